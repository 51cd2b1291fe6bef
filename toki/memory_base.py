"""The state every Memory operation shares: the log, the replayed snapshot, the store, and
the one place a change is committed (`_commit`).

Every change is a list of events validated in full before anything is written, appended
atomically with the projection rows it changes, and only then folded into the in-memory state
by the same `KeyState.apply` that replay uses, so the live state is by construction the replay
of the log (and `reconcile` checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from toki.algebra.base import Operator
from toki.canonical import check_json
from toki.errors import (
    InvalidInput,
    LifecycleError,
    UnknownVersion,
)
from toki.isolation import Isolation
from toki.judge import JudgeLog
from toki.log import Event, EventKind, EventLog
from toki.model import (
    FactKey,
    FactVersion,
    Lifecycle,
)
from toki.model import source_hash_of as _source_hash_of
from toki.projection import ReconcileReport, reconcile, rows_for
from toki.replay import KeyState, Snapshot
from toki.store.base import EventStore
from toki.store.memory import InMemoryStore
from toki.time import BoundSource, Interval, TimeLike, parse_instant

__all__ = ["POLICY_SUBJECT", "UNKNOWN", "Clock", "MemoryBase", "VersionRef"]

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


class MemoryBase:
    """Shared state and helpers of the `Memory` facade (see toki/memory.py)."""

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
        """ASSERT the version and, if it contradicts standing versions, one CONFLICT_OPEN
        joining their conflict groups (toki.conflicts).

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
        joins: set[str] = set()
        others: list[str] = []
        known = version.recorded_at
        value = version.value_json
        current_groups = state.groups.current_groups
        for other_id in state.overlapping(version.valid):
            other = state.versions[other_id]
            if other_id in exclude or other_id == version.supersedes or other.value_json == value:
                continue
            groups = current_groups(other_id)
            if groups:
                joins.update(groups)
            else:
                others.append(other_id)
            if other.recorded_at > known:
                known = other.recorded_at
        if joins or others:  # one event however many versions it contradicts
            pending.append(
                self._log.new(
                    EventKind.CONFLICT_OPEN,
                    version.key,
                    known,
                    (version.id, *sorted(others)),
                    {"version": version.id, "joins": sorted(joins), "with": sorted(others)},
                    pending=pending,
                )
            )

    def _leave_groups(
        self,
        state: KeyState | None,
        loser: str,
        winners: Sequence[str],
        how: str,
        recorded: datetime,
        pending: list[Event],
        **extra: str,
    ) -> None:
        """`loser` lost to one of `winners`: it leaves each conflict group it shares with one
        (once per batch; toki.conflicts)."""
        if state is None or not state.groups:
            return
        done = {
            (e.body["group"], v)
            for e in pending
            if e.kind is EventKind.CONFLICT_RESOLVE and "group" in e.body
            for v in e.body["versions"]
        }
        for gid in state.groups.shared(loser, winners):
            if (gid, loser) in done:
                continue
            group = state.groups.groups[gid]
            winner = next(w for w in winners if group.is_open_member(w, None))
            pending.append(
                self._log.new(
                    EventKind.CONFLICT_RESOLVE,
                    state.key,
                    recorded,
                    (loser, winner),
                    {"group": gid, "versions": [loser], "winner": winner, "how": how, **extra},
                    pending=pending,
                )
            )

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
