"""Checks on the state a library derives from its writes (docs/anomalies.md, "Derived state").

N1/N2/N3 see a real run as "key -> value". The bugs users report live elsewhere: in the
history table's order, in a vector index beside its id map and docstore, in what an API call
returned against what it stored, in which user a record belongs to. A worker reports those
structures, read from the library's own storage, under `observation["derived"]`:

    records     the live records, each {id, text, scope: {user_id, agent_id, run_id, ...}}
                and, where a call reports it, the record's `state` (a Graphiti edge's
                invalid_at)
    versions    {record id: [{event, old, new}, ...]} the durable history, in its own order
    structures  {name: [ids]} each redundant structure, as the ids it holds (multiset)
    agree       [[a, b], ...] the structures that must hold the same ids
    steps       the program's steps in the order they returned: {agent, step, op, args,
                scope, invoked (how many returns were logged before the call was made),
                returned | error, basis (the text the step decided on)}; a write
                returned as {id, event: ADD | UPDATE | DELETE | SAVE, text, previous |
                state}, a read as {id, text, scope}

Each check reads only what it needs; when the adapter does not report it the check abstains
(`ran=False`, `details["abstains"]` says what is missing): it never passes silently.
Every check is a plain function of one run, except `duplicate`, which also needs the
records of serial runs (a duplicate counts only if no serial order makes it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from toki.check.anomalies import Verdict

__all__ = [
    "DERIVED",
    "MORALS",
    "check_derived",
    "duplicate",
    "duplicated_texts",
    "forked_history",
    "index_divergence",
    "lost_update",
    "response_divergence",
    "resurrection",
    "scope_leak",
]

DERIVED = (
    "lost-update",
    "forked-history",
    "response-divergence",
    "index-divergence",
    "resurrection",
    "scope-leak",
    "duplicate",
)
MORALS = {
    "lost-update": "why: a write was decided on a version another committed write had already "
    "replaced, and it overwrote that version without having seen it",
    "forked-history": "why: the history records two successors of one version: two writers "
    "both changed it, and the record no longer says which came from which",
    "response-divergence": "why: the API reported a write that the durable record does not hold",
    "index-divergence": "why: the library's redundant structures hold different records: a "
    "read through one of them is served what another does not have",
    "resurrection": "why: a record the API reported deleted is served again",
    "scope-leak": "why: a call scoped to one user / agent / run / group reached data of another",
    "duplicate": "why: two live records hold one fact where every serial order keeps one",
}


def _view(observation: Mapping[str, Any]) -> Mapping[str, Any] | None:
    derived = observation.get("derived")
    return derived if isinstance(derived, Mapping) else None


def _abstain(name: str, reason: str) -> Verdict:
    return Verdict(name, False, ran=False, details={"abstains": reason})


def _need(
    name: str, observation: Mapping[str, Any], *parts: str
) -> tuple[Mapping[str, Any] | None, Verdict | None]:
    view = _view(observation)
    if view is None:
        return None, _abstain(name, "the adapter reports no derived state")
    missing = [p for p in parts if view.get(p) is None]
    if missing:
        return None, _abstain(name, f"the adapter cannot read {', '.join(missing)}")
    return view, None


def _verdict(name: str, problems: list[dict[str, Any]], expected: str, **details: Any) -> Verdict:
    keys = tuple(dict.fromkeys(str(p.get("id", p.get("text", ""))) for p in problems))
    return Verdict(
        name,
        bool(problems),
        keys,
        expected,
        problems or None,
        {"checked": details.pop("checked", 0), **details},
    )


def _write_responses(steps: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every write an API call reported as done: {id, event, text, basis, agent, step}."""
    out = []
    for s in steps:
        if "error" in s:
            continue
        for r in s.get("returned") or []:
            if not isinstance(r, Mapping) or r.get("event") not in ("ADD", "UPDATE", "DELETE"):
                continue
            basis = r.get("previous", s.get("basis"))
            out.append(
                {
                    "id": str(r.get("id")),
                    "event": r["event"],
                    "text": r.get("text"),
                    "basis": basis,
                    "agent": s.get("agent"),
                    "step": s.get("step"),
                    "op": s.get("op"),
                }
            )
    return out


