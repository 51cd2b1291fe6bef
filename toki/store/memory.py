"""The default backend: events and projection in process memory (fastest; not durable).

One writer at a time: `transact` holds a lock that really excludes other threads, so the
read-decide-append of a write is atomic with respect to every other write on this store.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager

from toki.chain import GENESIS, Digest, consumption_link
from toki.isolation import Isolation
from toki.log import Event
from toki.model import FactKey
from toki.replay import KeySummary
from toki.store.base import Operation, Plan

__all__ = ["InMemoryStore"]


class InMemoryStore:
    url = "memory://"

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._by_key: dict[FactKey, list[Event]] = {}
        self._projection: dict[FactKey, KeySummary] = {}
        self._watermark = 0
        self._consumption: dict[str, tuple[str, str]] = {}  # record id -> (consumer, payload)
        self._consumption_links: dict[str, str] = {}  # record id -> its chain link
        self._consumption_head = GENESIS
        self._ops: dict[str, str] = {}  # operation id -> recorded outcome
        self._lock = threading.RLock()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def write_lock(self) -> AbstractContextManager[None]:
        return self._locked()

    def transact(self, keys: frozenset[FactKey], level: Isolation, plan: Plan) -> int:
        """Serial: under the lock, read the partition, plan, append (nothing on failure)."""
        with self._lock:
            partition = [e for k in keys for e in self._by_key.get(k, ())]
            events, rows = plan(partition, self.last_seq())
            if events:
                self.append(events, rows, events[-1].seq)
        return 0

    def sequence(self) -> int:
        return 0

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
        op: Operation | None = None,
    ) -> None:
        with self._lock:
            if op is not None:
                self._ops.setdefault(op.op_id, op.result)
            self._events.extend(events)
            for event in events:
                self._by_key.setdefault(event.key, []).append(event)
            if replace:
                self._projection.clear()
            self._projection.update(summaries)
            self._watermark = max(self._watermark, watermark)

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        with self._lock:
            start = bisect_right(self._events, after_seq, key=_seq)  # seqs ascend
            return iter(self._events[start:])

    def last_seq(self) -> int:
        return self._events[-1].seq if self._events else 0

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        with self._lock:
            return self._watermark, dict(self._projection)

    def load_state(self) -> tuple[list[Event], list[Event], int, dict[FactKey, KeySummary]]:
        with self._lock:
            return list(self._events), [], self._watermark, dict(self._projection)

    def op_result(self, op_id: str) -> str | None:
        """The recorded outcome of a committed operation id, None if it never committed."""
        with self._lock:
            return self._ops.get(op_id)

    def load_log(self) -> tuple[list[Event], Digest | None]:
        """Every event and the chain seal (none: this store keeps no links to strip)."""
        with self._lock:
            return list(self._events), None

    def append_consumption(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Append (record id, consumer, read_at, payload) rows; a known id is a no-op."""
        with self._lock:
            for record_id, consumer, _, payload in rows:
                if record_id not in self._consumption:
                    self._consumption_head = consumption_link(
                        self._consumption_head, record_id, payload
                    )
                    self._consumption[record_id] = (consumer, payload)
                    self._consumption_links[record_id] = self._consumption_head

    def load_consumption(self, consumer: str | None = None) -> list[tuple[str, str]]:
        """(record id, payload) rows in append order, of one consumer or all."""
        with self._lock:
            return [
                (rid, payload)
                for rid, (who, payload) in self._consumption.items()
                if consumer is None or who == consumer
            ]

    def load_consumption_log(self) -> tuple[list[tuple[str, str, str | None]], Digest | None]:
        """Every consumption record (id, payload, link) in append order, and the seal."""
        with self._lock:
            links = self._consumption_links
            records = [(rid, p, links.get(rid)) for rid, (_, p) in self._consumption.items()]
            return records, Digest(len(records), self._consumption_head)

    def close(self) -> None:
        pass


def _seq(event: Event) -> int:
    return event.seq
