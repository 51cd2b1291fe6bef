"""N1, N2 and N3 on a real run, through toki's checkers where they apply.

The checkers in `toki.check.anomalies` take a system model, a finished `Run` and its store
state. A real run has no simulated store; `RealView` presents the library's observations in
that shape (the final observation is the state; each timeline snapshot is one committed
transaction of the history), so `n1_replay` and `n3_erasure` run unchanged and a real row
means what a model row means:

* N1: the library's recovery from its durable record (mem0: its history table re-applied;
  toki: the log reopened, and re-adjudicated with a fresh judge) differs from the live state.
* N2: the live beliefs are not those of any serial run *of the real code* over the committed
  claims, in any order that keeps each agent's own order. A claim is committed when its
  agent finished it, or when it left a trace in the library's state (a crash mid-call).
* N3: a value a reader was served after some step can no longer be produced by the library
  (its current memories, history or audit rows).

These small functions are the only place the real layer calls the checkers, so a change of
their definitions lands here.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.check.anomalies import Verdict, n1_replay, n3_erasure
from toki.real.adapter import Picker, RealSystem
from toki.real.driver import RealRun, SerialCache, serial_beliefs, serial_orders
from toki.sim.explore import Run
from toki.sim.program import CRASHED
from toki.sim.store import Op, OpKind
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import Beliefs, SimJudge, SystemModel, belief_hash

__all__ = ["ANOMALIES", "RealView", "check_real", "committed_claims", "n1", "n2", "n3"]

ANOMALIES = ("N1", "N2", "N3")
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


def n1(system: RealSystem, workload: Workload, rr: RealRun, recovery: Picker) -> Verdict:
    view = RealView(system, rr.recovered)
    verdict = n1_replay(view, workload, as_model_run(rr), recovery)  # type: ignore[arg-type]
    details = {**verdict.details, "cause": "recovery" if verdict.found else None}
    rejudge = getattr(system.host, "rejudged", None)
    if not verdict.found and rejudge is not None:
        again = rejudge(rr.recovered, workload.keys)
        live = system.host.beliefs(rr.observation, workload.keys)
        if again is not None:
            keys = tuple(k for k in workload.keys if live.get(k) != again.get(k))
            if keys:
                return Verdict(
                    "N1",
                    True,
                    keys,
                    {k: live.get(k) for k in keys},
                    {k: again.get(k) for k in keys},
                    {**details, "cause": "re-adjudication"},
                )
    return Verdict("N1", verdict.found, verdict.keys, verdict.expected, verdict.observed, details)


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
    out = {}
    for name in anomalies:
        if name == "N1":
            out[name] = n1(system, workload, rr, recovery)
        elif name == "N2":
            out[name] = n2(system, workload, rr, serial)
        elif name == "N3":
            out[name] = n3(system, workload, rr)
        else:
            raise ValueError(f"anomaly: unknown anomaly {name!r} (use N1, N2, N3)")
    return out
