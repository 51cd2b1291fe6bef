"""The encoded write path as simulator agents, so z3 and the simulator can be compared
schedule for schedule.

Each transaction of a z3 history (`toki.formal.encoding`) becomes an agent on `SimStore`
running the same four phases: begin (BEGIN and a first statement, which fixes the snapshot at
z3's begin as PostgreSQL does: at SNAPSHOT a write of a row of its own, at SERIALIZABLE the
plain read of the head), read (plain reads of the head, EWM's evidence rows, RULE's policy
row; the policy transaction selects the claims), write (one conditional UPDATE of the head,
evaluated and re-checked by the store; EWM's evidence row; the audit or held row) and end
(COMMIT or ROLLBACK). Rows: ("head",)
the head row, ("ev", v) EWM's evidence, ("pol",) RULE's policy, ("aud", writer, claim) audit
rows, ("held", claim) held rows, ("txn", name) SNAPSHOT's first statement. Every row written
carries "by": the writer's name, which names the transaction in the store's history (for
the commit order).

`replay` runs a counterexample's schedule event for event (it fails if a step would block
or the store refuses what z3 committed) and reports what every read saw and what the
simulator's final state shows; `explore` runs DPOR over the same transactions to completion.
The anomalies are computed from the simulator alone: N1 (the committed transactions re-run
serially in commit order end elsewhere), N2 (no serial order of them ends in the live
belief), N3 (a committed claim is in no head, audit or held row).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from toki.errors import InvalidInput
from toki.isolation import Isolation
from toki.sim.dpor import DPOR
from toki.sim.engine import Execution
from toki.sim.explore import Run, Stats
from toki.sim.program import (
    Abort,
    Agent,
    Begin,
    Commit,
    Local,
    Program,
    Read,
    Select,
    UpdateWhere,
    Write,
    program,
)
from toki.sim.store import OpKind

__all__ = [
    "Claim",
    "Outcome",
    "ReplayError",
    "Spec",
    "Txn",
    "anomalies",
    "check",
    "explore",
    "mismatches",
    "replay",
]

READ_FIELDS = (
    ("head", "head_read"),
    ("totals", "totals"),
    ("policy", "policy"),
    ("claims", "claims"),
    ("best", "best"),
)
WRITE_FIELDS = ("update", "takes_head", "audit", "held")

HEAD: tuple[str] = ("head",)
POL: tuple[str] = ("pol",)
EMPTY: dict[str, Any] = {"claim": None}
PHASES = ("read", "write", "end")


class ReplayError(AssertionError):
    """z3's schedule cannot be run as written in the simulator (a step would block, or the
    store refused a transaction z3 committed)."""


@dataclass(frozen=True, slots=True)
class Claim:
    value: int
    weight: Fraction
    recorded: int
    id: int
    source: int

    def row(self, name: str) -> dict[str, Any]:
        return {
            "claim": name,
            "value": self.value,
            "recorded": self.recorded,
            "id": self.id,
            "source": self.source,
        }


@dataclass(frozen=True, slots=True)
class Txn:
    name: str  # "T0", …; "P" is RULE's policy transaction
    claim: Claim | None
    commit: bool = True


@dataclass(frozen=True, slots=True)
class Spec:
    """What the agents run: the operator, the level, the variant switches, the txns."""

    operator: str
    level: Isolation
    txns: tuple[Txn, ...]
    values: int = 2
    variant: Mapping[str, bool] = field(default_factory=dict)

    def flag(self, name: str) -> bool:
        return bool(self.variant.get(name, True))

    @staticmethod
    def of(scenario: Mapping[str, Any]) -> Spec:
        """The transactions of a z3 scenario (`History.to_scenario`)."""
        ends = {
            s["txn"]: s["op"] == "commit"
            for s in scenario["schedule"]
            if s["op"] in ("commit", "abort")
        }
        txns = [
            Txn(
                c["txn"],
                Claim(
                    int(c["value"]),
                    Fraction(*c["weight_q"]),
                    int(c["recorded_at"]),
                    int(c["id"]),
                    int(c["source"]),
                ),
                ends[c["txn"]],
            )
            for c in scenario["claims"]
        ]
        if "policy_change" in scenario:
            txns.append(Txn("P", None, ends["P"]))
        return Spec(
            scenario["operator"],
            Isolation(scenario["level"]),
            tuple(txns),
            int(scenario.get("values", 2)),
            dict(scenario.get("variant", {})),
        )


# -- the agents ---------------------------------------------------------------------------


def _ev(row: Any) -> tuple[Fraction, tuple[int, int]]:
    if not row:
        return Fraction(0), (-1, -1)
    return Fraction(row["total"]), (int(row["newest"][0]), int(row["newest"][1]))


def _rank(row: Mapping[str, Any], pol: bool, operator: str) -> tuple[int, ...]:
    stamp = (int(row["recorded"]), int(row["id"]))
    if operator != "RULE":
        return stamp
    return (1 if row["source"] == (1 if pol else 0) else 0, *stamp)


def _head_seen(level: Isolation, replaced: Sequence[Any], evaluated: Sequence[Any]) -> Any:
    """The head the conditional update decided on, read right after it ran (the predicate
    is called again later by SSI's bookkeeping, on other versions): the row it updated
    (READ COMMITTED's re-check picks the newest), else the row its scan saw: the snapshot's
    (the first call at SNAPSHOT and SERIALIZABLE, where SSI's calls follow) or the newest
    (the last call at READ UNCOMMITTED and READ COMMITTED)."""
    if replaced:
        return replaced[-1]["claim"]
    snapshot = level in (Isolation.SNAPSHOT, Isolation.SERIALIZABLE)
    return (evaluated[0] if snapshot else evaluated[-1])["claim"]


def _agent(spec: Spec, t: Txn) -> Agent:
    """One transaction of the encoded write path; returns what it read and did."""
    op, me = spec.operator, t.name
    seen: dict[str, Any] = {"txn": me}
    failed = False

    def bad(result: Any) -> bool:
        nonlocal failed
        failed = failed or isinstance(result, Exception)
        return failed

    yield Begin()
    # at SNAPSHOT and SERIALIZABLE the first statement takes the snapshot, which z3 takes at
    # begin: SNAPSHOT writes a row of its own there; SERIALIZABLE reads the head there (the
    # same snapshot it would read at r, with no extra step for DPOR to interleave)
    hp: Any = None
    if spec.level is Isolation.SNAPSHOT:
        bad((yield Write(("txn", me), {"by": me})))
    elif spec.level is Isolation.SERIALIZABLE:
        hp = yield Read(HEAD)
    yield Local("read")
    mine = t.claim.row(me) if t.claim is not None else None
    if spec.level is not Isolation.SERIALIZABLE:
        hp = yield Read(HEAD)
    bad(hp)
    hp = hp if isinstance(hp, dict) else dict(EMPTY)
    seen["head_read"] = hp["claim"]
    totals: dict[int, tuple[Fraction, tuple[int, int]]] = {}
    pol = False
    claims: dict[str, dict[str, Any]] = {}
    if op == "EWM" and t.claim is not None:
        got_ev = yield Select(lambda k, v: isinstance(k, tuple) and k[0] == "ev")
        bad(got_ev)
        ev_rows = got_ev if isinstance(got_ev, dict) else {}
        totals = {v: _ev(ev_rows.get(("ev", v))) for v in range(spec.values)}
        seen["totals"] = {str(v): float(x[0]) for v, x in totals.items()}
    if op == "RULE" and t.claim is not None:
        got = yield Read(POL)
        bad(got)
        pol = isinstance(got, dict)
        seen["policy"] = 1 if pol else 0
    if t.claim is None:  # the policy transaction reads the claims (head and audit rows)
        rows = yield Select(lambda k, v: k == HEAD or (isinstance(k, tuple) and k[0] == "aud"))
        bad(rows)
        for row in rows.values() if isinstance(rows, dict) else ():
            if row.get("claim") is not None:
                claims[row["claim"]] = row
        seen["claims"] = sorted(claims)
    yield Local("write")
    took, held, audit = False, False, None
    seen["update"] = False
    if not failed:
        replaced: list[Any] = []
        evaluated: list[Any] = []  # every head row the predicate was called on

        def update(pred: Any, new: dict[str, Any]) -> Any:
            seen["update"] = True

            def where(k: Hashable, row: Any) -> bool:
                if k != HEAD:
                    return False
                evaluated.append(row or EMPTY)
                return bool(pred(row))

            def fn(k: Hashable, row: Any) -> Any:
                replaced.append(row)
                return {**new, "by": me}

            return UpdateWhere(where, fn, name=f"{op} head")

        gone: Any = None
        if t.claim is None:  # the policy change: set π1, put the best claim in the head
            bad((yield Write(POL, {"by": me})))
            best = max(claims.values(), key=lambda r: _rank(r, True, op), default=None)
            seen["best"] = None if best is None else best["claim"]
            if best is not None and not failed:
                res = yield update(lambda row: row["claim"] != best["claim"], best)
                took = bool(res) and not bad(res)
        else:
            assert mine is not None
            c = t.claim
            if op in ("LWW", "RULE"):

                def beats(row: Any) -> bool:
                    return row["claim"] is None or _rank(mine, pol, op) > _rank(row, pol, op)

                if spec.flag("locked_decision"):
                    res = yield update(beats, mine)
                    took = bool(res) and not bad(res)
                elif beats(hp):  # the blind write: decided on the head read at r
                    took = not bad((yield Write(HEAD, {**mine, "by": me})))
                    replaced.append(hp)
            elif op == "AWAIT":
                if hp["claim"] is None or hp["value"] == c.value:
                    res = yield update(
                        lambda row: row["claim"] is None or row["value"] == c.value, mine
                    )
                    took = bool(res) and not bad(res)
                held = not took
            else:  # EWM
                total, newest = totals[c.value]
                total += c.weight
                newest = max(newest, (c.recorded, c.id))
                wins = all(
                    u == c.value
                    or total > totals[u][0]
                    or (total == totals[u][0] and newest > totals[u][1])
                    for u in range(spec.values)
                )
                row = {"total": str(total), "newest": list(newest), "by": me}
                bad((yield Write(("ev", c.value), row)))
                if wins and not failed:
                    res = yield update(lambda r: r["claim"] is None or r["value"] != c.value, mine)
                    took = bool(res) and not bad(res)
        if seen["update"] and evaluated:
            seen["head_seen"] = _head_seen(spec.level, replaced, evaluated)
        if replaced:
            locked = spec.flag("audit_from_write") and spec.flag("locked_decision")
            gone = replaced[-1] if locked else hp
        if failed:
            took = held = False
        elif took:
            if gone is not None and gone["claim"] is not None and spec.flag("audit_write"):
                audit = gone["claim"]
                bad((yield Write(("aud", me, audit), {**gone, "by": me})))
        elif held and mine is not None:
            bad((yield Write(("held", me), {**mine, "by": me})))
        elif mine is not None:
            audit = me
            bad((yield Write(("aud", me, me), {**mine, "by": me})))
    # refused: the store aborted it (only ever a transaction z3 aborts too; z3 leaves an
    # abort's cause open, SI's first-updater-wins among them)
    seen.update(takes_head=took, held=held, audit=audit, refused=failed)
    yield Local("end")
    if failed or not t.commit:
        yield Abort()
        seen["committed"] = False
    else:
        seen["committed"] = not isinstance((yield Commit()), Exception)
    return seen


def program_of(spec: Spec, txns: Sequence[Txn] | None = None) -> Program:
    chosen = spec.txns if txns is None else tuple(txns)
    return program(
        f"z3-{spec.operator}-{spec.level.value}",
        spec.level,
        {HEAD: dict(EMPTY)},
        [lambda t=t: _agent(spec, t) for t in chosen],  # type: ignore[misc]
    )


# -- what the simulator shows -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """A finished simulator run: what each transaction saw and did, the final belief, the
    rows of each committed claim, the replayed and serial beliefs, and N1–N3."""

    seen: dict[str, dict[str, Any]]
    commit_order: tuple[str, ...]
    belief: dict[str, Any]
    rows: dict[str, str]
    replay: dict[str, Any]
    serial: tuple[dict[str, Any], ...]
    anomalies: dict[str, bool]


def _belief(spec: Spec, state: Mapping[Any, Any]) -> dict[str, Any]:
    head = state.get(HEAD) or EMPTY
    out: dict[str, Any] = {"current": [] if head["claim"] is None else [head["value"]]}
    if spec.operator == "EWM":
        out["totals"] = {str(v): float(_ev(state.get(("ev", v)))[0]) for v in range(spec.values)}
    return out


def _serial(spec: Spec, order: Sequence[Txn]) -> dict[str, Any]:
    if not order:
        return _belief(spec, {})
    exe = Execution(program_of(spec, [Txn(t.name, t.claim, True) for t in order]))
    for pid in range(len(order)):
        while not exe.agents[pid].done:
            exe.step(pid)
    return _belief(spec, exe.store.snapshot())


def _commit_order(history: Sequence[Any]) -> tuple[str, ...]:
    names = {
        op.txn: op.value["by"]
        for op in history
        if op.kind is OpKind.WRITE and isinstance(op.value, dict) and "by" in op.value
    }
    return tuple(names[op.txn] for op in history if op.kind is OpKind.COMMIT and op.txn in names)


def anomalies(spec: Spec, state: Mapping[Any, Any], history: Sequence[Any]) -> Outcome:
    """N1–N3 of a finished run, from the simulator's final state and history alone."""
    order = _commit_order(history)
    by_name = {t.name: t for t in spec.txns}
    belief = _belief(spec, state)
    rows: dict[str, str] = {}
    head = (state.get(HEAD) or EMPTY)["claim"]
    for name in order:
        if by_name[name].claim is None:
            continue
        if head == name:
            rows[name] = "head"
        elif any(isinstance(k, tuple) and k[0] == "aud" and k[2] == name for k in state):
            rows[name] = "audit"
        elif ("held", name) in state:
            rows[name] = "held"
        else:
            rows[name] = "none"
    committed = [by_name[n] for n in order]
    replayed = _serial(spec, committed)
    serial: list[dict[str, Any]] = []
    for perm in itertools.permutations(committed):
        b = _serial(spec, perm)
        if b not in serial:
            serial.append(b)
    return Outcome(
        seen={},
        commit_order=order,
        belief=belief,
        rows=rows,
        replay=replayed,
        serial=tuple(serial),
        anomalies={
            "N1": replayed != belief,
            "N2": belief not in serial,
            "N3": "none" in rows.values(),
        },
    )


def replay(scenario: Mapping[str, Any]) -> Outcome:
    """Run a z3 counterexample's schedule in the simulator, event for event."""
    spec = Spec.of(scenario)
    exe = Execution(program_of(spec))
    pids = {t.name: i for i, t in enumerate(spec.txns)}
    for event in scenario["schedule"]:
        pid = pids[event["txn"]]
        agent = exe.agents[pid]
        first = True
        while not agent.done:
            pending = agent.pending
            if not first and isinstance(pending, Local) and pending.name in PHASES:
                break
            if pid not in exe.enabled():
                raise ReplayError(f"{event['txn']} would block at {event['op']} (t={event['t']})")
            exe.step(pid)
            first = False
    if not all(a.done for a in exe.agents):
        raise ReplayError("the schedule ended with transactions still running")
    out = anomalies(spec, exe.store.snapshot(), exe.store.history())
    seen = {t.name: exe.agents[pids[t.name]].outcome for t in spec.txns}
    for t in spec.txns:
        if seen[t.name]["committed"] != t.commit:
            raise ReplayError(f"{t.name}: z3 says commit={t.commit}, the simulator disagrees")
    return replace(out, seen=seen)


def mismatches(scenario: Mapping[str, Any], out: Outcome) -> list[str]:
    """Every field z3 chose that the simulator's run does not show: what each read saw
    (head, totals, policy, the claims and the best the policy transaction saw), whether the
    conditional update ran and the head it saw (`head_seen`), what each write did. A
    transaction the store refused is only ever one z3 aborts too: its writes are not
    compared."""
    out_list = []
    for step in scenario["schedule"]:
        seen = out.seen[step["txn"]]
        if step["op"] == "read":
            for key, mine in READ_FIELDS:
                if key in step and step[key] != seen.get(mine):
                    out_list.append(
                        f"{step['txn']} read {key}: z3 {step[key]}, sim {seen.get(mine)}"
                    )
        if step["op"] == "write" and not seen["refused"]:
            keys = [k for k in WRITE_FIELDS if k in step]
            if step.get("update") and seen.get("update"):
                keys.append("head_seen")
            for key in keys:
                if step[key] != seen.get(key):
                    out_list.append(
                        f"{step['txn']} write {key}: z3 {step[key]}, sim {seen.get(key)}"
                    )
    return out_list


def check(scenario: Mapping[str, Any]) -> dict[str, Any]:
    """`scenario` replayed event for event and compared field by field: {"agree", "sim",
    "mismatches"} (or "error" when the schedule cannot run in the simulator)."""
    row: dict[str, Any] = {"z3": scenario.get("anomalies")}
    try:
        sim = replay(scenario)
    except AssertionError as exc:
        row.update(sim=None, agree=False, error=str(exc))
        return row
    bad = mismatches(scenario, sim)
    row.update(sim=sim.anomalies, mismatches=bad, agree=not bad and sim.anomalies == row["z3"])
    return row


def explore(
    spec: Spec, *, budget: int = 20_000, anomalies_of: Sequence[str] = ("N1", "N2", "N3")
) -> tuple[int, bool, list[Run]]:
    """DPOR over every schedule of `spec`'s transactions: (runs, finished, the runs showing
    one of `anomalies_of`). `finished` is False when the budget cut the exploration short."""
    prog = program_of(spec)
    runs, bad = 0, []
    it: Iterator[Run] = DPOR().runs(prog, Stats())
    for run in it:
        runs += 1
        if run.deadlock or run.truncated:
            raise InvalidInput("spec", f"run {runs} deadlocked or was truncated")
        out = anomalies(spec, dict(run.state), run.history)
        if any(out.anomalies[a] for a in anomalies_of):
            bad.append(run)
        if runs >= budget:
            return runs, False, bad
    return runs, True, bad
