"""N1, N2 and N3 on a real run, through toki's checkers where they apply.

The checkers in `toki.check.anomalies` take a system model, a finished `Run` and its store
state. A real run has no simulated store; `RealView` presents the library's observations in
that shape (the final observation is the state; each timeline snapshot is one committed
transaction of the history), so `n3_erasure` runs unchanged and a real row
means what a model row means:

* N1 / RD: the library's recovery from its durable record (mem0: its history table
  re-applied; Graphiti: its stored episodes re-ingested; LangMem: the kept thread re-run;
  toki: the log reopened, and re-adjudicated), run with the live judge pinned and with a
  fresh one. N1: the two differ (a fresh judge changes a winner); RD: the pinned one already
  differs from the live state (`recovery_checks`).
* N2: the live beliefs are not those of any serial run *of the real code* over the committed
  claims, in any order that keeps each agent's own order. A claim is committed when its
  agent finished it, or when it left a trace in the library's state (a crash mid-call).
* N3: a value a reader was served after some step can no longer be produced by the library
  (its current memories, history or audit rows).

These small functions are the only place the real layer calls the checkers, so a change of
their definitions lands here. The checks on derived state (lost update, forked history,
response and index divergence, resurrection, scope leak, duplicate) are in
`toki/real/derived.py`; `check_real` runs them by name too.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.canonical import canonical_json
from toki.check.anomalies import Verdict, n3_erasure
from toki.real.adapter import Picker, RealSystem
from toki.real.derived import DERIVED, check_derived, duplicated_texts
from toki.real.driver import (
    RealRun,
    SerialCache,
    run_serially,
    serial_beliefs,
    serial_orders,
)
from toki.sim.explore import Run
from toki.sim.program import CRASHED
from toki.sim.store import Op, OpKind
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import Beliefs, SimJudge, SystemModel, belief_hash

__all__ = [
    "ALL_CHECKS",
    "ANOMALIES",
    "RealView",
    "check_real",
    "committed_claims",
    "n2",
    "n3",
    "recovery_checks",
]

ANOMALIES = ("N1", "RD", "N2", "N3")
ALL_CHECKS = (*ANOMALIES, *DERIVED)
OBS = ("real", "observation")
SERIAL_LIMIT = 720  # serial orders compared at most; beyond that N2 is undecided


class RealView(SystemModel):
    """A real system seen as a model whose state is one observation of the library."""

    name: ClassVar[str] = "real"

    def __init__(self, system: RealSystem, recovered: Any = None) -> None:
        self.system = system
        self.recovered = recovered

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {OBS: {}}

    def beliefs(self, state: Mapping[Hashable, Any], keys: Iterable[str]) -> Beliefs:
        return self.system.host.beliefs(state.get(OBS) or {}, list(keys))

    def recover(
        self, state: Mapping[Hashable, Any], keys: Iterable[str], judge: SimJudge
    ) -> Beliefs:
        return self.system.host.recover(state.get(OBS) or {}, list(keys), judge, self.recovered)

    def recoverable(self, state: Mapping[Hashable, Any], key: str) -> set[str]:
        return self.system.host.recoverable(state.get(OBS) or {}, key)


def as_model_run(rr: RealRun) -> Run:
    """The real run in the checkers' shape: the final observation as the state, each
    timeline snapshot as one committed write of it."""
    ops: list[Op] = []
    for t, snap in enumerate(rr.timeline):
        ops.append(Op(2 * t, t + 1, OpKind.WRITE, OBS, snap["view"]))
        ops.append(Op(2 * t + 1, t + 1, OpKind.COMMIT))
    return Run(
        program="real",
        strategy="real",
        seeds=(),
        schedule=rr.schedule,
        state_hash="",
        state=((OBS, rr.observation),),
        outcomes=rr.outcomes,
        history=tuple(ops),
    )


def _judge_calls(recovered: Any) -> int:
    """Questions the recovery put to its judge (0 for a recovery that asks none)."""
    if isinstance(recovered, Mapping):
        return int(recovered.get("judge_calls") or 0)
    return 0


def recovery_checks(
    system: RealSystem, workload: Workload, rr: RealRun, judge: Picker, recovery: Picker
) -> tuple[Verdict, Verdict]:
    """(N1, RD) on a real run, as `toki.check.anomalies.recovery_checks` defines them for
    models: the library's recovery is run with the live judge pinned and with a fresh one.
    N1: the two rebuild different beliefs (re-adjudication changes a winner); RD: the pinned
    recovery already differs from the live state (an order, a lost or half-written record).
    A library whose recovery is judge-free (mem0) can show RD only. For toki, whose restart
    (reopening the log) asks no judge, N1 compares its re-adjudication under both judges.
    Without a pinned recovery (`finish_run` given no judge) the fresh one stands in for it."""
    host = system.host
    keys = list(workload.keys)
    live = host.beliefs(rr.observation, keys)
    pinned_raw = rr.recovered if rr.recovered_pinned is None else rr.recovered_pinned
    fresh = host.recover(rr.observation, keys, recovery, rr.recovered)
    pinned = host.recover(rr.observation, keys, judge, pinned_raw)
    rejudged = getattr(host, "rejudged", None)
    if rejudged is not None:
        fresh_n1, pinned_n1 = rejudged(rr.recovered, keys), rejudged(pinned_raw, keys)
    else:
        fresh_n1, pinned_n1 = fresh, pinned
    details = {
        "recovery_judge_seed": recovery.seed,
        "recovery_judge_calls": _judge_calls(rr.recovered),
        "pinned_judge_seed": judge.seed,
        "pinned_judge_calls": _judge_calls(pinned_raw),
        "pinned_recovery": rr.recovered_pinned is not None,
    }
    if fresh_n1 is None or pinned_n1 is None:
        n1_keys: tuple[str, ...] = ()
    else:
        n1_keys = tuple(k for k in keys if fresh_n1.get(k) != pinned_n1.get(k))
    rd_keys = tuple(k for k in keys if pinned.get(k) != live.get(k))
    n1 = Verdict(
        "N1",
        bool(n1_keys),
        n1_keys,
        {k: (pinned_n1 or {}).get(k) for k in n1_keys},
        {k: (fresh_n1 or {}).get(k) for k in n1_keys},
        {**details, "compared": "recovery with a fresh judge vs with the live judge pinned"},
    )
    rd = Verdict(
        "RD",
        bool(rd_keys),
        rd_keys,
        {k: live.get(k) for k in rd_keys},
        {k: pinned.get(k) for k in rd_keys},
        {**details, "compared": "recovery with the live judge pinned vs the live state"},
    )
    return n1, rd


def committed_claims(system: RealSystem, workload: Workload, rr: RealRun) -> list[list[SimClaim]]:
    """Per agent, in its own order: the claims it finished, and the one a crash interrupted
    if that claim left a trace in the library's state."""
    crashed_at = {t["crash"]: t.get("claim") for t in rr.trace if "crash" in t}
    out = []
    for agent, (inbox, outcome) in enumerate(zip(workload.inboxes, rr.outcomes, strict=True)):
        if outcome is CRASHED:
            at = crashed_at.get(agent)
            done = 0 if at is None else int(at)  # None: before its first claim
            kept = list(inbox[:done])
            if done < len(inbox) and system.host.recorded(rr.observation, inbox[done]):
                kept.append(inbox[done])
            out.append(kept)
        else:
            out.append(list(inbox))
    return out


