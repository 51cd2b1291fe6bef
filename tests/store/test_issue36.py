"""Regression tests of issue #36's eleven findings, one test (or a few) per finding, each
on every backend it concerns. Each docstring names its finding; each failed on the commit
before its fix."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import string
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.conftest import MemoryFactory
from tests.small_history import write_small_history
from toki import Claim, FactKey, Memory
from toki.canonical import digest
from toki.cli import main
from toki.errors import IntegrityError, InvalidInput, StoreError, TokiError
from toki.log import EventKind, _event_id
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


# -- finding 3: chain-strip downgrade --------------------------------------------------------


def _sqlite_raw(path: Path) -> Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]:
    def raw(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            return conn.execute(query, params).fetchall()
        finally:
            conn.close()

    return raw


@pytest.fixture(params=["sqlite", "postgres"])
def durable(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, Callable[..., Any], str]]:
    """(url, raw SQL runner, backend) of a store holding the small history."""
    if request.param == "sqlite":
        path = tmp_path / "s.db"
        url = f"sqlite:///{path}"
        with Memory.open(url) as mem:
            write_small_history(mem)
        yield url, _sqlite_raw(path), "sqlite"
        return
    factory = request.getfixturevalue("pg_store")
    store = factory()
    with Memory(store) as mem:
        write_small_history(mem)

    def raw(query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = psycopg.connect(store.dsn, autocommit=True)
        try:
            conn.execute(f'SET search_path TO "{store.schema}"'.encode())
            cur = conn.execute(query.replace("?", "%s").encode(), params)
            return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    yield store.url, raw, "postgres"


def _unprotect(raw: Callable[..., Any], backend: str) -> None:
    if backend == "sqlite":
        raw("DROP TRIGGER IF EXISTS toki_event_no_update")
    else:
        raw("DROP TRIGGER IF EXISTS toki_event_append_only ON toki_event")


def test_f3_a_stripped_chain_is_refused_by_open_and_verify(
    durable: tuple[str, Callable[..., Any], str],
) -> None:
    """Finding 3: a value edited and every link set to NULL was re-chained on open (the
    forgery served) and `toki verify` said intact. Now both refuse, without a digest."""
    url, raw, backend = durable
    _unprotect(raw, backend)
    row = raw("SELECT seq, payload FROM toki_event WHERE kind = 'ASSERT' ORDER BY seq")[0]
    body = json.loads(row[1])
    body["version"]["value"] = "Porto"
    payload = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    raw(
        "UPDATE toki_event SET payload = ?, payload_hash = ?, event_id = ? WHERE seq = ?",
        (payload, digest(payload, 64), _event_id(EventKind.ASSERT, payload), row[0]),
    )
    raw("UPDATE toki_event SET chain = NULL")
    with pytest.raises(IntegrityError, match="chain-strip downgrade"):
        open_url(url)
    assert main(["verify", url]) == 1
    raw("DELETE FROM toki_meta WHERE name = 'chain_seal'")  # the seal gone too: the payloads
    with pytest.raises(IntegrityError, match="chain-strip downgrade"):  # still pin _key_seq
        open_url(url)
    assert main(["verify", url]) == 1


def open_url(url: str) -> Memory:
    return Memory.open(url)


# -- finding 4 / 6: verify creates nothing; schema names ---------------------------------------


def test_f4_verify_of_a_missing_store_exits_2_and_creates_nothing(
    tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 4: `toki verify` of a store that does not exist said "0 events, chain intact"
    and created the SQLite file or PostgreSQL schema."""
    missing = tmp_path / "nope.db"
    assert main(["verify", f"sqlite:///{missing}"]) == 2
    assert not missing.exists() and not list(tmp_path.iterdir())
    err = capsys.readouterr().err.strip()
    assert "no toki store" in err and len(err.splitlines()) == 1
    schema = f"toki_missing_{uuid.uuid4().hex[:8]}"
    try:
        assert main(["verify", f"{pg_dsn}?schema={schema}"]) == 2
        assert "no toki store" in capsys.readouterr().err
        assert not _schema_exists(pg_dsn, schema)
    finally:  # a regression must not leave its schema in the shared database
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,))
        found = row.fetchone()
    return bool(found and found[0])


def _as_postgres_would_name(schema: str) -> set[str]:
    """The names a schema could have got from PostgreSQL: cut at a NUL, cut to 63 bytes."""
    cut = schema.split("\x00")[0]
    data = cut.encode("utf-8", "surrogatepass")[:63]
    return {cut, data.decode("utf-8", "ignore")} - {""}


