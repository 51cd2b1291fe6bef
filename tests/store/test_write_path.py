"""One write path: failure atomicity on every backend, and concurrent writers on PostgreSQL.

A write that fails at any statement (partition read, event append, projection rows, head
update, commit) leaves the Memory exactly as before and the store usable; concurrent writers
at their operators' levels never surface a raw driver error and lose no committed claim.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from toki import Claim, FactKey, Memory
from toki.algebra.await_ import AWAIT
from toki.algebra.ewm import EWM
from toki.algebra.lww import LWW
from toki.algebra.rule import RULE, Policy
from toki.errors import IsolationViolation, StoreError, TokiError
from toki.isolation import Isolation
from toki.log import EventKind
from toki.replay import replay
from toki.store.memory import InMemoryStore
from toki.store.postgres import PostgresStore
from toki.store.sqlite import SQLiteStore

StoreFactory = Callable[..., PostgresStore]
K = FactKey("t", "alice", "city")


def _claim(i: int, value: str = "", key: FactKey = K, **kw: Any) -> Claim:
    return Claim(
        key,
        value or f"city-{i}",
        f"m{i}",
        valid_from=f"2026-01-{1 + i % 28:02d}T00:00:00Z",
        recorded_at=f"2026-02-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z",
        **kw,
    )


def _seen(mem: Memory) -> tuple[str, tuple[str, ...], str]:
    return mem.state_hash(), tuple(e.event_id for e in mem.events()), repr(mem.current(K))


class Boom(Exception):
    """The injected failure."""


# -- SQLite: a failure at each statement of the write ---------------------------------------


class _FailingConn:
    """Delegates to a sqlite3 connection; raises Boom on the first statement starting `at`."""

    def __init__(self, conn: sqlite3.Connection, at: str) -> None:
        self._conn, self._at, self.fired = conn, at, False

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def _check(self, statement: str) -> None:
        if not self.fired and statement.lstrip().upper().startswith(self._at):
            self.fired = True
            raise Boom(statement)

    def execute(self, statement: str, *args: Any) -> Any:
        self._check(statement)
        return self._conn.execute(statement, *args)

    def executemany(self, statement: str, *args: Any) -> Any:
        self._check(statement)
        return self._conn.executemany(statement, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


SQLITE_POINTS = [
    "SELECT SEQ, CHAIN FROM TOKI_EVENT",  # the log's head (catch-up and chain link), once
    "INSERT INTO TOKI_EVENT",  # the event append
    "INSERT OR REPLACE INTO TOKI_CURRENT",  # the projection rows
    "INSERT OR REPLACE INTO TOKI_META",  # the chain seal and the watermark
    "COMMIT",  # the commit itself
]


@pytest.mark.parametrize("point", SQLITE_POINTS)
def test_sqlite_failure_at_each_statement_leaves_memory_and_store_as_before(
    tmp_path: Path, point: str
) -> None:
    path = tmp_path / "s.db"
    mem = Memory.open(f"sqlite:///{path}")
    mem.write(_claim(1, "Lisbon"), LWW)
    before = _seen(mem)
    store = mem._store
    assert isinstance(store, SQLiteStore)
    real = store._conn
    failing = _FailingConn(real, point)
    store._conn = failing  # type: ignore[assignment]
    with pytest.raises((Boom, TokiError)):
        mem.write(_claim(2, "Berlin"), LWW)
    assert failing.fired
    store._conn = real
    assert _seen(mem) == before
    assert not real.in_transaction  # no half-open transaction
    mem.write(_claim(3, "Rome"), LWW)  # the next write succeeds
    assert mem.current(K).value == "Rome"
    mem.close()
    again = Memory.open(f"sqlite:///{path}")
    assert again.state_hash() == replay(again.events()).state_hash()
    assert [e.event_id for e in again.events()] == [e.event_id for e in mem.events()]
    assert again.open_report is not None and again.open_report.ok
    again.close()


def test_memory_store_failure_leaves_memory_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    mem = Memory()
    mem.write(_claim(1, "Lisbon"), LWW)
    before = _seen(mem)

    def boom(*a: Any, **k: Any) -> None:
        raise Boom("append")

    monkeypatch.setattr(InMemoryStore, "append", boom)
    with pytest.raises(Boom):
        mem.write(_claim(2, "Berlin"), LWW)
    assert _seen(mem) == before
    monkeypatch.undo()
    mem.write(_claim(3, "Rome"), LWW)
    assert mem.current(K).value == "Rome"


def test_in_memory_writers_in_threads_are_serialised() -> None:
    """The in-memory store's lock really excludes threads: every write lands, seq dense."""
    mem = Memory()
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for i in range(25):
                mem.write(_claim(w * 100 + i, key=FactKey("t", f"u{i % 3}", "city")), LWW)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [e.seq for e in mem.events()] == list(range(1, len(mem.events()) + 1))
    claims = {e.version_ids[0] for e in mem.events() if e.body.get("claim")}
    assert len(claims) == 100
    assert mem.state_hash() == replay(mem.events()).state_hash()


