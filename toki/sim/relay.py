"""The outbox relay as a simulated program, so that its failures are scheduled choices.

`toki.relay` moves source writes into a `Memory`. Here the same procedure runs as steps on
the `SimStore`, beside the source writer that fills the outbox (as the seeds' triggers do, in
the business transaction), so the scheduler decides when a delivery fails mid-batch (the
fault "relay-fail"), when either process crashes, and how the relay's reads interleave with
the writer's transactions. `toki.check.relay.relay_verdict` then says whether the event log
the relay built is the one it must build.

Store layout: ("outbox", i) is the i-th committed source write (an `OutboxRow`);
("relay", "position") is the next row to move; ("log", i) is row i as moved into the event
log. Each delivery is one transaction (log row + position), so a crash never moves a row
twice or loses one.

The relay makes `passes` passes (a nightly job). A pass moves rows in order until the outbox
has no row at the position, or a delivery fails; the next pass resumes at the stored position.
The two relay mistakes the seeds (002) describe are options, so that the check can be seen
to catch each: `knowledge="relay"` records the relay's clock instead of the source write time,
and `on_failure="skip"` carries on past a failed row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Final, Literal

from toki.errors import InvalidInput
from toki.isolation import Isolation
from toki.model import FactKey
from toki.relay import OutboxRow
from toki.sim.program import (
    Abort,
    Agent,
    Begin,
    Commit,
    Crash,
    Fault,
    Local,
    Program,
    Read,
    World,
    Write,
)
from toki.sim.store import SimStore
from toki.time import format_instant, parse_instant

__all__ = ["POSITION", "RELAY_FAIL", "SEED_OUTBOX", "log_rows", "outbox_rows", "relay_program"]

POSITION: Final = ("relay", "position")
RELAY_FAIL: Final = "relay-fail"

_CITY = FactKey("crm", "people:ivan", "city")
SEED_OUTBOX: Final = (
    OutboxRow(_CITY, "Berlin", "2026-10-15T00:00:00Z", "2026-11-01T10:00:00Z", "crm-1"),
    OutboxRow(_CITY, "Prague", "2026-11-02T00:00:00Z", "2026-11-02T10:00:00Z", "crm-2"),
    OutboxRow(_CITY, "Oslo", "2026-11-03T00:00:00Z", "2026-11-03T10:00:00Z", "crm-3"),
)
"""The seeds' (002) CRM outbox: one person's city changing three times, written by triggers."""


def outbox_rows(state: Mapping[Any, Any]) -> list[OutboxRow]:
    """The committed outbox of a final state, in position order."""
    return _prefix(state, "outbox")


def log_rows(state: Mapping[Any, Any]) -> dict[int, OutboxRow]:
    """The event log the relay built: position -> row as moved."""
    return {k[1]: v for k, v in state.items() if isinstance(k, tuple) and k[0] == "log"}


def _prefix(state: Mapping[Any, Any], table: str) -> list[OutboxRow]:
    rows: list[OutboxRow] = []
    while (table, len(rows)) in state:
        rows.append(state[(table, len(rows))])
    return rows


def relay_program(
    outbox: Sequence[OutboxRow],
    *,
    level: Isolation = Isolation.READ_COMMITTED,
    writer: bool = True,
    failures: int = 1,
    crash_budget: int = 0,
    passes: int | None = None,
    knowledge: Literal["source", "relay"] = "source",
    on_failure: Literal["stop", "skip"] = "stop",
    name: str | None = None,
) -> Program:
    """A relay (and, with `writer`, the source writer filling the outbox concurrently).

    `failures` is how many times the fault "relay-fail" fires in a run (each makes the next
    delivery fail); `passes` defaults to one more than the failures and crashes it may have to
    recover from. A crashed writer loses the write it was making (the business transaction
    failed, so its outbox row must not exist) and goes on with the next one.
    """
    rows = list(outbox)
    if not rows:
        raise InvalidInput("outbox", "the outbox is empty", "give at least one OutboxRow")
    if not all(isinstance(r, OutboxRow) for r in rows):
        raise InvalidInput("outbox", "every row must be a toki.relay.OutboxRow")
    if knowledge not in ("source", "relay"):
        raise InvalidInput("knowledge", f"unknown {knowledge!r}", "use 'source' or 'relay'")
    if on_failure not in ("stop", "skip"):
        raise InvalidInput("on_failure", f"unknown {on_failure!r}", "use 'stop' or 'skip'")
    if failures < 0 or crash_budget < 0:
        raise InvalidInput("failures", "failures and crash_budget must be >= 0")
    n_passes = passes if passes is not None else 1 + failures + crash_budget
    if n_passes < 1:
        raise InvalidInput("passes", f"{n_passes} passes", "the relay needs at least one pass")
    night = max(parse_instant(r.written_at) for r in rows) + timedelta(hours=12)

    def build() -> World:
        armed = [0]  # failures armed and not yet consumed

        def source_writer() -> Agent:
            position = 0
            for row in rows:
                try:
                    yield Begin()
                    failed = yield Write(("outbox", position), row)
                    if failed is None and (yield Commit()) is None:
                        position += 1
                    else:
                        yield Abort()
                except Crash:
                    continue  # the business write is lost; the next one takes its place
            return position

        def relay() -> Agent:
            moved = [0]
            for _ in range(n_passes):
                try:
                    yield from _one_pass(armed, moved, knowledge, on_failure, night)
                except Crash:
                    continue  # the transaction rolled back; the next pass resumes there
            return moved[0]

        initial: dict[Any, Any] = {POSITION: 0}
        if not writer:
            initial.update({("outbox", i): row for i, row in enumerate(rows)})
        agents = (source_writer(), relay()) if writer else (relay(),)
        who = frozenset({len(agents) - 1})  # the relay is the last agent
        fault = Fault(RELAY_FAIL, lambda: armed.__setitem__(0, armed[0] + 1), failures, who)
        return World(SimStore(level, initial=initial), agents, (fault,) if failures else ())

    label = name or f"relay-{knowledge}-{on_failure}-{level.value}"
    return Program(label, build, crash_budget)


def _one_pass(
    armed: list[int], moved: list[int], knowledge: str, on_failure: str, night: datetime
) -> Agent:
    """Move rows until the outbox has none at the position or a delivery fails."""
    while True:
        yield Begin()
        position = yield Read(POSITION)
        row = yield Read(("outbox", position))
        if row is None or not isinstance(position, int):
            yield Commit()
            return None
        yield Local("deliver", position)
        if armed[0]:
            armed[0] -= 1
            yield Abort()
            if on_failure == "stop":
                return None  # stop at the first failure; the next pass resumes here
            yield Begin()  # the mistake: skip the failed row and carry on
            if (yield Write(POSITION, position + 1)) is None and (yield Commit()) is None:
                continue
            yield Abort()
            continue
        if knowledge == "relay":  # the mistake: the relay's clock as knowledge time
            tick = timedelta(seconds=moved[0])
            row = replace(row, written_at=format_instant(night + tick))
        failed = yield Write(("log", position), row)
        if failed is None:
            failed = yield Write(POSITION, position + 1)
        if failed is None:
            failed = yield Commit()
        if failed is None:
            moved[0] += 1
        else:
            yield Abort()  # refused by the store: retry the row
