"""The write-time anomalies, checked on a recorded simulator run of a system model.

- N1 replay inconsistency (the TOKI paper's definition): re-adjudication with a fresh judge
  yields a different winner. The system's own recovery procedure is run twice on what it
  durably recorded, once with the live judge pinned (same seed) and once with a fresh,
  unpinned judge; N1 holds when the two rebuild different beliefs. A recovery that never asks
  the judge cannot show it (the number of judge calls is reported with every verdict).
- RD recovery divergence: the recovery with the pinned judge already differs from the live
  state, for a reason other than the judge (a different order, a lost or half-written record,
  nothing durable). Whenever the fresh-judge recovery differs from the live state (the
  check that was called N1 before the split), N1 or RD holds.
- N2 belief-drift skew: the committed belief state is not the belief state of any serial
  execution of the same committed claims, in an order that respects each agent's own order
  (lost evidence update, write skew on one (subject, predicate) partition, a duplicated
  current row); the drift magnitude is the evidence weight the live state lacks. A claim an
  agent was processing when it crashed, or gave up on, may or may not have taken effect: the
  serial executions are taken both with and without it. With too many orders to rule out,
  the check is undecided (ran=False), never clean.
- N3 audit erasure: a value the live system believed for a key after some commit can no
  longer be produced by the final store (from current, history or audit rows).

Each check returns a `Verdict` with the keys involved and what was expected beside what was
observed; the witness (workload, schedule, seeds) is attached by the caller that knows them.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from toki.canonical import canonical_json
from toki.sim.explore import Run
from toki.sim.store import Op, OpKind
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import GAVE_UP
from toki.systems.base import (
    ANOMALIES,
    CRASHED_AT,
    Beliefs,
    SimJudge,
    SystemModel,
    belief_hash,
    run_serially,
)

__all__ = [
    "ANOMALIES",
    "Verdict",
    "check_run",
    "committed_snapshots",
    "delivered",
    "n1_replay",
    "n2_drift",
    "n3_erasure",
    "recovery_checks",
    "serial_draws",
    "serial_orders",
]


@dataclass(frozen=True, slots=True)
class Verdict:
    anomaly: str
    found: bool
    keys: tuple[str, ...] = ()
    expected: Any = None
    observed: Any = None
    details: Mapping[str, Any] = field(default_factory=dict)
    ran: bool = True  # False: the check could not run (abstained or undecided; see details)

    @property
    def abstained(self) -> bool:
        return not self.ran and "abstains" in self.details

    @property
    def undecided(self) -> bool:
        """The check ran out of means to decide (e.g. too many serial orders): neither an
        anomaly nor clean."""
        return not self.ran and "undecided" in self.details

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


# ------------------------------------------------------------------------ N1 and RD

_CACHE_LIMIT = 4096
_RECOVER_CACHE: dict[tuple[Any, ...], tuple[Beliefs, int]] = {}


def _model_key(system: SystemModel) -> tuple[Any, ...]:
    """What identifies a model's behaviour: its class, name and constructor settings."""
    settings = sorted((k, repr(v)) for k, v in getattr(system, "__dict__", {}).items())
    return (type(system).__qualname__, system.name, tuple(settings))


def _recover(
    system: SystemModel, run: Run, keys: Sequence[str], judge: SimJudge
) -> tuple[Beliefs, int]:
    """(the beliefs the model's recovery rebuilds from the final state, judge calls it made),
    memoised: recovery is a function of the final state and the judge, and the explored
    schedules of one program end in few distinct states."""
    key = (_model_key(system), run.state_hash, tuple(keys), judge.p, judge.seed)
    hit = _RECOVER_CACHE.get(key) if run.state_hash else None  # a run without a hash: no cache
    if hit is None:
        if len(_RECOVER_CACHE) > _CACHE_LIMIT:
            _RECOVER_CACHE.clear()
        counting = judge.counting()
        recovered = system.recover(dict(run.state), keys, counting)
        hit = _RECOVER_CACHE[key] = (recovered, counting.asked)
    return hit