# -- PostgreSQL ------------------------------------------------------------------------------

PG_POINTS = ["begin", "head", "pending", "projection", "commit"]


@pytest.mark.parametrize("point", PG_POINTS)
def test_pg_failure_at_each_statement_leaves_memory_and_store_as_before(
    pg_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    store = pg_store()
    mem = Memory(store)
    mem.write(_claim(1, "Lisbon"), LWW)
    before = _seen(mem)
    real_step = PostgresStore._step
    real_projection = PostgresStore._write_projection

    def step(self: PostgresStore, name: str, *args: Any) -> None:
        real_step(self, name, *args)
        if name == point:
            raise Boom(name)

    def projection(self: PostgresStore, *args: Any) -> None:
        real_projection(self, *args)
        raise Boom("projection")

    if point == "projection":
        monkeypatch.setattr(PostgresStore, "_write_projection", projection)
    else:
        monkeypatch.setattr(PostgresStore, "_step", step)
    with pytest.raises(Boom):
        mem.write(_claim(2, "Berlin"), LWW)
    monkeypatch.undo()
    assert _seen(mem) == before
    mem.write(_claim(3, "Rome"), LWW)
    assert mem.current(K).value == "Rome"
    again = Memory(pg_store(store.schema))
    assert [e.event_id for e in again.events()] == [e.event_id for e in mem.events()]
    assert again.open_report is not None and again.open_report.ok
    (pending,) = store.execute("SELECT count(*) FROM toki_pending")
    assert pending == (0,)


def test_pg_commit_failure_is_a_toki_error_and_leaves_nothing(pg_store: StoreFactory) -> None:
    """A real commit-time failure: a deferred constraint trigger refuses the transaction."""
    store = pg_store()
    mem = Memory(store)
    mem.write(_claim(1, "Lisbon"), LWW)
    before = _seen(mem)
    store.execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF position('Berlin' in NEW.payload) > 0 THEN RAISE EXCEPTION 'refused at commit' "
        "USING ERRCODE = 'check_violation'; END IF; RETURN NEW; END $$"
    )
    store.execute(
        "CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON toki_pending "
        "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse()"
    )
    with pytest.raises(StoreError, match="refused at commit"):
        mem.write(_claim(2, "Berlin"), LWW)
    assert _seen(mem) == before
    mem.write(_claim(3, "Rome"), LWW)
    assert mem.current(K).value == "Rome"


