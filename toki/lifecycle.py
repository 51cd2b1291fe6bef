"""Lifecycle operations: assert, supersede, revoke, insert a segment, confirm or reject a
held claim, and re-adjudicate the whole log. Each builds its events from the current state
and commits them through `MemoryBase._commit`.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from toki.algebra.base import Operator
from toki.algebra.provenance import Action, Decision, Provenance
from toki.algebra.rule import Policy
from toki.canonical import canonical_json, check_json, check_text, shown
from toki.errors import (
    InvalidInput,
    InvalidInterval,
    InvalidTime,
    LifecycleError,
    UnknownProposal,
)
from toki.judge import Judge, JudgeLog
from toki.log import Event, EventKind
from toki.memory_base import UNKNOWN, VersionRef
from toki.model import (
    Claim,
    FactKey,
    FactVersion,
    Lifecycle,
    need_key,
)
from toki.partition import Partition
from toki.replay import KeyState
from toki.time import BoundSource, Interval, TimeLike, format_instant, parse_instant
from toki.write import WritePath

if TYPE_CHECKING:
    from toki.memory import Memory

__all__ = ["LifecycleOps"]


class LifecycleOps(WritePath):
    """The lifecycle half of the `Memory` facade."""

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

        def build(p: Partition) -> list[Event]:
            if p.version(version.id) is not None:
                return []  # duplicate delivery: no-op
            pending: list[Event] = []
            self._assert_events(p, version, pending)
            return pending

        self._write([version.key], build)
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
        key = self._key_of(old, "old")

        def build(p: Partition) -> list[Event]:
            prior = p.resolve(old, "old")
            state = p.state(prior.key)
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
            made[:] = [version]
            if p.version(version.id) is not None:
                return []  # duplicate delivery: no-op
            pending: list[Event] = []
            self._assert_events(p, version, pending)
            closes = None if valid.start is None else format_instant(valid.start)
            pending.append(
                p.new(
                    EventKind.SUPERSEDE,
                    prior.key,
                    recorded,
                    (prior.id, version.id),
                    {"old": prior.id, "new": [version.id], "closes_at": closes},
                    pending=pending,
                )
            )
            return pending

        self._write([key], build)
        return made[0]

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
        check_text(reason, "reason")

        key = self._key_of(version)

        def build(p: Partition) -> list[Event]:
            target = p.resolve(version)
            state = p.state(target.key)
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
                        p.new(
                            EventKind.REVOKE,
                            target.key,
                            recorded,
                            (vid,),
                            {"version": vid, "reason": reason},
                            pending=pending,
                        )
                    )
            return pending

        self._write([key], build)

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
        check_json(value)
        state = self._state(need_key(key))
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
        need_key(key)
        recorded = self._recorded(recorded_at)
        if valid_from is None or valid_to is None:
            raise InvalidInterval("valid_to", "a segment needs both valid_from and valid_to")
        valid = self._interval(valid_from, valid_to, recorded, None, None)
        if valid.start is None or valid.end is None:
            raise InvalidInterval(
                "valid_from" if valid.start is None else "valid_to",
                "a segment needs known bounds, not 'unknown'",
                "give the instants the piece held between",
            )
        middle = self._new_version(
            key, value, valid, recorded, source_id, source_hash, None, weight
        )

        def build(p: Partition) -> list[Event]:
            if p.version(middle.id) is not None:
                return []
            state = p.state(key)
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
            self._assert_events(p, middle, pending, exclude=split_ids)
            for other, pieces in splits:
                for piece in pieces:
                    if p.version(piece.id) is None:
                        self._assert_events(p, piece, pending, exclude=split_ids | {middle.id})
                new_ids = [p.id for p in pieces] + [middle.id]
                pending.append(
                    p.new(
                        EventKind.SUPERSEDE,
                        key,
                        recorded,
                        (other.id, *new_ids),
                        {"old": other.id, "new": sorted(new_ids), "closes_at": None},
                        pending=pending,
                    )
                )
            return pending

        self._write([key], build)
        return middle

    def _hold_key(self, token: str) -> FactKey:
        """The key a HOLD token was issued on (catch up once if this Memory has not seen it)."""
        key = self._snapshot.holds.get(token) if isinstance(token, str) else None
        if key is None and isinstance(token, str):
            self.refresh()
            key = self._snapshot.holds.get(token)
        if key is None:
            raise UnknownProposal(
                f"token: no held decision has token {shown(token)} (use Decision.token from write)"
            )
        return key

    def _hold(self, p: Partition, key: FactKey, token: str) -> tuple[KeyState, dict[str, Any]]:
        state = p.state(key)
        if state is None:
            raise UnknownProposal(
                f"token: no held decision has token {shown(token)} (use Decision.token from write)"
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
        key = self._hold_key(token)

        def build(p: Partition) -> list[Event]:
            done.clear()
            state, body = self._hold(p, key, token)
            prov = body["provenance"]
            inputs = list(prov["inputs"])
            claim_id = str(body["claim"])
            if token in state.settled:
                return []  # a repeated confirmation is a no-op
            others = [v for v in inputs if v != claim_id and not state.is_revoked(v)]
            pending: list[Event] = []
            if accept:
                pending.append(
                    p.new(
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
                self._close_losers(p, state.key, decision, recorded, pending, reason="AWAIT")
            else:
                pending.append(
                    p.new(
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
                        p.new(
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
            losers, winners = (others, [claim_id]) if accept else ([claim_id], others)
            for loser in losers:
                self._leave_groups(
                    p, state, loser, winners, "AWAIT", recorded, pending, token=token
                )
            done.append(True)
            return pending

        self._write([key], build)
        return bool(done)

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
        from toki.memory import Memory

        fresh = Memory(clock=self._clock, isolation=self._isolation)
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
                        _bound(v.valid.start, v.valid.start_source, v.recorded_at),
                        _bound(v.valid.end, v.valid.end_source, v.recorded_at),
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


def _bound(at: datetime | None, source: BoundSource, recorded: datetime) -> TimeLike | None:
    """A stored bound as write() input again: None where write() assumed it (the recording
    time, marked ASSUMED), UNKNOWN where nobody knew it, else the instant."""
    if at is None:
        return UNKNOWN if source is BoundSource.UNKNOWN else None
    if source is BoundSource.ASSUMED and at == recorded:
        return None
    return at


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
