"""PostgreSQL: append-only by trigger, tstzrange versions, the EXCLUDE constraint on the
adjudicated projection, reconcile on reopen, staleness, and a writer whose server backend is
terminated mid-write. Every test works in its own schema (fixture `pg_store`, conftest)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from toki import UNKNOWN, Claim, FactKey, Memory
from toki.algebra import LWW
from toki.errors import (
    ConstraintViolation,
    IntegrityError,
    InvalidInterval,
    LifecycleError,
    StoreError,
)
from toki.isolation import Isolation
from toki.log import EventKind
from toki.replay import KeySummary
from toki.store.postgres import SCHEMA_VERSION, PostgresStore, mask_dsn

K = FactKey(tenant="t1", subject="u1", fact_key="city")
StoreFactory = Callable[..., PostgresStore]


def _fill(mem: Memory) -> None:
    a = mem.assert_fact(
        K,
        "Lisbon",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-02-01T00:00:00Z",
        source_id="m1",
    )
    mem.supersede(
        a,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="m2",
    )
    mem.assert_fact(
        K,
        "Rome",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-13T00:00:00Z",
        source_id="m3",
    )
    mem.assert_fact(
        FactKey(tenant="t1", subject="u1", fact_key="lived"),
        "Lisbon",
        valid_from=UNKNOWN,
        valid_to="2025-01-01T00:00:00Z",
        recorded_at="2026-02-01T00:00:00Z",
        source_id="m4",
    )


def _url(dsn: str, schema: str) -> str:
    return f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"


def test_memory_open_by_url_and_reopen_gives_the_same_state(
    pg_store: StoreFactory, pg_dsn: str
) -> None:
    schema = pg_store().schema  # creates (and later drops) the schema
    assert schema is not None
    with Memory.open(_url(pg_dsn, schema)) as mem:
        assert "schema=" + schema in mem.url
        _fill(mem)
        expected = (mem.state_hash(), mem.events(), mem.current(K))
    with Memory.open(_url(pg_dsn, schema)) as again:
        assert again.open_report is not None and again.open_report.ok
        assert (again.state_hash(), again.events(), again.current(K)) == expected
        assert again.reconcile().ok


@pytest.mark.parametrize("table", ["toki_event", "toki_version"])
def test_log_tables_reject_update_delete_and_truncate(pg_store: StoreFactory, table: str) -> None:
    store = pg_store()
    with Memory(store) as mem:
        _fill(mem)
        raw = pg_store(store.schema)
        for stmt in (
            f"UPDATE {table} SET recorded_at = now()",
            f"DELETE FROM {table}",
            f"TRUNCATE {table} CASCADE",
        ):
            verb = stmt.split()[0]
            with pytest.raises(psycopg.errors.RestrictViolation, match=f"append-only: {verb}"):
                raw.execute(stmt)
        assert raw.last_seq() == len(mem.events())


def test_versions_carry_their_valid_interval_as_a_tstzrange(pg_store: StoreFactory) -> None:
    store = pg_store()
    with Memory(store) as mem:
        _fill(mem)
        asserts = [e for e in mem.events() if e.kind is EventKind.ASSERT]
        rows = {
            r[0]: r[1:]
            for r in store.execute(
                "SELECT id, lower(valid_during), upper(valid_during), lower_inc(valid_during),"
                " upper_inc(valid_during), value, recorded_at FROM toki_version"
            )
        }
        assert len(rows) == len(asserts) == 4  # Lisbon, Berlin, Rome, lived
        for e in asserts:
            v = e.version
            assert v is not None
            lo, hi, lo_inc, hi_inc, value, recorded = rows[v.id]
            assert (lo, hi) == (v.valid.start, v.valid.end)
            assert lo_inc == (v.valid.start is not None) and not hi_inc  # '[)'
            assert value == v.value and recorded == v.recorded_at
        # one bound unknown, the other stated: the range is open below
        (unbounded,) = store.execute(
            "SELECT count(*) FROM toki_version WHERE lower_inf(valid_during) "
            "AND NOT upper_inf(valid_during)"
        )
        assert unbounded == (1,)


def test_adjudicated_rows_equal_the_segments_and_the_exclude_constraint_holds(
    pg_store: StoreFactory,
) -> None:
    store = pg_store()
    with Memory(store) as mem:
        _fill(mem)
        _, projection = store.load_projection()
        assert projection == mem._snapshot.summaries()
        (kind,) = store.execute(
            "SELECT contype FROM pg_constraint WHERE conname = 'toki_adjudicated_no_contradiction'"
            " AND connamespace = %s::regnamespace",
            (store.schema,),
        )
        assert kind == ("x",)
        # Berlin and Rome contradict (neither is adjudicated); "lived" stands alone
        assert [r[0] for r in store.execute("SELECT fact_key FROM toki_adjudicated")] == ["lived"]
        # by hand: a second value for "lived" overlapping the adjudicated Lisbon row
        (row,) = store.execute(
            "SELECT tenant, subject, scope_kind, scope_key, fact_key, valid_during "
            "FROM toki_adjudicated"
        )
        with pytest.raises(psycopg.errors.ExclusionViolation):
            store.execute(
                "INSERT INTO toki_adjudicated VALUES (%s,%s,%s,%s,%s,99,'v-x','\"Oslo\"',"
                "'\"Oslo\"',%s,'digest-of-oslo')",
                row,
            )


def test_overlapping_contradictory_segments_are_a_constraint_violation_naming_the_key(
    pg_store: StoreFactory,
) -> None:
    store = pg_store()
    bad = KeySummary(
        "h",
        ("v-a", "v-b"),
        0,
        2,
        (
            ("v-a", '"Lisbon"', "2026-01-01T00:00:00Z", None),
            ("v-b", '"Berlin"', "2026-07-03T00:00:00Z", "2026-09-01T00:00:00Z"),
        ),
    )
    with pytest.raises(ConstraintViolation, match=r"Lisbon.*Berlin") as info:
        store.append([], {K: bad}, 0)
    assert str(K) in str(info.value) and "2026-07-03T00:00:00Z" in str(info.value)
    assert store.load_projection() == (0, {})  # nothing of the write was kept
    # equal values may overlap (two sources said the same thing): no contradiction
    same = KeySummary("h", ("v-a", "v-b"), 0, 2, (bad.segments[0], ("v-b", '"Lisbon"', None, None)))
    store.append([], {K: same}, 0)
    assert store.load_projection() == (0, {K: same})


def test_reopen_refuses_a_corrupted_projection_and_repairs_it_on_request(
    pg_store: StoreFactory,
) -> None:
    store = pg_store()
    with Memory(store) as mem:
        _fill(mem)
        other = FactKey(tenant="t1", subject="u2", fact_key="city")
        mem.assert_fact(other, "Oslo", recorded_at="2026-02-01T00:00:00Z", source_id="m9")
    raw = pg_store(store.schema)
    # one user's preference goes wrong; the total row count stays the same
    raw.execute("UPDATE toki_current SET version_ids = '{}' WHERE subject = 'u2'")
    raw.execute("DELETE FROM toki_adjudicated WHERE fact_key = 'lived'")
    with pytest.raises(IntegrityError, match=r"(?s)projection differs.*repair_projection=True"):
        Memory(pg_store(store.schema))
    with Memory(pg_store(store.schema), repair_projection=True) as mem:
        report = mem.open_report
        assert report is not None and not report.ok
        diffs = {(d.key.subject, d.key.fact_key): d.fields for d in report.differences}
        assert set(diffs) == {("u2", "city"), ("u1", "lived")}
        assert "version_ids" in diffs["u2", "city"] and "segments" in diffs["u1", "lived"]
        assert mem.reconcile().ok  # rebuilt from the log on open


def test_a_second_connection_sees_staleness_until_it_catches_up(pg_store: StoreFactory) -> None:
    schema = pg_store().schema
    reader = Memory(pg_store(schema))
    writer = Memory(pg_store(schema))
    writer.assert_fact(K, "Lisbon", recorded_at="2026-02-01T00:00:00Z", source_id="m1")
    assert reader.current(K, catch_up=False).kind == "stale"  # never a wrong value
    assert reader.current(K).value == "Lisbon"
    v = reader.assert_fact(K, "Lisbon", recorded_at="2026-02-01T00:00:00Z", source_id="m1")
    assert len(reader.events()) == 1  # duplicate recognised across connections
    writer.revoke(v, recorded_at="2026-03-01T00:00:00Z", reason="x")
    assert reader.current(K).kind == "unknown"


def test_reads_inside_the_write_lock_use_its_transaction(pg_store: StoreFactory) -> None:
    """load_state and load_log read in the lock's own transaction, as load_projection and
    version_drift do (they used to open a read-only one inside it, which the server refused)."""
    store = pg_store()
    mem = Memory(store)
    _fill(mem)
    outside = store.load_state(), store.load_log()
    with store.write_lock():
        inside = store.load_state(), store.load_log()
    assert inside == outside
    assert [e.event_id for e in inside[1][0]] == [e.event_id for e in mem.events()]


def test_newer_schema_is_refused(pg_store: StoreFactory) -> None:
    store = pg_store()
    store.execute("UPDATE toki_meta SET value = %s WHERE name = 'schema_version'", (str(99),))
    with pytest.raises(
        StoreError, match=f"schema version 99, newer than this toki \\({SCHEMA_VERSION}"
    ):
        pg_store(store.schema)


def test_migrations_are_idempotent(pg_store: StoreFactory) -> None:
    from toki.store.postgres import MIGRATIONS

    store = pg_store()
    with store._conn.transaction(), store._conn.cursor() as cur:
        for migration in MIGRATIONS:
            migration(cur)  # again, on a migrated schema: no error, nothing duplicated
    assert store.execute("SELECT value FROM toki_meta WHERE name = 'schema_version'") == [
        (str(SCHEMA_VERSION),)
    ]


def test_unreachable_server_is_a_store_error_with_the_password_masked() -> None:
    dsn = "postgresql://alice:s3cret@127.0.0.1:1/nowhere"
    with pytest.raises(StoreError) as info:
        PostgresStore(dsn)
    text = str(info.value)
    assert "s3cret" not in text and "alice:***@127.0.0.1:1/nowhere" in text
    assert "TOKI_PG_DSN" in text
    assert mask_dsn("host=h password=x user=u") == "host=h password=*** user=u"


WRITER = textwrap.dedent(
    """
    import sys
    from toki import Claim, FactKey, Memory
    from toki.algebra import LWW
    from toki.store.postgres import PostgresStore
    store = PostgresStore(sys.argv[1], schema=sys.argv[2])
    mem = Memory(store)
    print(store.backend_pid(), flush=True)
    i = 0
    while True:  # LWW writes: DECISION + SUPERSEDE + ASSERT in one transaction
        key = FactKey(tenant="t", subject=f"u{i % 5}", fact_key="city")
        mem.write(Claim(key, f"city-{i}", f"m{i}", valid_from=f"2026-01-01T00:00:{i % 60:02d}Z",
                        recorded_at=f"2026-02-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z"),
                  LWW)
        i += 1
    """
)


@pytest.mark.slow
def test_terminated_backend_loses_nothing_committed_and_leaves_no_half_decision(
    pg_store: StoreFactory, pg_dsn: str
) -> None:
    schema = pg_store().schema
    assert schema is not None
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, pg_dsn, schema],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.stdout is not None
    pid = int(proc.stdout.readline())
    watcher = pg_store(schema)
    deadline = time.monotonic() + 60  # a hang guard, not an assertion about speed
    while watcher.last_seq() < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    # wait until the writer is inside a write (holds the writer's advisory lock), then kill it
    held: list[Any] = []
    while not held and time.monotonic() < deadline:
        held = watcher.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = %s", (pid,)
        )
    committed_before = watcher.last_seq()
    assert held and committed_before >= 200
    assert watcher.execute("SELECT pg_terminate_backend(%s)", (pid,)) == [(True,)]
    # the writer looks its write up by op id (issue #36): not committed, it reports a
    # StoreError and exits; committed (the kill came after COMMIT), it goes on writing on a
    # new connection, and is stopped here
    try:
        _, err = proc.communicate(timeout=5)
        assert b"not committed" in err, err.decode()[-2000:]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    assert proc.returncode != 0
    with Memory(pg_store(schema)) as mem:
        events = mem.events()
        assert len(events) >= committed_before
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        for e in events:
            e.verify()
        asserted = {e.version_ids[0] for e in events if e.kind is EventKind.ASSERT}
        kinds = {e.kind for e in events}
        assert {EventKind.DECISION, EventKind.SUPERSEDE} <= kinds
        for e in events:
            if e.kind in (EventKind.DECISION, EventKind.SUPERSEDE, EventKind.CONFLICT_OPEN):
                assert set(e.version_ids) <= asserted, e.describe()
        # per write: the DECISION is followed by what it decided, all in one transaction
        assert events[-1].kind is not EventKind.DECISION
        assert mem.reconcile().ok and mem.open_report is not None and mem.open_report.ok
        (n,) = pg_store(schema).execute("SELECT count(*) FROM toki_version")
        assert n == (len(asserted),)


def test_lww_writes_go_through_unchanged(pg_store: StoreFactory) -> None:
    """The operator path (DECISION events) on PostgreSQL, checked against the in-memory store.

    On PostgreSQL each write runs at its operator's declared level (LWW: READ COMMITTED) and
    the provenance records that level; the serial in-memory store is told the same level."""
    claims = [
        Claim(
            K,
            v,
            f"m{i}",
            valid_from=f"2026-{m:02d}-01T00:00:00Z",
            recorded_at=f"2026-{r:02d}-02T00:00:00Z",
        )
        for i, (v, m, r) in enumerate([("Lisbon", 1, 2), ("Berlin", 7, 8), ("Rome", 6, 3)])
    ]
    on_pg, in_mem = Memory(pg_store()), Memory(isolation=Isolation.READ_COMMITTED)
    for c in claims:
        assert on_pg.write(c, LWW) == in_mem.write(c, LWW)
    assert on_pg.state_hash() == in_mem.state_hash()
    on_pg.close()


def test_events_after_a_seq_walk_the_primary_key_before_any_statistics(
    pg_store: Callable[..., Any],
) -> None:
    """A catch-up and a checkpointed open read the events after a seq. On a table just
    loaded, before autovacuum has analyzed it, `seq > %s` alone was planned as a scan of the
    whole table (0.21 s per write at 10^6 events); EVENTS_AFTER's upper bound makes it an
    index walk whatever the statistics say."""
    from toki.store.pg_rows import EVENTS_AFTER

    store = pg_store()
    store.execute("ALTER TABLE toki_event SET (autovacuum_enabled = false)")
    n = 50_000
    store.execute(
        "INSERT INTO toki_event (seq, key_seq, kind, tenant, subject, scope_kind, scope_key, "
        "fact_key, recorded_at, version_ids, payload, payload_hash, event_id) SELECT g, g, "
        "'ASSERT', 't', 's', 'global', '*', 'f', now(), ARRAY['v'], '{}', 'h', 'e-' || g "
        "FROM generate_series(1, %s) g",
        (n,),
    )

    def plan(query: str) -> str:
        return "\n".join(str(r[0]) for r in store.execute("EXPLAIN " + query, (n - 2,)))

    unbounded = EVENTS_AFTER.replace(" AND seq <= (SELECT max(seq) FROM toki_event)", "")
    assert unbounded != EVENTS_AFTER
    assert "Seq Scan on toki_event " in plan(unbounded)  # the premise: no statistics yet
    bounded = plan(EVENTS_AFTER)
    assert "Seq Scan on toki_event " not in bounded and "toki_event_pkey" in bounded, bounded
    assert [r[0] for r in store.execute(EVENTS_AFTER, (n - 2,))] == [n - 1, n]


def test_the_tail_version_check_walks_indexes_before_any_statistics(
    pg_store: Callable[..., Any],
) -> None:
    """A checkpointed open checks the toki_version rows of its tail. Planned on a table just
    loaded, the id half (`id = ANY(...)`) was a scan of the whole table; TAIL_VERSIONS looks
    each id up in the primary key and scans no table; its per-key half can only use the btree
    on key and key_seq (its equalities are in collation "C"), never the gist index the
    planner otherwise guessed."""
    from toki.store.pg_checkpoint import TAIL_VERSIONS

    store = pg_store()
    store.execute("ALTER TABLE toki_version SET (autovacuum_enabled = false)")
    n = 50_000
    store.execute(
        "INSERT INTO toki_version (id, tenant, subject, scope_kind, scope_key, fact_key, "
        "value_json, valid_during, recorded_at, source_id, source_hash, weight, key_seq) "
        "SELECT 'v-' || g, 't', 's' || (g %% 100), 'global', '*', 'f', '\"x\"', "
        "tstzrange(now(), NULL), now(), 'src', 'h', 1.0, g / 100 + 1 "
        "FROM generate_series(1, %s) g",
        (n,),
    )
    ids = [f"v-{i}" for i in range(n - 999, n + 1)]
    keys = [f"s{i}" for i in range(100)]
    params = (ids, ["t"] * 100, keys, ["global"] * 100, ["*"] * 100, ["f"] * 100, [495] * 100)
    plan = "\n".join(str(r[0]) for r in store.execute("EXPLAIN " + TAIL_VERSIONS, params))
    assert "Seq Scan on toki_version" not in plan, plan
    assert "toki_version_pkey" in plan, plan
    assert "toki_version_key_seq_c" in plan and "toki_version_key on" not in plan, plan
    # the per-key half as migration 6 queried it: the planner takes the gist index on key
    # and valid time, which reads every version of a key (0.44 s at 10^6 events)
    old = TAIL_VERSIONS.split(" UNION ")[1].replace(' COLLATE "C"', "")
    premise = "\n".join(str(r[0]) for r in store.execute("EXPLAIN " + old, params[1:]))
    assert "toki_version_key on" in premise, premise
    before = "SELECT id FROM toki_version WHERE id = ANY(%s)"  # the query it replaced
    premise = "\n".join(str(r[0]) for r in store.execute("EXPLAIN " + before, params[:1]))
    assert "Seq Scan on toki_version" in premise, premise
    got = {r[0] for r in store.execute(TAIL_VERSIONS, params)}
    want = set(ids) | {f"v-{g}" for g in range(1, n + 1) if g // 100 + 1 >= 495}
    assert got == want


def test_a_hold_is_found_by_its_token_through_an_index(pg_store: Callable[..., Any]) -> None:
    """confirm and reject find a HOLD's key by its token through toki_event_token (migration
    8), before the table has statistics too; a payload jsonb cannot read is decoded by toki
    (and still found); one that is not JSON (inserted outside toki) neither breaks the index
    nor is taken for a hold: its row is read, and named, by seq."""
    from toki.model import FactKey
    from toki.store.pg_schema import TOKEN_OF

    store = pg_store()
    store.execute("ALTER TABLE toki_event SET (autovacuum_enabled = false)")
    n = 20_000
    store.execute(
        "INSERT INTO toki_event (seq, key_seq, kind, tenant, subject, scope_kind, scope_key, "
        "fact_key, recorded_at, version_ids, payload, payload_hash, event_id) "
        "SELECT g, 1, 'DECISION', 't', 's' || g, 'global', '*', 'f', now(), '{}', "
        "CASE WHEN g = 7 THEN 'not json' WHEN g IN (9, 11) THEN "
        "'{\"action\":\"HOLD\",\"note\":\"a\\u0000\\ud800\",\"token\":\"k' || g || '\"}' "
        "WHEN g %% 2 = 0 THEN "
        "'{\"action\":\"HOLD\",\"token\":\"k' || g || '\"}' "
        "ELSE '{\"action\":\"SUPERSEDE\",\"token\":\"k' || g || '\"}' END, 'h', 'e-' || g "
        "FROM generate_series(1, %s) g",
        (n,),
    )
    query = f"SELECT seq FROM toki_event WHERE kind = 'DECISION' AND {TOKEN_OF} = %s"
    plan = "\n".join(str(r[0]) for r in store.execute("EXPLAIN " + query, ("k42",)))
    assert "toki_event_token" in plan and "Seq Scan" not in plan, plan
    assert store.hold_key("k42", n) == FactKey("t", "s42", "f")
    # a payload jsonb cannot read (\u0000, a lone surrogate), as toki's may hold, still found
    assert store.hold_key("k9", n) == FactKey("t", "s9", "f")
    assert store.hold_key("k42", 41) is None  # after upto
    assert store.hold_key("k43", n) is None  # a DECISION of that token, not a HOLD
    assert store.hold_key("nope", n) is None


def _partition_reads(store: PostgresStore, into: list[tuple[bool, int]]) -> None:
    """Record each partition read of `store`: (after known positions?, events it returned)."""
    read = store._read_partition

    def recorded(cur: Any, keys: Any, after: Any = None) -> Any:
        events = read(cur, keys, after)
        into.append((after is not None, len(events)))
        return events

    store._read_partition = recorded  # type: ignore[method-assign]


def test_a_hot_key_write_rereads_only_what_came_after_what_the_memory_holds(
    pg_store: StoreFactory,
) -> None:
    """A write plans from the key's state this Memory folded, plus what came after it in the
    store (issue #37: a hot key on PostgreSQL re-read and decoded its whole history on every
    write, and then on every write another writer had come between); the decisions are those
    of a fresh read."""
    schema = pg_store().schema
    hot, other = Memory(pg_store(schema)), Memory(pg_store(schema))
    prev = hot.assert_fact(K, "v0", recorded_at="2026-01-01T00:00:00Z", source_id="s")
    for i in range(1, 12):
        prev = hot.supersede(prev, f"v{i}", valid_from=f"2026-01-{i + 1:02d}T00:00:00Z",
                             recorded_at=f"2026-02-01T00:00:{i:02d}Z", source_id="s")
    reads: list[tuple[bool, int]] = []
    assert isinstance(hot._store, PostgresStore)
    _partition_reads(hot._store, reads)
    prev = hot.supersede(prev, "v12", valid_from="2026-01-20T00:00:00Z",
                         recorded_at="2026-02-01T00:01:00Z", source_id="s")
    assert reads == [(True, 0)]  # only the events after the 23 it holds: none
    for n in range(3):  # a rival writes between each of hot's writes
        other.refresh()
        before = len(other.events())
        other.assert_fact(K, f"rival{n}", valid_from=f"2026-01-{25 + n}T00:00:00Z",
                          recorded_at=f"2026-02-01T00:0{2 + n}:00Z", source_id="o")
        rival = len(other.events()) - before
        reads.clear()
        hot.assert_fact(K, f"third{n}", valid_from=f"2026-01-{25 + n}T12:00:00Z",
                        recorded_at=f"2026-02-01T00:0{2 + n}:30Z", source_id="h")
        assert reads == [(True, rival)]  # the rival's events, and not the whole partition
    fresh = Memory(pg_store(schema))
    assert fresh.state_hash() == hot.state_hash() == Memory.replay(fresh.events()).state_hash()
    assert fresh.open_conflicts(K) == hot.open_conflicts(K) != []


def test_a_hold_that_came_after_what_the_memory_holds_makes_the_write_read_it_all(
    pg_store: StoreFactory,
) -> None:
    """A HOLD (AWAIT) is indexed beyond its key's state, so a write whose delta read finds one
    reads the key's whole partition, as a write without a folded state does."""
    from toki.algebra.await_ import AWAIT

    schema = pg_store().schema
    hot, other = Memory(pg_store(schema)), Memory(pg_store(schema))
    hot.assert_fact(K, "Lisbon", valid_from="2026-01-01T00:00:00Z",
                    recorded_at="2026-02-01T00:00:00Z", source_id="s")
    other.refresh()
    held = other.write(Claim(K, "Berlin", "o", valid_from="2026-01-01T00:00:00Z",
                             recorded_at="2026-02-01T00:01:00Z"), AWAIT)
    assert held.action.value == "HOLD"
    reads: list[tuple[bool, int]] = []
    assert isinstance(hot._store, PostgresStore)
    _partition_reads(hot._store, reads)
    hot.assert_fact(K, "Rome", valid_from="2026-01-01T00:00:00Z",
                    recorded_at="2026-02-01T00:02:00Z", source_id="h")
    assert reads[0][0] and reads[0][1] > 0
    assert reads[1][0] is False  # then the whole partition
    fresh = Memory(pg_store(schema))
    assert fresh.state_hash() == hot.state_hash() == Memory.replay(fresh.events()).state_hash()