def recovery_checks(
    system: SystemModel, workload: Workload, run: Run, judge: SimJudge, recovery_judge: SimJudge
) -> tuple[Verdict, Verdict]:
    """(N1, RD): recovery with a fresh judge against recovery with the live judge pinned,
    and recovery with the live judge pinned against the live state."""
    keys = workload.keys
    live = system.beliefs(dict(run.state), keys)
    pinned, pinned_calls = _recover(system, run, keys, SimJudge(judge.p, judge.seed))
    fresh, fresh_calls = _recover(system, run, keys, recovery_judge)
    details = {
        "recovery_judge_seed": recovery_judge.seed,
        "recovery_judge_calls": fresh_calls,
        "pinned_judge_seed": judge.seed,
        "pinned_judge_calls": pinned_calls,
    }
    n1_keys = tuple(k for k in keys if fresh.get(k) != pinned.get(k))
    rd_keys = tuple(k for k in keys if pinned.get(k) != live.get(k))
    n1 = Verdict(
        "N1",
        bool(n1_keys),
        n1_keys,
        {k: pinned.get(k) for k in n1_keys},
        {k: fresh.get(k) for k in n1_keys},
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


def n1_replay(
    system: SystemModel, workload: Workload, run: Run, recovery_judge: SimJudge
) -> Verdict:
    """The check as it was before N1 and RD were split: the recovery with `recovery_judge`
    differs from the live state (N1 or RD, undistinguished). Kept for callers that check a
    recorded run without a pinned judge (`toki.real.checks`); `recovery_checks` separates the
    two."""
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
        {"recovery_judge_seed": getattr(recovery_judge, "seed", None)},
    )


# ------------------------------------------------------------------------ N2

SAMPLED_ORDERS = 120
ALL_ORDERS = 5040
MAX_OPTIONAL = 6  # claims whose effect is uncertain; beyond this the check is undecided
_SERIAL_CACHE: dict[tuple[Any, ...], _Serial] = {}

Chains = tuple[tuple[SimClaim, ...], ...]


def delivered(workload: Workload, run: Run) -> list[tuple[tuple[SimClaim, ...], frozenset[int]]]:
    """Per agent: the claims it took from its inbox, in order, and the positions among them
    whose effect may be partial or absent (the claim in progress when it crashed, a claim it
    gave up on after retries). Fault re-deliveries (`duplicate:<agent>`) are included."""
    fired = [c for c in run.schedule if isinstance(c, str)]
    out = []
    for i, inbox in enumerate(workload.inboxes):
        claims = list(inbox)
        claims += [inbox[0]] * fired.count(f"duplicate:{i}") if inbox else []
        outcome = run.outcomes[i] if i < len(run.outcomes) else None
        if isinstance(outcome, tuple) and len(outcome) == 2 and outcome[0] == CRASHED_AT:
            taken = int(outcome[1])
            out.append((tuple(claims[:taken]), frozenset({taken - 1} if taken else ())))
        elif isinstance(outcome, tuple):
            done = claims[: len(outcome)]
            unsure = frozenset(j for j, o in enumerate(outcome) if o == GAVE_UP)
            out.append((tuple(done), unsure))
        else:  # a bare CRASHED (crashed before it started) or an unknown outcome
            out.append((tuple(claims), frozenset(range(len(claims)))))
    return out


def _chains(seqs: Sequence[tuple[SimClaim, ...]]) -> Chains:
    """Each agent's order of distinct claims (a re-delivery is the same claim). A claim some
    other agent also received is left free (its own one-claim chain): constraining it by
    either agent's order could only add false alarms."""
    per_agent = [list(dict.fromkeys(seq)) for seq in seqs]
    count: dict[SimClaim, int] = {}
    for seq in per_agent:
        for c in seq:
            count[c] = count.get(c, 0) + 1
    shared = [c for c in count if count[c] > 1]
    chains = [tuple(c for c in seq if count[c] == 1) for seq in per_agent]
    chains += [(c,) for c in shared]
    return tuple(ch for ch in chains if ch)


