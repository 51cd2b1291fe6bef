"""The write path: a claim, the key's state and an operator → the events that record the
decision (DECISION, ASSERT, the losers closed pointwise, CONFLICT_RESOLVE).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from toki.algebra.allocate import Span, allocate
from toki.algebra.base import Operator
from toki.algebra.context import ResolveContext
from toki.algebra.gate import gate
from toki.algebra.provenance import Action, Decision, Provenance
from toki.algebra.rule import Policy
from toki.canonical import canonical_json, shown
from toki.errors import (
    InvalidInput,
)
from toki.isolation import Isolation, check_precondition, dominates
from toki.judge import Judge, JudgeLog
from toki.log import Event, EventKind
from toki.memory_base import POLICY_SUBJECT, MemoryBase
from toki.model import (
    Claim,
    FactKey,
    FactVersion,
)
from toki.ops import decision_of, operation_for, outcome_text
from toki.partition import Partition
from toki.replay import KeyState
from toki.store.base import Steps, drive
from toki.time import BoundSource, Interval, TimeLike, format_instant

__all__ = ["WritePath"]

_OPEN_LO = -(2**62)
_OPEN_HI = 2**62
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


class WritePath(MemoryBase):
    """`write`, `configure` and `set_policy`: claims through an operator."""

    def configure(self, fact_key: str, operator: Operator) -> None:
        """Route claims on `fact_key` (any tenant and subject) to `operator` by default."""
        if not isinstance(operator, Operator):
            raise InvalidInput("operator", f"{operator!r} is not an Operator")
        FactKey("configure", "configure", fact_key)  # the same rules as a key's fact_key
        self._operators[fact_key] = operator

    def operator_for(self, key: FactKey) -> Operator:
        from toki.algebra.lww import LWW

        return self._operators.get(key.fact_key, LWW)

    def _context(
        self,
        p: Partition,
        level: Isolation,
        decided_at: datetime,
        judge: Judge | None,
        log_judge: bool,
        allow_weaker_isolation: bool,
    ) -> ResolveContext:
        return ResolveContext(
            decided_at=decided_at,
            isolation=level,
            judge=judge,
            judge_log=self._judge_log(p) if log_judge else None,
            own_log=p.snapshot.judge_log,
            allow_weaker_isolation=allow_weaker_isolation,
            evidence=lambda key: _evidence(p, key),
            policy=lambda key, at: self._config_policy(key, at) or _policy_in_force(p, key, at),
        )

    def _judge_log(self, p: Partition) -> JudgeLog:
        if self._judge_log_cache is not None:
            return self._judge_log_cache
        return p.snapshot.judge_log

    def set_policy(
        self, tenant: str, fact_key: str, policy: Policy, *, recorded_at: TimeLike | None = None
    ) -> None:
        """Put a RULE policy in force for `fact_key` from `recorded_at` on (a POLICY event).

        The same call again (same policy, same recorded_at) is a no-op, like any duplicate
        delivery."""
        if not isinstance(policy, Policy):
            raise InvalidInput("policy", f"expected a toki.algebra.Policy, got {shown(policy)}")
        recorded = self._recorded(recorded_at)
        key = FactKey(tenant, POLICY_SUBJECT, fact_key)

        body = {"policy": policy.to_json(), "id": policy.id}

        def build(p: Partition) -> list[Event]:
            state = p.state(key)
            if state is not None and any(
                at == recorded
                and logged.get("id") == policy.id
                and canonical_json(logged.get("policy")) == canonical_json(body["policy"])
                for at, logged in state.policies
            ):
                return []  # the same POLICY event is already in the log
            return [p.new(EventKind.POLICY, key, recorded, (), body)]

        self._write([key], build)

    def write(
        self,
        claim: Claim,
        operator: Operator | None = None,
        *,
        judge: Judge | None = None,
        log_judge: bool = True,
        allow_weaker_isolation: bool = False,
        semantic_gate: bool = False,
        op_id: str | None = None,
    ) -> Decision:
        """The whole write path: duplicate → NOOP; no contradiction → INSERT; contradiction →
        operator → DECISION event → close losers → insert winner → audit rows → commit.

        Judge verdicts are logged under (fact key, θ) before the decision commits and are
        reused, never re-asked, when the same question comes up again (log_judge=False
        switches the keyed log off, to model baselines).

        op_id: this write's operation id (toki.ops): a retry with the same id, after any
        failure or an unknown outcome, never stores the claim twice and returns the decision
        the first run committed.
        """
        return drive(
            self.write_steps(
                claim,
                operator,
                judge=judge,
                log_judge=log_judge,
                allow_weaker_isolation=allow_weaker_isolation,
                semantic_gate=semantic_gate,
                op_id=op_id,
            )
        )

    def write_steps(
        self,
        claim: Claim,
        operator: Operator | None = None,
        *,
        judge: Judge | None = None,
        log_judge: bool = True,
        allow_weaker_isolation: bool = False,
        semantic_gate: bool = False,
        op_id: str | None = None,
    ) -> Steps[Decision]:
        """`write` as a generator of the store's statements: what a simulator agent runs
        (`decision = yield from memory.write_steps(claim)` over `toki.store.sim`), so that
        the scheduler interleaves this very code path. `write` is this, driven to its end."""
        if not isinstance(claim, Claim):
            raise InvalidInput("claim", f"expected a toki.Claim, got {type(claim).__name__}")
        op = operator if operator is not None else self.operator_for(claim.key)
        if not isinstance(op, Operator):
            raise InvalidInput("operator", f"{op!r} is not an Operator")
        recorded = self._recorded(claim.recorded_at)
        valid = self._interval(claim.valid_from, claim.valid_to, recorded, None, None)
        version = self._new_version(
            claim.key,
            claim.value,
            valid,
            recorded,
            claim.source_id,
            claim.source_hash,
            None,
            claim.weight,
        )
        level = self._level_for(op.requires)
        if self._concurrent and not allow_weaker_isolation:
            check_precondition(level, op.requires, what=f"operator {op.name}")
        result: list[Decision] = []
        operation = operation_for(self._store, op_id)  # toki.ops
        keys = [claim.key]
        if op.name == "RULE":  # RULE reads the policy in force: its key is in the partition
            keys.append(FactKey(claim.key.tenant, POLICY_SUBJECT, claim.key.fact_key))

        def build(p: Partition) -> list[Event]:
            result.clear()  # a retried transaction decides again from a fresh read
            ctx = self._context(p, level, recorded, judge, log_judge, allow_weaker_isolation)
            found = gate(p.state(claim.key), version, ctx, semantic=semantic_gate)
            pending: list[Event] = []
            if found.duplicate:
                result.append(op.resolve([version], version, ctx))
                return []
            if not found.contradicts:
                if found.equivalent:  # corroborating evidence: kept, closed by what it agrees with
                    decision = _equivalence(op, version, found.equivalent[0], ctx)
                else:  # the operator does not run: its precondition is recorded, not enforced
                    held = dominates(ctx.isolation, op.requires)
                    decision = _insert_decision(op, version, ctx, held)
            else:
                decision = self._pointwise(
                    p, op.resolve(list(found.contradicts), version, ctx), version, pending
                )
            result.append(decision)
            if operation is not None:  # stored with the events: what a retry returns
                operation.result = outcome_text(replace(decision, claim_id=version.id))
            self._judge_events(p, ctx, pending)
            if decision.action is not Action.INSERT:
                pending.append(
                    self._decision_event(p, claim.key, recorded, decision, version.id, pending)
                )
            proposed = decision.action is Action.HOLD and op.name == "AWAIT"
            settled = frozenset(decision.losers) | {decision.winner or ""}
            self._assert_events(
                p,
                version,
                pending,
                proposed=proposed,
                exclude=frozenset() if decision.action is Action.HOLD else settled,
                claim=True,
            )
            if decision.action in (Action.SUPERSEDE, Action.REJECT):
                self._close_losers(p, claim.key, decision, recorded, pending, reason=op.name)
            return pending

        yield from self._write_steps(keys, build, level, operation)
        if operation is not None and operation.replayed:
            return decision_of(operation.result)
        return replace(result[0], claim_id=version.id)

    def _judge_events(self, p: Partition, ctx: ResolveContext, pending: list[Event]) -> None:
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
        self,
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

    def _close_losers(
        self,
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
        ranked, effs, spans, kept = self._allocation(p, key, decision.ranking, pending)
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
                    piece = self._piece(version, _interval_of(frag, eff), recorded)
                    if p.version(piece.id) is None:
                        self._assert_events(p, piece, pending, exclude=frozenset(decision.ranking))
                    new_ids.append(piece.id)
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
            self._leave_groups(p, state, vid, beaters, reason, recorded, pending)

    def _allocation(
        self,
        p: Partition,
        key: FactKey,
        ranking: Sequence[str],
        pending: list[Event],
        *extra: FactVersion,
    ) -> tuple[list[FactVersion], dict[str, Interval], dict[str, Span], dict[str, list[Span]]]:
        state = p.state(key)
        ranked = [self._pending_version(p, v, pending, extra) for v in ranking]
        effs = {v.id: self._effective_now(state, v) for v in ranked}
        spans = {vid: _span(eff) for vid, eff in effs.items()}
        kept = allocate([(v.id, v.value_json, spans[v.id]) for v in ranked])
        return ranked, effs, spans, kept

    def _pointwise(
        self, p: Partition, decision: Decision, claim: FactVersion, pending: list[Event]
    ) -> Decision:
        """Settle who lost what: a version is a loser when it lost any valid-time point."""
        if decision.action not in (Action.SUPERSEDE, Action.REJECT):
            return decision
        _, _, spans, kept = self._allocation(p, claim.key, decision.ranking, pending, claim)
        losers = tuple(sorted(v for v in decision.ranking if kept[v] != [spans[v]]))
        # SUPERSEDE: something that stood was (partly) closed; REJECT: only the claim lost
        action = Action.SUPERSEDE if any(v != claim.id for v in losers) else Action.REJECT
        prov = replace(decision.provenance, losers=losers)
        return Decision(action, decision.winner, losers, prov, decision.ranking)

    @staticmethod
    def _effective_now(state: KeyState | None, version: FactVersion) -> Interval:
        if state is not None and version.id in state.versions:
            return state.effective(version.id) or version.valid
        return version.valid

    def _pending_version(
        self, p: Partition, vid: str, pending: list[Event], extra: Sequence[FactVersion] = ()
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
