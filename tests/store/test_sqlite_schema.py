"""SQLite schema 4 (issue #21, goal 3): fact keys by integer id, the event-id uniqueness check
through an integer prefix index, and the migration of files written in schemas 1-3."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

import toki.store.sqlite as sqlite_store
from tests.small_history import OTHER, K, write_small_history
from tests.store.legacy import unpinned
from toki import FactKey, Memory
from toki.errors import ConstraintViolation, IntegrityError, StoreError
from toki.isolation import Isolation
from toki.log import Event, EventKind
from toki.store.base import EVENT_COLUMNS
from toki.store.sqlite import CACHE_KIB, CHECKPOINT_PAGES, SCHEMA_VERSION, SQLiteStore, id_prefix

NEW = FactKey("t1", "u3", "city")

# The DDL of schema 3 as toki wrote it before schema 4 (toki/store/sqlite.py at version 3),
# kept here verbatim so that the migration is tested against the real old layout.
V3_EVENT = """
CREATE TABLE toki_event (
    seq          INTEGER PRIMARY KEY,
    key_seq      INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    fact_key     TEXT NOT NULL,
    recorded_at  TEXT NOT NULL,
    payload      TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    event_id     TEXT NOT NULL UNIQUE,
    chain        TEXT,
    UNIQUE (fact_key, key_seq)
);
CREATE INDEX toki_event_recorded ON toki_event (recorded_at);
CREATE TRIGGER toki_event_no_update BEFORE UPDATE ON toki_event
BEGIN SELECT RAISE(ABORT, 'toki_event is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER toki_event_no_delete BEFORE DELETE ON toki_event
BEGIN SELECT RAISE(ABORT, 'toki_event is append-only: DELETE is not allowed'); END;
"""
V3_REST = """
CREATE TABLE toki_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE toki_current (
    fact_key       TEXT PRIMARY KEY,
    value_hash     TEXT NOT NULL,
    version_ids    TEXT NOT NULL,
    open_conflicts INTEGER NOT NULL,
    open_intervals INTEGER NOT NULL,
    segments       TEXT NOT NULL DEFAULT '[]'
);
"""
V3_CONSUMPTION = """
CREATE TABLE toki_consumption (
    n         INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL UNIQUE,
    consumer  TEXT NOT NULL,
    read_at   TEXT NOT NULL,
    payload   TEXT NOT NULL
);
CREATE INDEX toki_consumption_consumer ON toki_consumption (consumer);
CREATE TRIGGER toki_consumption_no_update BEFORE UPDATE ON toki_consumption
BEGIN SELECT RAISE(ABORT, 'toki_consumption is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER toki_consumption_no_delete BEFORE DELETE ON toki_consumption
BEGIN SELECT RAISE(ABORT, 'toki_consumption is append-only: DELETE is not allowed'); END;
"""


def _raw(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _old_file(tmp_path: Path, version: int) -> tuple[Path, Memory]:
    """A file in the layout of schema `version` (1-3) holding what today's toki wrote (rows
    copied column by column, the fact key as its text); returns it and an in-memory twin."""
    new = tmp_path / "new.db"
    with Memory.open(f"sqlite:///{new}") as mem:
        write_small_history(mem)
    events = _raw(new, "SELECT e.seq, e.key_seq, e.kind, k.fact_key, e.recorded_at, e.payload, "
                  "e.payload_hash, e.event_id, e.chain FROM toki_event e "
                  "JOIN toki_key k ON k.id = e.key_id ORDER BY e.seq")
    current = _raw(new, "SELECT * FROM toki_current")
    meta = _raw(new, "SELECT name, value FROM toki_meta WHERE name = 'watermark'")
    old = tmp_path / f"v{version}.db"
    conn = sqlite3.connect(old, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    event_ddl = V3_EVENT if version >= 2 else V3_EVENT.replace("    chain        TEXT,\n", "")
    conn.executescript(V3_REST + event_ddl + (V3_CONSUMPTION if version >= 3 else ""))
    columns = "seq, key_seq, kind, fact_key, recorded_at, payload, payload_hash, event_id"
    if version >= 2:
        conn.executemany(f"INSERT INTO toki_event ({columns}, chain) VALUES (?,?,?,?,?,?,?,?,?)",
                         events)
    else:
        conn.executemany(f"INSERT INTO toki_event ({columns}) VALUES (?,?,?,?,?,?,?,?)",
                         [(*row[:5], *unpinned(str(row[2]), str(row[5]))) for row in events])
    conn.executemany("INSERT INTO toki_current VALUES (?,?,?,?,?,?)", current)
    conn.executemany("INSERT INTO toki_meta VALUES (?,?)", meta)
    conn.execute("INSERT INTO toki_meta VALUES ('schema_version', ?)", (str(version),))
    conn.close()
    twin = Memory()
    write_small_history(twin)
    return old, twin


def _shape(e: Event) -> tuple[object, ...]:
    """An event without its id and payload (which a toki before #36 wrote without `_key_seq`)."""
    return e.seq, e.key_seq, e.kind, e.key, e.recorded_at, e.version_ids


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_file_of_an_older_schema_is_migrated_and_keeps_working(
    tmp_path: Path, version: int
) -> None:
    path, twin = _old_file(tmp_path, version)
    url = f"sqlite:///{path}"
    with Memory.open(url) as mem:
        events = mem.events()
        if version == 1:  # unchained: opening chains it, and says so with a CHAIN event
            assert events[-1].kind is EventKind.CHAIN  # payloads as logged before #36:
            assert [_shape(e) for e in events[:-1]] == [_shape(e) for e in twin.events()]
        else:
            assert events == twin.events()
            assert mem.digest() == twin.digest() and mem.state_hash() == twin.state_hash()
        assert mem.verify().ok
        assert mem.current(K).value == "Berlin" and mem.current(OTHER).value == "Oslo"
        mem.assert_fact(NEW, "Bergen", valid_from="2026-04-01T00:00:00Z",
                        recorded_at="2026-04-02T00:00:00Z", source_id="msg-4")
        saved = mem.digest()
        keys = len({e.key for e in mem.events()})
    assert _raw(path, "SELECT value FROM toki_meta WHERE name = 'schema_version'") == [
        (str(SCHEMA_VERSION),)]
    columns = {r[1] for r in _raw(path, "PRAGMA table_info(toki_event)")}
    assert "key_id" in columns and "id_prefix" in columns and "fact_key" not in columns
    names = {r[0] for r in _raw(path, "SELECT name FROM sqlite_master")}
    assert "toki_event_old" not in names and "toki_event_recorded" not in names
    assert {"toki_event_no_update", "toki_event_no_delete", "toki_event_unique_id",
            "toki_key_no_update", "toki_key_no_delete", "toki_consumption"} <= names
    assert _raw(path, "SELECT count(*) FROM toki_key") == [(keys,)]
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        _raw(path, "UPDATE toki_event SET payload = '{}' WHERE seq = 1")
    with Memory.open(url) as again:  # once: a second open changes nothing
        assert again.open_report is not None and again.open_report.ok
        assert again.verify(saved).ok and again.current(NEW).value == "Bergen"
        assert again.current(K, consumer="q").value == "Berlin"
        assert len(again.consumed_by("q")) == 1


def test_a_newer_schema_is_refused_and_the_file_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with Memory.open(f"sqlite:///{path}") as mem:
        write_small_history(mem)
    _raw(path, "UPDATE toki_meta SET value = ? WHERE name = 'schema_version'",
         (str(SCHEMA_VERSION + 1),))
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than "
                       rf"this toki \({SCHEMA_VERSION}\)"):
        Memory.open(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_the_store_runs_at_full_sync_with_its_cache(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    try:
        assert store.execute("PRAGMA synchronous") == [(2,)]  # FULL
        assert store.execute("PRAGMA journal_mode") == [("wal",)]
        assert store.execute("PRAGMA foreign_keys") == [(1,)]
        assert store.execute("PRAGMA cache_size") == [(-CACHE_KIB,)]
        assert store.execute("PRAGMA wal_autocheckpoint") == [(CHECKPOINT_PAGES,)]
    finally:
        store.close()


# -- the integrity guarantees under the new indexes ------------------------------------------


def _stored(tmp_path: Path) -> tuple[SQLiteStore, list[Event]]:
    path = tmp_path / "a.db"
    with Memory.open(f"sqlite:///{path}") as mem:
        write_small_history(mem)
        events = mem.events()
    return SQLiteStore(path), events


def _next(store: SQLiteStore, e: Event, **change: object) -> Event:
    """`e` again, as the next event of the log (same kind and payload: the same event id)."""
    key_seq = max((x.key_seq for x in store.load() if x.key == e.key), default=0) + 1
    return dataclasses.replace(e, seq=store.last_seq() + 1, key_seq=key_seq, **change)


def test_the_same_event_again_is_refused_and_nothing_of_the_write_is_kept(
    tmp_path: Path,
) -> None:
    store, events = _stored(tmp_path)
    try:
        before = list(store.load())
        fresh = Memory()  # an event on a key the file does not know yet
        fresh.assert_fact(FactKey("t1", "u9", "city"), "Rome", recorded_at="2026-05-01T00:00:00Z",
                          source_id="m9")
        (new,) = fresh.events()
        new = dataclasses.replace(new, seq=store.last_seq() + 1)
        again = dataclasses.replace(_next(store, events[0]), seq=new.seq + 1)
        assert again.event_id == events[0].event_id
        with pytest.raises(ConstraintViolation, match=r"UNIQUE constraint failed: "
                           r"toki_event\.event_id.*nothing of it was kept"):
            store.append([new, again], {}, again.seq)
        assert list(store.load()) == before
        assert store.execute("SELECT count(*) FROM toki_key") == [(2,)]
    finally:
        store.close()


def test_distinct_events_whose_id_prefixes_collide_are_all_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every event gets the same prefix: the index finds them all, the check compares the
    whole id, so no distinct event is refused and a true duplicate still is."""
    monkeypatch.setattr(sqlite_store, "id_prefix", lambda event_id: 7)
    store, events = _stored(tmp_path)
    try:
        assert len(events) >= 5 and len({e.event_id for e in events}) == len(events)
        assert store.execute("SELECT DISTINCT id_prefix FROM toki_event") == [(7,)]
        assert list(store.load()) == list(events)
        with pytest.raises(ConstraintViolation, match=r"toki_event\.event_id"):
            store.append([_next(store, events[2])], {}, store.last_seq() + 1)
        assert list(store.load()) == list(events)
    finally:
        store.close()


def test_the_id_prefix_is_the_first_eight_bytes_of_the_id() -> None:
    assert id_prefix("e-" + "00" * 7 + "01" + "ab" * 8) == 1
    assert id_prefix("e-" + "7f" + "ff" * 7 + "00" * 8) == 2**63 - 1
    assert id_prefix("e-" + "ff" * 8 + "00" * 8) == -1
    assert id_prefix("e-" + "80" + "00" * 7) == -(2**63)
    for odd in ("", "e-", "not an id", "e-zzzzzzzzzzzzzzzzzz"):  # any text: a stable value
        assert id_prefix(odd) == id_prefix(odd) and -(2**63) <= id_prefix(odd) < 2**63


def test_two_events_at_one_key_seq_are_refused(tmp_path: Path) -> None:
    """Per-key order: UNIQUE (key_id, key_seq) refuses a second event at a key's position."""
    store, events = _stored(tmp_path)
    try:
        other = Memory()
        other.assert_fact(K, "Porto", recorded_at="2026-06-01T00:00:00Z", source_id="m7")
        (rival,) = other.events()  # K's key_seq 1, which the file already holds
        rival = dataclasses.replace(rival, seq=store.last_seq() + 1)
        with pytest.raises(ConstraintViolation, match=r"toki_event\.key_id, toki_event\.key_seq"):
            store.append([rival], {}, rival.seq)
        assert list(store.load()) == list(events)
    finally:
        store.close()


def test_the_key_table_is_append_only(tmp_path: Path) -> None:
    store, _ = _stored(tmp_path)
    try:
        for sql in ("UPDATE toki_key SET fact_key = 'x'", "DELETE FROM toki_key"):
            with pytest.raises(sqlite3.IntegrityError, match="toki_key is append-only"):
                store.execute(sql)
    finally:
        store.close()


def test_a_rolled_back_write_forgets_the_key_ids_it_made(tmp_path: Path) -> None:
    """The new key's toki_key row goes with the rollback; so must the id the store learnt
    for it, or the key's next events would be filed under an id another key then gets."""
    store, events = _stored(tmp_path)
    try:
        writer = Memory()
        first, second = FactKey("t1", "u7", "city"), FactKey("t1", "u8", "city")
        writer.assert_fact(first, "Rome", recorded_at="2026-05-01T00:00:00Z", source_id="a")
        writer.assert_fact(second, "Bonn", recorded_at="2026-05-02T00:00:00Z", source_id="b")
        on_first, on_second = writer.events()
        base = store.last_seq()
        on_first = dataclasses.replace(on_first, seq=base + 1)
        dup = dataclasses.replace(_next(store, events[0]), seq=base + 2)
        with pytest.raises(ConstraintViolation):
            store.append([on_first, dup], {}, dup.seq)
        store.append([dataclasses.replace(on_second, seq=base + 1)], {}, base + 1)
        store.append([dataclasses.replace(on_first, seq=base + 2)], {}, base + 2)
        ids = dict(store.execute("SELECT fact_key, id FROM toki_key"))
        assert len(set(ids.values())) == 4
    finally:
        store.close()
    with Memory.open(f"sqlite:///{tmp_path / 'a.db'}", repair_projection=True) as mem:
        mem.assert_fact(first, "Rome", recorded_at="2026-05-01T00:00:00Z", source_id="a")
        mem.assert_fact(second, "Bonn", recorded_at="2026-05-02T00:00:00Z", source_id="b")
        assert len(mem.events()) == len(events) + 2  # both known: duplicates, nothing added
        assert mem.current(first).value == "Rome" and mem.current(second).value == "Bonn"


def test_an_event_filed_under_another_key_id_is_an_integrity_error(tmp_path: Path) -> None:
    store, events = _stored(tmp_path)
    store.close()
    path = tmp_path / "a.db"
    _raw(path, "DROP TRIGGER toki_event_no_update")
    (other_id,) = _raw(path, "SELECT id FROM toki_key WHERE fact_key LIKE '%u2%'")[0]
    seq = max(e.seq for e in events if e.key == K)  # a key_seq OTHER does not have
    _raw(path, "UPDATE toki_event SET key_id = ? WHERE seq = ?", (other_id, seq))
    store = SQLiteStore(path)
    try:  # the partition read of a transaction (store.transact) checks each row's key
        with pytest.raises(IntegrityError, match=f"event seq {seq} is stored under another "
                           "fact key"):
            store.transact(frozenset({OTHER}), Isolation.SERIALIZABLE, lambda part, base: ([], {}))
        assert store.transact(frozenset({NEW}), Isolation.SERIALIZABLE,
                              lambda part, base: ([], {})) == 0
    finally:
        store.close()


def test_the_partition_read_uses_the_key_index(tmp_path: Path) -> None:
    store, _ = _stored(tmp_path)
    try:
        plan = store.execute(
            f"EXPLAIN QUERY PLAN SELECT {EVENT_COLUMNS} FROM toki_event WHERE key_id IN (SELECT id FROM "
            "toki_key WHERE fact_key IN (?)) ORDER BY key_seq", ("x",))
        text = " ".join(str(r[-1]) for r in plan)
        assert "USING INDEX sqlite_autoindex_toki_event_1 (key_id=?)" in text, text
    finally:
        store.close()


# -- a batch of benchmark size -----------------------------------------------------------------


def _many(n: int) -> list[Event]:
    from toki.log import EventLog
    from toki.model import FactVersion
    from toki.time import BoundSource, Interval, parse_instant

    log = EventLog()
    for i in range(n):
        key = FactKey("t1", f"s{i % 37}", "city")
        at = parse_instant("2026-01-01T00:00:00Z", "at")
        version = FactVersion(key, f"v{i}", Interval(at, None, BoundSource.EVIDENCE,
                                                     BoundSource.UNKNOWN), at, f"src-{i}", "h")
        log.add(log.new(EventKind.ASSERT, key, at, (version.id,),
                        {"version": version.payload(), "proposed": False}, version))
    return list(log)


def test_a_large_batch_is_stored_in_order_with_the_links_of_a_sequential_chain(
    tmp_path: Path,
) -> None:
    from toki.chain import GENESIS, link

    events = _many(6017)
    store = SQLiteStore(tmp_path / "a.db")
    try:
        store.append(events[:5], {}, 5)  # the large batch continues a stored chain
        store.append(events[5:], {}, len(events))
        stored = list(store.load())
        assert stored == events
        prev, links = GENESIS, []
        for e in events:
            prev = link(prev, e)
            links.append(prev)
        assert [e.chain for e in stored] == links
    finally:
        store.close()


def test_a_large_batch_that_fails_keeps_nothing(tmp_path: Path) -> None:
    events = _many(4500)
    store = SQLiteStore(tmp_path / "a.db")
    try:
        store.append(events[:10], {}, 10)
        late = dataclasses.replace(events[3], seq=events[-1].seq + 1, key_seq=10**6)
        with pytest.raises(ConstraintViolation, match=r"toki_event\.event_id"):
            store.append([*events[10:], late], {}, late.seq)  # refused at its last row
        broken = dataclasses.replace(events[4000], body={})  # its row cannot be built
        with pytest.raises(KeyError, match="_recorded_at"):
            store.append([*events[10:4000], broken, *events[4001:]], {}, events[-1].seq)
        assert list(store.load()) == events[:10]
        store.append(events[10:], {}, events[-1].seq)  # the store is usable after both
        assert list(store.load()) == events
    finally:
        store.close()