def _merge_count(chains: Chains) -> int:
    out = math.factorial(sum(len(c) for c in chains))
    for c in chains:
        out //= math.factorial(len(c))
    return out


def _all_merges(chains: Chains) -> Iterator[tuple[SimClaim, ...]]:
    heads = [0] * len(chains)
    order: list[SimClaim] = []
    total = sum(len(c) for c in chains)

    def rec() -> Iterator[tuple[SimClaim, ...]]:
        if len(order) == total:
            yield tuple(order)
            return
        for i, chain in enumerate(chains):
            if heads[i] < len(chain):
                order.append(chain[heads[i]])
                heads[i] += 1
                yield from rec()
                heads[i] -= 1
                order.pop()

    yield from rec()


def _random_merge(chains: Chains, rng: random.Random) -> tuple[SimClaim, ...]:
    """A merge drawn uniformly: take the next claim of a chain with probability proportional
    to what is left of it."""
    left = [len(c) for c in chains]
    heads = [0] * len(chains)
    order = []
    while any(left):
        i = rng.choices(range(len(chains)), left)[0]
        order.append(chains[i][heads[i]])
        heads[i] += 1
        left[i] -= 1
    return tuple(order)


def serial_orders(
    seqs: Sequence[tuple[SimClaim, ...]], limit: int, seed: int = 0
) -> tuple[list[tuple[SimClaim, ...]], bool]:
    """(orders, complete): every interleaving of the agents' own orders (each agent's claims
    stay in the order it processed them) when there are at most `limit`, otherwise `limit`
    uniformly drawn ones (fixed seed)."""
    chains = _chains(seqs)
    n = _merge_count(chains)
    if n <= limit:
        return list(_all_merges(chains)), True
    rng = random.Random(seed)
    return [_random_merge(chains, rng) for _ in range(limit)], False


def _variants(
    agents: Sequence[tuple[tuple[SimClaim, ...], frozenset[int]]],
) -> list[tuple[tuple[SimClaim, ...], ...]]:
    """Each way the uncertain claims may have taken effect (each present or absent)."""
    unsure = [(a, j) for a, (_, opt) in enumerate(agents) for j in sorted(opt)]
    out = []
    for keep in itertools.product((True, False), repeat=len(unsure)):
        dropped = {u for u, k in zip(unsure, keep, strict=True) if not k}
        out.append(
            tuple(
                tuple(c for j, c in enumerate(seq) if (a, j) not in dropped)
                for a, (seq, _) in enumerate(agents)
            )
        )
    return out


@dataclass(slots=True)
class _Serial:
    """The serial orders of one set of variants under one judge, and the belief hashes of
    those computed so far (in order): orders are run lazily, until one reaches the state
    asked about."""

    orders: list[tuple[SimClaim, ...]]
    complete: bool  # the orders are all of them (else a uniform sample)
    hashes: list[str] = field(default_factory=list)