def test_a_duplicate_an_older_toki_left_pending_makes_the_write_read_it_all(
    pg_store: StoreFactory,
) -> None:
    """A pending row whose id is logged already (two identical events, which only a toki
    before issue #36 could write) is ignored by every reader; a write whose delta read finds
    one reads the whole partition, whose fold drops it, rather than fold it onto the state it
    holds a second time."""
    from tests.store.legacy import unpinned
    from toki.log import event_from_record, make_event
    from toki.plan import interval, new_version
    from toki.replay import replay
    from toki.time import parse_instant

    at = parse_instant("2026-02-01T00:00:00Z")
    store = pg_store()
    version = new_version(K, "Lisbon", interval("2026-01-01T00:00:00Z", None, at), at, "s", None)
    fresh = make_event(1, 1, EventKind.ASSERT, K, at, (version.id,),
                       {"version": version.payload(), "proposed": False}, version)
    payload, payload_hash, event_id = unpinned(fresh.kind.value, fresh.payload)
    legacy = event_from_record({"seq": 1, "key_seq": 1, "kind": fresh.kind.value,
                                "payload": payload, "payload_hash": payload_hash,
                                "event_id": event_id})
    store.append([legacy], replay([legacy]).summaries(), 1)
    store.execute(  # the second, identical event an older toki committed but never sequenced
        "INSERT INTO toki_pending SELECT nextval('toki_tick'), 2, kind, tenant, subject, "
        "scope_kind, scope_key, fact_key, recorded_at, version_ids, payload, payload_hash, "
        "event_id FROM toki_event WHERE seq = 1"
    )
    store.execute("UPDATE toki_head SET pos = 2")
    mem = Memory(pg_store(store.schema))
    reads: list[tuple[bool, int]] = []
    assert isinstance(mem._store, PostgresStore)
    _partition_reads(mem._store, reads)
    mem.assert_fact(K, "Berlin", valid_from="2026-01-01T00:00:00Z",
                    recorded_at="2026-02-02T00:00:00Z", source_id="t")
    assert reads == [(True, 1), (False, 2)]
    assert [e.key_seq for e in mem.events()] == [1, 3, 4]  # the ASSERT and its CONFLICT_OPEN
    fresh_mem = Memory(pg_store(store.schema))
    assert fresh_mem.state_hash() == mem.state_hash()
    assert len(mem.open_conflicts(K)) == 1


