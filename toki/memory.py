"""Memory: the one imperative shell around the functional core.

It holds the store, the chain check, the clock, the operator routing and the replayed state,
and runs every change the same way: fix the request's instants (the clock), plan it with a
pure planner over the partition the store's transaction read (toki/write.py,
toki/lifecycle.py), append and commit the plan, and only then fold its events into the live
state. Every read is a function of a `Db` (toki/db.py), the state as a value. The layers and
the path of one write, one read and one replay are in docs/architecture.md.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toki.algebra import OPERATORS
from toki.algebra.base import Operator
from toki.algebra.lww import LWW
from toki.algebra.provenance import AuditRow, Decision
from toki.algebra.rule import Policy
from toki.canonical import canonical_json, check_json, check_text, shown
from toki.chain import ChainCheck, Digest, VerifyReport
from toki.checkpoint import (
    UNCHECKED,
    Checkpoint,
    LazyLog,
    due,
    lazy_snapshot,
    text_digest,
)
from toki.consumption import (
    ConsumerImpact,
    Consumption,
    Impact,
    answer_now,
    impact,
    need_consumer,
    need_source,
    verify_reads,
)
from toki.db import Db, resolve_in, scope_keys
from toki.errors import (
    IntegrityError,
    InvalidInput,
    InvalidInterval,
    LifecycleError,
    StoreError,
    UnknownProposal,
    UnknownVersion,
)
from toki.isolation import Isolation, check_precondition
from toki.judge import Judge
from toki.lifecycle import (
    plan_assert,
    plan_revoke,
    plan_revoke_source,
    plan_segment,
    plan_settle,
    plan_supersede,
)
from toki.log import CONFIG_KEY, Event, EventKind, EventLog
from toki.model import (
    Claim,
    FactKey,
    FactVersion,
    HistoryEntry,
    Lifecycle,
    Resolution,
    Scope,
    need_key,
)
from toki.ops import decision_of, op_done, operation_for, outcome_text
from toki.partition import Partition, extends
from toki.plan import (
    LOG_KEY,
    POLICY_SUBJECT,
    UNKNOWN,
    VersionRef,
    claim_version,
    interval,
    new_version,
    version_id,
)
from toki.projection import ReconcileReport, compare, reconcile
from toki.replay import KeyState, KeySummary, Snapshot, gc_paused, is_built, replay
from toki.scratch import rejudge
from toki.shadow import (
    Config,
    ShadowReport,
    config_stack,
    fold_under,
    in_force,
    plan_promote,
    plan_rollback,
    shadow_report,
)
from toki.store.audit import verify_store
from toki.store.base import EventStore, Operation, Steps, drive, transact_steps
from toki.store.memory import InMemoryStore
from toki.store.open import open_store
from toki.time import BoundSource, TimeLike, format_instant, parse_instant
from toki.write import WriteRequest, plan_policy, plan_write, write_keys

__all__ = ["POLICY_SUBJECT", "UNKNOWN", "Clock", "Memory", "VersionRef", "WriteStats"]

Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class WriteStats:
    """Counters of a Memory's writes (the product grid reports retries)."""

    writes: int
    retries: int