def lost_update(observation: Mapping[str, Any]) -> Verdict:
    """A committed write decided on a version that another committed write had already
    replaced: its basis (what the API said it read: mem0's `previous_memory`, or the text
    the step's bound read returned) is not the version just before it in the history."""
    name = "lost-update"
    view, no = _need(name, observation, "versions", "steps")
    if no is not None:
        return no
    assert view is not None
    responses = [r for r in _write_responses(view["steps"]) if r["event"] == "UPDATE"]
    with_basis = [r for r in responses if r["basis"] is not None]
    if responses and not with_basis:
        return _abstain(name, "no update reported the version (basis) it was decided on")
    problems = []
    for rid, rows in sorted(view["versions"].items()):
        for i, row in enumerate(rows):
            if row.get("event") != "UPDATE" or i == 0:
                continue
            before = rows[i - 1].get("new")
            for r in with_basis:
                if r["id"] == rid and r["text"] == row.get("new") and r["basis"] != before:
                    problems.append(
                        {
                            "id": rid,
                            "decided_on": r["basis"],
                            "replaced": before,
                            "wrote": row.get("new"),
                            "agent": r["agent"],
                            "step": r["step"],
                        }
                    )
    return _verdict(
        name,
        problems,
        "every update replaces the version it was decided on",
        checked=len(with_basis),
    )


def forked_history(observation: Mapping[str, Any]) -> Verdict:
    """Two successors recorded for one version: a history row whose predecessor (`old`) is
    not the version the row before it produced, but an earlier one."""
    name = "forked-history"
    view, no = _need(name, observation, "versions")
    if no is not None:
        return no
    assert view is not None
    problems = []
    for rid, rows in sorted(view["versions"].items()):
        for i, row in enumerate(rows):
            old = row.get("old")
            if i == 0 or old is None or old == rows[i - 1].get("new"):
                continue
            earlier = [j for j in range(i - 1) if rows[j].get("new") == old]
            if earlier:
                problems.append(
                    {
                        "id": rid,
                        "version": old,
                        "successors": [rows[earlier[-1] + 1].get("new"), row.get("new")],
                    }
                )
    return _verdict(
        name,
        problems,
        "each version has one successor",
        checked=sum(len(r) for r in view["versions"].values()),
    )


def response_divergence(observation: Mapping[str, Any]) -> Verdict:
    """What an API call returned is not what was durably stored. With a history (mem0):
    each reported ADD / UPDATE / DELETE of a record has its row, with that text. With
    records that carry a `state` (Graphiti's edges, `invalid_at`): the state the last call
    to report on a record returned is the stored one (no call is in flight at the end)."""
    name = "response-divergence"
    view, no = _need(name, observation, "steps")
    if no is not None:
        return no
    assert view is not None
    versions = view.get("versions")
    saves = _saved_states(view["steps"])
    if versions is None and not saves:
        return _abstain(name, "the adapter reports neither a history nor the stored states")
    problems: list[dict[str, Any]] = []
    responses = _write_responses(view["steps"]) if versions is not None else []
    for r in responses:
        rows = (versions or {}).get(r["id"]) or []
        if r["event"] == "DELETE":
            ok = any(row.get("event") == "DELETE" for row in rows)
        else:
            ok = any(row.get("event") == r["event"] and row.get("new") == r["text"] for row in rows)
        if not ok:
            problems.append(
                {**{k: r[k] for k in ("id", "event", "text", "agent", "step")}, "stored": rows}
            )
    stored = {str(r.get("id")): r.get("state") for r in view.get("records") or []}
    removals = [
        pos
        for pos, s in enumerate(view["steps"])
        if "error" not in s
        and any(
            isinstance(r, Mapping) and r.get("event") in ("DELETE", "DELETE_ALL")
            for r in s.get("returned") or []
        )
    ]
    for rid, (state, s) in sorted(saves.items()):
        if rid not in stored and any(pos > s["_pos"] for pos in removals):
            continue  # removed after the call returned: not a divergence of its answer
        if stored.get(rid) != state:
            problems.append(
                {
                    "id": rid,
                    "returned": state,
                    "stored": stored.get(rid),
                    "agent": s.get("agent"),
                    "step": s.get("step"),
                }
            )
    return _verdict(
        name,
        problems,
        "every write an API call reported is in the durable record",
        checked=len(responses) + len(saves),
    )


