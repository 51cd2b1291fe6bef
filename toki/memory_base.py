"""The state every Memory operation shares: the log, the replayed snapshot, the store, and
the one place a change is committed (`_commit`).

Every change is a list of events validated in full before anything is written, appended
atomically with the projection rows it changes, and only then folded into the in-memory state
by the same `KeyState.apply` that replay uses, so the live state is by construction the replay
of the log (and `reconcile` checks it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from toki.algebra.base import Operator
from toki.canonical import check_json, check_text
from toki.chain import ChainCheck
from toki.errors import (
    IntegrityError,
    InvalidInput,
    LifecycleError,
    StoreError,
    UnknownVersion,
)
from toki.isolation import Isolation
from toki.judge import JudgeLog
from toki.log import Event, EventKind, EventLog
from toki.model import (
    FactKey,
    FactVersion,
    Lifecycle,
    need_key,
    need_source_hash,
)
from toki.model import source_hash_of as _source_hash_of
from toki.ops import op_done, operation_for
from toki.partition import Partition
from toki.projection import ReconcileReport, reconcile
from toki.replay import KeyState, KeySummary, Snapshot, gc_paused, replay
from toki.store.base import EventStore, Operation, Steps, drive, transact_steps
from toki.store.memory import InMemoryStore
from toki.time import BoundSource, Interval, TimeLike, format_instant, parse_instant

__all__ = ["POLICY_SUBJECT", "UNKNOWN", "Clock", "MemoryBase", "VersionRef", "WriteStats"]

POLICY_SUBJECT = "__toki_policy__"
"""Reserved subject under which RULE policies are logged (one key per tenant and fact_key)."""

LOG_KEY = FactKey("__toki__", "__toki_log__", "chain")
"""Reserved key under which events about the log itself (CHAIN) are logged."""

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


@dataclass(frozen=True, slots=True)
class WriteStats:
    """Counters of a Memory's writes (the product grid reports retries)."""

    writes: int
    retries: int


