"""The default backend: events and projection in process memory (fastest; not durable)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext

from toki.log import Event
from toki.model import FactKey
from toki.replay import KeySummary

__all__ = ["InMemoryStore"]


class InMemoryStore:
    url = "memory://"

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._projection: dict[FactKey, KeySummary] = {}
        self._watermark = 0

    def write_lock(self) -> AbstractContextManager[None]:
        return nullcontext()

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
    ) -> None:
        self._events.extend(events)
        if replace:
            self._projection.clear()
        self._projection.update(summaries)
        self._watermark = max(self._watermark, watermark)

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        return (e for e in self._events if e.seq > after_seq)

    def last_seq(self) -> int:
        return self._events[-1].seq if self._events else 0

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        return self._watermark, dict(self._projection)

    def close(self) -> None:
        pass