def _saved_states(
    steps: Iterable[Mapping[str, Any]],
) -> dict[str, tuple[Any, Mapping[str, Any]]]:
    """Per record: the state the last call that reported on it returned, and that step."""
    out: dict[str, tuple[Any, Mapping[str, Any]]] = {}
    for pos, s in enumerate(steps):
        if "error" in s:
            continue
        for r in s.get("returned") or []:
            if isinstance(r, Mapping) and r.get("event") == "SAVE" and "state" in r:
                out[str(r.get("id"))] = (r["state"], {**s, "_pos": pos})
    return out


def index_divergence(observation: Mapping[str, Any]) -> Verdict:
    """A library's redundant structures disagree: each pair it declares in `agree` (vector
    index vs id map vs docstore vs the history's live records; edge provenance vs episodes)
    must hold the same ids."""
    name = "index-divergence"
    view, no = _need(name, observation, "structures", "agree")
    if no is not None:
        return no
    assert view is not None
    structures = view["structures"]
    problems = []
    for a, b in view["agree"]:
        if a not in structures or b not in structures:
            return _abstain(name, f"the adapter cannot read {a if a not in structures else b}")
        left, right = Counter(map(str, structures[a])), Counter(map(str, structures[b]))
        if left != right:
            problems.append(
                {
                    "id": f"{a}~{b}",
                    a: sorted((left - right).elements()),
                    b: sorted((right - left).elements()),
                }
            )
    return _verdict(
        name, problems, "the declared structures hold the same ids", checked=len(view["agree"])
    )


def resurrection(observation: Mapping[str, Any]) -> Verdict:
    """A deleted fact served again: a read invoked after a delete of a record returned (a
    DELETE the API reported) serves that record, or the record is live at the end. A read
    that overlapped the delete may serve either (real-time order: `invoked` counts the
    returns logged before the read was invoked; without it, the read's return is used)."""
    name = "resurrection"
    view, no = _need(name, observation, "steps", "records")
    if no is not None:
        return no
    assert view is not None
    deleted: dict[str, int] = {}  # record id -> position of the step that deleted it
    problems = []
    reads = 0
    for pos, s in enumerate(view["steps"]):
        if "error" in s:
            continue
        for r in s.get("returned") or []:
            if not isinstance(r, Mapping):
                continue
            if r.get("event") == "DELETE":
                deleted.setdefault(str(r.get("id")), pos)
            elif r.get("event") == "DELETE_ALL":
                continue
            elif "event" not in r:
                reads += 1
                rid = str(r.get("id"))
                invoked = s.get("invoked", pos)
                if rid in deleted and deleted[rid] < invoked:
                    problems.append(
                        {"id": rid, "text": r.get("text"), "served_by": [s["agent"], s["step"]]}
                    )
    live = {str(r.get("id")): r for r in view["records"]}
    for rid in sorted(deleted):
        if rid in live:
            problems.append({"id": rid, "text": live[rid].get("text"), "served_by": "final state"})
    return _verdict(
        name, problems, "no deleted record is served again", checked=len(deleted) + reads
    )


