"""A store with `SimStore`'s interface whose transactions run on a real PostgreSQL server.

The engine (`toki.sim.engine.Execution`) drives it unchanged through `build_program(...,
store_factory=PgServer(dsn))`: the scheduler still decides which agent's step runs next, but
every statement is executed by the server, so waits, serialization failures and deadlocks are
PostgreSQL's own, not the simulator's model of them. That is what lets the real-database grid
(`toki.experiments.pg_grid`) compare the simulator with the server cell by cell.

Layout: one schema per store (per run), one table `t (key text primary key, value jsonb,
writer bigint)`. Keys are encoded as canonical JSON text (tuples as arrays, decoded back to
tuples); `writer` is the adapter's transaction id of the row's last writer (0 = initial rows),
so that reads can be recorded with the version they saw, as `SimStore`'s history does.

Level mapping (PostgreSQL ↔ `Isolation`): READ COMMITTED ↔ READ_COMMITTED, REPEATABLE READ ↔
SNAPSHOT (PostgreSQL's repeatable read is snapshot isolation with first-updater-wins),
SERIALIZABLE ↔ SERIALIZABLE (SSI). SimStore's REPEATABLE_READ (locking PL-2.99) and
READ_UNCOMMITTED have no PostgreSQL counterpart and are refused.

Waiting: each transaction owns a connection and a worker thread; a statement is submitted to
the worker and the adapter then *settles* the server: it polls until every outstanding
statement has either finished or is waiting on a lock held by one of this store's
transactions (`pg_blocking_pids` from an observer connection), and the wait-for graph among
them is acyclic. A statement still waiting surfaces as `WouldBlock` naming the holders; the
engine retries it after one of them ends, and the retry collects the same statement (its
snapshot and its place in the lock queue are kept, as PostgreSQL keeps them). Why not a short
`lock_timeout`: the timeout is an error that aborts the transaction (a savepoint per statement
would be needed, which gives the retried statement a new snapshot and a new place in the
queue), and whether a wait exceeds a timeout depends on timing; `pg_blocking_pids` is the
server's own answer and needs no timing at all. A cycle is left to the server's deadlock
detector (`deadlock_timeout` is set to 20 ms when the role may): its victim fails with
40P01, which surfaces as `Deadlock`.

After every commit or rollback the adapter settles again: a statement that waited for the
finished transaction is resumed *by the server* at that moment (it completes, fails with
40001 at REPEATABLE READ, or waits for someone else), which is when PostgreSQL runs it; the
engine collects the outcome when it next schedules that agent. The history records the
statement when it is collected.

Failures: SQLSTATE 40001 and 40P01 surface as `SerializationFailure` / `Deadlock` after the
transaction is rolled back, exactly as `SimStore` reports them.

`update_where(where, fn)` / `delete_where(where)`: the predicate is a Python callable, so the
statement is run as (1) a scan of the table at the statement's snapshot, evaluating `where` on
every row; (2) `SELECT … WHERE key = ANY(matched) ORDER BY key FOR UPDATE`, which waits for
row locks; (3) `where` re-evaluated on the row version the lock returned, skipping rows that
no longer match; (4) one `UPDATE`/`DELETE` per remaining row. At READ COMMITTED, step (2)
returns the newest committed version after a wait, so (3) is exactly PostgreSQL's EvalPlanQual
re-check of an `UPDATE … WHERE` (a row that stopped matching is skipped; a row that changed
but still matches is updated from its newest version). At REPEATABLE READ and SERIALIZABLE,
step (2) on a row changed since the snapshot fails with 40001, as the `UPDATE` would. The
scan is a sequential scan, so at SERIALIZABLE it takes a relation-level SIREAD lock (coarser
than `SimStore`'s exact predicate locks: more, never fewer, serialization failures).

Differences from `SimStore` that callers may notice: `delete` of a missing key takes no lock
(PostgreSQL deletes nothing); `state_hash` hashes canonical JSON (jsonb does not keep object
key order), so it is comparable between two PgStores, not with a SimStore's hash.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from toki.errors import (
    Deadlock,
    InvalidInput,
    SerializationFailure,
    StoreError,
    TransactionError,
    WouldBlock,
)
from toki.isolation import Isolation
from toki.sim.store import (
    INITIAL_TXN,
    Op,
    OpKind,
    Predicate,
    Seen,
    TxnStatus,
    Updater,
    not_active_error,
    state_digest,
    txn_status,
)

__all__ = ["PG_LEVELS", "PgServer", "PgStore", "decode_key", "encode_key"]

PG_LEVELS: Mapping[Isolation, str] = {
    Isolation.READ_COMMITTED: "READ COMMITTED",
    Isolation.SNAPSHOT: "REPEATABLE READ",
    Isolation.SERIALIZABLE: "SERIALIZABLE",
}
HANG_GUARD = 60.0
"""Seconds a settle may take before the adapter gives up (a server that never answers)."""
_POLL = 0.001


def _jsonable(x: Any) -> Any:
    if isinstance(x, tuple | list):
        return [_jsonable(v) for v in x]
    return x


def _tupled(x: Any) -> Any:
    if isinstance(x, list):
        return tuple(_tupled(v) for v in x)
    return x


def encode_key(key: Hashable) -> str:
    """A key as canonical JSON text: tuples become arrays (so ("cur", "k") is ["cur","k"])."""
    return json.dumps(_jsonable(key), separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def decode_key(text: str) -> Hashable:
    """The inverse of `encode_key` (arrays come back as tuples)."""
    key: Hashable = _tupled(json.loads(text))
    return key


@dataclass(eq=False)
class _Slot:
    """One server connection and the worker thread that runs its statements."""

    conn: psycopg.Connection[Any]
    pid: int
    worker: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))


@dataclass(eq=False)
class _Txn:
    id: int
    slot: _Slot
    kind: str = ""  # the statement submitted and not yet collected
    future: Future[Any] | None = None
    blockers: frozenset[int] = frozenset()


class PgServer:
    """A connection pool on one server and a `store_factory` for `build_program`.

    `PgServer(dsn)(level, initial=...)` makes a fresh `PgStore` in its own schema; `close()`
    (or leaving the `with` block) closes every store it made and every connection."""

    def __init__(self, dsn: str, *, deadlock_timeout_ms: int = 20) -> None:
        self.dsn = dsn
        self.deadlock_timeout_ms = deadlock_timeout_ms
        try:
            self.observer = psycopg.connect(dsn, autocommit=True, connect_timeout=10)
        except psycopg.Error as exc:
            from toki.store.postgres import mask_dsn

            raise StoreError(
                f"PostgreSQL at {mask_dsn(dsn)} is unreachable ({exc}); "
                "pass --dsn or set TOKI_PG_DSN"
            ) from exc
        self._idle: list[_Slot] = []
        self._slots: list[_Slot] = []
        self._stores: list[PgStore] = []
        self._lock = threading.Lock()

    def __call__(self, level: Isolation, initial: Mapping[Any, Any] | None = None) -> PgStore:
        store = PgStore(level, initial, server=self)
        self._stores.append(store)
        return store

    @property
    def last(self) -> PgStore | None:
        """The store made last (the run in progress)."""
        return self._stores[-1] if self._stores else None

    def close_stores(self) -> None:
        """Close (roll back, drop the schema of) every store made so far."""
        while self._stores:
            self._stores.pop().close()

    def close(self) -> None:
        self.close_stores()
        for slot in self._slots:
            slot.worker.shutdown(wait=True)
            slot.conn.close()
        self._slots = []
        self._idle = []
        self.observer.close()

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def acquire(self) -> _Slot:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        # a superuser-only setting: without it the server's default (1 s) applies
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute(
                sql.SQL("SET deadlock_timeout = {}").format(
                    sql.Literal(f"{self.deadlock_timeout_ms}ms")
                )
            )
        conn.execute(sql.SQL("SET lock_timeout = {}").format(sql.Literal(f"{int(HANG_GUARD)}s")))
        slot = _Slot(conn, conn.info.backend_pid)
        with self._lock:
            self._slots.append(slot)
        return slot

    def release(self, slot: _Slot) -> None:
        with self._lock:
            self._idle.append(slot)


class PgStore:
    """`SimStore`'s interface on a PostgreSQL schema; see the module docstring."""

    def __init__(
        self, level: Isolation, initial: Mapping[Any, Any] | None = None, *, server: PgServer
    ) -> None:
        if level not in PG_LEVELS:
            raise InvalidInput(
                "level",
                f"{level!r} has no PostgreSQL counterpart",
                "use READ_COMMITTED, SNAPSHOT (PostgreSQL's repeatable read) or SERIALIZABLE",
            )
        self._level = level
        self._server = server
        self.schema = f"toki_pg_{uuid.uuid4().hex[:12]}"
        self._t = sql.Identifier(self.schema, "t")
        self._obs = server.observer
        self._hist: list[Op] = []
        self._step = 0
        self._next_id = 1
        self._active: dict[int, _Txn] = {}
        self._finished: dict[int, TxnStatus] = {}
        self._by_pid: dict[int, int] = {}
        self._version_of: dict[tuple[int, Hashable], int] = {}
        self._closed = False
        with self._obs.transaction():
            self._obs.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(self.schema)))
            self._obs.execute(
                sql.SQL(
                    "CREATE TABLE {} (key text PRIMARY KEY, value jsonb NOT NULL, "
                    "writer bigint NOT NULL DEFAULT 0)"
                ).format(self._t)
            )
            rows = []
            for key, value in (initial or {}).items():
                if value is None:
                    raise InvalidInput(f"initial[{key!r}]", "None is not storable", "omit the key")
                rows.append((encode_key(key), Jsonb(value)))
                self._version_of[(INITIAL_TXN, key)] = 0
            if rows:
                with self._obs.cursor() as cur:
                    cur.executemany(
                        sql.SQL("INSERT INTO {} (key, value) VALUES (%s, %s)").format(self._t),
                        rows,
                    )

    # ------------------------------------------------------------------ read-only API

    @property
    def level(self) -> Isolation:
        return self._level

    def history(self) -> tuple[Op, ...]:
        return tuple(self._hist)

    def history_len(self) -> int:
        return len(self._hist)

    def snapshot(self) -> dict[Hashable, Any]:
        """The committed state, read by an autocommit statement."""
        rows = self._obs.execute(sql.SQL("SELECT key, value FROM {}").format(self._t)).fetchall()
        return {decode_key(k): v for k, v in rows}

    def state_hash(self) -> str:
        return state_digest(
            (encode_key(k), json.dumps(_jsonable(v), sort_keys=True))
            for k, v in self.snapshot().items()
        )

    def status(self, txn: int) -> TxnStatus:
        return txn_status(txn, self._active, self._finished)

    def active(self) -> tuple[int, ...]:
        return tuple(self._active)

    # ------------------------------------------------------------------ transactions

    def begin(self) -> int:
        """BEGIN at the store's level; the snapshot is taken by the first statement."""
        tid = self._next_id
        self._next_id += 1
        slot = self._server.acquire()
        slot.conn.execute(
            sql.SQL("BEGIN ISOLATION LEVEL {}").format(sql.SQL(PG_LEVELS[self._level]))
        )
        self._active[tid] = _Txn(tid, slot)
        self._by_pid[slot.pid] = tid
        self._log(tid, OpKind.BEGIN)
        return tid

    def commit(self, txn: int) -> None:
        t = self._get(txn)

        def work(cur: psycopg.Cursor[Any]) -> None:
            cur.execute("COMMIT")

        self._statement(t, "commit", work)
        self._end(t, TxnStatus.COMMITTED)
        self._log(t.id, OpKind.COMMIT)
        self._settle(None)

    def abort(self, txn: int) -> None:
        """ROLLBACK; a no-op on a transaction the server already aborted."""
        t = self._active.get(txn)
        if t is None:
            if self._finished.get(txn) is TxnStatus.ABORTED:
                return
            raise self._not_active(txn)
        self._rollback(t, "abort")
        self._settle(None)

    # ------------------------------------------------------------------ statements

    def read(self, txn: int, key: Hashable) -> Any:
        t = self._get(txn)
        stmt = sql.SQL("SELECT value, writer FROM {} WHERE key = %s").format(self._t)

        def work(cur: psycopg.Cursor[Any]) -> Any:
            cur.execute(stmt, (encode_key(key),))
            return cur.fetchone()

        row = self._statement(t, "read", work)
        if row is None:
            self._log(t.id, OpKind.READ, key, None, None, None)
            return None
        value, writer = row
        self._log(t.id, OpKind.READ, key, value, writer, self._version_of.get((writer, key)))
        return value

    def write(self, txn: int, key: Hashable, value: Any) -> None:
        """An upsert (INSERT … ON CONFLICT DO UPDATE), as SimStore's write."""
        if value is None:
            raise InvalidInput("value", "None is not a storable value", "use delete(txn, key)")
        t = self._get(txn)
        stmt = sql.SQL(
            "INSERT INTO {} (key, value, writer) VALUES (%s, %s, %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, writer = EXCLUDED.writer"
        ).format(self._t)

        def work(cur: psycopg.Cursor[Any]) -> None:
            cur.execute(stmt, (encode_key(key), Jsonb(value), t.id))

        self._statement(t, "write", work)
        self._log(t.id, OpKind.WRITE, key, value, t.id)

    def delete(self, txn: int, key: Hashable) -> None:
        t = self._get(txn)
        stmt = sql.SQL("DELETE FROM {} WHERE key = %s").format(self._t)

        def work(cur: psycopg.Cursor[Any]) -> None:
            cur.execute(stmt, (encode_key(key),))

        self._statement(t, "delete", work)
        self._log(t.id, OpKind.DELETE, key, None, t.id)

    def select(self, txn: int, where: Predicate) -> dict[Hashable, Any]:
        """Every row, filtered by `where` in Python (a sequential scan on the server)."""
        t = self._get(txn)
        scan = sql.SQL("SELECT key, value, writer FROM {} ORDER BY key").format(self._t)

        def work(cur: psycopg.Cursor[Any]) -> list[tuple[Hashable, Any, int, bool]]:
            cur.execute(scan)
            out = []
            for k, v, w in cur.fetchall():
                key = decode_key(k)
                out.append((key, v, w, bool(where(key, v))))
            return out

        rows = self._statement(t, "select", work)
        items = tuple(Seen(k, v, w, self._version(w, k), m) for k, v, w, m in rows)
        result = {k: v for k, v, _, m in rows if m}
        self._log(t.id, OpKind.SELECT, None, tuple(result.items()), None, None, where, items)
        return result

    def update_where(self, txn: int, where: Predicate, fn: Updater) -> dict[Hashable, Any]:
        """Scan, lock the matching rows FOR UPDATE, re-check `where`, update (module doc)."""
        return self._modify(txn, where, fn)

    def delete_where(self, txn: int, where: Predicate) -> dict[Hashable, Any]:
        return self._modify(txn, where, None)

    def _modify(self, txn: int, where: Predicate, fn: Updater | None) -> dict[Hashable, Any]:
        t = self._get(txn)
        scan = sql.SQL("SELECT key, value, writer FROM {} ORDER BY key").format(self._t)
        lock = sql.SQL(
            "SELECT key, value, writer FROM {} WHERE key = ANY(%s) ORDER BY key FOR UPDATE"
        ).format(self._t)
        update = sql.SQL("UPDATE {} SET value = %s, writer = %s WHERE key = %s").format(self._t)
        remove = sql.SQL("DELETE FROM {} WHERE key = %s").format(self._t)

        def work(cur: psycopg.Cursor[Any]) -> tuple[list[Any], list[Any]]:
            cur.execute(scan)
            seen = []
            for k, v, w in cur.fetchall():
                key = decode_key(k)
                seen.append((key, v, w, bool(where(key, v))))
            matched = [encode_key(k) for k, _, _, m in seen if m]
            writes: list[tuple[Hashable, Any, Any]] = []
            if not matched:
                return seen, writes
            cur.execute(lock, (matched,))
            for k, v, _w in cur.fetchall():
                key = decode_key(k)
                if not where(key, v):  # EvalPlanQual: the newest version no longer matches
                    continue
                if fn is None:
                    cur.execute(remove, (k,))
                    writes.append((key, None, v))
                else:
                    new = fn(key, v)
                    if new is None:
                        raise InvalidInput("fn", f"returned None for key {key!r}", "delete_where")
                    cur.execute(update, (Jsonb(new), t.id, k))
                    writes.append((key, new, v))
            return seen, writes

        seen, writes = self._statement(t, "update_where" if fn else "delete_where", work)
        items = tuple(Seen(k, v, w, self._version(w, k), m) for k, v, w, m in seen)
        candidates = tuple((k, v) for k, v, _, m in seen if m)
        self._log(t.id, OpKind.SELECT, None, candidates, None, None, where, items)
        out: dict[Hashable, Any] = {}
        for key, new, old in writes:
            if new is None:
                self._log(t.id, OpKind.DELETE, key, None, t.id)
                out[key] = old
            else:
                self._log(t.id, OpKind.WRITE, key, new, t.id)
                out[key] = new
        return out

    def _version(self, writer: int, key: Hashable) -> int:
        """The history step of `writer`'s write of `key` (every writer wrote through us)."""
        return self._version_of.get((writer, key), -1)

    # ------------------------------------------------------------------ running statements

    def _statement(self, t: _Txn, kind: str, work: Callable[[psycopg.Cursor[Any]], Any]) -> Any:
        """Submit (or collect, on a retry) one statement; WouldBlock while the server says it
        waits; the failure after a rollback when it failed to serialize or deadlocked."""
        if t.future is None:

            def run() -> Any:
                with t.slot.conn.cursor() as cur:
                    return work(cur)

            t.kind = kind
            t.future = t.slot.worker.submit(run)
        elif t.kind != kind:
            raise TransactionError(
                f"txn {t.id}: its {t.kind} statement is still waiting; retry that step "
                f"before a {kind}"
            )
        self._settle(t)
        fut = t.future
        if not fut.done():
            raise WouldBlock(t.id, t.blockers)
        t.future = None
        t.kind = ""
        try:
            return fut.result()
        except (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected) as exc:
            reason = str(exc.diag.message_primary or exc)
            self._rollback(t, reason)
            self._settle(None)
            if isinstance(exc, psycopg.errors.DeadlockDetected):
                raise Deadlock(t.id, reason) from None
            raise SerializationFailure(t.id, reason) from None
        except psycopg.Error as exc:
            self._rollback(t, f"error: {exc}")
            self._settle(None)
            raise StoreError(f"txn {t.id}: the server refused a {kind}: {exc}") from exc

    def _settle(self, current: _Txn | None) -> None:
        """Poll until every outstanding statement has finished or waits on a lock held by one
        of our transactions, with no cycle among the waits (the server breaks cycles)."""
        deadline = time.monotonic() + HANG_GUARD
        if current is not None and current.future is not None:
            wait([current.future], timeout=0.002)
        while True:
            pending = [
                t for t in self._active.values() if t.future is not None and not t.future.done()
            ]
            if not pending:
                return
            rows = self._obs.execute(
                "SELECT p, pg_blocking_pids(p) FROM unnest(%s::int[]) AS p",
                ([t.slot.pid for t in pending],),
            ).fetchall()
            blocking = {int(p): list(b or ()) for p, b in rows}
            waits: dict[int, frozenset[int]] = {}
            stable = True
            for t in pending:
                if t.future is not None and t.future.done():
                    continue
                owners = [self._by_pid.get(p) for p in blocking.get(t.slot.pid, [])]
                if not owners or None in owners:  # running, or a lock being handed over
                    stable = False
                    break
                waits[t.id] = frozenset(o for o in owners if o is not None)
            if stable and not _cyclic(waits):
                for t in pending:
                    if t.id in waits:
                        t.blockers = waits[t.id]
                return
            if time.monotonic() > deadline:
                raise StoreError(
                    f"the server neither finished nor settled statements of transactions "
                    f"{sorted(t.id for t in pending)} within {HANG_GUARD:.0f} s"
                )
            futures = [t.future for t in pending if t.future is not None]
            wait(futures, timeout=_POLL, return_when=FIRST_COMPLETED)

    # ------------------------------------------------------------------ finishing

    def _get(self, txn: int) -> _Txn:
        t = self._active.get(txn)
        if t is None:
            raise self._not_active(txn)
        return t

    def _not_active(self, txn: object) -> TransactionError:
        return not_active_error(txn, self._finished)

    def _rollback(self, t: _Txn, note: str) -> None:
        fut = t.future
        if fut is not None and not fut.done():  # a crash while waiting: cancel the statement
            self._obs.execute("SELECT pg_cancel_backend(%s)", (t.slot.pid,))
            wait([fut], timeout=HANG_GUARD)
        t.future = None
        t.slot.conn.execute("ROLLBACK")
        self._end(t, TxnStatus.ABORTED)
        self._log(t.id, OpKind.ABORT, note=note)

    def _end(self, t: _Txn, status: TxnStatus) -> None:
        del self._active[t.id]
        self._by_pid.pop(t.slot.pid, None)
        self._finished[t.id] = status
        self._server.release(t.slot)

    def close(self) -> None:
        """Roll back what is still open (a run that ended stuck) and drop the schema."""
        if self._closed:
            return
        for t in list(self._active.values()):
            self._rollback(t, "closed")
        self._obs.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
        )
        self._closed = True

    def _log(
        self,
        txn: int,
        kind: OpKind,
        key: Hashable | None = None,
        value: Any = None,
        writer: int | None = None,
        version: int | None = None,
        predicate: Predicate | None = None,
        items: tuple[Seen, ...] = (),
        note: str = "",
    ) -> int:
        self._step = step = self._step + 1
        if kind is OpKind.WRITE or kind is OpKind.DELETE:
            version = step
            self._version_of[(txn, key)] = step
        self._hist.append(Op(step, txn, kind, key, value, writer, version, predicate, items, note))
        return step


def _cyclic(waits: Mapping[int, frozenset[int]]) -> bool:
    """True when the wait-for graph has a cycle (the server's deadlock detector will act)."""
    state: dict[int, int] = {}

    def visit(n: int) -> bool:
        state[n] = 1
        for m in waits.get(n, ()):
            s = state.get(m, 0)
            if s == 1 or (s == 0 and visit(m)):
                return True
        state[n] = 2
        return False

    return any(state.get(n, 0) == 0 and visit(n) for n in waits)