@pytest.mark.parametrize(
    "schema",
    ["a%00b", "x" * 64, "é" * 32, "tab\tname", " "],
    ids=["nul", "64", "utf8", "tab", "blank"],
)
def test_f4_f6_bad_schema_names_are_refused_before_any_ddl(pg_dsn: str, schema: str) -> None:
    """Findings 4 and 6: a %00 in a schema name left a truncated schema behind; names over
    63 bytes were silently truncated, so two stores collided. Now InvalidInput (exit 2)
    before anything is created."""
    from urllib.parse import quote, unquote

    name = unquote(schema)
    url = f"{pg_dsn}?schema={quote(name)}"
    try:
        with pytest.raises(InvalidInput, match="schema"):
            Memory.open(url)
        assert main(["verify", url]) == 2
        assert not any(_schema_exists(pg_dsn, n) for n in _as_postgres_would_name(name))
    finally:  # a regression must not leave its schema in the shared database
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for n in _as_postgres_would_name(name):
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(n))
                conn.execute(drop)


def test_f6_the_longest_schema_name_is_kept_whole(pg_store: Callable[..., Any]) -> None:
    """63 bytes is accepted and names its own store (the limit is PostgreSQL's, not less)."""
    name = "t" + uuid.uuid4().hex[:12] + "x" * 50
    with Memory(pg_store(name)) as mem:
        mem.write(Claim(CITY, "Lisbon", source_id="s1"))
        assert mem._store.url.endswith(name)  # type: ignore[attr-defined]
    assert len(name.encode()) == 63


# -- finding 5: toki_version edits -------------------------------------------------------------


def test_f5_an_edit_of_toki_version_is_caught_by_open_and_verify(
    pg_store: Callable[..., Any],
) -> None:
    """Finding 5: edits to PostgreSQL's toki_version (the table docs/postgres.md offers for
    SQL queries) were caught by neither open, verify nor the digest."""
    store = pg_store()
    with Memory(store) as mem:
        write_small_history(mem)
        saved = mem.digest()
    url = store.url
    store.execute("DROP TRIGGER toki_version_append_only ON toki_version")
    store.execute("UPDATE toki_version SET value = '\"Porto\"'::jsonb WHERE subject = 'u1'")
    with pytest.raises(IntegrityError, match="t1:u1:global/\\*:city: differs"):
        Memory.open(url)
    assert main(["verify", url]) == 1
    assert main(["verify", url, "--digest", str(saved)]) == 1
    Memory.open(url, repair_projection=True).close()  # repair rebuilds it from the log
    assert main(["verify", url, "--digest", str(saved)]) == 0
    rows = store.execute("SELECT value FROM toki_version WHERE subject = 'u1'")
    assert "Porto" not in str(rows)


# -- finding 8: Memory.verify(str) -------------------------------------------------------------


def test_f8_verify_takes_the_digest_text(make_memory: MemoryFactory) -> None:
    """Finding 8: `Memory.verify(str(digest))` raised AttributeError."""
    mem = make_memory()
    mem.write(Claim(CITY, "Lisbon", source_id="s1"))
    assert mem.verify(str(mem.digest())).ok
    with pytest.raises(InvalidInput, match="digest"):
        mem.verify("not a digest")
    with pytest.raises(InvalidInput, match="digest"):
        mem.verify(12)  # type: ignore[arg-type]


# -- finding 10: read-only SQLite --------------------------------------------------------------


def test_f10_verify_opens_sqlite_read_only_and_writes_nothing(tmp_path: Path) -> None:
    """Finding 10 (the code path): verify opens the file with mode=ro; the file is byte for
    byte unchanged afterwards (SQLite may leave an empty -wal and its -shm index beside it)."""
    path = tmp_path / "ro.db"
    with Memory.open(f"sqlite:///{path}") as mem:
        write_small_history(mem)
    before = path.read_bytes()
    assert main(["verify", f"sqlite:///{path}"]) == 0
    assert path.read_bytes() == before
    wal = tmp_path / "ro.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    assert {p.name for p in tmp_path.iterdir()} <= {"ro.db", "ro.db-wal", "ro.db-shm"}


