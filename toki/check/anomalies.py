"""The three write-time anomalies, checked on a recorded simulator run of a system model.

- N1 replay inconsistency: the system's own recovery procedure, run on what it durably
  recorded (with a fresh, unpinned judge), rebuilds a different belief state than the live
  run ended with.
- N2 belief-drift skew: the committed belief state is not the belief state of any serial
  execution of the same committed claims (lost evidence update, write skew on one
  (subject, predicate) partition, a duplicated current row); the drift magnitude is the
  evidence weight the live state lacks compared with the closest serial state.
- N3 audit erasure: a value the live system believed for a key after some commit can no
  longer be produced by the final store (from current, history or audit rows).

Each check returns a `Verdict` with the keys involved and what was expected beside what was
observed; the witness (workload, schedule, seeds) is attached by the caller that knows them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toki.canonical import canonical_json
from toki.sim.explore import Run
from toki.sim.store import Op, OpKind
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import SimJudge, SystemModel, belief_hash, serial_beliefs

__all__ = ["Verdict", "check_run", "committed_snapshots", "n1_replay", "n2_drift", "n3_erasure"]


@dataclass(frozen=True, slots=True)
class Verdict:
    anomaly: str
    found: bool
    keys: tuple[str, ...] = ()
    expected: Any = None
    observed: Any = None
    details: Mapping[str, Any] = field(default_factory=dict)
    ran: bool = True  # False: the check could not run (reason in details)

    def to_json(self) -> dict[str, Any]:
        return {
            "anomaly": self.anomaly,
            "found": self.found,
            "ran": self.ran,
            "keys": list(self.keys),
            "expected": self.expected,
            "observed": self.observed,
            "details": dict(self.details),
        }


def committed_snapshots(
    history: Sequence[Op], initial: Mapping[Hashable, Any]
) -> list[dict[Hashable, Any]]:
    """The committed state after each commit, in commit order (from the store's history)."""
    pending: dict[int, dict[Hashable, tuple[bool, Any]]] = {}
    state = dict(initial)
    out = []
    for op in history:
        if op.kind is OpKind.WRITE:
            pending.setdefault(op.txn, {})[op.key] = (False, op.value)
        elif op.kind is OpKind.DELETE:
            pending.setdefault(op.txn, {})[op.key] = (True, None)
        elif op.kind is OpKind.ABORT:
            pending.pop(op.txn, None)
        elif op.kind is OpKind.COMMIT:
            for key, (deleted, value) in pending.pop(op.txn, {}).items():
                if deleted:
                    state.pop(key, None)
                else:
                    state[key] = value
            out.append(dict(state))
    return out


def _committed_claims(state: Mapping[Hashable, Any], workload: Workload) -> list[SimClaim]:
    """Claims whose effect committed: the workload's claims found in the final state's
    version rows, or (for models without version rows) all of them."""
    by_id = {c.cid: c for c in workload.claims}
    stored = [
        by_id[k[1]]
        for k in state
        if isinstance(k, tuple) and len(k) == 2 and k[0] == "ver" and k[1] in by_id
    ]
    return stored or list(dict.fromkeys(workload.claims))


def n1_replay(
    system: SystemModel, workload: Workload, run: Run, recovery_judge: SimJudge
) -> Verdict:
    final = dict(run.state)
    live = system.beliefs(final, workload.keys)
    recovered = system.recover(final, workload.keys, recovery_judge)
    keys = tuple(k for k in workload.keys if live.get(k) != recovered.get(k))
    return Verdict(
        "N1",
        bool(keys),
        keys,
        {k: live.get(k) for k in keys},
        {k: recovered.get(k) for k in keys},
        {"recovery_judge_seed": recovery_judge.seed},
    )


def n2_drift(system: SystemModel, workload: Workload, run: Run, judge: SimJudge) -> Verdict:
    """Sound: a sampled set of serial orders could miss the one the run is equivalent to, so a
    state not found among the samples is re-checked against every order (up to 7 claims); with
    more claims the check is undecided (ran=False) rather than a false alarm."""
    final = dict(run.state)
    live = system.beliefs(final, workload.keys)
    claims = list(dict.fromkeys(_committed_claims(final, workload)))
    target = belief_hash(live)
    serial = _serial(system, workload, claims, judge, SAMPLED_ORDERS)
    orders = "all" if _factorial(len(claims)) <= SAMPLED_ORDERS else "sampled"
    if target not in serial and orders == "sampled":
        if _factorial(len(claims)) <= ALL_ORDERS:
            serial = _serial(system, workload, claims, judge, ALL_ORDERS)
            orders = "all"
        else:
            return Verdict(
                "N2",
                False,
                ran=False,
                details={
                    "undecided": f"{len(claims)} committed claims: too many orders to rule out "
                    f"(checked {SAMPLED_ORDERS} sampled orders)"
                },
            )
    found = target not in serial
    details: dict[str, Any] = {
        "serial_states": len(serial),
        "committed_claims": len(claims),
        "serial_orders": orders,
    }
    keys: tuple[str, ...] = ()
    if found:
        lost = _evidence_lost(live, claims)
        if lost:
            details["evidence_lost"] = lost
        keys = tuple(sorted({c.key for c in claims}))
    return Verdict(
        "N2", found, keys, "a belief state of some serial order", live if found else None, details
    )


SAMPLED_ORDERS = 120
ALL_ORDERS = 5040
_SERIAL_CACHE: dict[tuple[Any, ...], set[str]] = {}


def _serial(
    system: SystemModel, workload: Workload, claims: Sequence[SimClaim], judge: SimJudge, limit: int
) -> set[str]:
    """Serial belief states, memoised: the explored schedules of one program mostly commit
    the same claims, and a model's serial outcomes depend only on them (and the judge)."""
    key = (
        type(system).__qualname__,
        system.name,
        tuple(workload.keys),
        tuple(sorted(canonical_json(c.to_json()) for c in claims)),  # not ids: they repeat
        judge.p,
        judge.seed,
        limit,
    )
    found = _SERIAL_CACHE.get(key)
    if found is None:
        if len(_SERIAL_CACHE) > 4096:
            _SERIAL_CACHE.clear()
        found = _SERIAL_CACHE[key] = serial_beliefs(system, workload, claims, judge, limit=limit)
    return found


def _factorial(n: int) -> int:
    out = 1
    for i in range(2, n + 1):
        out *= i
    return out


def _evidence_lost(live: Mapping[str, Any], claims: Sequence[SimClaim]) -> float:
    """Committed claim weight missing from the live evidence totals (EWM-style models)."""
    committed = sum(c.weight for c in claims)
    stored = 0.0
    seen = False
    for entry in live.values():
        if isinstance(entry, dict) and isinstance(entry.get("evidence"), dict):
            seen = True
            stored += sum(float(v) for v in entry["evidence"].values())
    if not seen:
        return 0.0
    return round(max(0.0, committed - stored), 9)


def n3_erasure(system: SystemModel, workload: Workload, run: Run) -> Verdict:
    final = dict(run.state)
    initial = system.initial(workload)
    believed: dict[str, list[tuple[int, str]]] = {}
    for t, snapshot in enumerate(committed_snapshots(run.history, initial)):
        for key, entry in system.beliefs(snapshot, workload.keys).items():
            value = entry.get("value") if isinstance(entry, dict) else entry
            if value is not None:
                believed.setdefault(key, []).append((t, str(value)))
    erased: dict[str, list[str]] = {}
    first_at: dict[str, int] = {}
    for key, seen in believed.items():
        keep = system.recoverable(final, key)
        for t, value in seen:
            if value not in keep and value not in erased.get(key, []):
                erased.setdefault(key, []).append(value)
                first_at.setdefault(key, t)
    keys = tuple(sorted(erased))
    return Verdict(
        "N3",
        bool(keys),
        keys,
        {k: sorted({v for _, v in believed[k]}) for k in keys},
        {k: sorted(system.recoverable(final, k)) for k in keys},
        {"erased": erased, "believed_after_commit": first_at},
    )


def check_run(
    system: SystemModel,
    workload: Workload,
    run: Run,
    judge: SimJudge,
    recovery_judge: SimJudge,
    anomalies: Sequence[str] = ("N1", "N2", "N3"),
) -> dict[str, Verdict]:
    """Run the requested checks; a model that abstains on an anomaly gets ran=False."""
    out: dict[str, Verdict] = {}
    for name in anomalies:
        if name in system.abstains:
            out[name] = Verdict(name, False, ran=False, details={"abstains": system.abstains[name]})
        elif name == "N1":
            out[name] = n1_replay(system, workload, run, recovery_judge)
        elif name == "N2":
            out[name] = n2_drift(system, workload, run, judge)
        elif name == "N3":
            out[name] = n3_erasure(system, workload, run)
        else:
            raise ValueError(f"anomaly: unknown anomaly {name!r} (use N1, N2, N3)")
    return out


def verdict_digest(verdicts: Mapping[str, Verdict]) -> str:
    return canonical_json({k: v.to_json() for k, v in sorted(verdicts.items())})
