"""What a `toki show` page holds, independent of the file it came from.

Every kind of file toki writes (model, relay and real witnesses, toki histories, Elle/Jepsen
histories) is read into one `Page`: rows in schedule order, each on one lane (an agent, a
task or thread of an agent, a process), the transactions open on each lane, the steps that
make the anomaly (`Row.mark` says why), any Adya cycles, and the explanation text the
matching command (`toki replay`, `toki real replay`, `toki check`) prints. `toki.show.html`
draws a page; nothing here knows about HTML.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Cycle", "CycleEdge", "Page", "Row", "Span"]


@dataclass(frozen=True, slots=True)
class Row:
    """One scheduled step (a gate point, a scheduler choice, a transaction of a history).

    `kind` is a word the page styles by (read, write, commit, abort, crash, fault, llm, txn,
    step); `record` is everything known about the step, shown in full on click; `mark` is
    empty, or why the step is part of the anomaly."""

    index: int
    lane: str
    text: str
    kind: str = "step"
    txn: str = ""
    record: Mapping[str, Any] = field(default_factory=dict)
    mark: str = ""


@dataclass(frozen=True, slots=True)
class Span:
    """A transaction on one lane, from its first row to its last (indices into the rows)."""

    txn: str
    lane: str
    first: int
    last: int
    level: str = ""
    outcome: str = "open"  # committed, aborted, open (unknown)


@dataclass(frozen=True, slots=True)
class CycleEdge:
    src: str
    dst: str
    kind: str  # ww, wr, rw, process, realtime
    label: str  # the edge's short label: its kind and key
    explanation: str


@dataclass(frozen=True, slots=True)
class Cycle:
    """One Adya anomaly's dependency cycle, each edge explained as Elle does."""

    name: str
    edges: tuple[CycleEdge, ...]
    text: str


@dataclass(frozen=True, slots=True)
class Page:
    title: str
    source: str  # the file shown, as given
    kind: str  # "model witness", "real witness", "relay witness", "toki history", "Elle history"
    verdict: str  # one line: what the check says now
    facts: tuple[tuple[str, str], ...]
    explanation: tuple[str, ...]  # the text `toki replay` / `toki check` prints
    rows: tuple[Row, ...]
    lanes: tuple[str, ...]
    spans: tuple[Span, ...] = ()
    cycles: tuple[Cycle, ...] = ()
    notes: tuple[str, ...] = ()
