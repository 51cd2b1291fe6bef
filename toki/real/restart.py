"""Checks of runs with faults beyond a crash (`toki.real.faults`).

After a process death (restart, torn) the library was reopened from its own files, each
killed client retried what it had not been acknowledged, and the library was asked to
find each memory it serves (`RealRun.restart`). Those checks, and the one for injected
failures, are:

* `silent-failure`: a boundary call (store, LLM) was failed by an injected error, the
  library's API call returned normally (no exception, no error in its result), and the
  claim left no trace in the library's state (`HostAdapter.recorded`; a program's step
  "key is value" is that claim, a step of another text must be found in a live record or
  a history row): the application was told nothing went wrong, and its write is gone. A
  failure the library made good (mem0 2.x falls back from `batch_add_history` to one
  `add_history` per row) is not one. Limit: a claim the judge would have rejected anyway
  also leaves no trace; the witness's story shows which (the failed point, and what the
  call returned).
* `lost-write`: a memory readers were served just before the death is not served after
  the reopen (what was acknowledged did not survive).
* `resurrection-after-restart`: a memory that had been removed before the death is served
  again after the reopen (`resurrection` is the derived-state check of toki/real/derived.py).
* `wrong-answer`: after the restart, a search for the exact text of a memory the library
  serves returns another memory first, or a search for a memory it served before returns
  another memory at score 1 (the query's own vector, filed under another memory): the
  index answers for one memory with another (response divergence).
* `index-after-restart`: the library's own index disagrees with itself after the restart
  (FAISS: vectors in the index, ids mapped, payloads stored).
* `removed-after-restart`: at the end of a restarted run, a fact whose record was removed
  (served by a record at some point, by no record at the end) is still served inside a
  text the library derives from its records (a view's `summaries`: Graphiti's entity
  summaries): the removal did not reach everything that serves the fact, and the reopened
  library serves it. Abstains when the library reports no summaries.
* `checkpoint-before-writes`: the saver's tables as the death left them hold a checkpoint
  that has a child but no stored writes: the child was made from a task's writes, so the
  checkpoint was durable before the writes that produced it (langchain-ai/langgraph#8039's
  ordering; the Pregel loop promises the opposite for delta channels only). Abstains for a
  library without checkpoints.
* `reexecuted-after-restart`: a node whose side effect ran before the death runs it again
  after the restart (the resumed thread re-executed instead of replaying the node's
  writes). Abstains for a library that reports no side effects.
* `reopen-failed`: the library cannot be opened from the files the dead process left (the
  adapter's reopen reports why, e.g. the database engine crashed replaying its log): every
  acknowledged write is out of reach.

N3 on such a run compares everything served, before and after the death, with what the
library can produce at the end: the restart is one more step of the history.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from toki.check.anomalies import Verdict
from toki.real.adapter import RealSystem
from toki.real.checks import SERIAL_LIMIT, committed_claims
from toki.real.driver import DEATHS, RealRun, SerialCache, serial_beliefs, serial_orders
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import belief_hash

__all__ = ["FAULT_ANOMALIES", "check_faults", "injected", "n2_acknowledged", "removed_kept"]

EXACT = 0.999  # a search score this close to 1 matched the query's own vector

FAULT_ANOMALIES = (
    "silent-failure",
    "lost-write",
    "resurrection-after-restart",
    "wrong-answer",
    "index-after-restart",
    "removed-after-restart",
    "reopen-failed",
    "checkpoint-before-writes",
    "reexecuted-after-restart",
)


def _claim_result(outcomes: Sequence[Any], agent: int, claim: int | None) -> Any:
    """What the library's API call of that claim returned (adapters return one entry per
    claim), or None when the outcome has another shape."""
    if claim is None or agent >= len(outcomes):
        return None
    out = outcomes[agent]
    if isinstance(out, tuple | list) and claim < len(out):
        return out[claim]
    return None


def _is_error(result: Any) -> bool:
    if isinstance(result, str):
        return result.startswith("error")
    if isinstance(result, tuple | list):
        return any(_is_error(r) for r in result)
    if isinstance(result, Mapping):
        return "error" in result
    return False


def _program_steps(workload: Workload, rr: RealRun) -> dict[tuple[int, int], Any] | None:
    """A program's step log by (agent, step) (derived.py: `returned` or `error` each);
    None for a workload of claims."""
    if getattr(workload, "family", None) is None:
        return None
    derived = rr.observation.get("derived") or {}
    return {(int(s["agent"]), int(s["step"])): s for s in derived.get("steps") or ()}


def _left_trace(system: RealSystem, observation: Mapping[str, Any], item: Any) -> bool:
    """A claim left a trace (the adapter's `recorded`). A program's step "key is value" is
    that claim (as the workers tell the stub LLM); a step of another text, that text in a
    live record or a history row; a step without text (a delete, a read) is not judged."""
    if getattr(item, "op", None) is None:
        return bool(system.host.recorded(observation, item))
    text = item.arg("text")
    if not isinstance(text, str):
        return True
    key, said, value = text.partition(" is ")
    if said and key:
        return bool(system.host.recorded(observation, SimClaim(key, value)))
    derived = observation.get("derived") or {}
    texts = {r.get("text") for r in derived.get("records") or ()}
    texts |= {v.get("new") for vs in (derived.get("versions") or {}).values() for v in vs}
    return text in texts


def silent_failure(system: RealSystem, workload: Workload, rr: RealRun) -> Verdict:
    injected = [t for t in rr.trace if t.get("fault") == "raise"]
    if not injected:
        return Verdict("silent-failure", False, ran=False, details={"abstains": "no injection"})
    steps = _program_steps(workload, rr)
    swallowed = []
    for t in injected:
        result = _claim_result(rr.outcomes, int(t["agent"]), t.get("claim"))
        if result is None:
            continue
        if steps is not None:  # a program's step reports its failure in the step log
            entry = steps.get((int(t["agent"]), int(t["claim"])))
            if entry is None or "error" in entry:
                continue
        elif _is_error(result):
            continue
        swallowed.append(
            {
                "agent": t["agent"],
                "claim": t.get("claim"),
                "point": t["point"],
                "error": t.get("error"),
                "returned": result,
            }
        )
    lost = [
        t
        for t in swallowed
        if not _left_trace(system, rr.observation, workload.inboxes[int(t["agent"])][t["claim"]])
    ]
    found = bool(lost)
    keys = tuple(sorted({str(workload.inboxes[int(t["agent"])][t["claim"]].key) for t in lost}))
    return Verdict(
        "silent-failure",
        found,
        keys,
        "a call whose boundary call failed reports it, or its claim is still recorded",
        lost or None,
        {"injected": len(injected), "swallowed": swallowed},
    )


def injected(rr: RealRun) -> bool:
    """The run contains an injected failure (a raise fault that fired at a call)."""
    return any(t.get("fault") == "raise" for t in rr.trace)


def n2_acknowledged(
    system: RealSystem, workload: Workload, rr: RealRun, serial: SerialCache
) -> Verdict:
    """N2 for a run with injected failures: a claim whose call reported its failure (an
    error in its result) was not acknowledged, so the serial runs leave it out (N2 proper
    counts every finished claim as committed, which would report each failure as N2)."""
    sequences = [  # committed claims are a prefix of the inbox: position n is claim n
        [c for n, c in enumerate(seq) if not _is_error(_claim_result(rr.outcomes, i, n))]
        for i, seq in enumerate(committed_claims(system, workload, rr))
    ]
    orders = serial_orders(sequences, SERIAL_LIMIT)
    if orders is None:
        return Verdict("N2", False, ran=False, details={"undecided": "too many serial orders"})
    live = system.host.beliefs(rr.observation, workload.keys)
    found = belief_hash(live) not in serial_beliefs(serial, orders)
    keys = tuple(sorted({str(c.key) for s in sequences for c in s})) if found else ()
    return Verdict(
        "N2",
        found,
        keys,
        "the beliefs of a serial run of the real code over the acknowledged claims",
        live if found else None,
        {"serial_orders": len(orders), "acknowledged": [len(s) for s in sequences]},
    )


def _ids(view: Any) -> dict[str, str]:
    """id -> text of the memories a snapshot serves."""
    out = {}
    for m in (view or {}).get("memories", ()) if isinstance(view, Mapping) else ():
        if isinstance(m, Mapping) and m.get("id") is not None:
            out[str(m["id"])] = str(m.get("text"))
    return out


def _death(rr: RealRun) -> Mapping[str, Any] | None:
    return next((t for t in rr.trace if t.get("fault") in DEATHS), None)


def restart_checks(rr: RealRun) -> dict[str, Verdict]:
    """The restart checks (not run: abstain, when the run had no death)."""
    restart = rr.restart
    death = _death(rr)
    if restart is None or death is None:
        return {
            name: Verdict(name, False, ran=False, details={"abstains": "no process death"})
            for name in FAULT_ANOMALIES[1:]
        }
    cut = rr.trace.index(death)
    before: Any = None  # the last view served before the death
    for entry in rr.timeline:
        if int(entry.get("after", -1)) < _executed_before(rr.trace, cut):
            before = entry.get("view")
    earlier = {
        i: t
        for entry in rr.timeline
        if int(entry.get("after", -1)) < _executed_before(rr.trace, cut)
        for i, t in _ids(entry.get("view")).items()
    }
    served = _ids(before)
    reopened = _ids(restart.get("reopened"))
    torn = death.get("torn")
    why = {"death": death.get("fault"), "torn": torn}
    lost = {i: t for i, t in served.items() if i not in reopened}
    back = {i: t for i, t in reopened.items() if i in earlier and i not in served}
    live = set(_ids(rr.observation).values())
    wrong = []
    for probe in restart.get("probes") or ():
        answers = probe.get("answers") or []
        text = probe["query"]["text"]
        if not answers or answers[0].get("text") == text:
            continue
        score = answers[0].get("score")
        exact = isinstance(score, int | float) and score >= EXACT
        if text in live or exact:
            wrong.append({"query": text, "first": answers[0]})
    integrity = restart.get("integrity") or {}
    counts = {k: v for k, v in integrity.items() if isinstance(v, int)}
    diverged = len(set(counts.values())) > 1
    return {
        "lost-write": Verdict(
            "lost-write",
            bool(lost),
            (),
            "every memory served before the death is served after the reopen",
            lost or None,
            {**why, "served_before": served, "reopened": reopened},
        ),
        "resurrection-after-restart": Verdict(
            "resurrection-after-restart",
            bool(back),
            (),
            "no memory removed before the death is served after the reopen",
            back or None,
            why,
        ),
        "wrong-answer": Verdict(
            "wrong-answer",
            bool(wrong),
            (),
            "a search for a memory's exact text finds that memory first",
            wrong or None,
            {**why, "probes": len(restart.get("probes") or ())},
        ),
        "index-after-restart": Verdict(
            "index-after-restart",
            diverged,
            (),
            "the library's index agrees with itself",
            integrity if diverged else None,
            {**why, "integrity": integrity, "reopened": restart.get("integrity_reopened")},
            ran=bool(counts),
        ),
        "removed-after-restart": removed_kept(rr, why),
        "reopen-failed": Verdict(
            "reopen-failed",
            bool(restart.get("failed")),
            (),
            "the library opens the files the dead process left",
            restart.get("failed"),
            why,
        ),
        "checkpoint-before-writes": checkpoint_before_writes(restart, why),
        "reexecuted-after-restart": reexecuted(rr, why),
    }


def checkpoint_before_writes(restart: Mapping[str, Any], why: Mapping[str, Any]) -> Verdict:
    """A checkpoint the death left with a child but no stored writes (the reopen's view of
    the saver's tables: `integrity_reopened["checkpoints"]`)."""
    name = "checkpoint-before-writes"
    saved = (restart.get("integrity_reopened") or {}).get("checkpoints")
    if not isinstance(saved, list):
        return Verdict(
            name, False, ran=False, details={"abstains": "the library has no checkpoints"}
        )
    parents = {c.get("parent") for c in saved}
    bare = [
        {"checkpoint": c.get("id"), "step": c.get("step"), "thread": c.get("thread")}
        for c in saved
        if c.get("id") in parents and not c.get("writes")
    ]
    return Verdict(
        name,
        bool(bare),
        (),
        "every checkpoint with a child holds the writes the child was made from",
        bare or None,
        {**why, "checkpoints": len(saved)},
    )


def reexecuted(rr: RealRun, why: Mapping[str, Any]) -> Verdict:
    """A node's side effect applied more than once in one thread (`observation["effects"]`,
    in the order they ran; `instance` 0 before the death, 1 after)."""
    name = "reexecuted-after-restart"
    effects = rr.observation.get("effects")
    if not isinstance(effects, list):
        return Verdict(name, False, ran=False, details={"abstains": "no side effects reported"})
    runs: dict[tuple[str, str], list[int]] = {}
    for e in effects:
        runs.setdefault((str(e.get("thread")), str(e.get("node"))), []).append(
            int(e.get("instance", 0))
        )
    twice = [
        {"thread": t, "node": n, "instances": i} for (t, n), i in sorted(runs.items()) if len(i) > 1
    ]
    return Verdict(
        name,
        bool(twice),
        (),
        "each node's side effect is applied once per thread",
        twice or None,
        {**why, "effects": len(effects)},
    )


def removed_kept(rr: RealRun, why: Mapping[str, Any]) -> Verdict:
    """A fact whose record was removed (served by some view, by no record at the end) is
    still inside a summary the restarted library serves at the end."""
    name = "removed-after-restart"
    summaries = [s for s in rr.observation.get("summaries") or () if isinstance(s, Mapping)]
    if "summaries" not in rr.observation:
        return Verdict(name, False, ran=False, details={"abstains": "the library has no summaries"})
    views = [t.get("view") for t in rr.timeline]
    views.append((rr.restart or {}).get("reopened"))
    live = _ids(rr.observation)
    removed = sorted(
        {t for v in views for i, t in _ids(v).items() if i not in live and t not in live.values()}
    )
    kept = [
        {"fact": fact, "summary_of": s.get("name"), "id": s.get("id"), "summary": s.get("text")}
        for fact in removed
        for s in summaries
        if fact in str(s.get("text") or "")
    ]
    return Verdict(
        name,
        bool(kept),
        (),
        "no summary the library serves still states a fact whose record was removed",
        kept or None,
        {**why, "removed": removed, "summaries": len(summaries)},
    )


def _executed_before(trace: Sequence[Mapping[str, Any]], cut: int) -> int:
    """How many released gate points precede trace entry `cut` (timeline entries count
    released points: `after` is the index of the point a snapshot follows)."""
    return sum(1 for t in trace[:cut] if "agent" in t and "crash" not in t)


def check_faults(
    system: RealSystem,
    workload: Workload,
    rr: RealRun,
    anomalies: Sequence[str] = FAULT_ANOMALIES,
) -> dict[str, Verdict]:
    out = {"silent-failure": silent_failure(system, workload, rr), **restart_checks(rr)}
    unknown = set(anomalies) - set(out)
    if unknown:
        raise ValueError(f"anomaly: unknown fault anomaly {sorted(unknown)}")
    return {name: out[name] for name in anomalies}
