"""The outbox relay: moves source writes into the memory's event log, in order.

The seeds (002) describe three relay mistakes; this relay avoids each by construction:
- knowledge time is the source's write time, never the relay's clock (otherwise the span
  between the write and the relay looks "not yet known");
- at the first failure it stops, and the next pass resumes from that row (carrying on would
  build later changes of the same field on a missing one);
- a value change closes the previous value's interval (a supersession), so history keeps
  both; a row repeating the current value changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from toki.errors import TokiError
from toki.memory import Memory
from toki.model import FactKey, Lifecycle
from toki.time import TimeLike

__all__ = ["OutboxRow", "Relay", "RelayResult"]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One source write: which fact changed to what, from when, written when and where."""

    key: FactKey
    value: Any
    valid_from: TimeLike | None
    written_at: TimeLike
    source_id: str


@dataclass(frozen=True, slots=True)
class RelayResult:
    moved: int
    position: int  # the next row to move (== len(outbox) when done)
    failed: str | None  # why it stopped early, if it did


class Relay:
    """Moves rows of an outbox into a Memory; `run()` may be called again to resume."""

    def __init__(
        self,
        memory: Memory,
        outbox: Sequence[OutboxRow],
        deliver: Callable[[OutboxRow], None] | None = None,
    ) -> None:
        self.memory = memory
        self.outbox = outbox
        self.position = 0
        self._deliver = deliver or self._apply

    def run(self) -> RelayResult:
        moved = 0
        while self.position < len(self.outbox):
            row = self.outbox[self.position]
            try:
                self._deliver(row)
            except (TokiError, OSError) as exc:
                return RelayResult(moved, self.position, f"row {self.position}: {exc}")
            self.position += 1
            moved += 1
        return RelayResult(moved, self.position, None)

    def _apply(self, row: OutboxRow) -> None:
        standing = [
            h.version for h in self.memory.history(row.key) if h.lifecycle is Lifecycle.ACTIVE
        ]
        if standing and all(v.value == row.value for v in standing):
            return  # the same value written again: no change
        if len(standing) == 1:
            self.memory.supersede(
                standing[0],
                row.value,
                valid_from=row.valid_from,
                recorded_at=row.written_at,
                source_id=row.source_id,
            )
        else:
            self.memory.assert_fact(
                row.key,
                row.value,
                valid_from=row.valid_from,
                recorded_at=row.written_at,
                source_id=row.source_id,
            )