class Memory:
    """A bitemporal fact store. In-memory by default; `Memory.open(url)` for a backend."""

    def __init__(
        self,
        store: EventStore | None = None,
        *,
        clock: Clock | None = None,
        isolation: Isolation | None = None,
        repair_projection: bool = False,
        from_checkpoint: bool = True,
    ) -> None:
        """isolation: the level writes run at. None: on PostgreSQL each write runs at its
        operator's declared level; the in-memory and SQLite stores have one writer at a time,
        so their writes are serial (SERIALIZABLE). An explicit level is the level actually
        run; one below an operator's requirement is refused unless the write passes
        allow_weaker_isolation=True (an experiment), and then it really runs at that level.

        Opening checks the log's chain and reconciles the stored projection with the log; a
        difference raises IntegrityError and changes nothing, unless repair_projection=True
        (after `toki verify` showed the log intact): then the projection is rebuilt from it.

        A store with a checkpoint (SQLite, PostgreSQL) is opened from it: only the events
        after it are folded, each key's state is built from its own log rows on first use
        (toki.checkpoint); from_checkpoint=False (and repair_projection=True) replays and
        chain-checks the whole log instead, and then writes a new checkpoint if one is due."""
        self._store: EventStore = store if store is not None else InMemoryStore()
        self._clock: Clock = clock or _utc_now
        self._isolation = isolation
        self._concurrent = bool(getattr(self._store, "concurrent", False))
        self._operators: dict[str, Operator] = {}
        self._log = EventLog()
        self._snapshot = Snapshot()
        self._shared = False  # a Db holds self._snapshot: the next fold copies it first
        self._owned: set[FactKey] | None = None  # keys cloned since (None: all are ours)
        self._views: dict[str, tuple[int, Snapshot]] = {}
        self._writer = threading.RLock()
        self._writes = 0
        self._retries = 0
        self.open_report: ReconcileReport | None = None
        self._repair = repair_projection
        self._from_checkpoint = from_checkpoint and not repair_projection
        self._chain: ChainCheck | None = ChainCheck(self._store.url)
        self._checkpoint: Checkpoint | None = None  # the last one read or written
        self._digests: dict[str, str] = {}  # its projection-row digests, per key text
        # keys folded since (their digests are stale), each with the projection row this
        # Memory's own write stored for it, None where another fold came after that row
        self._dirty: dict[FactKey, KeySummary | None] = {}
        self._checkpoints = hasattr(self._store, "save_checkpoint") and not getattr(
            self._store, "read_only", False
        )
        self._load()

    # -- opening and closing ---------------------------------------------------------------

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        isolation: Isolation | None = None,
        repair_projection: bool = False,
        from_checkpoint: bool = True,
    ) -> Memory:
        """Open 'memory://', 'sqlite:///path.db' or 'postgresql://…'. Opening checks the log's
        chain and reconciles the projection; see docs/integrity.md for repair_projection.
        isolation=None: on PostgreSQL each write runs at its operator's declared level (the
        one-writer stores are serial); a level forces that level (see Memory.__init__);
        from_checkpoint=False replays the whole log even if the store has a checkpoint."""
        return cls(
            open_store(url),
            clock=clock,
            isolation=isolation,
            repair_projection=repair_projection,
            from_checkpoint=from_checkpoint,
        )

    def close(self) -> None:
        """Close the store, writing a checkpoint first if one is due (toki.checkpoint)."""
        with suppress(StoreError):  # a checkpoint only saves the next open time
            self._checkpoint_if_due()
        self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return self._store.url

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
        memory._chain = None  # a replay at a cutoff is part of a log, not a store's chain
        kept = sorted(
            (e for e in _dedup(events) if e.event_id in snapshot.seen), key=lambda e: e.seq
        )
        memory._store.append(kept, snapshot.summaries(), snapshot.watermark)
        for event in kept:
            memory._fold(event)
        return memory

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

    def _load(self) -> None:
        """Fold the log (or, from a checkpoint, only its tail); reconcile the stored
        projection against the same consistent read; route claims to the operators of the
        configuration promoted last."""
        self._store.sequence()  # events a crashed writer committed but never sequenced
        refused = self._open_from_checkpoint() if self._from_checkpoint else ""
        if refused is None:
            return
        # the cyclic GC paused throughout: replay, reconcile and the checkpoint build
        # acyclic objects by the million, and its scans of them were a third of the time
        with gc_paused():
            self._full_load(refused)
            with suppress(StoreError):  # e.g. a log written before checkpoints: write one now
                self._checkpoint_if_due()

    def _full_load(self, refused: str) -> None:
        """The whole log replayed and chain-checked (no checkpoint, or one refused)."""
        events, unsequenced, watermark, stored = self._store.load_state()
        chained = self._chain_old_log(events)
        # one bulk replay of the events the log admits: the state folding them one by one
        # gives (tested), and the replay reconcile compares the stored projection with
        self._snapshot = replay([e for e in events if self._admit(e)])
        config = in_force(self._snapshot, None)
        if config is not None:
            self._operators = {f: OPERATORS[o] for f, o in config.operators}
        if self._log.last_seq == 0 and not stored and not unsequenced:
            return
        replayed = self._snapshot
        if unsequenced:  # committed after our sequencing: the projection has them, we not yet
            replayed = replay(self._log)
            for event in unsequenced:
                replayed.apply(event)
        replayed.watermark = self._log.last_seq
        report = reconcile(stored, watermark, replayed)
        how = "full replay" + (f" ({refused})" if refused else "")
        self.open_report = report = dataclasses.replace(report, opened_from=how)
        if not report.ok:
            if not (self._repair or chained):
                raise self._drifted(report)
            self._store.append([], replayed.summaries(), replayed.watermark, replace=True)
        if chained:
            self._record_chaining(chained, report)

    def _drifted(self, report: ReconcileReport) -> IntegrityError:
        return IntegrityError(
            f"{self._store.url}: the stored projection differs from the log (projection "
            f"at seq {report.watermark}, log at seq {report.replay_watermark}): "
            f"{report.describe()}; nothing was changed. The projection is only ever "
            "written with the log, so one of them was changed outside toki: run `toki "
            "verify URL --digest D` with a digest saved earlier; if the log is intact, "
            "open with repair_projection=True to rebuild the projection from it"
        )

    # -- checkpoints (toki.checkpoint) -----------------------------------------------------

    def _open_from_checkpoint(self) -> str | None:
        """Open from the store's checkpoint: None if it did; otherwise why not ("" when the
        store has none), and the caller replays the whole log. A record that fails its
        checks is refused, never trusted: the full replay then decides (and names any
        tampering with the log itself as it always did)."""
        load = getattr(self._store, "load_checkpoint", None)
        found = None if load is None else load()
        if found is None:
            return ""
        url = self._store.url
        try:
            checkpoint = Checkpoint.from_text(found[0], found[1], url)
        except IntegrityError as exc:
            return f"checkpoint refused: {exc}"
        if checkpoint is None:
            return "checkpoint of another format ignored"
        seq = checkpoint.seq
        known = {t: k for k, t, _, _ in checkpoint.keys}
        read = self._store.load_tail(seq, known)  # type: ignore[attr-defined]
        if read is None:  # PostgreSQL: writers kept committing events not yet sequenced
            return f"checkpoint at seq {seq} not used: concurrent writes kept the log unsequenced"
        at, tail, seal, at_seal, watermark, stored = read
        last = tail[-1].seq if tail else seq
        problem = None
        if at != checkpoint.head:
            problem = f"the stored chain link at seq {seq} is not the checkpoint's head"
        elif seal is None or any(e.chain is None for e in tail):
            problem = "the log after it has no chain seal or an unlinked event"
        elif (
            seal.seq > last
            or (seal.seq <= seq and at_seal != seal.head)
            or (seal.seq > seq and tail[seal.seq - seq - 1].chain != seal.head)
        ):
            problem = "the chain seal does not match the log"
        if problem is not None:
            return f"checkpoint at seq {seq} refused: {problem}"
        self._checkpoint = checkpoint
        self._digests = {t: d for _, t, _, d in checkpoint.keys}
        self._log = LazyLog(checkpoint, lambda: self._store.prefix_events(seq), url)  # type: ignore[attr-defined]
        chain = self._chain = ChainCheck(url)
        chain.seq, chain.head = seq, checkpoint.head
        admitted = [e for e in tail if self._admit(e)]  # the tail fully chain-checked
        store: Any = self._store

        def row_of(key: FactKey) -> KeySummary | None:
            row = stored.get(store.key_text(key))
            return None if row is None else store.parse_row(row)[1]

        self._snapshot = lazy_snapshot(checkpoint, store, admitted, row_of)
        touched = {e.key for e in admitted}
        self._dirty.update(dict.fromkeys(touched))
        config = in_force(self._snapshot, None)
        if config is not None:
            self._operators = {f: OPERATORS[o] for f, o in config.operators}
        report = dataclasses.replace(
            self._reconcile_tail(stored, watermark, touched, known),
            opened_from=f"checkpoint at seq {seq} ({len(admitted)} tail events on "
            f"{len(touched)} keys, whose projection rows are checked on first use)",
        )
        self.open_report = report
        if not report.ok:
            raise self._drifted(report)
        return None

    def _reconcile_tail(
        self,
        rows: Mapping[str, Sequence[Any]],
        watermark: int,
        touched: set[FactKey],
        keys: Mapping[str, FactKey],
    ) -> ReconcileReport:
        """Reconcile after a checkpointed open: every stored row (as stored, by key text) of
        a key the tail did not touch against the digest the checkpoint recorded for it; a
        row that differs or is missing is compared with its key's fold from the log. The keys
        the tail touched, and those whose row the record leaves UNCHECKED, check their row when
        first used (toki.checkpoint.lazy_snapshot).
        `keys`: the record's keys by text, as the open parsed them."""
        store: Any = self._store
        recorded = self._digests
        skip = {store.key_text(k) for k in touched}
        skip.update(t for t, d in recorded.items() if d == UNCHECKED)
        stored: dict[FactKey, KeySummary] = {}
        fresh: dict[FactKey, KeySummary] = {}
        checked = 0
        digest_row = store.digest_row
        for text in rows.keys() | recorded.keys():
            if text in skip:
                continue
            checked += 1
            row = rows.get(text)
            if row is not None and digest_row(row) == recorded.get(text):
                continue  # the row the checkpoint's writer derived from the log
            if row is not None:
                parsed, summary = store.parse_row(row)
                stored[parsed] = summary
            if text in keys:
                fresh[keys[text]] = self._snapshot.keys[keys[text]].summary()
        report = compare(stored, watermark, fresh, self._log.last_seq)
        return dataclasses.replace(report, keys_checked=checked)

    def checkpoint(self) -> Checkpoint | None:
        """Write a checkpoint at the log's head now (SQLite, PostgreSQL: at the last event
        this Memory folded, which is sequenced; None on a store that keeps none,
        on a read-only one, or for an empty log): the next open folds only what comes after
        it (docs/integrity.md)."""
        if not self._checkpoints or self._chain is None or self._log.last_seq == 0:
            return None
        with self._writer, self._store.write_lock():
            self._catch_up()
            seqs = self._log.key_seqs()
            rows = []
            store: Any = self._store
            states = self._snapshot.keys
            for key in sorted(states):
                text = store.key_text(key)
                digest = self._digests.get(text)
                if key in self._dirty or digest is None or digest == UNCHECKED:
                    state = states[key]  # an unbuilt key's row stays to be checked on use
                    written = self._dirty.get(key)  # the row stored: no fold to redo
                    if written is not None:
                        digest = store.projection_digest(key, written)
                    elif is_built(state):
                        digest = store.projection_digest(key, state.summary())
                    else:
                        digest = UNCHECKED
                rows.append((key, text, seqs.get(key, 0), digest))
            checkpoint = Checkpoint(self._log.last_seq, self._chain.head, tuple(rows))
            text = checkpoint.to_text()
            self._store.save_checkpoint(text, text_digest(text))  # type: ignore[attr-defined]
        self._checkpoint = checkpoint
        self._digests = {t: d for _, t, _, d in rows}
        self._dirty.clear()
        return checkpoint

    def _checkpoint_if_due(self) -> None:
        base = 0 if self._checkpoint is None else self._checkpoint.seq
        if self._checkpoints and due(self._log.last_seq, base, len(self._snapshot.keys)):
            self.checkpoint()

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

    # -- folding: the live state is the replay of the log ----------------------------------

    def _admit(self, event: Event) -> bool:
        """Check the event's chain link and add it to the log; False for a duplicate."""
        if self._chain is not None:  # seqs dense from 1, stored links as recomputed
            self._chain.add(event, event.chain)
        return self._log.add(event)

    def _fold(self, event: Event, adopted: bool = False) -> None:
        """adopted: the key's state holds the event already (`_adopt`): index it only."""
        if self._admit(event):  # the log holds the ids the snapshot has seen: a new one
            if not adopted and (self._shared or self._owned is not None):
                self._own(event.key)
            self._snapshot.apply(event, new=True, folded=adopted)
            self._dirty[event.key] = None

    def _adopt(self, key: FactKey, state: KeyState) -> None:
        """A committed write's own copy of the key's state becomes the live one: a Db that
        holds the old one keeps it unchanged, a reader sees the old or the new, never half."""
        self._unshare()
        self._snapshot.keys[key] = state
        if self._owned is not None:
            self._owned.add(key)

    def _own(self, key: FactKey) -> None:
        """Copy on write: never fold into a state a Db handed out still holds."""
        self._unshare()
        owned = self._owned
        assert owned is not None
        if key not in owned:
            state = self._snapshot.keys.get(key)
            if state is not None:
                self._snapshot.keys[key] = state.clone()
            owned.add(key)

    def _unshare(self) -> None:
        """A Db holds the snapshot: fold into a copy (sharing its key states) from now on."""
        if self._shared:
            self._snapshot = self._snapshot.copy()
            self._shared = False
            self._owned = set()

    def _catch_up(self) -> int:
        """Fold events the store sequenced since our watermark; returns how many."""
        n = 0
        if self._store.last_seq() > self._log.last_seq:
            with gc_paused():  # possibly another process's thousands of events
                for event in self._store.load(self._log.last_seq):
                    self._fold(event)
                    n += 1
        return n

    def refresh(self) -> int:
        """Catch up with events appended by other processes; returns how many were folded."""
        with self._writer:
            self._store.sequence()
            return self._catch_up()

    # -- the one commit point --------------------------------------------------------------

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
        """Plan -> append -> commit -> fold: the store's transaction shell reads the
        partition of `keys`, the planner `build` decides from it alone, the shell appends
        and commits; only then are the events folded into this Memory (a failed write leaves
        it exactly as it was).

        A generator: on a store whose transaction shell is itself a generator of simulator
        statements (`toki.store.sim`), every statement is yielded to the agent driving this
        write; on every other store it yields nothing (`drive` runs it)."""
        made: list[Event] = []
        known: dict[FactKey, int] | None = None

        def plan(
            partition: Sequence[Event], base_seq: int
        ) -> tuple[list[Event], dict[FactKey, KeySummary]]:
            if known is not None and extends(known, partition):  # what came after we held
                part = Partition.of_snapshot(wanted, self._snapshot, base_seq)
                part.extend(partition)
            else:
                part = Partition(wanted, partition, base_seq)
            events = build(part)
            made[:] = events
            return events, (part.fold(events) if events else {})

        wanted = frozenset(keys)
        op = op if op is not None else operation_for(self._store)  # issue #36 (toki.ops)
        with self._writer:
            if self._concurrent:
                if getattr(self._store, "reads_after_known", False):
                    # the keys' events this Memory folded: a key's per-key seqs are dense and
                    # sequenced in order, so a folded prefix is what the store holds up to it;
                    # the store reads only what came after (a hot key rereads nothing)
                    states = self._snapshot.keys
                    known = {k: states[k].last_key_seq if k in states else 0 for k in wanted}
                retries = yield from transact_steps(self._store, wanted, level, plan, op, known)
                self._retries += retries
                if made and not (op and op.replayed):
                    self._writes += 1
                    with suppress(StoreError):  # committed: catching up may wait (toki.ops)
                        self._catch_up()
                        self._checkpoint_if_due()  # covers what we folded: sequenced only
                return [] if op and op.replayed else made
            # one writer (memory, SQLite): under its lock the caught-up live state is the
            # partition as read inside the transaction; clone it rather than re-read it
            with self._store.write_lock():
                self._catch_up()
                if op_done(self._store, op):  # a retried operation id: stored once (toki.ops)
                    return []
                part = Partition.of_snapshot(wanted, self._snapshot, self._log.last_seq)
                events = build(part)
                rows = part.fold(events) if events else {}
                if events:
                    extra: dict[str, Any] = {} if op is None else {"op": op}  # toki.ops
                    self._store.append(events, rows, events[-1].seq, **extra)
            # committed: only now does this Memory see them, each key's state the one the
            # write folded into where that is a copy (Partition.SMALL_KEY), else folded again
            adopted = part.own_states({e.key for e in events})
            for key, state in adopted.items():
                self._adopt(key, state)
            for event in events:
                self._fold(event, event.key in adopted)
            self._dirty.update(rows)  # the rows stored: what the next checkpoint vouches for
            if events:
                self._writes += 1
                with suppress(StoreError):  # committed already: a busy lock only delays it
                    self._checkpoint_if_due()
            return events

    # -- the request's instants and references (the shell's part of a request) -------------

    def _now(self) -> datetime:
        return parse_instant(self._clock(), "clock()")

    def _recorded(self, recorded_at: TimeLike | None) -> datetime:
        return self._now() if recorded_at is None else parse_instant(recorded_at, "recorded_at")

    def _key_of(self, ref: VersionRef, field: str = "version") -> FactKey:
        """The key a version belongs to (a version's key never changes; catch up if unseen)."""
        vid = version_id(ref, field)
        key = self._snapshot.version_key.get(vid)
        if key is None:
            self.refresh()
            key = self._snapshot.version_key.get(vid)
        if key is None:
            raise UnknownVersion(vid, field)
        return key

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

    # -- writing: claims through an operator -----------------------------------------------

    def configure(self, fact_key: str, operator: Operator) -> None:
        """Route claims on `fact_key` (any tenant and subject) to `operator` by default."""
        if not isinstance(operator, Operator):
            raise InvalidInput("operator", f"{operator!r} is not an Operator")
        FactKey("configure", "configure", fact_key)  # the same rules as a key's fact_key
        self._operators[fact_key] = operator

    def operator_for(self, key: FactKey) -> Operator:
        return self._operators.get(key.fact_key, LWW)

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
        self._write([key], lambda p: plan_policy(p, key, policy, recorded))

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
        version = claim_version(claim, self._recorded(claim.recorded_at))
        level = self._level_for(op.requires)
        if self._concurrent and not allow_weaker_isolation:
            check_precondition(level, op.requires, what=f"operator {op.name}")
        request = WriteRequest(
            version,
            op,
            level,
            judge=judge,
            log_judge=log_judge,
            allow_weaker_isolation=allow_weaker_isolation,
            semantic_gate=semantic_gate,
            config_policy=self._config_policy,
        )
        made: list[Decision] = []
        operation = operation_for(self._store, op_id)  # toki.ops

        def build(p: Partition) -> list[Event]:
            made.clear()  # a retried transaction decides again from a fresh read
            decision, events = plan_write(p, request)
            made.append(decision)
            if operation is not None:  # stored with the events: what a retry returns
                operation.result = outcome_text(decision)
            return events

        yield from self._write_steps(write_keys(claim.key, op), build, level, operation)
        if operation is not None and operation.replayed:
            return decision_of(operation.result)
        return made[0]

    # -- writing: the lifecycle operations -------------------------------------------------

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
        valid = interval(valid_from, valid_to, recorded, from_source, to_source)
        version = new_version(key, value, valid, recorded, source_id, source_hash, None, weight)
        self._write([version.key], lambda p: plan_assert(p, version))
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
        valid = interval(valid_from, valid_to, recorded)
        made: list[FactVersion] = []
        key = self._key_of(old, "old")

        def build(p: Partition) -> list[Event]:
            version, events = plan_supersede(
                p, old, value, valid, recorded, source_id, source_hash, weight
            )
            made[:] = [version]
            return events

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
        _need_reason(reason)
        key = self._key_of(version)
        self._write([key], lambda p: plan_revoke(p, version, recorded, reason))

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
        state = self._snapshot.state(need_key(key))
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
        valid = interval(valid_from, valid_to, recorded)
        if valid.start is None or valid.end is None:
            raise InvalidInterval(
                "valid_from" if valid.start is None else "valid_to",
                "a segment needs known bounds, not 'unknown'",
                "give the instants the piece held between",
            )
        middle = new_version(key, value, valid, recorded, source_id, source_hash, None, weight)
        self._write([key], lambda p: plan_segment(p, middle))
        return middle

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
            settled, events = plan_settle(p, key, token, accept, recorded)
            done[:] = [settled]
            return events

        self._write([key], build)
        return done[0]

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
        if operator is not None and not isinstance(operator, Operator):
            raise InvalidInput("operator", f"{operator!r} is not an Operator")
        scratch = rejudge(
            self._log,
            self._operators,
            operator,
            judge=judge,
            use_keyed_log=use_keyed_log,
            level=self.isolation,
        )
        fresh = Memory.replay(scratch.events, clock=self._clock)
        fresh._isolation = self._isolation
        fresh._operators = dict(self._operators)
        return fresh

    # -- reading: functions of the state as a value ----------------------------------------

    def db(self, system_as_of: TimeLike | None = None) -> Db:
        """The state as a value: everything this Memory has folded, as known at
        `system_as_of` (default: all), under the configuration in force then. It never
        changes: later writes go to a copy (docs/architecture.md)."""
        with self._writer:
            db = self._db(_as_of(system_as_of), self._now())
            self._shared = True
            return db

    def _db(self, as_of: datetime | None, now: datetime | None = None) -> Db:
        """The live state as a Db for one read (not frozen: see `db`; no clock read unless
        the read needs `now`)."""
        return Db(self._snapshot, self._view(as_of), self._log.last_seq, as_of, now)

    def _log_db(self, as_of: datetime | None) -> Db:
        """`_db` for the reads of the log as decided (history, lifecycle, audit, conflicts,
        versions), which never look at the configuration in force: no refold is built."""
        return Db(self._snapshot, self._snapshot, self._log.last_seq, as_of)

    def resolve_at(
        self,
        key: FactKey,
        valid_at: TimeLike | None = None,
        system_as_of: TimeLike | None = None,
        *,
        scope_chain: Sequence[Scope | str] | None = None,
        consumer: str | None = None,
    ) -> Resolution:
        """What held at `valid_at` (default now), as known at `system_as_of` (default: all).

        With a scope chain, scopes are tried most specific first; the first answer that is
        not "unknown" wins (a conflict is an answer: it is never skipped over). With a
        consumer ("answer-17"), the read is recorded in the consumption log (docs/consumption.md);
        without one it costs nothing extra.
        """
        need_key(key)
        if consumer is not None:
            need_consumer(consumer)
        at = self._now() if valid_at is None else parse_instant(valid_at, "valid_at")
        as_of = _as_of(system_as_of)
        keys = scope_keys(key, scope_chain)
        if consumer is None:
            return resolve_in(self._view(as_of), keys, at, as_of)
        with self._writer:  # the answer and the log position it is recorded with agree
            result = resolve_in(self._view(as_of), keys, at, as_of)
            self._record_read(consumer, key, at, as_of, keys, result)
        return result

    def current(
        self,
        key: FactKey,
        *,
        catch_up: bool = True,
        scope_chain: Sequence[Scope | str] | None = None,
        consumer: str | None = None,
    ) -> Resolution:
        """The answer now, as known now. If another writer moved the log past our watermark,
        catch up first, or with catch_up=False report kind "stale" rather than a wrong value
        (a stale answer is not recorded for a consumer: it consumed nothing)."""
        need_key(key)
        if self._store.last_seq() > self._log.last_seq:
            if not catch_up:
                return Resolution("stale")
            self.refresh()
        return self.resolve_at(key, None, None, scope_chain=scope_chain, consumer=consumer)

    def history(self, key: FactKey, system_as_of: TimeLike | None = None) -> list[HistoryEntry]:
        """Every version known at `system_as_of`: lifecycle, effective interval, successor."""
        return self._log_db(_as_of(system_as_of)).history(key)

    def render_history(self, key: FactKey, system_as_of: TimeLike | None = None) -> str:
        return self._log_db(_as_of(system_as_of)).render_history(key)

    def lifecycle(self, version: VersionRef, system_as_of: TimeLike | None = None) -> Lifecycle:
        return self._log_db(_as_of(system_as_of)).lifecycle(version)

    def audit(self, key: FactKey) -> list[AuditRow]:
        """The dual-row view's audit rows: every version that lost a decision, with the
        decision's provenance. Nothing a decision touched is ever overwritten or deleted."""
        return self._log_db(None).audit(key)

    def open_conflicts(self, key: FactKey) -> list[tuple[str, ...]]:
        return self._log_db(None).open_conflicts(key)

    def version(self, version_id: str) -> FactVersion:
        return self._log_db(None).version(version_id)

    def keys(self) -> list[FactKey]:
        return sorted(self._snapshot.keys)

    def events(self) -> tuple[Event, ...]:
        return self._log.events()

    @property
    def watermark(self) -> int:
        return self._log.last_seq

    def state_hash(self) -> str:
        """The hash of the belief state serving reads now (under the configuration in force)."""
        return self._view(None).state_hash()

    # -- the log's integrity ---------------------------------------------------------------

    def digest(self, *, key: bytes | None = None) -> Digest:
        """(last seq, head link) of the log as this Memory has folded it: save its text
        (`str(digest)`) outside the store; `verify(digest)` later proves the log up to that seq
        unchanged. With `key` (bytes you keep, never stored), the chain is HMAC-SHA256."""
        if key is None and self._chain is not None:
            return self._chain.digest()
        check = ChainCheck(self._store.url, _chain_key(key))
        for event in self._log:
            check.add(event)
        return check.digest()

    def verify(
        self, digest: Digest | str | None = None, *, key: bytes | None = None
    ) -> VerifyReport:
        """Walk the stored log again: seqs dense from 1, stored links, the chain seal, and
        (given a digest saved earlier, or its 'seq:head' text; keyed if it was made with
        `key`) the log up to its seq unchanged; then every projection table and the
        consumption chain against the log (docs/integrity.md)."""
        return verify_store(self._store, digest, key=_chain_key(key))  # toki.store.audit

    def reconcile(self) -> ReconcileReport:
        """Compare the stored projection with a fresh replay of the stored log, per key."""
        watermark, stored = self._store.load_projection()
        return reconcile(stored, watermark, replay(self._store.load(0)))

    # -- consumption: named reads, impact, revoke_source ----------------------------------

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
        append = getattr(self._store, "append_consumption", None)
        if append is None:
            raise StoreError(
                f"{self._store.url}: this backend keeps no consumption log; read without "
                "consumer=, or use a memory://, sqlite:// or postgresql:// store"
            )
        config = in_force(self._snapshot, as_of)
        record = Consumption(
            consumer=consumer,
            read_at=self._now(),
            key=key,
            valid_at=valid_at,
            system_as_of=as_of,
            scope_chain=tuple(str(k.scope) for k in keys),
            log_seq=self._log.last_seq,
            log_head=self._chain.head if self._chain is not None else "",
            config_id=None if config is None else config.id,
            config=None if config is None else config.to_json(),
            operators={fk: op.name for fk, op in self._operators.items()},
            answer=answer,
        )
        append([(record.record_id, consumer, format_instant(record.read_at), record.to_text())])

    def consumed_by(self, consumer: str, *, verify: bool = True) -> list[Consumption]:
        """Every read `consumer` made, in the order made, with the answer it was given.

        verify (default) re-derives each answer from the fact log as it stood at the read
        (events with seq <= log_seq, under the configuration then in force) and checks the
        log prefix's chain head: a record that no longer follows from its log raises
        IntegrityError. Later corrections do not change what is returned."""
        need_consumer(consumer)
        records = self._consumption(consumer)
        if verify and records:
            if max(r.log_seq for r in records) > self._log.last_seq:
                self.refresh()  # a record names a seq another writer appended
            verify_reads(records, self._log.events(), self._store.url)
        return records

    def _consumption(self, consumer: str | None = None) -> list[Consumption]:
        load = getattr(self._store, "load_consumption", None)
        if load is None:
            return []
        return [Consumption.from_text(p, rid, self._store.url) for rid, p in load(consumer)]

    def impact(self, source_id: str) -> Impact:
        """What `source_id` touched: its versions (split pieces carry its source id), their
        keys, the versions they superseded, and the named reads that consumed any of them,
        each with its answer then and the same question's answer now."""
        source_id = need_source(source_id)
        self.refresh()
        return impact(self._db(None), source_id, self._consumption())

    def revoke_source(
        self, source_id: str, *, reason: str, recorded_at: TimeLike | None = None
    ) -> Impact:
        """The source itself was wrong: revoke every version from it in ONE atomic write
        (one REVOKE per version, on every key it touched), then report the impact with each
        consumer's answer then and now. The fold recomputes the affected keys: supersessions
        whose every replacement came from the source stop closing what they closed, conflicts
        it was part of lose it. Equal to revoking each version by hand (a property test)."""
        source_id = need_source(source_id)
        _need_reason(reason)
        recorded = self._recorded(recorded_at)
        before = self.impact(source_id)
        if not before.versions:
            raise LifecycleError(f"source_id: no version came from source {source_id!r}")
        if len(before.revoked) == len(before.versions):
            raise LifecycleError(f"source_id: every version from {source_id!r} is already revoked")
        self._write(
            before.keys,
            lambda p: plan_revoke_source(p, before.keys, source_id, reason, recorded),
        )
        now = self._db(None)
        return Impact(
            source_id,
            before.versions,
            before.revoked,
            before.keys,
            before.dependents,
            tuple(ConsumerImpact(c.read, answer_now(now, c.read)) for c in before.consumers),
        )

    # -- configurations: reads under the one in force; shadow, promote, rollback -----------

    def _view(self, as_of: datetime | None) -> Snapshot:
        """The state reads at system time `as_of` are served from: the log as decided, or
        its fold under the configuration promoted then (toki/shadow.py)."""
        config = in_force(self._snapshot, as_of)
        if config is None:
            return self._snapshot
        cached = self._views.get(config.id)
        if cached is not None and cached[0] == self._log.last_seq:
            return cached[1]
        snapshot, _ = fold_under(self._log, config)
        self._views[config.id] = (self._log.last_seq, snapshot)
        return snapshot

    def _config_policy(self, key: FactKey, at: datetime) -> dict[str, Any] | None:
        """The RULE policy a promoted configuration puts in force for `key` at `at`, if any;
        it takes precedence over POLICY events."""
        config = in_force(self._snapshot, at)
        policy = None if config is None else config.policy(key.tenant, key.fact_key)
        return None if policy is None else policy.to_json()

    def config_in_force(self, system_as_of: TimeLike | None = None) -> Config | None:
        """The promoted configuration serving reads at `system_as_of` (None: the log as
        decided, the state before any promotion)."""
        return in_force(self._snapshot, _as_of(system_as_of))

    def current_config(self) -> Config:
        """The configuration serving reads now: the one promoted, else the log as decided
        (this Memory's operator routing, logged operators elsewhere, no extra policies)."""
        config = in_force(self._snapshot, None)
        if config is not None:
            return config
        return Config(operators=tuple((f, op.name) for f, op in self._operators.items()))

    def shadow(
        self, config: Config, *, valid_at: TimeLike | None = None, judge: Judge | None = None
    ) -> ShadowReport:
        """Fold the whole log under `config` without touching the live state and classify
        every read whose answer at `valid_at` (default now) differs from the serving one.
        Pass the judge the live writes used, if any (see `toki.shadow.fold_under`)."""
        if not isinstance(config, Config):
            raise InvalidInput("config", f"expected a toki.shadow.Config, got {shown(config)}")
        self.refresh()
        at = self._now() if valid_at is None else parse_instant(valid_at, "valid_at")
        serving = in_force(self._snapshot, None)
        folded, notes = fold_under(self._log, config, judge=judge)
        before = serving if serving is not None else self.current_config()
        return shadow_report(self._view(None), folded, notes, config, serving, before, at)

    def promote(self, config: Config, *, recorded_at: TimeLike | None = None) -> None:
        """Serve reads from the fold under `config` from `recorded_at` on (a CONFIG event;
        the configuration it replaces stays in the log). Claims written from then on are
        routed to its operators. Promoting the configuration already in force is a no-op."""
        if not isinstance(config, Config):
            raise InvalidInput("config", f"expected a toki.shadow.Config, got {shown(config)}")
        current = in_force(self._snapshot, None)
        if current is not None and current.id == config.id:
            return
        recorded = self._recorded(recorded_at)
        before = {f: op.name for f, op in self._operators.items()}
        if self._write([CONFIG_KEY], lambda p: plan_promote(p, config, before, recorded)):
            self._operators = {f: OPERATORS[o] for f, o in config.operators}

    def rollback(self, *, recorded_at: TimeLike | None = None) -> Config | None:
        """Switch reads back to the configuration in force before the last promotion still
        in force (a CONFIG event; nothing is deleted); returns it (None: the log as decided)."""
        if not config_stack(self._snapshot, None):
            raise LifecycleError("rollback: no promoted configuration is in force")
        recorded = self._recorded(recorded_at)
        made: list[tuple[Mapping[str, Any], Config | None]] = []

        def build(p: Partition) -> list[Event]:
            top, again, events = plan_rollback(p, recorded)
            made[:] = [(top, again)]
            return events

        self._write([CONFIG_KEY], build)
        top, again = made[0]
        self._operators = {f: OPERATORS[o] for f, o in dict(top["operators_before"]).items()}
        return again


def _as_of(system_as_of: TimeLike | None) -> datetime | None:
    return None if system_as_of is None else parse_instant(system_as_of, "system_as_of")


def _need_reason(reason: object) -> None:
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("reason", "must be a non-empty string", "say why it was wrong")
    check_text(reason, "reason")


def _chain_key(key: object) -> bytes | None:
    if key is None or (isinstance(key, bytes) and key):
        return key
    raise InvalidInput("key", "must be non-empty bytes (read it from a file you keep)")


def _dedup(events: Iterable[Event]) -> list[Event]:
    best: dict[str, Event] = {}
    for event in events:
        kept = best.get(event.event_id)
        if kept is None or event.seq < kept.seq:
            best[event.event_id] = event
    return list(best.values())
