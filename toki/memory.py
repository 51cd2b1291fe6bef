"""Memory: the facade over the event log, the replayed state and a storage backend.

Every change is a list of events validated in full before anything is written, appended
atomically with the projection rows it changes, then folded into the in-memory state by the
same `KeyState.apply` that replay uses, so the live state is by construction the replay of
the log (and `reconcile` checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from toki.algebra.allocate import Span, allocate
from toki.algebra.base import Operator
from toki.algebra.context import ResolveContext
from toki.algebra.gate import gate
from toki.algebra.provenance import Action, AuditRow, Decision, Provenance
from toki.algebra.rule import Policy
from toki.canonical import canonical_json, check_json
from toki.errors import (
    InvalidInput,
    InvalidInterval,
    InvalidTime,
    LifecycleError,
    UnknownProposal,
    UnknownVersion,
)
from toki.isolation import Isolation, dominates
from toki.judge import Judge, JudgeLog
from toki.log import Event, EventKind, EventLog
from toki.model import (
    Claim,
    FactKey,
    FactVersion,
    HistoryEntry,
    Lifecycle,
    Resolution,
    Scope,
)
from toki.model import source_hash_of as _source_hash_of
from toki.projection import ReconcileReport, reconcile, rows_for
from toki.replay import KeyState, Snapshot, replay
from toki.store.base import EventStore, open_store
from toki.store.memory import InMemoryStore
from toki.time import BoundSource, Interval, TimeLike, format_instant, parse_instant

__all__ = ["POLICY_SUBJECT", "UNKNOWN", "Memory"]

POLICY_SUBJECT = "__toki_policy__"
"""Reserved subject under which RULE policies are logged (one key per tenant and fact_key)."""

UNKNOWN = "unknown"
"""Pass as valid_from / valid_to when the source gives no bound and none may be assumed."""

VersionRef = FactVersion | str
Clock = Callable[[], datetime]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OPEN_LO = -(2**62)
_OPEN_HI = 2**62


def _us(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Memory:
    """A bitemporal fact store. In-memory by default; `Memory.open(url)` for a backend."""

    def __init__(
        self,
        store: EventStore | None = None,
        *,
        clock: Clock | None = None,
        isolation: Isolation = Isolation.SERIALIZABLE,
    ) -> None:
        """isolation: the level this store's writes run at. A Memory serialises its writes
        under one writer lock, so SERIALIZABLE is the truth; a weaker level is for
        experiments that want operators' preconditions checked against it."""
        self._store: EventStore = store if store is not None else InMemoryStore()
        self._clock: Clock = clock or _utc_now
        self.isolation = isolation
        self._operators: dict[str, Operator] = {}
        self._judge_log_cache: JudgeLog | None = None
        self._log = EventLog()
        self._snapshot = Snapshot()
        self.open_report: ReconcileReport | None = None
        self._load()

    @classmethod
    def open(
        cls, url: str, *, clock: Clock | None = None, isolation: Isolation = Isolation.SERIALIZABLE
    ) -> Memory:
        """Open 'memory://', 'sqlite:///path.db' or 'postgresql://…'; reconciles on open."""
        return cls(open_store(url), clock=clock, isolation=isolation)

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return self._store.url

    # -- loading and catching up -----------------------------------------------------------

    def _load(self) -> None:
        for event in self._store.load(0):
            self._fold(event)
        watermark, stored = self._store.load_projection()
        if self._log.last_seq == 0 and not stored:
            return
        self.open_report = reconcile(stored, watermark, self._snapshot)
        if not self.open_report.ok:  # the projection is disposable: rebuild it from the log
            self._store.append(
                [], self._snapshot.summaries(), self._snapshot.watermark, replace=True
            )

    def _fold(self, event: Event) -> None:
        if self._log.add(event):
            self._snapshot.apply(event)

    def _catch_up(self) -> int:
        """Fold events other writers appended since our watermark; returns how many."""
        n = 0
        if self._store.last_seq() > self._log.last_seq:
            for event in self._store.load(self._log.last_seq):
                self._fold(event)
                n += 1
        return n

    def refresh(self) -> int:
        """Catch up with events appended by other processes; returns how many were folded."""
        with self._store.write_lock():
            return self._catch_up()

    def _write(self, build: Callable[[], list[Event]]) -> list[Event]:
        """Validate-and-build under the writer lock, then append atomically and fold."""
        with self._store.write_lock():
            self._catch_up()
            events = build()
            if not events:
                return []
            for event in events:
                self._fold(event)
            keys = {e.key for e in events}
            try:
                self._store.append(events, rows_for(self._snapshot, keys), self._log.last_seq)
            except BaseException:
                self._reload()
                raise
            return events

    def _reload(self) -> None:
        self._log = EventLog()
        self._snapshot = Snapshot()
        for event in self._store.load(0):
            self._fold(event)

    # -- input helpers ---------------------------------------------------------------------

    def _now(self) -> datetime:
        return parse_instant(self._clock(), "clock()")

    def _recorded(self, recorded_at: TimeLike | None) -> datetime:
        return self._now() if recorded_at is None else parse_instant(recorded_at, "recorded_at")

    @staticmethod
    def _interval(
        valid_from: TimeLike | None,
        valid_to: TimeLike | None,
        recorded: datetime,
        from_source: BoundSource | None,
        to_source: BoundSource | None,
    ) -> Interval:
        if valid_from is None:
            start, s_src = recorded, from_source or BoundSource.ASSUMED
        elif isinstance(valid_from, str) and valid_from.strip().lower() == UNKNOWN:
            start, s_src = None, BoundSource.UNKNOWN
        else:
            start, s_src = (
                parse_instant(valid_from, "valid_from"),
                from_source or BoundSource.EVIDENCE,
            )
        if valid_to is None or (isinstance(valid_to, str) and valid_to.strip().lower() == UNKNOWN):
            end, e_src = None, BoundSource.UNKNOWN
        else:
            end, e_src = parse_instant(valid_to, "valid_to"), to_source or BoundSource.EVIDENCE
        return Interval(start, end, s_src, e_src)

    def _resolve_ref(self, ref: VersionRef, field: str = "version") -> FactVersion:
        vid = ref.id if isinstance(ref, FactVersion) else ref
        if not isinstance(vid, str):
            raise InvalidInput(field, f"expected a FactVersion or version id, got {vid!r}")
        version = self._snapshot.version(vid)
        if version is None:
            raise UnknownVersion(vid, field)
        return version

    def _state(self, key: FactKey) -> KeyState | None:
        return self._snapshot.state(key)

    def _new_version(
        self,
        key: FactKey,
        value: Any,
        valid: Interval,
        recorded: datetime,
        source_id: str,
        source_hash: str | None,
        supersedes: str | None = None,
        weight: float = 1.0,
    ) -> FactVersion:
        if not isinstance(key, FactKey):
            raise InvalidInput("key", f"expected a FactKey, got {type(key).__name__}")
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidInput("source_id", "must be a non-empty string", "name the message/doc")
        check_json(value)
        return FactVersion(
            key=key,
            value=value,
            valid=valid,
            recorded_at=recorded,
            source_id=source_id,
            source_hash=source_hash or _source_hash_of(source_id, value),
            supersedes=supersedes,
            weight=weight,
        )

    def _assert_events(
        self,
        version: FactVersion,
        pending: list[Event],
        *,
        proposed: bool = False,
        exclude: frozenset[str] = frozenset(),
        claim: bool = False,
    ) -> None:
        """ASSERT the version, and open a conflict with each standing contradicting version.

        claim marks versions that entered through `write` (re-adjudication re-runs those)."""
        body: dict[str, Any] = {"version": version.payload(), "proposed": proposed}
        if claim:
            body["claim"] = True
        pending.append(
            self._log.new(
                EventKind.ASSERT,
                version.key,
                version.recorded_at,
                (version.id,),
                body,
                version,
                pending=pending,
            )
        )
        state = self._state(version.key)
        if state is None:
            return
        for other_id in state.overlapping(version.valid):
            other = state.versions[other_id]
            if other.id in exclude or other.id == version.supersedes:
                continue
            if other.value_json == version.value_json:
                continue
            left, right = sorted((other.id, version.id))
            pending.append(
                self._log.new(
                    EventKind.CONFLICT_OPEN,
                    version.key,
                    max(version.recorded_at, other.recorded_at),
                    (left, right),
                    {"left": left, "right": right},
                    pending=pending,
                )
            )

    # -- the write API ---------------------------------------------------------------------

    def assert_fact(
        self,
        key: FactKey,
        value: Any,
        *,
        valid_from: TimeLike | None = None,
        valid_to: TimeLike | None = None,
        recorded_at: TimeLike | None = None,
        source_id: str,
        source_hash: str | None = None,
        weight: float = 1.0,
        from_source: BoundSource | None = None,
        to_source: BoundSource | None = None,
    ) -> FactVersion:
        """Record a claim. Returns its FactVersion (an identical claim returns the same one).

        valid_from defaults to the recording time, marked ASSUMED; pass UNKNOWN for a bound
        the source did not give ("I used to live in Lisbon"). A claim that overlaps a standing
        version with a different value is kept ACTIVE beside it with an OPEN conflict.
        """
        recorded = self._recorded(recorded_at)
        valid = self._interval(valid_from, valid_to, recorded, from_source, to_source)
        version = self._new_version(
            key, value, valid, recorded, source_id, source_hash, None, weight
        )

        def build() -> list[Event]:
            if self._snapshot.version(version.id) is not None:
                return []  # duplicate delivery: no-op
            pending: list[Event] = []
            self._assert_events(version, pending)
            return pending

        self._write(build)
        return version

    def supersede(
        self,
        old: VersionRef,
        value: Any,
        *,
        valid_from: TimeLike | None = None,
        valid_to: TimeLike | None = None,
        recorded_at: TimeLike | None = None,
        source_id: str,
        source_hash: str | None = None,
        weight: float = 1.0,
    ) -> FactVersion:
        """The world changed: `value` holds from valid_from, closing `old` there. Both stay."""
        recorded = self._recorded(recorded_at)
        valid = self._interval(valid_from, valid_to, recorded, None, None)
        made: list[FactVersion] = []

        def build() -> list[Event]:
            prior = self._resolve_ref(old, "old")
            state = self._state(prior.key)
            assert state is not None
            self._check_standing(state, prior, "supersede")
            if recorded < prior.recorded_at:
                raise InvalidTime(
                    "recorded_at",
                    f"{format_instant(recorded)} precedes the superseded version's recording "
                    f"time {format_instant(prior.recorded_at)}",
                    "a supersession cannot be known before what it supersedes (clock rollback?)",
                )
            p_start = prior.valid.start
            if valid.start is not None and p_start is not None and valid.start < p_start:
                raise InvalidInterval(
                    "valid_from",
                    f"{format_instant(valid.start)} precedes the start "
                    f"{format_instant(p_start)} of the version it supersedes",
                    "use revoke (it never held) or insert_segment (a past piece) instead",
                )
            version = self._new_version(
                prior.key, value, valid, recorded, source_id, source_hash, prior.id, weight
            )
            made.append(version)
            if self._snapshot.version(version.id) is not None:
                return []  # duplicate delivery: no-op
            pending: list[Event] = []
            self._assert_events(version, pending)
            closes = None if valid.start is None else format_instant(valid.start)
            pending.append(
                self._log.new(
                    EventKind.SUPERSEDE,
                    prior.key,
                    recorded,
                    (prior.id, version.id),
                    {"old": prior.id, "new": [version.id], "closes_at": closes},
                    pending=pending,
                )
            )
            return pending

        self._write(build)
        return made[0]

    def _check_standing(self, state: KeyState, version: FactVersion, what: str) -> None:
        life = state.lifecycle(version.id)
        if life is Lifecycle.REVOKED:
            raise LifecycleError(
                f"version: {version.id} was revoked; cannot {what} it (assert a new fact instead)"
            )
        if life is Lifecycle.PROPOSED:
            raise LifecycleError(
                f"version: {version.id} is PROPOSED; confirm or reject it before you {what} it"
            )

    def revoke(
        self, version: VersionRef, *, recorded_at: TimeLike | None = None, reason: str
    ) -> None:
        """We were wrong: the version never held. It stays in the log and in history.

        The pieces a segment split cut out of it (same value and source, `supersedes` it)
        carry the same wrong claim and are revoked with it; a supersession whose every
        replacement is revoked no longer closes the version it superseded.
        """
        recorded = self._recorded(recorded_at)
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("reason", "must be a non-empty string", "say why it was wrong")

        def build() -> list[Event]:
            target = self._resolve_ref(version)
            state = self._state(target.key)
            assert state is not None
            if state.is_revoked(target.id):
                raise LifecycleError(f"version: {target.id} is already revoked")
            if recorded < target.recorded_at:
                raise InvalidTime(
                    "recorded_at",
                    f"{format_instant(recorded)} precedes the version's recording time "
                    f"{format_instant(target.recorded_at)}",
                    "a revocation cannot be known before the version it revokes",
                )
            pending: list[Event] = []
            for vid in _derived_pieces(state, target):
                if not state.is_revoked(vid):
                    pending.append(
                        self._log.new(
                            EventKind.REVOKE,
                            target.key,
                            recorded,
                            (vid,),
                            {"version": vid, "reason": reason},
                            pending=pending,
                        )
                    )
            return pending

        self._write(build)

    def revoke_value(
        self,
        key: FactKey,
        value: Any,
        *,
        valid_at: TimeLike,
        recorded_at: TimeLike | None = None,
        reason: str,
    ) -> tuple[str, ...]:
        """Revoke whichever standing versions hold `value` at `valid_at`.

        Looked up by value and valid time, not by a remembered version id: after a
        supersession or a segment split the value may live in a newer version.
        """
        at = parse_instant(valid_at, "valid_at")
        state = self._state(key)
        ids = [] if state is None else state.eligible(at)
        wanted = canonical_json(value)
        targets = [v for v in ids if state is not None and state.versions[v].value_json == wanted]
        if not targets:
            raise LifecycleError(
                f"value: no standing version of {key} holds {wanted} at {format_instant(at)}"
            )
        for vid in targets:
            self.revoke(vid, recorded_at=recorded_at, reason=reason)
        return tuple(targets)

    def insert_segment(
        self,
        key: FactKey,
        value: Any,
        *,
        valid_from: TimeLike,
        valid_to: TimeLike,
        recorded_at: TimeLike | None = None,
        source_id: str,
        source_hash: str | None = None,
        weight: float = 1.0,
    ) -> FactVersion:
        """A past piece: `value` held in [valid_from, valid_to) inside what we believed.

        Each standing version it cuts into is superseded by a left piece, this segment and a
        right piece, all new versions; nothing is rewritten and the old version stays in history.
        """
        recorded = self._recorded(recorded_at)
        if valid_from is None or valid_to is None:
            raise InvalidInterval("valid_to", "a segment needs both valid_from and valid_to")
        valid = self._interval(valid_from, valid_to, recorded, None, None)
        middle = self._new_version(
            key, value, valid, recorded, source_id, source_hash, None, weight
        )

        def build() -> list[Event]:
            if self._snapshot.version(middle.id) is not None:
                return []
            state = self._state(key)
            pending: list[Event] = []
            splits: list[tuple[FactVersion, list[FactVersion]]] = []
            if state is not None:
                for other in list(state.versions.values()):
                    life = state.lifecycle(other.id)
                    if life not in (Lifecycle.ACTIVE, Lifecycle.SUPERSEDED):
                        continue
                    eff = state.effective(other.id)
                    if (
                        eff is None
                        or not eff.overlaps(valid)
                        or other.value_json == middle.value_json
                    ):
                        continue
                    if recorded < other.recorded_at:
                        raise InvalidTime(
                            "recorded_at",
                            f"{format_instant(recorded)} precedes the recording of {other.id}",
                            "a segment cannot be known before the version it splits",
                        )
                    pieces = []
                    assert valid.start is not None and valid.end is not None
                    if eff.start is None or eff.start < valid.start:
                        left = Interval(
                            eff.start, valid.start, eff.start_source, BoundSource.EVIDENCE
                        )
                        pieces.append(self._piece(other, left, recorded))
                    if eff.end is None or eff.end > valid.end:
                        right = Interval(valid.end, eff.end, BoundSource.EVIDENCE, eff.end_source)
                        pieces.append(self._piece(other, right, recorded))
                    splits.append((other, pieces))
            split_ids = frozenset(o.id for o, _ in splits)
            self._assert_events(middle, pending, exclude=split_ids)
            for other, pieces in splits:
                for piece in pieces:
                    if self._snapshot.version(piece.id) is None:
                        self._assert_events(piece, pending, exclude=split_ids | {middle.id})
                new_ids = [p.id for p in pieces] + [middle.id]
                pending.append(
                    self._log.new(
                        EventKind.SUPERSEDE,
                        key,
                        recorded,
                        (other.id, *new_ids),
                        {"old": other.id, "new": sorted(new_ids), "closes_at": None},
                        pending=pending,
                    )
                )
            return pending

        self._write(build)
        return middle

    def _piece(self, original: FactVersion, valid: Interval, recorded: datetime) -> FactVersion:
        return FactVersion(
            key=original.key,
            value=original.value,
            valid=valid,
            recorded_at=recorded,
            source_id=original.source_id,
            source_hash=original.source_hash,
            supersedes=original.id,
            weight=original.weight,
        )

    # -- the algebra's write path -----------------------------------------------------------

    def configure(self, fact_key: str, operator: Operator) -> None:
        """Route claims on `fact_key` (any tenant and subject) to `operator` by default."""
        if not isinstance(operator, Operator):
            raise InvalidInput("operator", f"{operator!r} is not an Operator")
        self._operators[fact_key] = operator

    def operator_for(self, key: FactKey) -> Operator:
        from toki.algebra.lww import LWW

        return self._operators.get(key.fact_key, LWW)

    def _context(
        self,
        decided_at: datetime,
        judge: Judge | None,
        log_judge: bool,
        allow_weaker_isolation: bool,
    ) -> ResolveContext:
        return ResolveContext(
            decided_at=decided_at,
            isolation=self.isolation,
            judge=judge,
            judge_log=self._judge_log() if log_judge else None,
            own_log=self._snapshot.judge_log,
            allow_weaker_isolation=allow_weaker_isolation,
            evidence=self._evidence,
            policy=self._policy_in_force,
        )

    def _judge_log(self) -> JudgeLog:
        if self._judge_log_cache is not None:
            return self._judge_log_cache
        return self._snapshot.judge_log

    def _evidence(self, key: FactKey) -> list[FactVersion]:
        state = self._state(key)
        if state is None:
            return []
        return [v for v in state.versions.values() if not state.is_revoked(v.id)]

    def _policy_in_force(self, key: FactKey, at: datetime) -> dict[str, Any] | None:
        state = self._state(FactKey(key.tenant, POLICY_SUBJECT, key.fact_key))
        if state is None:
            return None
        best = None
        for recorded, body in state.policies:
            if recorded <= at and (best is None or recorded >= best[0]):
                best = (recorded, body)
        return None if best is None else dict(best[1]["policy"])

    def set_policy(
        self, tenant: str, fact_key: str, policy: Policy, *, recorded_at: TimeLike | None = None
    ) -> None:
        """Put a RULE policy in force for `fact_key` from `recorded_at` on (a POLICY event)."""
        if not isinstance(policy, Policy):
            raise InvalidInput("policy", f"expected a toki.algebra.Policy, got {policy!r}")
        recorded = self._recorded(recorded_at)
        key = FactKey(tenant, POLICY_SUBJECT, fact_key)
        self._write(
            lambda: [
                self._log.new(
                    EventKind.POLICY,
                    key,
                    recorded,
                    (),
                    {"policy": policy.to_json(), "id": policy.id},
                )
            ]
        )

    def write(
        self,
        claim: Claim,
        operator: Operator | None = None,
        *,
        judge: Judge | None = None,
        log_judge: bool = True,
        allow_weaker_isolation: bool = False,
        semantic_gate: bool = False,
    ) -> Decision:
        """The whole write path: duplicate → NOOP; no contradiction → INSERT; contradiction →
        operator → DECISION event → close losers → insert winner → audit rows → commit.

        Judge verdicts are logged under (fact key, θ) before the decision commits and are
        reused, never re-asked, when the same question comes up again (log_judge=False
        switches the keyed log off, to model baselines).
        """
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
        result: list[Decision] = []

        def build() -> list[Event]:
            ctx = self._context(recorded, judge, log_judge, allow_weaker_isolation)
            found = gate(self._state(claim.key), version, ctx, semantic=semantic_gate)
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
                    op.resolve(list(found.contradicts), version, ctx), version, pending
                )
            result.append(decision)
            self._judge_events(ctx, pending)
            if decision.action is not Action.INSERT:
                pending.append(
                    self._decision_event(claim.key, recorded, decision, version.id, pending)
                )
            proposed = decision.action is Action.HOLD and op.name == "AWAIT"
            settled = frozenset(decision.losers) | {decision.winner or ""}
            self._assert_events(
                version,
                pending,
                proposed=proposed,
                exclude=frozenset() if decision.action is Action.HOLD else settled,
                claim=True,
            )
            if decision.action in (Action.SUPERSEDE, Action.REJECT):
                self._close_losers(claim.key, decision, recorded, pending, reason=op.name)
            return pending

        self._write(build)
        return replace(result[0], claim_id=version.id)

    def _judge_events(self, ctx: ResolveContext, pending: list[Event]) -> None:
        for call in ctx.new_calls:
            pending.append(
                self._log.new(
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
        key: FactKey,
        recorded: datetime,
        decision: Decision,
        claim_id: str,
        pending: list[Event],
    ) -> Event:
        return self._log.new(
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
        state = self._state(key)
        ranked, effs, spans, kept = self._allocation(key, decision.ranking, pending)
        open_pairs = set() if state is None else set(state.open_conflicts())
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
                    if self._snapshot.version(piece.id) is None:
                        self._assert_events(piece, pending, exclude=frozenset(decision.ranking))
                    new_ids.append(piece.id)
            pending.append(
                self._log.new(
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
                        self._log.new(
                            EventKind.CONFLICT_RESOLVE,
                            key,
                            recorded,
                            pair,
                            {"left": pair[0], "right": pair[1], "winner": other, "how": reason},
                            pending=pending,
                        )
                    )

    def _allocation(
        self,
        key: FactKey,
        ranking: Sequence[str],
        pending: list[Event],
        *extra: FactVersion,
    ) -> tuple[list[FactVersion], dict[str, Interval], dict[str, Span], dict[str, list[Span]]]:
        state = self._state(key)
        ranked = [self._pending_version(v, pending, extra) for v in ranking]
        effs = {v.id: self._effective_now(state, v) for v in ranked}
        spans = {vid: _span(eff) for vid, eff in effs.items()}
        kept = allocate([(v.id, v.value_json, spans[v.id]) for v in ranked])
        return ranked, effs, spans, kept

    def _pointwise(self, decision: Decision, claim: FactVersion, pending: list[Event]) -> Decision:
        """Settle who lost what: a version is a loser when it lost any valid-time point."""
        if decision.action not in (Action.SUPERSEDE, Action.REJECT):
            return decision
        _, _, spans, kept = self._allocation(claim.key, decision.ranking, pending, claim)
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
        self, vid: str, pending: list[Event], extra: Sequence[FactVersion] = ()
    ) -> FactVersion:
        for v in extra:
            if v.id == vid:
                return v
        for e in pending:
            if e.version is not None and e.version.id == vid:
                return e.version
        return self._resolve_ref(vid)

    def _hold(self, token: str) -> tuple[KeyState, dict[str, Any]]:
        key = self._snapshot.holds.get(token) if isinstance(token, str) else None
        state = None if key is None else self._state(key)
        if state is None:
            raise UnknownProposal(
                f"token: no held decision has token {token!r} (use Decision.token from write)"
            )
        for _, body in state.decisions:
            if body.get("token") == token and body.get("action") == "HOLD":
                return state, dict(body)
        raise UnknownProposal(f"token: no held decision has token {token!r}")  # pragma: no cover

    def confirm(self, token: str, *, recorded_at: TimeLike | None = None) -> bool:
        """Confirm a held claim: it supersedes what it contradicted. A repeated token is a
        no-op (returns False); an unknown token raises UnknownProposal."""
        return self._settle(token, True, recorded_at)

    def reject(self, token: str, *, recorded_at: TimeLike | None = None) -> bool:
        """Reject a held claim: it is revoked, the incumbent stands. Idempotent like confirm."""
        return self._settle(token, False, recorded_at)

    def _settle(self, token: str, accept: bool, recorded_at: TimeLike | None) -> bool:
        recorded = self._recorded(recorded_at)
        done: list[bool] = []

        def build() -> list[Event]:
            state, body = self._hold(token)
            prov = body["provenance"]
            inputs = list(prov["inputs"])
            claim_id = str(body["claim"])
            if token in state.settled:
                return []  # a repeated confirmation is a no-op
            others = [v for v in inputs if v != claim_id and not state.is_revoked(v)]
            pending: list[Event] = []
            if accept:
                pending.append(
                    self._log.new(
                        EventKind.CONFIRM,
                        state.key,
                        recorded,
                        (claim_id,),
                        {"version": claim_id, "token": token},
                    )
                )
                decision = Decision(
                    Action.SUPERSEDE,
                    claim_id,
                    tuple(others),
                    Provenance.from_json(prov),
                    (claim_id, *others),
                )
                self._close_losers(state.key, decision, recorded, pending, reason="AWAIT")
            else:
                pending.append(
                    self._log.new(
                        EventKind.REVOKE,
                        state.key,
                        recorded,
                        (claim_id,),
                        {"version": claim_id, "reason": "rejected", "token": token},
                    )
                )
            for other in others:
                pair = tuple(sorted((claim_id, other)))
                if pair in state.conflicts_opened and pair not in state.conflicts_resolved:
                    pending.append(
                        self._log.new(
                            EventKind.CONFLICT_RESOLVE,
                            state.key,
                            recorded,
                            pair,
                            {
                                "left": pair[0],
                                "right": pair[1],
                                "winner": claim_id if accept else other,
                                "how": "AWAIT",
                                "token": token,
                            },
                            pending=pending,
                        )
                    )
            done.append(True)
            return pending

        self._write(build)
        return bool(done)

    def audit(self, key: FactKey) -> list[AuditRow]:
        """The dual-row view's audit rows: every version that lost a decision, with the
        decision's provenance. Nothing a decision touched is ever overwritten or deleted."""
        state = self._state(key)
        if state is None:
            return []
        rows = []
        for decided, body in state.decisions:
            if body.get("decision") != "resolution":
                continue
            prov = Provenance.from_json(dict(body["provenance"]))
            for loser in prov.losers:
                rows.append(AuditRow("audit", state.versions[loser], prov, prov.operator, decided))
        return rows

    def readjudicate(
        self,
        operator: Operator | None = None,
        *,
        judge: Judge | None = None,
        use_keyed_log: bool = True,
    ) -> Memory:
        """Recovery by re-running every logged claim through the write path on a fresh store
        (the procedure of systems that log inputs, not decisions). With the keyed log, each
        judge question is answered from the DECISION events; without it, the judge is asked
        again, and a stochastic judge may decide differently (N1)."""
        fresh = Memory(clock=self._clock, isolation=self.isolation)
        fresh._operators = dict(self._operators)
        log = JudgeLog.from_events(self._log) if use_keyed_log else None
        fresh._judge_log_cache = log
        for event in self._log:
            if event.kind is EventKind.POLICY:
                fresh.set_policy(
                    event.key.tenant,
                    event.key.fact_key,
                    Policy.from_json(event.body["policy"]),
                    recorded_at=event.recorded_at,
                )
            elif event.kind is EventKind.ASSERT and event.body.get("claim"):
                v = event.version
                assert v is not None
                fresh.write(
                    Claim(
                        v.key,
                        v.value,
                        v.source_id,
                        _bound(v.valid.start, v.valid.start_source),
                        _bound(v.valid.end, v.valid.end_source),
                        v.recorded_at,
                        v.source_hash,
                        v.weight,
                    ),
                    operator,
                    judge=judge,
                    log_judge=use_keyed_log,
                    allow_weaker_isolation=True,
                )
        return fresh

    # -- reading ---------------------------------------------------------------------------

    def resolve_at(
        self,
        key: FactKey,
        valid_at: TimeLike | None = None,
        system_as_of: TimeLike | None = None,
        *,
        scope_chain: Sequence[Scope | str] | None = None,
    ) -> Resolution:
        """What held at `valid_at` (default now), as known at `system_as_of` (default: all).

        With a scope chain, scopes are tried most specific first; the first answer that is
        not "unknown" wins (a conflict is an answer: it is never skipped over).
        """
        at = self._now() if valid_at is None else parse_instant(valid_at, "valid_at")
        as_of = None if system_as_of is None else parse_instant(system_as_of, "system_as_of")
        for scoped in self._scope_keys(key, scope_chain):
            state = self._state(scoped)
            if state is None:
                continue
            result = state.resolve(at, as_of)
            if result.kind != "unknown":
                return result
        return Resolution("unknown")

    @staticmethod
    def _scope_keys(key: FactKey, chain: Sequence[Scope | str] | None) -> list[FactKey]:
        if chain is None:
            scopes = [key.scope] if key.scope_kind == "global" else [key.scope, Scope()]
        else:
            scopes = [s if isinstance(s, Scope) else Scope.from_resource(s) for s in chain]
            if not scopes:
                raise InvalidInput("scope_chain", "is empty", "omit it or name at least one scope")
        return [key.in_scope(s) for s in scopes]

    def current(
        self,
        key: FactKey,
        *,
        catch_up: bool = True,
        scope_chain: Sequence[Scope | str] | None = None,
    ) -> Resolution:
        """The answer now, as known now. If another writer moved the log past our watermark,
        catch up first, or with catch_up=False report kind "stale" rather than a wrong value."""
        if self._store.last_seq() > self._log.last_seq:
            if not catch_up:
                return Resolution("stale")
            self.refresh()
        return self.resolve_at(key, None, None, scope_chain=scope_chain)

    def history(self, key: FactKey, system_as_of: TimeLike | None = None) -> list[HistoryEntry]:
        """Every version known at `system_as_of`: lifecycle, effective interval, successor."""
        as_of = None if system_as_of is None else parse_instant(system_as_of, "system_as_of")
        state = self._state(key)
        return [] if state is None else state.history(as_of)

    def lifecycle(self, version: VersionRef, system_as_of: TimeLike | None = None) -> Lifecycle:
        target = self._resolve_ref(version)
        as_of = None if system_as_of is None else parse_instant(system_as_of, "system_as_of")
        state = self._state(target.key)
        assert state is not None
        return state.lifecycle(target.id, as_of)

    def open_conflicts(self, key: FactKey) -> list[tuple[str, str]]:
        state = self._state(key)
        return [] if state is None else state.open_conflicts()

    def version(self, version_id: str) -> FactVersion:
        return self._resolve_ref(version_id)

    def keys(self) -> list[FactKey]:
        return sorted(self._snapshot.keys)

    def events(self) -> tuple[Event, ...]:
        return self._log.events()

    @property
    def watermark(self) -> int:
        return self._log.last_seq

    def state_hash(self) -> str:
        return self._snapshot.state_hash()

    def reconcile(self) -> ReconcileReport:
        """Compare the stored projection with a fresh replay of the stored log, per key."""
        watermark, stored = self._store.load_projection()
        return reconcile(stored, watermark, replay(self._store.load(0)))

    def render_history(self, key: FactKey, system_as_of: TimeLike | None = None) -> str:
        return "\n".join(entry.render() for entry in self.history(key, system_as_of))

    # -- replay ----------------------------------------------------------------------------

    @classmethod
    def replay(
        cls,
        events: Iterable[Event],
        system_as_of: TimeLike | None = None,
        *,
        clock: Clock | None = None,
    ) -> Memory:
        """A fresh in-memory Memory holding the given events recorded by `system_as_of`."""
        cutoff = None if system_as_of is None else parse_instant(system_as_of, "system_as_of")
        events = list(events)
        snapshot = replay(events, cutoff)
        memory = cls(clock=clock)
        kept = sorted(
            (e for e in _dedup(events) if e.event_id in snapshot.seen), key=lambda e: e.seq
        )
        memory._store.append(kept, snapshot.summaries(), snapshot.watermark)
        for event in kept:
            memory._fold(event)
        return memory


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


def _bound(at: datetime | None, source: BoundSource) -> TimeLike | None:
    """A stored bound as write() input again (None: assumed; UNKNOWN: unknown)."""
    if at is None:
        return UNKNOWN if source is BoundSource.UNKNOWN else None
    return at


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


def _derived_pieces(state: KeyState, root: FactVersion) -> list[str]:
    """`root` and, transitively, the split pieces that repeat its claim."""
    out = [root.id]
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for child in state.versions.values():
            if (
                child.supersedes == parent.id
                and child.value_json == parent.value_json
                and child.source_id == parent.source_id
                and child.id not in out
            ):
                out.append(child.id)
                frontier.append(child)
    return out


def _dedup(events: Iterable[Event]) -> list[Event]:
    best: dict[str, Event] = {}
    for event in events:
        kept = best.get(event.event_id)
        if kept is None or event.seq < kept.seq:
            best[event.event_id] = event
    return list(best.values())