def test_f10_a_store_on_read_only_media_opens_and_verifies(tmp_path: Path) -> None:
    """Finding 10: a SQLite store on read-only media could be neither opened nor verified.
    (Needs a read-only mount: root may mount a tmpfs; skipped where it cannot.)"""
    media = tmp_path / "media"
    media.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(media)], capture_output=True
        ).returncode
    ):
        pytest.skip("cannot mount a read-only file system here")
    try:
        url = f"sqlite:///{media / 'ro.db'}"
        with Memory.open(url) as mem:
            write_small_history(mem)
            state = mem.state_hash()
        subprocess.run(["mount", "-o", "remount,ro", str(media)], check=True)
        with Memory.open(url) as mem:
            assert mem.state_hash() == state and mem.verify().ok
            with pytest.raises(StoreError, match=r"readonly|read-only"):
                mem.write(Claim(CITY, "Porto", source_id="s9"))
        assert main(["verify", url]) == 0
    finally:
        subprocess.run(["umount", "-l", str(media)], check=False)


# -- finding 11: a projection-only edit --------------------------------------------------------


def test_f11_verify_catches_a_projection_only_edit(
    durable: tuple[str, Callable[..., Any], str],
) -> None:
    """Finding 11: docs/integrity.md said `toki verify --digest` catches a projection-only
    edit; it did not. verify now reconciles every projection table with the log."""
    url, raw, backend = durable
    with Memory.open(url) if backend == "sqlite" else _pg(url) as mem:
        saved = mem.digest()
    raw("UPDATE toki_current SET value_hash = 'forged'")
    assert main(["verify", url, "--digest", str(saved)]) == 1
    assert main(["verify", url]) == 1


def _pg(url: str) -> Memory:
    from toki.store.postgres import PostgresStore

    return Memory(PostgresStore(url))


# -- findings 7, 8, 9: validation at the API boundary ------------------------------------------


def test_f7_config_names_and_policy_sources_are_validated(make_memory: MemoryFactory) -> None:
    """Finding 7: a lone surrogate in a Config name raised a raw UnicodeEncodeError; an
    integer Policy source was accepted."""
    from toki.algebra import Policy

    with pytest.raises(InvalidInput, match=r"config\.name"):
        Config(name="\ud800")
    for bad in ((3,), ("\ud800",), ("a\x00",)):
        with pytest.raises(InvalidInput, match=r"policy\.sources"):
            Policy("prefer_source", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=r"policy\.sources"):
        Policy("prefer_source", "s1")  # type: ignore[arg-type]


def test_f7_a_long_consumer_name_works_on_every_backend(make_memory: MemoryFactory) -> None:
    """Finding 7: a consumer name over ~2.7 kB worked on memory and SQLite but failed on
    PostgreSQL (a btree row's limit; random text, which PostgreSQL cannot compress under
    it); the index now goes through md5(consumer)."""
    mem = make_memory()
    mem.write(Claim(CITY, "Lisbon", source_id="s1"))
    who = "".join(random.Random(36).choices(string.ascii_letters + string.digits, k=6000))
    assert mem.current(CITY, consumer=who).value == "Lisbon"
    assert len(mem.consumed_by(who)) == 1