def n2(system: RealSystem, workload: Workload, rr: RealRun, serial: SerialCache) -> Verdict:
    sequences = committed_claims(system, workload, rr)
    orders = serial_orders(sequences, SERIAL_LIMIT)
    claims = sum(len(s) for s in sequences)
    if orders is None:
        return Verdict(
            "N2",
            False,
            ran=False,
            details={
                "undecided": f"{claims} committed claims: more than {SERIAL_LIMIT} serial orders"
            },
        )
    live = system.host.beliefs(rr.observation, workload.keys)
    hashes = serial_beliefs(serial, orders)
    found = belief_hash(live) not in hashes
    keys = tuple(sorted({c.key for s in sequences for c in s})) if found else ()
    return Verdict(
        "N2",
        found,
        keys,
        "the beliefs of a serial run of the real code",
        live if found else None,
        {
            "serial_orders": len(orders),
            "serial_states": len(hashes),
            "committed_claims": claims,
            "respects_agent_order": True,
        },
    )


def n3(system: RealSystem, workload: Workload, rr: RealRun) -> Verdict:
    return n3_erasure(RealView(system), workload, as_model_run(rr))


def check_real(
    system: RealSystem,
    workload: Workload,
    rr: RealRun,
    serial: SerialCache,
    recovery: Picker,
    anomalies: Sequence[str] = ANOMALIES,
) -> dict[str, Verdict]:
    out: dict[str, Verdict] = {}
    if getattr(workload, "family", None) is not None:  # an OpProgram: no claims
        # except the checks a host defines over a program's final state (Letta's N2)
        kept = set(getattr(system.host, "program_checks", ()))
        for name in [a for a in anomalies if a in ANOMALIES and a not in kept]:
            out[name] = Verdict(
                name,
                False,
                ran=False,
                details={"abstains": "defined over claims; a program of operations has none"},
            )
        anomalies = [a for a in anomalies if a not in ANOMALIES or a in kept]
    if {"N1", "RD"} & set(anomalies):
        n1, rd = recovery_checks(system, workload, rr, serial.judge, recovery)
    for name in anomalies:
        if name == "N1":
            out[name] = n1
        elif name == "RD":
            out[name] = rd
        elif name == "N2":
            out[name] = n2(system, workload, rr, serial)
        elif name == "N3":
            out[name] = n3(system, workload, rr)
        elif name in DERIVED:
            out[name] = check_derived(name, rr.observation, lambda: serial_duplicates(serial))
        else:
            raise ValueError(f"anomaly: unknown anomaly {name!r} (use {', '.join(ALL_CHECKS)})")
    return out


def serial_duplicates(serial: SerialCache) -> list[set[str] | None]:
    """The duplicated (scope, text) pairs of each serial run of the workload's steps, in
    every order that keeps each agent's own (what `duplicate` compares with). Memoised in
    the serial cache (under a key of its own) across the runs of one exploration."""
    expand = getattr(serial.workload, "serial_inboxes", None)  # an OpProgram's batch steps
    inboxes = serial.workload.inboxes if expand is None else expand()
    orders = serial_orders(inboxes, SERIAL_LIMIT)
    if orders is None:
        return [None]
    out: list[set[str] | None] = []
    for order in orders:
        key = ("derived:duplicate", *(canonical_json(c.to_json()) for c in order))
        found = serial.hashes.get(key)
        if found is None:
            obs = run_serially(
                serial.system, serial.session, serial.workload, order, serial.judge, serial.seed
            )
            dups = duplicated_texts(obs)
            found = canonical_json(None if dups is None else sorted(dups))
            serial.hashes[key] = found
            serial.runs += 1
        got = json.loads(found)
        out.append(None if got is None else set(got))
    return out
