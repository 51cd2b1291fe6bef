"""Consumption provenance (named reads), impact of a source, revoke_source (issue 20)."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import NOW, fixed_clock
from toki import Claim, FactKey, Memory
from toki.errors import IntegrityError, InvalidInput, InvalidTime, LifecycleError
from toki.store.sqlite import SCHEMA_VERSION

CITY = FactKey("acme", "ana", "city")
T0 = "2026-01-01T00:00:00Z"


def _story(mem: Memory) -> tuple[str, str]:
    """Lisbon from msg-1; a wrong source says Paris later; returns the two version ids."""
    lisbon = mem.assert_fact(
        CITY, "Lisbon", valid_from="2025-01-01T00:00:00Z", recorded_at=T0, source_id="msg-1"
    )
    paris = mem.supersede(
        lisbon,
        "Paris",
        valid_from="2025-06-01T00:00:00Z",
        recorded_at="2026-01-02T00:00:00Z",
        source_id="spam",
    )
    return lisbon.id, paris.id


def test_a_named_read_is_reproduced_after_a_correction(mem: Memory) -> None:
    _, paris = _story(mem)
    events = len(mem.events())
    before = mem.state_hash()
    answer = mem.current(CITY, consumer="answer-17")
    assert answer.value == "Paris" and answer.version_ids == (paris,)
    # a named read writes nothing into the fact log and changes no belief
    assert len(mem.events()) == events and mem.state_hash() == before
    mem.revoke(paris, reason="spam", recorded_at="2026-02-01T00:00:00Z")
    assert mem.current(CITY).value == "Lisbon"
    (read,) = mem.consumed_by("answer-17")  # verify=True re-derives it from the log prefix
    assert read.answer == answer and read.consumer == "answer-17"
    assert read.log_seq == events and read.key == CITY and read.valid_at == NOW
    assert read.scope_chain == ("global/*",) and read.config_id is None
    assert mem.consumed_by("nobody") == []


def test_reads_without_a_consumer_record_nothing(mem: Memory) -> None:
    _story(mem)
    mem.current(CITY)
    mem.resolve_at(CITY, "2025-03-01T00:00:00Z")
    assert mem._store.load_consumption() == []  # type: ignore[attr-defined]
    mem.resolve_at(CITY, "2025-03-01T00:00:00Z", consumer="a")
    mem.resolve_at(CITY, "2025-03-01T00:00:00Z", consumer="a")  # the same read again: one record
    mem.resolve_at(CITY, "2025-07-01T00:00:00Z", T0, consumer="a")
    reads = mem.consumed_by("a")
    assert [r.answer.value for r in reads] == ["Lisbon", "Lisbon"]
    assert reads[1].system_as_of == datetime(2026, 1, 1, tzinfo=UTC)


def test_a_late_arrival_recorded_before_the_read_does_not_change_what_it_saw(
    mem: Memory,
) -> None:
    """A relay may append, after the read, an event recorded before it: the record pins the
    log by seq, not by system time, so it is still reproduced exactly."""
    _story(mem)
    seen = mem.resolve_at(CITY, "2025-08-01T00:00:00Z", consumer="q")
    mem.assert_fact(
        CITY,
        "Rome",
        valid_from="2025-07-01T00:00:00Z",
        recorded_at="2026-01-03T00:00:00Z",
        source_id="late",
    )
    assert mem.resolve_at(CITY, "2025-08-01T00:00:00Z", NOW).kind == "conflict"
    (read,) = mem.consumed_by("q")
    assert read.answer == seen and seen.value == "Paris"


def test_a_bad_consumer_is_refused_before_anything_is_read(mem: Memory) -> None:
    _story(mem)
    for bad in ("", "  ", 17, "a\x00b"):
        with pytest.raises(InvalidInput, match="consumer"):
            mem.current(CITY, consumer=bad)  # type: ignore[arg-type]
    assert mem._store.load_consumption() == []  # type: ignore[attr-defined]


def test_a_changed_record_is_detected() -> None:
    mem = Memory(clock=fixed_clock)
    _story(mem)
    mem.current(CITY, consumer="q")
    rows = mem._store._consumption  # type: ignore[attr-defined]
    (rid,) = rows
    rows[rid] = ("q", rows[rid][1].replace("Paris", "Porto"))
    with pytest.raises(IntegrityError, match="does not match its payload"):
        mem.consumed_by("q")


def test_a_record_that_no_longer_follows_from_its_log_is_detected() -> None:
    mem = Memory(clock=fixed_clock)
    _story(mem)
    mem.current(CITY, consumer="q")
    other = Memory(clock=fixed_clock)  # same record, a different log
    other.assert_fact(CITY, "Oslo", recorded_at=T0, source_id="x")
    other.assert_fact(CITY, "Oslo", recorded_at="2026-01-02T00:00:00Z", source_id="y")
    other._store._consumption = dict(mem._store._consumption)  # type: ignore[attr-defined]
    with pytest.raises(IntegrityError, match="chain head differs"):
        other.consumed_by("q")
    assert other.consumed_by("q", verify=False)[0].answer.value == "Paris"


def test_the_consumption_log_survives_reopening_and_is_append_only(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Memory.open(url, clock=fixed_clock) as mem:
        _story(mem)
        mem.current(CITY, consumer="q")
    with Memory.open(url, clock=fixed_clock) as mem:
        assert [r.answer.value for r in mem.consumed_by("q")] == ["Paris"]
        for sql in ("UPDATE toki_consumption SET consumer = 'x'", "DELETE FROM toki_consumption"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                mem._store.execute(sql)  # type: ignore[attr-defined]


def test_a_version_2_sqlite_store_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with Memory.open(f"sqlite:///{path}", clock=fixed_clock) as mem:
        _story(mem)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE toki_consumption")
    conn.execute("UPDATE toki_meta SET value='2' WHERE name='schema_version'")
    conn.commit()
    conn.close()
    with Memory.open(f"sqlite:///{path}", clock=fixed_clock) as mem:
        assert mem.current(CITY, consumer="q").value == "Paris"
        assert len(mem.consumed_by("q")) == 1
        version = mem._store.execute("SELECT value FROM toki_meta WHERE name='schema_version'")  # type: ignore[attr-defined]
        assert version == [(str(SCHEMA_VERSION),)] and SCHEMA_VERSION == 4


def test_a_postgres_schema_at_version_3_is_migrated(pg_store: Any) -> None:
    from toki.store.postgres import SCHEMA_VERSION as PG_VERSION
    from toki.store.postgres import PostgresStore

    store: PostgresStore = pg_store()
    mem = Memory(store, clock=fixed_clock)
    _story(mem)
    store.execute("DROP TABLE toki_consumption")
    store.execute("UPDATE toki_meta SET value = '3' WHERE name = 'schema_version'")
    again = Memory(pg_store(store.schema), clock=fixed_clock)
    assert again.current(CITY, consumer="q").value == "Paris"
    assert [r.answer.value for r in again.consumed_by("q")] == ["Paris"]
    assert PG_VERSION >= 4  # 5: toki_op (issue #36)


# -- impact and revoke_source -----------------------------------------------------------


def test_impact_and_revoke_source(mem: Memory) -> None:
    lisbon, paris = _story(mem)
    job = FactKey("acme", "ana", "job")
    mem.assert_fact(job, "pilot", recorded_at=T0, source_id="spam")
    mem.assert_fact(job, "chef", recorded_at=T0, source_id="hr")
    unrelated = FactKey("acme", "bo", "city")
    mem.assert_fact(unrelated, "Oslo", recorded_at=T0, source_id="msg-2")
    mem.current(CITY, consumer="answer-17")
    mem.current(job, consumer="answer-18")
    mem.current(unrelated, consumer="answer-19")
    impact = mem.impact("spam")
    assert impact.keys == (job, CITY) or impact.keys == (CITY, job)
    assert len(impact.versions) == 2 and paris in impact.versions and impact.revoked == ()
    assert impact.dependents == (lisbon,)  # Paris superseded it: it re-opens when Paris goes
    assert sorted(c.consumer for c in impact.consumers) == ["answer-17", "answer-18"]
    assert {c.status for c in impact.consumers} == {"unchanged"}

    writes = mem.write_stats.writes
    report = mem.revoke_source("spam", reason="a spam bot", recorded_at="2026-02-01T00:00:00Z")
    assert mem.write_stats.writes == writes + 1  # one atomic write
    revokes = [e for e in mem.events() if e.kind.value == "REVOKE"]
    assert len(revokes) == 2 and {e.body["source"] for e in revokes} == {"spam"}
    by = {c.consumer: c for c in report.consumers}
    assert by["answer-17"].then.value == "Paris" and by["answer-17"].now.value == "Lisbon"
    assert by["answer-18"].then.kind == "conflict" and by["answer-18"].now.value == "chef"
    assert {c.status for c in report.consumers} == {"stale"} and len(report.stale) == 2
    assert mem.consumed_by("answer-17")[0].answer.value == "Paris"  # what it saw, still
    assert mem.impact("spam").revoked == report.versions


def test_revoke_source_refuses_what_it_cannot_do(mem: Memory) -> None:
    _story(mem)
    with pytest.raises(LifecycleError, match="no version came from"):
        mem.revoke_source("nobody", reason="x")
    with pytest.raises(InvalidTime, match="precedes"):
        mem.revoke_source("spam", reason="x", recorded_at="2025-01-01T00:00:00Z")
    with pytest.raises(InvalidInput, match="reason"):
        mem.revoke_source("spam", reason=" ")
    assert not any(e.kind.value == "REVOKE" for e in mem.events())  # nothing was written
    mem.revoke_source("spam", reason="x", recorded_at="2026-02-01T00:00:00Z")
    with pytest.raises(LifecycleError, match="already revoked"):
        mem.revoke_source("spam", reason="x", recorded_at="2026-02-01T00:00:00Z")


# -- property: revoke_source then replay == revoking each version by hand ------------------

SOURCES = ["s0", "s1", "s2"]
VALUES = ["a", "b", "c"]
KEYS = [FactKey("t", "u", "k0"), FactKey("t", "u", "k1"), FactKey("t", "v", "k0")]
BASE = datetime(2026, 1, 1, tzinfo=UTC)

op = st.tuples(
    st.sampled_from(["assert", "write", "supersede", "segment", "revoke"]),
    st.integers(0, len(KEYS) - 1),
    st.sampled_from(VALUES),
    st.sampled_from(SOURCES),
    st.integers(0, 20),
    st.integers(1, 10),
)


def _run(ops: list[tuple[str, int, str, str, int, int]]) -> Memory:
    """Apply random operations (those the state refuses are skipped, deterministically)."""
    from toki.errors import TokiError

    mem = Memory(clock=fixed_clock)
    for i, (kind, k, value, source, start, length) in enumerate(ops):
        key = KEYS[k]
        recorded = BASE + timedelta(hours=i)
        valid = BASE - timedelta(days=40) + timedelta(days=start)
        try:
            if kind == "assert":
                mem.assert_fact(
                    key, value, valid_from=valid, recorded_at=recorded, source_id=source
                )
            elif kind == "write":
                mem.write(Claim(key, value, source, valid, None, recorded))
            elif kind == "segment":
                mem.insert_segment(
                    key,
                    value,
                    valid_from=valid,
                    valid_to=valid + timedelta(days=length),
                    recorded_at=recorded,
                    source_id=source,
                )
            else:
                standing = [h for h in mem.history(key) if h.lifecycle.value == "ACTIVE"]
                if not standing:
                    continue
                target = standing[(start + length) % len(standing)].version
                if kind == "revoke":
                    mem.revoke(target, reason="r", recorded_at=recorded)
                else:
                    mem.supersede(
                        target,
                        value,
                        valid_from=max(valid, target.valid.start or valid),
                        recorded_at=recorded,
                        source_id=source,
                    )
        except TokiError:
            continue
    return mem


@settings(max_examples=60)
@given(st.lists(op, min_size=1, max_size=14), st.sampled_from(SOURCES))
def test_revoke_source_equals_revoking_each_version_by_hand(
    ops: list[tuple[str, int, str, str, int, int]], source: str
) -> None:
    by_source = _run(ops)
    by_hand = Memory.replay(by_source.events(), clock=fixed_clock)
    at = BASE + timedelta(days=30)
    impact = by_source.impact(source)
    if len(impact.revoked) == len(impact.versions):
        with pytest.raises(LifecycleError):
            by_source.revoke_source(source, reason="wrong", recorded_at=at)
        return
    by_source.revoke_source(source, reason="wrong", recorded_at=at)
    for vid in impact.versions:
        if by_hand.lifecycle(vid).value != "REVOKED":
            by_hand.revoke(vid, reason="wrong", recorded_at=at)
    assert by_source.state_hash() == by_hand.state_hash()
    for key in KEYS:
        assert [h.render() for h in by_source.history(key)] == [
            h.render() for h in by_hand.history(key)
        ]
    replayed = Memory.replay(by_source.events())
    assert replayed.state_hash() == by_source.state_hash()
    assert all(by_source.lifecycle(v).value == "REVOKED" for v in impact.versions)


def test_a_read_verifies_whatever_order_its_version_ids_were_listed_in() -> None:
    """Versions that start together were listed in another order by earlier releases (by id
    on the current path); the answer is the same set of versions, so the read still verifies,
    while a different set does not."""
    from dataclasses import replace

    from toki.consumption import same_read
    from toki.model import Resolution

    a = Resolution("conflict", None, ("v-b", "v-a"), (("v-a", "v-b"),))
    assert same_read(a, replace(a, version_ids=("v-a", "v-b")))
    assert not same_read(a, replace(a, version_ids=("v-a", "v-c")))
    assert not same_read(a, replace(a, kind="value"))
