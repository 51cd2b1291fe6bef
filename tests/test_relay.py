"""The relay keeps the source's write time, stops at the first failure and resumes there."""

from __future__ import annotations

from toki import FactKey, Memory
from toki.errors import StoreError
from toki.relay import OutboxRow, Relay

K = FactKey("crm", "people:ivan", "city")
ROWS = [
    OutboxRow(K, "Berlin", "2026-10-15T00:00:00Z", "2026-11-01T10:00:00Z", "crm-1"),
    OutboxRow(K, "Berlin", "2026-10-15T00:00:00Z", "2026-11-01T11:00:00Z", "crm-1b"),
    OutboxRow(K, "Prague", "2026-11-02T00:00:00Z", "2026-11-02T10:00:00Z", "crm-2"),
    OutboxRow(K, "Oslo", "2026-11-03T00:00:00Z", "2026-11-03T10:00:00Z", "crm-3"),
]


def test_stops_at_first_failure_and_resumes_there() -> None:
    mem = Memory()
    relay = Relay(mem, ROWS)
    failures = {2}

    def flaky(row: OutboxRow) -> None:
        if relay.position in failures:
            failures.clear()
            raise StoreError("worker lost its connection")
        relay._apply(row)

    relay._deliver = flaky
    first = relay.run()
    assert (first.moved, first.position) == (2, 2) and first.failed is not None
    assert mem.current(K).value == "Berlin"  # nothing after the failed row was applied
    second = relay.run()
    assert second.failed is None and second.position == len(ROWS)
    assert mem.current(K).value == "Oslo"
    assert [h.version.value for h in mem.history(K)] == ["Berlin", "Prague", "Oslo"]


def test_knowledge_time_is_the_source_write_time() -> None:
    mem = Memory()
    Relay(mem, ROWS).run()  # relayed long after the writes
    # at 10:30 on 1 Nov the CRM had written Berlin: the memory knew it then
    assert mem.resolve_at(K, "2026-10-20T00:00:00Z", "2026-11-01T10:30:00Z").value == "Berlin"
    assert mem.resolve_at(K, "2026-11-02T12:00:00Z", "2026-11-02T09:00:00Z").value == "Berlin"
    assert mem.resolve_at(K, "2026-11-02T12:00:00Z", "2026-11-02T10:00:00Z").value == "Prague"


def test_repeated_value_is_no_change_and_history_keeps_each_value() -> None:
    mem = Memory()
    Relay(mem, ROWS).run()
    assert len([h for h in mem.history(K) if h.version.value == "Berlin"]) == 1
    assert mem.resolve_at(K, "2026-10-20T00:00:00Z").value == "Berlin"  # closed, still there