class MemoryBase:
    """Shared state and helpers of the `Memory` facade (see toki/memory.py)."""

    def __init__(
        self,
        store: EventStore | None = None,
        *,
        clock: Clock | None = None,
        isolation: Isolation | None = None,
        repair_projection: bool = False,
    ) -> None:
        """isolation: the level writes run at. None: on PostgreSQL each write runs at its
        operator's declared level; the in-memory and SQLite stores have one writer at a time,
        so their writes are serial (SERIALIZABLE). An explicit level is the level actually
        run; one below an operator's requirement is refused unless the write passes
        allow_weaker_isolation=True (an experiment), and then it really runs at that level.

        Opening checks the log's chain and reconciles the stored projection with the log; a
        difference raises IntegrityError and changes nothing, unless repair_projection=True
        (after `toki verify` showed the log intact): then the projection is rebuilt from it."""
        self._store: EventStore = store if store is not None else InMemoryStore()
        self._clock: Clock = clock or _utc_now
        self._isolation = isolation
        self._concurrent = bool(getattr(self._store, "concurrent", False))
        self._operators: dict[str, Operator] = {}
        self._judge_log_cache: JudgeLog | None = None
        self._log = EventLog()
        self._snapshot = Snapshot()
        self._writer = threading.RLock()
        self._writes = 0
        self._retries = 0
        self.open_report: ReconcileReport | None = None
        self._repair = repair_projection
        self._chain: ChainCheck | None = ChainCheck(self._store.url)
        self._load()

    @property
    def isolation(self) -> Isolation:
        """The level writes run at when no operator says otherwise (see __init__)."""
        return self._isolation if self._isolation is not None else Isolation.SERIALIZABLE

    def _level_for(self, required: Isolation) -> Isolation:
        """The level a write whose operator requires `required` actually runs at."""
        if self._isolation is not None:
            return self._isolation
        return required if self._concurrent else Isolation.SERIALIZABLE

    @property
    def write_stats(self) -> WriteStats:
        """Writes committed through this Memory and serialization-failure retries they took."""
        return WriteStats(self._writes, self._retries)

    # -- loading and catching up -----------------------------------------------------------

    def _load(self) -> None:
        """Fold the log; reconcile the stored projection against the same consistent read."""
        self._store.sequence()  # events a crashed writer committed but never sequenced
        with gc_paused():
            events, unsequenced, watermark, stored = self._store.load_state()
            chained = self._chain_old_log(events)
            # one bulk replay of the events the log admits: the state folding them one by one
            # gives (tested), and the replay reconcile compares the stored projection with
            self._snapshot = replay([e for e in events if self._admit(e)])
        if self._log.last_seq == 0 and not stored and not unsequenced:
            return
        replayed = self._snapshot
        if unsequenced:  # committed after our sequencing: the projection has them, we not yet
            replayed = replay(self._log)
            for event in unsequenced:
                replayed.apply(event)
        replayed.watermark = self._log.last_seq
        self.open_report = report = reconcile(stored, watermark, replayed)
        if not report.ok:
            if not (self._repair or chained):
                raise IntegrityError(
                    f"{self._store.url}: the stored projection differs from the log (projection "
                    f"at seq {report.watermark}, log at seq {report.replay_watermark}): "
                    f"{report.describe()}; nothing was changed. The projection is only ever "
                    "written with the log, so one of them was changed outside toki: run `toki "
                    "verify URL --digest D` with a digest saved earlier; if the log is intact, "
                    "open with repair_projection=True to rebuild the projection from it"
                )
            self._store.append([], replayed.summaries(), replayed.watermark, replace=True)
        if chained:
            self._record_chaining(chained, report)

    def _chain_old_log(self, events: Sequence[Event]) -> int:
        """The migration of a log written before the chain: store the links of its events
        (trusting the log as it is now); returns how many were chained (0: nothing to do)."""
        set_links = getattr(self._store, "set_links", None)
        n = sum(1 for e in events if e.chain is None)
        if not n or set_links is None:
            return 0
        if any(e.chain is not None for e in events[:n]):
            first = next(e for e in events[n:] if e.chain is None)
            raise IntegrityError(
                f"{self._store.url}: event seq {first.seq} has no chain link although events "
                "before it have one (its link was removed outside toki); restore the store "
                "from a backup taken before it"
            )
        check = ChainCheck(self._store.url)
        set_links([(e.seq, check.add(e)) for e in events])
        return n

    def _record_chaining(self, chained: int, report: ReconcileReport) -> None:
        """The migration is itself an event (and so part of the chain from here on)."""
        body = {
            "chained": chained,
            "through_seq": self._log.last_seq,
            "head": self._chain.head if self._chain is not None else "",
            "projection_rebuilt": [str(d.key) for d in report.differences],
            "why": "the log was written before toki chained its events; links were computed "
            "from the log as it was when this store was first opened by a chaining toki",
        }
        recorded = self._now()
        self._write([LOG_KEY], lambda p: [p.new(EventKind.CHAIN, LOG_KEY, recorded, (), body)])

    def _admit(self, event: Event) -> bool:
        """Check the event's chain link and add it to the log; False for a duplicate."""
        if self._chain is not None:  # seqs dense from 1, stored links as recomputed
            self._chain.add(event, event.chain)
        return self._log.add(event)

    def _fold(self, event: Event) -> None:
        if self._admit(event):
            self._snapshot.apply(event)

    def _catch_up(self) -> int:
        """Fold events the store sequenced since our watermark; returns how many."""
        n = 0
        if self._store.last_seq() > self._log.last_seq:
            for event in self._store.load(self._log.last_seq):
                self._fold(event)
                n += 1
        return n

    def refresh(self) -> int:
        """Catch up with events appended by other processes; returns how many were folded."""
        with self._writer:
            self._store.sequence()
            return self._catch_up()

    def _key_of(self, ref: VersionRef, field: str = "version") -> FactKey:
        """The key a version belongs to (a version's key never changes; catch up if unseen)."""
        vid = ref.id if isinstance(ref, FactVersion) else ref
        if not isinstance(vid, str):
            raise InvalidInput(field, f"expected a FactVersion or version id, got {vid!r}")
        key = self._snapshot.version_key.get(vid)
        if key is None:
            self.refresh()
            key = self._snapshot.version_key.get(vid)
        if key is None:
            raise UnknownVersion(vid, field)
        return key

    def _write(
        self,
        keys: Iterable[FactKey],
        build: Callable[[Partition], list[Event]],
        level: Isolation = Isolation.READ_COMMITTED,
    ) -> list[Event]:
        """The one commit point (see `_write_steps`), run to completion."""
        return drive(self._write_steps(keys, build, level))

    def _write_steps(
        self,
        keys: Iterable[FactKey],
        build: Callable[[Partition], list[Event]],
        level: Isolation = Isolation.READ_COMMITTED,
        op: Operation | None = None,
    ) -> Steps[list[Event]]:
        """The one commit point: the store's transaction shell reads the partition of `keys`,
        `build` decides from it alone, the shell appends and commits; only then are the
        events folded into this Memory (a failed write leaves it exactly as it was).

        A generator: on a store whose transaction shell is itself a generator of simulator
        statements (`toki.store.sim`), every statement is yielded to the agent driving this
        write; on every other store it yields nothing (`drive` runs it)."""
        made: list[Event] = []

        def plan(
            partition: Sequence[Event], base_seq: int
        ) -> tuple[list[Event], dict[FactKey, KeySummary]]:
            part = Partition(wanted, partition, base_seq)
            events = build(part)
            made[:] = events
            return events, (part.fold(events) if events else {})

        wanted = frozenset(keys)
        op = op if op is not None else operation_for(self._store)  # issue #36 (toki.ops)
        with self._writer:
            if self._concurrent:
                retries = yield from transact_steps(self._store, wanted, level, plan, op)
                self._retries += retries
                if made and not (op and op.replayed):
                    self._writes += 1
                    with suppress(StoreError):  # committed: catching up may wait (toki.ops)
                        self._catch_up()
                return [] if op and op.replayed else made
            # one writer (memory, SQLite): under its lock the caught-up live state is the
            # partition as read inside the transaction; clone it rather than re-read it
            with self._store.write_lock():
                self._catch_up()
                if op_done(self._store, op):  # a retried operation id: stored once (toki.ops)
                    return []
                part = Partition.of_snapshot(wanted, self._snapshot, self._log.last_seq)
                events = build(part)
                if events:
                    extra: dict[str, Any] = {} if op is None else {"op": op}  # toki.ops
                    self._store.append(events, part.fold(events), events[-1].seq, **extra)
            for event in events:  # committed: only now does this Memory see them
                self._fold(event)
            if events:
                self._writes += 1
            return events

    # -- reading and recording reads -------------------------------------------------------

    def _view(self, as_of: datetime | None) -> Snapshot:
        """The state reads at system time `as_of` are served from (toki/shadow.py overrides
        it with the projection of the configuration in force then)."""
        return self._snapshot

    def _config_record(self, as_of: datetime | None) -> tuple[str | None, Any]:
        """(id, JSON) of the promoted configuration in force at `as_of`; (None, None): the
        log as decided (toki/shadow.py overrides it)."""
        return None, None

    def _config_policy(self, key: FactKey, at: datetime) -> dict[str, Any] | None:
        """The RULE policy a promoted configuration puts in force for `key` at `at`, if any
        (toki/shadow.py overrides it); it takes precedence over POLICY events."""
        return None

    def _record_read(
        self,
        consumer: str,
        key: FactKey,
        valid_at: datetime,
        as_of: datetime | None,
        keys: Sequence[FactKey],
        answer: Any,
    ) -> None:
        """Append one Consumption record (toki.consumption) beside the event log."""
        from toki.consumption import Consumption

        append = getattr(self._store, "append_consumption", None)
        if append is None:
            raise StoreError(
                f"{self._store.url}: this backend keeps no consumption log; read without "
                "consumer=, or use a memory://, sqlite:// or postgresql:// store"
            )
        config_id, config = self._config_record(as_of)
        record = Consumption(
            consumer=consumer,
            read_at=self._now(),
            key=key,
            valid_at=valid_at,
            system_as_of=as_of,
            scope_chain=tuple(str(k.scope) for k in keys),
            log_seq=self._log.last_seq,
            log_head=self._chain.head if self._chain is not None else "",
            config_id=config_id,
            config=config,
            operators={fk: op.name for fk, op in self._operators.items()},
            answer=answer,
        )
        append([(record.record_id, consumer, format_instant(record.read_at), record.to_text())])

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
        need_key(key)
        if not isinstance(source_id, str) or not source_id.strip():
            raise InvalidInput("source_id", "must be a non-empty string", "name the message/doc")
        check_text(source_id, "source_id")
        check_json(value)
        return FactVersion(
            key=key,
            value=value,
            valid=valid,
            recorded_at=recorded,
            source_id=source_id,
            source_hash=need_source_hash(source_hash) or _source_hash_of(source_id, value),
            supersedes=supersedes,
            weight=weight,
        )

    def _assert_events(
        self,
        p: Partition,
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
            p.new(
                EventKind.ASSERT,
                version.key,
                version.recorded_at,
                (version.id,),
                body,
                version,
                pending=pending,
            )
        )
        state = p.state(version.key)
        if state is None:
            return
        joins: set[str] = set()
        others: list[str] = []
        known = version.recorded_at
        value = version.value_json
        versions, groups, of = state.versions, state.groups.groups, state.groups.of
        for other_id in state.overlapping(version.valid):  # this loop runs per standing version
            other = versions[other_id]
            if other.value_json == value or other_id in exclude or other_id == version.supersedes:
                continue
            in_groups = [g for g in of.get(other_id, ()) if other_id not in groups[g].left]
            if in_groups:
                joins.update(in_groups)
            else:
                others.append(other_id)
            if other.recorded_at > known:
                known = other.recorded_at
        if joins or others:  # one event however many versions it contradicts
            pending.append(
                p.new(
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
        p: Partition,
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
                p.new(
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