def test_f8_integers_beyond_4300_digits_are_toki_errors(make_memory: MemoryFactory) -> None:
    """Finding 8: an int over 4,300 digits in an error message raised ValueError (Python's
    int -> str limit) instead of the toki error being reported."""
    mem = make_memory()
    big = 10**5000
    from toki.algebra import Policy

    calls: list[Callable[[], object]] = [
        lambda: mem.write(Claim(CITY, "x", "s1", weight=big)),
        lambda: mem.confirm(big),  # type: ignore[arg-type]
        lambda: FactKey("t", "s", big),  # type: ignore[arg-type]
        lambda: mem.set_policy("t", "city", big),  # type: ignore[arg-type]
        lambda: mem.current(CITY, consumer=big),  # type: ignore[arg-type]
        lambda: mem.shadow(big),  # type: ignore[arg-type]
        lambda: mem.impact(big),  # type: ignore[arg-type]
        lambda: Policy(big),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(TokiError, match=r"about 5000 digits|must be|expected"):
            call()


def test_f8_the_empty_logs_digest_parses(make_memory: MemoryFactory) -> None:
    mem = make_memory()
    assert str(mem.digest()) == "0:" and mem.verify(str(mem.digest())).ok


def test_f9_shadow_with_a_non_utf8_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Finding 9: `toki shadow` with a non-UTF-8 config file exited 4 instead of 2."""
    path = tmp_path / "s.db"
    with Memory.open(f"sqlite:///{path}") as mem:
        mem.write(Claim(CITY, "Lisbon", source_id="s1"))
    config = tmp_path / "c.toml"
    config.write_bytes(b'operators = { city = "EWM" }\n# \xff\xfe\n')
    assert main(["shadow", f"sqlite:///{path}", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--config" in err and len(err.splitlines()) == 1


# -- consumption records: a chain of their own -------------------------------------------------


def test_a_deleted_consumption_record_is_caught_by_verify(
    durable: tuple[str, Callable[..., Any], str],
) -> None:
    """The issue's last point: a deleted consumption record went unseen by every check. Named
    reads now chain among themselves (their own lock, not the event writer's); verify walks
    that chain to its seal."""
    url, raw, backend = durable
    with Memory.open(url) if backend == "sqlite" else _pg(url) as mem:
        for who in ("a", "b", "c"):
            mem.current(FactKey("t1", "u1", "city"), consumer=who)
        assert mem.verify().ok
    if backend == "sqlite":
        raw("DROP TRIGGER toki_consumption_no_delete")
    else:
        raw("DROP TRIGGER toki_consumption_append_only ON toki_consumption")
    raw("DELETE FROM toki_consumption WHERE consumer = 'b'")  # a middle record
    assert main(["verify", url]) == 1
    raw("DELETE FROM toki_consumption WHERE consumer = 'c'")  # and the last: the seal
    assert main(["verify", url]) == 1


def test_f4_shadow_of_a_missing_store_exits_2_and_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`toki shadow` reads a store, never writes one: a missing store is exit 2, one line."""
    config = tmp_path / "c.toml"
    config.write_text('operators = { city = "EWM" }\n', encoding="utf-8")
    missing = tmp_path / "nope.db"
    assert main(["shadow", f"sqlite:///{missing}", "--config", str(config)]) == 2
    assert not missing.exists()
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_f1_a_pending_duplicate_left_by_an_older_toki_does_not_wedge_the_sequencer(
    pg_store: Callable[..., Any],
) -> None:
    """Finding 1, the recovery: a store an older toki wedged holds a pending row whose id is
    logged already. The sequencer leaves it pending (every reader ignores a duplicate id) and
    sequences everything else; writes to its key go on."""
    from tests.store.legacy import unpinned
    from toki.log import event_from_record, make_event
    from toki.replay import replay

    store = pg_store()
    fresh = make_event(1, 1, EventKind.CHAIN, CITY, AT, (), {"chained": 0})
    payload, payload_hash, event_id = unpinned(fresh.kind.value, fresh.payload)
    record = {"seq": 1, "key_seq": 1, "kind": fresh.kind.value, "payload": payload}
    legacy = event_from_record({**record, "payload_hash": payload_hash, "event_id": event_id})
    store.append([legacy], replay([legacy]).summaries(), 1)
    store.execute(  # the second, identical event an older toki committed but never sequenced
        "INSERT INTO toki_pending SELECT nextval('toki_tick'), 2, kind, tenant, subject, "
        "scope_kind, scope_key, fact_key, recorded_at, version_ids, payload, payload_hash, "
        "event_id FROM toki_event WHERE seq = 1"
    )
    store.execute(
        "INSERT INTO toki_head VALUES ('acme', 'u1', 'global', '*', 'city', 2) "
        "ON CONFLICT (tenant, subject, scope_kind, scope_key, fact_key) DO UPDATE SET pos = 2"
    )
    assert store.sequence() == 0  # nothing it can sequence, and no error
    with Memory(store) as mem:
        mem.write(Claim(CITY, "Lisbon", source_id="s1"))
        assert mem.current(CITY).value == "Lisbon"
        assert [e.key_seq for e in mem.events()] == [1, 3]
        assert mem.verify().ok
    assert store.execute("SELECT count(*) FROM toki_pending") == [(1,)]


def test_verify_reconciles_the_index_tables(
    durable: tuple[str, Callable[..., Any], str],
) -> None:
    """Every table derived from the log is checked by verify: SQLite's toki_key (which key
    an event is filed under), PostgreSQL's toki_head (each key's last per-key seq)."""
    url, raw, backend = durable
    assert main(["verify", url]) == 0
    if backend == "sqlite":
        raw("DROP TRIGGER toki_key_no_update")
        raw("UPDATE toki_key SET fact_key = replace(fact_key, 'u1', 'u9')")
    else:
        raw("UPDATE toki_head SET pos = pos + 5 WHERE subject = 'u1'")
    assert main(["verify", url]) == 1
