"""The part of the store one write reads: its keys' events, as read inside its transaction.

A write decides from its partition alone, so the same decision code runs on every backend:
the backend's transaction shell reads the partition, the write builds its events from it, and
the shell appends them with the projection rows `fold` returns. The Memory's cached state
stands in for the read only where the store vouches that it is the partition: a one-writer
store under its lock, or PostgreSQL together with what its transaction read after the
per-key positions the Memory folded (`of_snapshot`, then `extend`); a cache behind a
concurrent writer is never planned from alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from toki.checkpoint import LazyMap
from toki.errors import InvalidInput, UnknownVersion
from toki.log import Event, EventKind, make_event
from toki.model import FactKey, FactVersion
from toki.projection import rows_for
from toki.replay import KeyState, KeySummary, Snapshot, indexed_beyond_key

__all__ = ["SMALL_KEY", "Partition", "extends"]

SMALL_KEY = 256
"""A key with at most this many events is copied for a write rather than forked: the copy
costs O(SMALL_KEY) once, folding into it and summarising it cost less than through a fork's
overlays (a write on a key of 500 events still costs less copied), and once the write
commits the copy becomes the key's live state, so nothing is folded twice. A key with more
events (a hot key) is forked: O(1), and its writes stay O(log n) in its versions."""


class Partition:
    """The events of `keys` folded into a scratch snapshot, and the numbering of new events.

    base_seq: the global seq new events continue from (single-writer backends); a backend
    whose sequencer assigns the global seq after commit passes 0 and ignores it.
    """

    __slots__ = ("_forked", "_key_seq", "base_seq", "keys", "snapshot")

    def __init__(self, keys: Iterable[FactKey], events: Iterable[Event], base_seq: int) -> None:
        self.keys = frozenset(keys)
        self.base_seq = base_seq
        self.snapshot = Snapshot()
        self._key_seq: dict[FactKey, int] = {}
        self._forked: set[FactKey] = set()  # states that read through to a live one
        self.extend(events)

    @classmethod
    def of_snapshot(cls, keys: Iterable[FactKey], live: Snapshot, base_seq: int) -> Partition:
        """The partition of a single-writer store, taken from the caught-up live snapshot
        under the writer lock, so that folding the write's events for the projection rows
        leaves the live state untouched: a copy of each small key's state, a fork of each
        hot key's (no replay, no copy: a fork reads through to the live state, which nothing
        changes until this write is over); see SMALL_KEY."""
        part = cls(keys, (), base_seq)
        snap = part.snapshot
        snap.judge_log = live.judge_log  # read-only here: new verdicts go to ctx.new_calls
        for key in part.keys:
            state = live.keys.get(key)
            if state is None:
                continue
            state._ensure_built()  # the live state keeps its query structures from here on
            if state.last_key_seq <= SMALL_KEY:
                snap.keys[key] = state.clone()
            else:
                snap.keys[key] = state.fork()
                part._forked.add(key)
            part._key_seq[key] = state.last_key_seq
        keys = part.keys  # the keys' holds when asked: listing every hold of a store opened
        # from a checkpoint reads the whole log's DECISION events (0.33 s at 10^6 events)
        snap.holds = LazyMap(lambda: {t: k for t, k in live.holds.items() if k in keys})
        snap.watermark = live.watermark
        return part

    def extend(self, events: Iterable[Event]) -> None:
        """Fold events into the partition in per-key order (a duplicate id once) and number
        new events after them: the events read (`__init__`), or what came after the live
        states it was taken from (`of_snapshot`; only events `extends` accepts, which its own
        copies or forks of those states take alone)."""
        for event in sorted(events, key=lambda e: e.key_seq):
            self.snapshot.apply(event)
            if event.key_seq > self._key_seq.get(event.key, 0):
                self._key_seq[event.key] = event.key_seq

    def state(self, key: FactKey) -> KeyState | None:
        if key not in self.keys:  # a write may only decide from what its transaction read
            raise InvalidInput("key", f"{key} is not in this write's partition")
        return self.snapshot.state(key)

    def version(self, vid: str) -> FactVersion | None:
        """A version of one of the partition's keys (a write touches few keys: asking each
        is cheaper than indexing every version of a hot key per write)."""
        for state in self.snapshot.keys.values():
            version = state.versions.get(vid)
            if version is not None:
                return version
        return None

    def resolve(self, ref: FactVersion | str, field: str = "version") -> FactVersion:
        vid = ref.id if isinstance(ref, FactVersion) else ref
        version = self.version(vid)
        if version is None:
            raise UnknownVersion(vid, field)
        return version

    def positions(self) -> dict[FactKey, int]:
        """The per-key position (last key_seq) of every key read: the head rows' values."""
        return {k: self._key_seq.get(k, 0) for k in self.keys}

    def new(
        self,
        kind: EventKind,
        key: FactKey,
        recorded_at: datetime,
        version_ids: tuple[str, ...],
        body: Mapping[str, Any],
        version: FactVersion | None = None,
        *,
        pending: Sequence[Event] | None = None,
    ) -> Event:
        """The next event on `key` (numbers continue after `pending`), not yet appended."""
        if key not in self.keys:
            raise InvalidInput("key", f"{key} is not in this write's partition")
        seq = self.base_seq + 1 + (len(pending) if pending else 0)
        key_seq = self._key_seq.get(key, 0) + 1
        if pending:
            key_seq += sum(1 for e in pending if e.key == key)
        return make_event(seq, key_seq, kind, key, recorded_at, version_ids, body, version)

    def own_states(self, keys: Iterable[FactKey]) -> dict[FactKey, KeyState]:
        """The states of `keys` this partition holds as its own (copied or new, not forks):
        once the write that folded into them commits, each is its key's new live state."""
        states = self.snapshot.keys
        return {k: states[k] for k in keys if k in states and k not in self._forked}

    def fold(self, events: Sequence[Event]) -> dict[FactKey, KeySummary]:
        """Apply the write's events to the scratch snapshot; the projection rows they change."""
        keys = self.snapshot.keys
        for event in events:  # per key only: the snapshot's shared indexes stay untouched
            state = keys.get(event.key)
            if state is None:
                state = keys[event.key] = KeyState(event.key)
            state.apply(event)
        return rows_for(self.snapshot, {e.key for e in events})


def extends(known: Mapping[FactKey, int], events: Iterable[Event]) -> bool:
    """Whether `events` are what came after states folded up to the per-key positions
    `known`, and can be folded into those states alone (`Partition.extend`): each is after its
    key's position, and none is indexed beyond its key (a HOLD, a judge verdict). A store
    that reads only what came after (`reads_after_known`) hands such events to the plan
    instead of the keys' whole partition; anything else needs the whole partition."""
    return all(
        e.key_seq > known.get(e.key, 0) and not indexed_beyond_key(e) for e in events
    )