_SEED = 3737
print(f"test_postgres: hypothesis seed {_SEED}")


@seed(_SEED)
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(
    st.tuples(st.integers(0, 1), st.integers(0, 1), st.sampled_from(["assert", "supersede",
                                                                      "lww", "await"]),
              st.integers(0, 40)),
    min_size=1, max_size=14))
def test_two_writers_on_shared_keys_end_in_the_state_of_a_fresh_replay(
    pg_store: StoreFactory, steps: list[tuple[int, int, str, int]]
) -> None:
    """Two Memories write, interleaved, on two shared keys (asserts, supersedes of the last
    version they see, LWW and AWAIT writes), each planning from its folded state plus what
    the other wrote after it: each one's state is a fresh open's and a replay's of the log."""
    from toki.algebra.await_ import AWAIT

    schema = pg_store().schema
    mems = [Memory(pg_store(schema)), Memory(pg_store(schema))]
    keys = [K, FactKey(tenant="t1", subject="u2", fact_key="city")]
    last: dict[tuple[int, int], Any] = {}
    for i, (who, k, how, day) in enumerate(steps):
        mem, key = mems[who], keys[k]
        at, valid = f"2026-03-01T00:00:{i:02d}Z", "2026-01-01T00:00:00Z"
        value = f"{how}{i}"
        if how == "supersede" and (who, k) in last:
            # refused when closed or revoked meanwhile: no write
            with suppress(LifecycleError, InvalidInterval):
                last[who, k] = mem.supersede(last[who, k], value, recorded_at=at,
                                             valid_from=f"2026-02-{1 + day % 28:02d}T00:00:00Z",
                                             source_id="s")
        elif how in ("lww", "await"):
            mem.write(Claim(key, value, f"s{who}", valid_from=valid, recorded_at=at),
                      LWW if how == "lww" else AWAIT)
        else:
            last[who, k] = mem.assert_fact(key, value, valid_from=valid, recorded_at=at,
                                           source_id=f"s{who}")
    fresh = Memory(pg_store(schema))
    want = fresh.state_hash()
    assert want == Memory.replay(fresh.events()).state_hash()
    for mem in mems:
        mem.refresh()
        assert mem.state_hash() == want