def _scope_of(steps: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """The scope each record was written under (from the add that created it)."""
    out: dict[str, dict[str, str]] = {}
    for s in steps:
        for r in s.get("returned") or []:
            if isinstance(r, Mapping) and r.get("event") == "ADD":
                out.setdefault(str(r.get("id")), dict(s.get("scope") or {}))
    return out


def _within(scope: Mapping[str, str], asked: Mapping[str, str]) -> bool:
    """The record's scope is the one asked for; a namespace (LangGraph's store) also covers
    its descendants, segment by segment ("a/b" covers "a/b/c", not "a/bc")."""
    for k, v in asked.items():
        got = scope.get(k)
        if k == "namespace" and got is not None and (not v or got.startswith(v + "/")):
            continue
        if got != v:
            return False
    return True


def scope_leak(observation: Mapping[str, Any]) -> Verdict:
    """Data under one scope (user, agent, run, group) seen or changed under another: a read
    asked for scope S serves a record written under another scope, or a record written under
    S' vanished with no delete of its own (no DELETE row) while only calls scoped to other
    scopes deleted anything."""
    name = "scope-leak"
    view, no = _need(name, observation, "steps", "records")
    if no is not None:
        return no
    assert view is not None
    steps = view["steps"]
    versions = view.get("versions")
    written = _scope_of(steps)
    problems: list[dict[str, Any]] = []
    reads = 0
    for s in steps:
        asked = s.get("scope") or {}
        if "error" in s or not asked:
            continue
        for r in s.get("returned") or []:
            if isinstance(r, Mapping) and "event" not in r:
                reads += 1
                # the scope it was written under (an update may have moved it since)
                scope = written.get(str(r.get("id"))) or r.get("scope") or {}
                if not _within(scope, asked):
                    problems.append(
                        {"id": str(r.get("id")), "asked": asked, "served": scope, "by": s["op"]}
                    )
    live = {str(r.get("id")) for r in view["records"]}
    deleters = [s for s in steps if s.get("op") in ("delete", "delete_all") and "error" not in s]
    for rid, scope in sorted(written.items()):
        if versions is None:
            break
        rows = versions.get(rid) or []
        if rid in live or any(r.get("event") == "DELETE" for r in rows):
            continue
        foreign = [s for s in deleters if not _within(scope, s.get("scope") or {})]
        if foreign and not [s for s in deleters if _within(scope, s.get("scope") or {})]:
            problems.append(
                {
                    "id": rid,
                    "written_under": scope,
                    "gone_after": [[s["op"], s.get("scope")] for s in foreign],
                }
            )
    extra = {} if versions is not None else {"not_checked": "vanished records (no history)"}
    return _verdict(
        name,
        problems,
        "reads and deletes stay within their scope",
        checked=reads + len(written),
        **extra,
    )


def duplicated_texts(observation: Mapping[str, Any]) -> set[str] | None:
    """(scope, text) pairs held by two or more live records, as one string each."""
    view = _view(observation)
    if view is None or view.get("records") is None:
        return None
    count = Counter(
        f"{sorted((r.get('scope') or {}).items())} {r.get('text')}" for r in view["records"]
    )
    return {k for k, n in count.items() if n > 1}


def duplicate(
    observation: Mapping[str, Any], serial: Callable[[], Iterable[set[str] | None]] | None
) -> Verdict:
    """Two live records for one fact (same scope, same text) where every serial order of
    the same steps keeps one: `serial` gives the duplicated pairs of each serial run."""
    name = "duplicate"
    found = duplicated_texts(observation)
    if found is None:
        return _abstain(name, "the adapter reports no records")
    if not found:
        return _verdict(name, [], "one live record per fact", checked=1)
    if serial is None:
        return _abstain(name, "no serial runs to compare with")
    runs = list(serial())
    if any(r is None for r in runs):
        return _abstain(name, "a serial run reported no records")
    serial_dups = set().union(*[r for r in runs if r is not None])
    problems = [{"text": t} for t in sorted(found - serial_dups)]
    return _verdict(
        name,
        problems,
        "one live record per fact, as in every serial order",
        checked=len(found),
        serial_runs=len(runs),
    )


def check_derived(
    name: str,
    observation: Mapping[str, Any],
    serial: Callable[[], Iterable[set[str] | None]] | None = None,
) -> Verdict:
    """One derived-state check by name (`DERIVED`)."""
    if name == "duplicate":
        return duplicate(observation, serial)
    checks: dict[str, Callable[[Mapping[str, Any]], Verdict]] = {
        "lost-update": lost_update,
        "forked-history": forked_history,
        "response-divergence": response_divergence,
        "index-divergence": index_divergence,
        "resurrection": resurrection,
        "scope-leak": scope_leak,
    }
    if name not in checks:
        raise ValueError(f"anomaly: unknown derived check {name!r} (use {', '.join(DERIVED)})")
    return checks[name](observation)