def _serial(
    system: SystemModel,
    workload: Workload,
    variants: Sequence[tuple[tuple[SimClaim, ...], ...]],
    judge: SimJudge,
) -> _Serial:
    """Memoised per (model, claims, judge): the explored schedules of one program mostly
    commit the same claims. All orders when there are at most ALL_ORDERS, else a uniform
    sample of SAMPLED_ORDERS (then a state not reached is undecided, not an anomaly)."""
    key = (
        _model_key(system),
        tuple(workload.keys),
        tuple(
            tuple(tuple(canonical_json(c.to_json()) for c in seq) for seq in v) for v in variants
        ),
        judge.p,
        judge.seed,
    )
    hit = _SERIAL_CACHE.get(key)
    if hit is None:
        complete = _order_count(variants) <= ALL_ORDERS
        share = ALL_ORDERS if complete else max(1, SAMPLED_ORDERS // len(variants))
        orders = [o for v in variants for o in serial_orders(v, share)[0]]
        if len(_SERIAL_CACHE) > _CACHE_LIMIT:
            _SERIAL_CACHE.clear()
        hit = _SERIAL_CACHE[key] = _Serial(list(dict.fromkeys(orders)), complete)
    return hit


def _reachable(
    system: SystemModel, workload: Workload, serial: _Serial, judge: SimJudge, target: str
) -> bool:
    """Whether some serial order gives the belief state `target` (run until one does)."""
    if target in serial.hashes:
        return True
    for i in range(len(serial.hashes), len(serial.orders)):
        state = run_serially(system, workload, serial.orders[i], judge)
        serial.hashes.append(belief_hash(system.beliefs(state, workload.keys)))
        if serial.hashes[-1] == target:
            return True
    return False


def _order_count(variants: Sequence[tuple[tuple[SimClaim, ...], ...]]) -> int:
    return sum(_merge_count(_chains(v)) for v in variants)


def n2_drift(system: SystemModel, workload: Workload, run: Run, judge: SimJudge) -> Verdict:
    """Sound: every order that keeps each agent's own order is tried (up to ALL_ORDERS) before
    a state is reported; with more orders, or more uncertain claims than MAX_OPTIONAL, a state
    no sampled order reaches is undecided (ran=False) rather than a false alarm."""
    final = dict(run.state)
    live = system.beliefs(final, workload.keys)
    agents = delivered(workload, run)
    unsure = sum(len(opt) for _, opt in agents)
    claims = list(dict.fromkeys(c for seq, _ in agents for c in seq))
    if unsure > MAX_OPTIONAL:
        return _undecided(f"{unsure} claims of uncertain effect (crashed or given up)", claims)
    variants = _variants(agents)
    total = _order_count(variants)
    serial = _serial(system, workload, variants, judge)
    reached = _reachable(system, workload, serial, judge, belief_hash(live))
    if not reached and not serial.complete:
        return _undecided(
            f"{total} serial orders of {len(claims)} committed claims: too many to rule out "
            f"(none of {len(serial.orders)} sampled orders reaches the state)",
            claims,
        )
    details: dict[str, Any] = {
        "serial_orders": total,
        "committed_claims": len(claims),
        "uncertain_claims": unsure,
        "orders_checked": "all" if serial.complete else "sampled",
    }
    keys: tuple[str, ...] = ()
    if not reached:
        details["serial_states"] = len(set(serial.hashes))
        lost = _evidence_lost(live, claims)
        if lost:
            details["evidence_lost"] = lost
        keys = tuple(sorted({c.key for c in claims}))
    return Verdict(
        "N2",
        not reached,
        keys,
        "a belief state of some serial order that keeps each agent's own order",
        None if reached else live,
        details,
    )


def _undecided(why: str, claims: Sequence[SimClaim]) -> Verdict:
    return Verdict(
        "N2", False, ran=False, details={"undecided": why, "committed_claims": len(claims)}
    )


def serial_draws(
    system: SystemModel, workload: Workload, run: Run, seeds: Sequence[int], p: float
) -> int:
    """Under how many of these judge draws (seeds) the run's live belief state is the state
    of some serial execution: whether a flagged N2 state needs the interleaving at all, or
    only a judge that answered differently."""
    live = belief_hash(system.beliefs(dict(run.state), workload.keys))
    variants = _variants(delivered(workload, run))
    hits = 0
    for seed in seeds:
        judge = SimJudge(p, seed)
        serial = _serial(system, workload, variants, judge)
        hits += _reachable(system, workload, serial, judge, live)
    return hits


Question = tuple[str, tuple[str, ...]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScriptedJudge(SimJudge):
    """A judge whose answers are chosen, not drawn: `script` maps a question (its text and
    candidates) to the index of the candidate it picks. A question the script does not hold
    gets candidate 0, keeps it for the rest of the run, and is listed in `unscripted` (with
    its number of candidates) in the order asked: enough to enumerate every answer to every
    question a serial run asks."""

    script: dict[Question, int] = field(default_factory=dict, compare=False, repr=False)
    unscripted: list[tuple[Question, int]] = field(
        default_factory=list, compare=False, repr=False
    )

    def pick(self, question: str, candidates: Sequence[str]) -> str:
        if self.calls is not None:
            self.calls[0] += 1
        q = (question, tuple(candidates))
        if q not in self.script:
            self.script[q] = 0
            self.unscripted.append((q, len(candidates)))
        return candidates[self.script[q]]


def every_answer(run: Callable[[ScriptedJudge], T]) -> Iterator[T]:
    """`run` once per assignment of answers to the questions it asks: a depth-first walk of
    the answer tree, in which each question asked for the first time branches on each of its
    candidates (a later question may depend on an earlier answer; each leaf is run once)."""
    scripts: list[dict[Question, int]] = [{}]
    while scripts:
        script = scripts.pop()
        judge = ScriptedJudge(script=dict(script))
        yield run(judge)
        fixed = dict(script)
        for question, n in judge.unscripted:  # the siblings of this run's first-time answers
            scripts.extend({**fixed, question: answer} for answer in range(1, n))
            fixed[question] = 0


def n2_origin_by_answers(
    system: SystemModel, workload: Workload, run: Run, budget: int
) -> tuple[str, int]:
    """Whether an N2 state needs the interleaving or only other judge answers, by enumeration:
    every serial order that keeps each agent's own order (every variant of the uncertain
    claims) is run under every assignment of answers to the questions it asks. "judge" when
    some run reaches the state, "schedule" when every run was made and none does, "bounded"
    when the orders were too many to list or `budget` serial runs did not finish (then
    nothing is claimed). Returns the label and the serial runs made."""
    target = belief_hash(system.beliefs(dict(run.state), workload.keys))
    variants = _variants(delivered(workload, run))
    if _order_count(variants) > ALL_ORDERS:
        return "bounded", 0
    orders = list(dict.fromkeys(o for v in variants for o in serial_orders(v, ALL_ORDERS)[0]))
    runs = 0
    for order in orders:

        def serial(judge: ScriptedJudge, order: tuple[SimClaim, ...] = order) -> str:
            state = run_serially(system, workload, order, judge)
            return belief_hash(system.beliefs(state, workload.keys))

        for state in every_answer(serial):
            runs += 1
            if state == target:
                return "judge", runs
            if runs >= budget:
                return "bounded", runs
    return "schedule", runs


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


# ------------------------------------------------------------------------ N3


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


# ------------------------------------------------------------------------ all of them


def check_run(
    system: SystemModel,
    workload: Workload,
    run: Run,
    judge: SimJudge,
    recovery_judge: SimJudge,
    anomalies: Sequence[str] = ("N1", "N2", "N3"),
) -> dict[str, Verdict]:
    """Run the requested checks (by default the three of the original interface; pass
    `ANOMALIES` for RD too); a check the model abstains from gets ran=False (the rule is
    `toki.systems.base.abstentions`)."""
    out: dict[str, Verdict] = {}
    abstains = system.abstains
    recovery: tuple[Verdict, Verdict] | None = None
    for name in anomalies:
        if name not in ANOMALIES:
            raise ValueError(f"anomaly: unknown anomaly {name!r} (use {', '.join(ANOMALIES)})")
        if name in abstains:
            out[name] = Verdict(name, False, ran=False, details={"abstains": abstains[name]})
        elif name in ("N1", "RD"):
            if recovery is None:
                recovery = recovery_checks(system, workload, run, judge, recovery_judge)
            out[name] = recovery[0] if name == "N1" else recovery[1]
        elif name == "N2":
            out[name] = n2_drift(system, workload, run, judge)
        else:
            out[name] = n3_erasure(system, workload, run)
    return out


def verdict_digest(verdicts: Mapping[str, Verdict]) -> str:
    return canonical_json({k: v.to_json() for k, v in sorted(verdicts.items())})