@pytest.mark.parametrize("every", [8, 10**9])
def test_the_pending_queue_is_vacuumed_as_the_store_sequences(
    pg_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, every: int
) -> None:
    """toki_pending is a queue (each write inserts its events, the sequencer deletes them);
    its dead rows are what the sequencer and each partition read scan until a VACUUM, and
    autovacuum wakes once a minute. The store VACUUMs it every VACUUM_PENDING_EVERY events it
    sequenced, so the table stays a few pages however many writes went through; with no
    VACUUM (every = 10**9) it grows with the writes (a hot key's, one page per ten
    events on PostgreSQL 15)."""
    import toki.store.postgres as pg

    monkeypatch.setattr(pg, "VACUUM_PENDING_EVERY", every)
    store = pg_store()
    mem = Memory(store)
    prev = mem.assert_fact(K, "v0", valid_from="2026-01-01T00:00:00Z",
                           recorded_at="2026-02-01T00:00:00Z", source_id="s")
    for i in range(1, 200):
        prev = mem.supersede(prev, f"v{i}", valid_from=f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z",
                             recorded_at=f"2026-02-01T01:{i // 60:02d}:{i % 60:02d}Z",
                             source_id="s")
    assert store.execute("SELECT count(*) FROM toki_pending") == [(0,)]
    ((pages,),) = store.execute("SELECT pg_relation_size('toki_pending') / 8192")
    if every == 8:
        assert pages <= 4
    else:
        assert pages >= 20  # the dead rows of 399 events, never reclaimed
    assert Memory(pg_store(store.schema)).state_hash() == mem.state_hash()
