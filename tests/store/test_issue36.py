"""Regression tests of issue #36's eleven findings, one test (or a few) per finding, each
on every backend it concerns. Each docstring names its finding; each failed on the commit
before its fix."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.conftest import MemoryFactory
from toki import Claim, FactKey
from toki.shadow import Config

AT = datetime(2026, 3, 1, tzinfo=UTC)
CITY = FactKey("acme", "u1", "city")


def test_f1_promote_rollback_promote_at_one_instant(make_memory: MemoryFactory) -> None:
    """Finding 1: promote(C), rollback(), promote(C) at one recorded_at made one event id
    twice: PostgreSQL's sequencer wedged, the in-memory log dropped the promote and refused
    every later write. Now three events, C in force, and later writes go through."""
    mem = make_memory()
    config = Config(operators=(("city", "EWM"),))
    mem.promote(config, recorded_at=AT)
    mem.rollback(recorded_at=AT)
    mem.promote(config, recorded_at=AT)
    ids = [e.event_id for e in mem.events()]
    assert len(ids) == len(set(ids)) == 3
    assert mem.operator_for(CITY).name == "EWM"
    mem.write(Claim(CITY, "Lisbon", source_id="s1"))
    assert mem.current(CITY).value == "Lisbon"
    assert mem.verify().ok
