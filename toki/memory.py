"""Memory: the facade over the event log, the replayed state and a storage backend.

The parts live in modules named after them: toki/memory_base.py (state and the commit point),
toki/write.py (the write path through an operator), toki/lifecycle.py (assert, supersede,
revoke, segments, confirm/reject, readjudicate), toki/queries.py (reading),
toki/consumption.py (named reads, impact, revoke_source) and toki/shadow.py (shadow
projections, promote, rollback).
"""

from __future__ import annotations

from collections.abc import Iterable

from toki.isolation import Isolation
from toki.log import Event
from toki.memory_base import POLICY_SUBJECT, UNKNOWN, Clock
from toki.replay import replay
from toki.shadow import ShadowOps
from toki.store.base import open_store
from toki.time import TimeLike, parse_instant

__all__ = ["POLICY_SUBJECT", "UNKNOWN", "Memory"]


class Memory(ShadowOps):
    """A bitemporal fact store. In-memory by default; `Memory.open(url)` for a backend."""

    @classmethod
    def open(
        cls,
        url: str,
        *,
        clock: Clock | None = None,
        isolation: Isolation | None = None,
        repair_projection: bool = False,
    ) -> Memory:
        """Open 'memory://', 'sqlite:///path.db' or 'postgresql://…'. Opening checks the log's
        chain and reconciles the projection; see docs/integrity.md for repair_projection.
        isolation=None: on PostgreSQL each write runs at its operator's declared level (the
        one-writer stores are serial); a level forces that level (see Memory.__init__)."""
        return cls(
            open_store(url),
            clock=clock,
            isolation=isolation,
            repair_projection=repair_projection,
        )

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return self._store.url

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
        memory._chain = None  # a replay at a cutoff is part of a log, not a store's chain
        kept = sorted(
            (e for e in _dedup(events) if e.event_id in snapshot.seen), key=lambda e: e.seq
        )
        memory._store.append(kept, snapshot.summaries(), snapshot.watermark)
        for event in kept:
            memory._fold(event)
        return memory


def _dedup(events: Iterable[Event]) -> list[Event]:
    best: dict[str, Event] = {}
    for event in events:
        kept = best.get(event.event_id)
        if kept is None or event.seq < kept.seq:
            best[event.event_id] = event
    return list(best.values())