def test_pg_terminated_backend_mid_write(
    pg_store: StoreFactory, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    store = pg_store()
    mem = Memory(store)
    mem.write(_claim(1, "Lisbon"), LWW)
    before = _seen(mem)
    real_step = PostgresStore._step
    pid = store.backend_pid()

    def step(self: PostgresStore, name: str, *args: Any) -> None:
        if name == "pending":
            with psycopg.connect(pg_dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        real_step(self, name, *args)

    monkeypatch.setattr(PostgresStore, "_step", step)
    with pytest.raises(StoreError, match="not committed"):  # looked up by its op id
        mem.write(_claim(2, "Berlin"), LWW)
    monkeypatch.undo()
    assert _seen(mem) == before
    mem.write(_claim(3, "Rome"), LWW)  # reconnects
    assert mem.current(K).value == "Rome"


def test_pg_refused_values_leave_no_phantom(pg_store: StoreFactory) -> None:
    """A NUL byte in source_id and a 12,000-character value: either stored, or refused with a
    toki error and nothing of the write kept (the Memory serves what the database holds)."""
    store = pg_store()
    mem = Memory(store)
    mem.write(_claim(1, "Lisbon"), LWW)
    for bad in (
        lambda: Claim(K, "Berlin", "m\x00x", recorded_at="2026-03-01T00:00:00Z"),
        lambda: Claim(K, "x" * 12_000, "m2", recorded_at="2026-03-02T00:00:00Z"),
    ):
        before = _seen(mem)
        try:  # the NUL is refused when the claim is made (the same rule on every backend)
            mem.write(bad(), LWW)
        except TokiError:
            assert _seen(mem) == before
        again = Memory(pg_store(store.schema))
        assert again.state_hash() == mem.state_hash()
        again.close()
    mem.write(Claim(K, "Rome", "m3", recorded_at="2026-04-01T00:00:00Z"), LWW)
    assert mem.current(K).value == "Rome"


def test_pg_level_below_the_operators_requirement_is_refused(pg_store: StoreFactory) -> None:
    mem = Memory(pg_store(), isolation=Isolation.READ_COMMITTED)
    mem.write(_claim(1, "Lisbon"), LWW)
    with pytest.raises(IsolationViolation):
        mem.write(_claim(2, "Berlin"), EWM)
    assert len(mem.events()) == 1
    decision = mem.write(_claim(3, "Rome"), EWM, allow_weaker_isolation=True)
    assert decision.provenance.isolation is Isolation.READ_COMMITTED
    assert not decision.provenance.precondition_held


def test_pg_default_runs_each_operator_at_its_declared_level(pg_store: StoreFactory) -> None:
    mem = Memory(pg_store())
    for i, op in enumerate([LWW, EWM, AWAIT]):
        d = mem.write(_claim(i, key=FactKey("t", f"u{i}", "city")), op)
        assert d.provenance.isolation is op.requires


def _default_level_dsn(dsn: str, level: str) -> str:
    sep = "&" if "?" in dsn else "?"
    value = level.replace(" ", "\\ ")  # libpq options: a space inside a value is escaped
    return f"{dsn}{sep}options={quote(f'-c default_transaction_isolation={value}')}"


@pytest.mark.slow
@pytest.mark.parametrize("server_default", ["repeatable read", "serializable"])
@pytest.mark.parametrize("op", [LWW, EWM, AWAIT, RULE], ids=lambda o: o.name)
def test_pg_concurrent_writers_lose_nothing_and_raise_no_raw_error(
    pg_store: StoreFactory, pg_dsn: str, server_default: str, op: Any
) -> None:
    """200 writes per operator from 4 threads (own connections) on 2 hot keys with the
    server's default level at RR or SERIALIZABLE: no error but toki's, nothing lost, the log
    dense and replayable, the projection consistent, per-key order kept."""
    schema = pg_store().schema
    assert schema is not None
    dsn = _default_level_dsn(pg_dsn, server_default)
    writers = 4
    per = 50
    mems = [Memory(PostgresStore(dsn, schema=schema)) for _ in range(writers)]
    policy = Policy("newest_valid_time")
    if op.name == "RULE":
        mems[0].set_policy("t", "city", policy, recorded_at="2026-01-01T00:00:00Z")
    errors: list[BaseException] = []
    decided: list[str] = []
    lock = threading.Lock()
    claims = [_claim(n, key=FactKey("t", f"hot{n % 2}", "city")) for n in range(writers * per)]

    def worker(w: int) -> None:
        for i in range(per):
            n = w * per + i
            try:
                d = mems[w].write(claims[n], op)
            except BaseException as exc:  # collected: the assertion names them
                with lock:
                    errors.append(exc)
                continue
            with lock:
                decided.append(d.claim_id or "")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(decided) == writers * per
    fresh = Memory(PostgresStore(pg_dsn, schema=schema))
    events = fresh.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    asserted = {e.version_ids[0] for e in events if e.kind is EventKind.ASSERT}
    assert set(decided) <= asserted
    assert fresh.open_report is not None and fresh.open_report.ok
    assert fresh.state_hash() == replay(events).state_hash()
    for m in mems:
        m.refresh()
        assert m.state_hash() == fresh.state_hash()
    retries = sum(m.write_stats.retries for m in mems)
    print(f"{op.name} default={server_default}: {len(events)} events, {retries} retries")
    # the final state is the serial execution of the claims in the log's order
    serial = Memory(isolation=op.requires)
    if op.name == "RULE":
        serial.set_policy("t", "city", policy, recorded_at="2026-01-01T00:00:00Z")
    by_id = {c.source_id: c for c in claims}
    for e in events:
        if e.kind is EventKind.ASSERT and e.body.get("claim"):
            assert e.version is not None
            serial.write(by_id[e.version.source_id], op)
    assert serial.state_hash() == fresh.state_hash()
    for m in [*mems, fresh]:
        m.close()


def test_pg_writes_to_different_keys_do_not_wait_for_each_other(
    pg_store: StoreFactory, pg_dsn: str
) -> None:
    """A write holding key A's head row open does not block a write to key B."""
    import psycopg

    schema = pg_store().schema
    a = Memory(PostgresStore(pg_dsn, schema=schema))
    b = Memory(PostgresStore(pg_dsn, schema=schema))
    a.write(_claim(1, key=FactKey("t", "a", "city")), LWW)
    b.write(_claim(2, key=FactKey("t", "b", "city")), LWW)
    with psycopg.connect(pg_dsn, autocommit=False) as holder:
        holder.execute(f"SET search_path TO {schema}".encode())
        holder.execute("SET lock_timeout = '5s'")
        holder.execute("SELECT * FROM toki_head WHERE subject = 'a' FOR UPDATE")
        b.write(_claim(3, key=FactKey("t", "b", "city")), LWW)  # would block on a global lock
        holder.rollback()
    assert b.current(FactKey("t", "b", "city")).value == "city-3"
    a.close()
    b.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_single_writer_transact_shell_reads_the_partition_and_commits(
    tmp_path: Path, backend: str
) -> None:
    """`EventStore.transact` (the shell a simulator-backed store implements) on the serial
    backends: the plan sees the key's committed events; a failing plan leaves nothing."""
    from toki.log import EventKind as Kind
    from toki.partition import Partition

    store = InMemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "t.db")
    mem = Memory(store)
    mem.write(_claim(1, "Lisbon"), LWW)
    seen: list[int] = []

    def plan(events: Any, base_seq: int) -> Any:
        seen.append(len(events))
        part = Partition([K], events, base_seq)
        new = [part.new(Kind.POLICY, K, mem.events()[-1].recorded_at, (), {"policy": {}})]
        return new, part.fold(new)

    assert store.transact(frozenset([K]), Isolation.SERIALIZABLE, plan) == 0
    assert seen == [len(mem.events())]
    assert mem.refresh() == 1

    def failing(events: Any, base_seq: int) -> Any:
        raise Boom("plan")

    with pytest.raises(Boom):
        store.transact(frozenset([K]), Isolation.SERIALIZABLE, failing)
    assert mem.refresh() == 0
