"""The write path as a pure planner: a claim, its key's state as the write's transaction read
it, and an operator -> the decision and the events that record it (the judge's verdicts,
DECISION, ASSERT, the losers closed pointwise, CONFLICT_RESOLVE).

`plan_write` reads only its partition and the request: no store, no clock, no `Memory`. The
shell (toki/memory.py) fixes the request's instants, runs the plan inside the store's
transaction at `request.level` and folds what it committed; a scratch state
(toki/scratch.py) runs the same plan in memory (re-adjudication, shadow projections).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from toki.algebra.allocate import Span, allocate
from toki.algebra.base import Operator
from toki.algebra.context import ResolveContext
from toki.algebra.gate import gate
from toki.algebra.provenance import Action, Decision, Provenance
from toki.algebra.rule import Policy
from toki.canonical import canonical_json
from toki.isolation import Isolation, dominates
from toki.judge import Judge, JudgeLog
from toki.log import Event, EventKind
from toki.model import FactKey, FactVersion
from toki.partition import Partition
from toki.plan import POLICY_SUBJECT, assert_events, leave_groups, piece
from toki.replay import KeyState
from toki.time import BoundSource, Interval, format_instant

__all__ = [
    "PolicyLookup",
    "WriteRequest",
    "close_losers",
    "plan_policy",
    "plan_write",
    "write_keys",
]

_OPEN_LO = -(2**62)
_OPEN_HI = 2**62
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

PolicyLookup = Callable[[FactKey, datetime], dict[str, Any] | None]
"""The RULE policy a promoted configuration puts in force for a key at an instant, if any."""


def _us(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


@dataclass(frozen=True, slots=True)
class WriteRequest:
    """One claim through one operator, everything fixed: the version (its instants are the
    shell's), the isolation level the write runs at, and where judge verdicts come from.

    judge_log: the keyed log that answers judge questions (re-adjudication passes the log's);
    None: the partition's own. log_judge=False switches the keyed log off (baselines).
    config_policy: RULE policies of a promoted configuration (they beat POLICY events)."""

    version: FactVersion
    operator: Operator
    level: Isolation
    judge: Judge | None = None
    log_judge: bool = True
    allow_weaker_isolation: bool = False
    semantic_gate: bool = False
    judge_log: JudgeLog | None = None
    config_policy: PolicyLookup | None = None


def write_keys(key: FactKey, operator: Operator) -> list[FactKey]:
    """The keys a write reads: its own, and for RULE the key its policy is logged under."""
    if operator.name == "RULE":
        return [key, FactKey(key.tenant, POLICY_SUBJECT, key.fact_key)]
    return [key]


def plan_write(p: Partition, request: WriteRequest) -> tuple[Decision, list[Event]]:
    """The whole write path: duplicate -> NOOP; no contradiction -> INSERT; contradiction ->
    operator -> DECISION event -> close losers -> insert winner -> audit rows."""
    version, op = request.version, request.operator
    ctx = _context(p, request)
    found = gate(p.state(version.key), version, ctx, semantic=request.semantic_gate)
    pending: list[Event] = []
    if found.duplicate:
        return replace(op.resolve([version], version, ctx), claim_id=version.id), []
    if not found.contradicts:
        if found.equivalent:  # corroborating evidence: kept, closed by what it agrees with
            decision = _equivalence(op, version, found.equivalent[0], ctx)
        else:  # the operator does not run: its precondition is recorded, not enforced
            held = dominates(ctx.isolation, op.requires)
            decision = _insert_decision(op, version, ctx, held)
    else:
        decision = _pointwise(
            p, op.resolve(list(found.contradicts), version, ctx), version, pending
        )
    _judge_events(p, ctx, pending)
    if decision.action is not Action.INSERT:
        pending.append(
            _decision_event(p, version.key, version.recorded_at, decision, version.id, pending)
        )
    proposed = decision.action is Action.HOLD and op.name == "AWAIT"
    settled = frozenset(decision.losers) | {decision.winner or ""}
    assert_events(
        p,
        version,
        pending,
        proposed=proposed,
        exclude=frozenset() if decision.action is Action.HOLD else settled,
        claim=True,
    )
    if decision.action in (Action.SUPERSEDE, Action.REJECT):
        close_losers(p, version.key, decision, version.recorded_at, pending, reason=op.name)
    return replace(decision, claim_id=version.id), pending


def plan_policy(p: Partition, key: FactKey, policy: Policy, recorded: datetime) -> list[Event]:
    """A POLICY event putting `policy` in force from `recorded` (none: the same one is there)."""
    body = {"policy": policy.to_json(), "id": policy.id}
    state = p.state(key)
    if state is not None and any(
        at == recorded
        and logged.get("id") == policy.id
        and canonical_json(logged.get("policy")) == canonical_json(body["policy"])
        for at, logged in state.policies
    ):
        return []  # the same POLICY event is already in the log
    return [p.new(EventKind.POLICY, key, recorded, (), body)]


def _context(p: Partition, request: WriteRequest) -> ResolveContext:
    judge_log = None
    if request.log_judge:
        judge_log = request.judge_log if request.judge_log is not None else p.snapshot.judge_log
    lookup = request.config_policy
    return ResolveContext(
        decided_at=request.version.recorded_at,
        isolation=request.level,
        judge=request.judge,
        judge_log=judge_log,
        own_log=p.snapshot.judge_log,
        allow_weaker_isolation=request.allow_weaker_isolation,
        evidence=lambda key: _evidence(p, key),
        policy=lambda key, at: (
            (lookup(key, at) if lookup else None) or _policy_in_force(p, key, at)
        ),
    )


def _judge_events(p: Partition, ctx: ResolveContext, pending: list[Event]) -> None:
    for call in ctx.new_calls:
        pending.append(
            p.new(
                EventKind.DECISION,
                call.key,
                ctx.decided_at,
                tuple(c.id for c in call.question.candidates),
                {
                    "decision": "judge",
                    "task": call.question.task,
                    "theta": call.theta.to_json(),
                    "theta_digest": call.theta.digest,
                    "verdict": call.verdict.to_json(),
                },
                pending=pending,
            )
        )


def _decision_event(
    p: Partition,
    key: FactKey,
    recorded: datetime,
    decision: Decision,
    claim_id: str,
    pending: list[Event],
) -> Event:
    return p.new(
        EventKind.DECISION,
        key,
        recorded,
        tuple(decision.provenance.inputs),
        {
            "decision": "resolution",
            "action": decision.action.value,
            "token": decision.token,
            "claim": claim_id,
            "provenance": decision.provenance.to_json(),
        },
        pending=pending,
    )


def close_losers(
    p: Partition,
    key: FactKey,
    decision: Decision,
    recorded: datetime,
    pending: list[Event],
    *,
    reason: str,
) -> None:
    """Apply the decision's ranking pointwise: each valid-time point goes to the best
    ranked version covering it. A version that lost some points is closed (where it
    keeps a prefix) or replaced by pieces for the parts it keeps; nothing is rewritten."""
    state = p.state(key)
    ranked, effs, spans, kept = _allocation(p, key, decision.ranking, pending)
    open_pairs = set() if state is None else set(state.open_pairs())
    for pos, version in enumerate(ranked):
        vid = version.id
        if kept[vid] == [spans[vid]]:
            continue  # lost nothing
        eff = effs[vid]
        beaters = [
            b.id
            for b in ranked[:pos]
            if b.value_json != version.value_json and effs[b.id].overlaps(eff)
        ]
        new_ids = list(beaters)
        closes: str | None = None
        fragments = kept[vid]
        if len(fragments) == 1 and fragments[0][0] == spans[vid][0]:
            closes = format_instant(_instant(fragments[0][1]))  # keeps a prefix
        else:
            for frag in fragments:
                part = piece(version, _interval_of(frag, eff), recorded)
                if p.version(part.id) is None:
                    assert_events(p, part, pending, exclude=frozenset(decision.ranking))
                new_ids.append(part.id)
        pending.append(
            p.new(
                EventKind.SUPERSEDE,
                key,
                recorded,
                (vid, *new_ids),
                {
                    "old": vid,
                    "new": sorted(new_ids),
                    "closes_at": closes,
                    "reason": f"lost to {', '.join(beaters)} under {reason}",
                    "decision": decision.token,
                },
                pending=pending,
            )
        )
        for other in beaters:
            pair = _pair(vid, other)
            if pair in open_pairs:
                open_pairs.discard(pair)
                pending.append(
                    p.new(
                        EventKind.CONFLICT_RESOLVE,
                        key,
                        recorded,
                        pair,
                        {"left": pair[0], "right": pair[1], "winner": other, "how": reason},
                        pending=pending,
                    )
                )
        leave_groups(p, state, vid, beaters, reason, recorded, pending)


def _allocation(
    p: Partition,
    key: FactKey,
    ranking: Sequence[str],
    pending: list[Event],
    *extra: FactVersion,
) -> tuple[list[FactVersion], dict[str, Interval], dict[str, Span], dict[str, list[Span]]]:
    state = p.state(key)
    ranked = [_pending_version(p, v, pending, extra) for v in ranking]
    effs = {v.id: _effective_now(state, v) for v in ranked}
    spans = {vid: _span(eff) for vid, eff in effs.items()}
    kept = allocate([(v.id, v.value_json, spans[v.id]) for v in ranked])
    return ranked, effs, spans, kept


def _pointwise(
    p: Partition, decision: Decision, claim: FactVersion, pending: list[Event]
) -> Decision:
    """Settle who lost what: a version is a loser when it lost any valid-time point."""
    if decision.action not in (Action.SUPERSEDE, Action.REJECT):
        return decision
    _, _, spans, kept = _allocation(p, claim.key, decision.ranking, pending, claim)
    losers = tuple(sorted(v for v in decision.ranking if kept[v] != [spans[v]]))
    # SUPERSEDE: something that stood was (partly) closed; REJECT: only the claim lost
    action = Action.SUPERSEDE if any(v != claim.id for v in losers) else Action.REJECT
    prov = replace(decision.provenance, losers=losers)
    return Decision(action, decision.winner, losers, prov, decision.ranking)


def _effective_now(state: KeyState | None, version: FactVersion) -> Interval:
    if state is not None and version.id in state.versions:
        return state.effective(version.id) or version.valid
    return version.valid


def _pending_version(
    p: Partition, vid: str, pending: list[Event], extra: Sequence[FactVersion] = ()
) -> FactVersion:
    for v in extra:
        if v.id == vid:
            return v
    for e in pending:
        if e.version is not None and e.version.id == vid:
            return e.version
    return p.resolve(vid)


def _span(interval: Interval) -> Span:
    lo = _OPEN_LO if interval.start is None else _us(interval.start)
    hi = _OPEN_HI if interval.end is None else _us(interval.end)
    return (lo, hi)


def _instant(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _interval_of(span: Span, within: Interval) -> Interval:
    """A kept fragment as an interval; bounds it shares with `within` keep their provenance."""
    lo, hi = span
    start = None if lo == _OPEN_LO else _instant(lo)
    end = None if hi == _OPEN_HI else _instant(hi)
    s_src = within.start_source if start == within.start else BoundSource.EVIDENCE
    e_src = within.end_source if end == within.end else BoundSource.EVIDENCE
    return Interval(start, end, s_src, e_src)


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _insert_decision(
    op: Operator, version: FactVersion, ctx: ResolveContext, held: bool
) -> Decision:
    """No contradiction: the claim is simply inserted (recorded for the caller, not logged)."""
    from toki.algebra.provenance import evidence_digest, idempotency_key

    prov = Provenance(
        operator=op.name,
        operator_version=op.version,
        judge_key=None,
        evidence_digest=evidence_digest([version.id, version.value_json]),
        inputs=(version.id,),
        winner=version.id,
        losers=(),
        decided_at=ctx.decided_at,
        isolation=ctx.isolation,
        idempotency_key=idempotency_key(op.name, (version.id,)),
        precondition_held=held,
        reason="no contradiction",
    )
    return Decision(Action.INSERT, version.id, (), prov)


def _equivalence(
    op: Operator, version: FactVersion, incumbent: FactVersion, ctx: ResolveContext
) -> Decision:
    """A judge found the claim says what `incumbent` says: kept as corroborating evidence."""
    held = ctx.precondition(op.requires, op.name)
    base = _insert_decision(op, version, ctx, held)
    prov = Provenance(
        **{
            **{f: getattr(base.provenance, f) for f in Provenance.__dataclass_fields__},
            "inputs": tuple(sorted((version.id, incumbent.id))),
            "winner": incumbent.id,
            "losers": (version.id,),
            "reason": "judged equivalent: corroborating evidence",
        }
    )
    return Decision(Action.REJECT, incumbent.id, (version.id,), prov, (incumbent.id, version.id))


def _evidence(p: Partition, key: FactKey) -> list[FactVersion]:
    """Every non-revoked version on record for `key` (what EWM weighs)."""
    state = p.state(key)
    if state is None:
        return []
    return [v for v in state.versions.values() if not state.is_revoked(v.id)]


def _policy_in_force(p: Partition, key: FactKey, at: datetime) -> dict[str, Any] | None:
    """The RULE policy recorded latest at or before `at` (read from the partition)."""
    state = p.state(FactKey(key.tenant, POLICY_SUBJECT, key.fact_key))
    if state is None:
        return None
    best = None
    for recorded, body in state.policies:
        if recorded <= at and (best is None or recorded >= best[0]):
            best = (recorded, body)
    return None if best is None else dict(best[1]["policy"])
