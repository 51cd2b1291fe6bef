"""A small history shared by the integrity and SQLite schema tests: two LWW writes on one key
(so the log holds a DECISION) and an assertion on a second key."""

from __future__ import annotations

from toki import Claim, FactKey, Memory
from toki.algebra import LWW

K = FactKey("t1", "u1", "city")
OTHER = FactKey("t1", "u2", "city")


def write_small_history(mem: Memory) -> None:
    mem.write(Claim(K, "Lisbon", "msg-1", "2026-01-01T00:00:00Z",
                    recorded_at="2026-02-01T00:00:00Z"), LWW)
    mem.write(Claim(K, "Berlin", "msg-2", "2026-01-01T00:00:00Z",
                    recorded_at="2026-03-01T00:00:00Z"), LWW)
    mem.assert_fact(OTHER, "Oslo", valid_from="2026-01-01T00:00:00Z",
                    recorded_at="2026-03-02T00:00:00Z", source_id="msg-3")
