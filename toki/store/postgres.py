"""PostgreSQL backend: an append-only event table, versions with tstzrange valid time, and an
adjudicated projection that a btree_gist EXCLUDE constraint keeps free of contradictions.

It behaves like the SQLite backend: events and the projection rows they change commit in one
transaction, and `write_lock` holds a transaction-scoped advisory lock so that
read-validate-append is serialised across processes. The server adds what SQLite cannot:
range types, an exclusion constraint on the adjudicated rows, and real isolation levels.

This module holds the connection, the error mapping and the write transaction (`transact`);
the rest of the protocol calls functions over a cursor: the log, the sequencer and the
version rows in `pg_log`, the projection rows in `pg_projection`, the consumption log in
`pg_consumption`, tables and migrations in `pg_schema`, row forms and locks in `pg_rows`.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, cast

import psycopg
from psycopg import errors as pg_errors
from psycopg import pq, sql

from toki.chain import Digest, check_seal
from toki.errors import ConstraintViolation, OutcomeUnknown, StoreError, WriteConflict
from toki.isolation import Isolation
from toki.log import Event
from toki.model import FactKey
from toki.partition import extends
from toki.replay import KeySummary
from toki.store import pg_checkpoint, pg_consumption, pg_log
from toki.store.base import EVENT_COLUMNS, Operation, Plan, events_from_rows
from toki.store.pg_projection import read_projection, write_projection
from toki.store.pg_rows import (
    EVENTS_AFTER,
    KEY_COLS,
    LOCK_CLASS,
    PENDING_ROW_COLS,
    Hooked,
    advisory_lock,
    cause,
    check_schema_name,
    describe,
    event_row,
    key_row,
    read_seal,
    split_schema,
    version_drift,
    version_table,
    with_schema,
)
from toki.store.pg_schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    migrate,
    stored_version,
    version_refusal,
)

__all__ = ["DEFAULT_DSN", "MIGRATIONS", "SCHEMA_VERSION", "PostgresStore", "default_dsn"]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"

_RETRYABLE = (
    pg_errors.SerializationFailure,  # 40001 (not a TransactionRollback subclass in psycopg)
    pg_errors.DeadlockDetected,  # 40P01
    pg_errors.TransactionRollback,
)
TAIL_TRIES = 8
"""Reads an open from a checkpoint makes before it gives up (full replay) because each one
saw events committed but not yet sequenced."""
MAX_RETRIES = 64
"""Serialization failures, deadlocks and moved heads a write retries before WriteConflict."""
VACUUM_PENDING_EVERY = 512
"""Events a store sequences between its VACUUMs of toki_pending. The table is a queue: each
write inserts its events and the sequencer deletes them, and until a VACUUM the dead rows
stay in the heap the sequencer and every partition read scan. Autovacuum wakes once a
minute by default, so without this a busy store scans a minute of writes' dead rows per
write (bench_write_cost_pg's hot key: 5.9 -> 9.6 ms per write over 2,000 writes, 4,000 dead
rows in 401 pages; 6.1 ms again after one VACUUM)."""

_LEVELS = {
    Isolation.READ_UNCOMMITTED: "READ UNCOMMITTED",  # PostgreSQL runs it as READ COMMITTED
    Isolation.READ_COMMITTED: "READ COMMITTED",
    Isolation.REPEATABLE_READ: "REPEATABLE READ",  # PostgreSQL's is snapshot isolation
    Isolation.SNAPSHOT: "REPEATABLE READ",
    Isolation.SERIALIZABLE: "SERIALIZABLE",
}


def default_dsn() -> str:
    """$TOKI_PG_DSN, else the local test server (tests and benchmarks use this)."""
    return os.environ.get("TOKI_PG_DSN") or DEFAULT_DSN


def mask_dsn(dsn: str) -> str:
    """The DSN with any password replaced by '***' (for error messages and logs)."""
    masked = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", masked)


# ------------------------------------------------------------------------------ the store


def _logged_twice(cur: psycopg.Cursor[Any], events: Sequence[Event]) -> bool:
    """Whether a pending one of `events` has its id logged already: a duplicate only a toki
    before issue #36 could write, which stays pending and which every reader ignores (the
    whole partition's fold does; a fold onto what the caller holds could not tell)."""
    pending = [e.event_id for e in events if e.seq == 0]
    if not pending:
        return False
    row = cur.execute(
        "SELECT EXISTS (SELECT 1 FROM toki_event WHERE event_id = ANY(%s))", (pending,)
    ).fetchone()
    return bool(row and row[0])


class _HeadMoved(Exception):
    """A key's head row moved between the partition read and the conditional update."""


class PostgresStore:
    """Durable events and projection in one PostgreSQL schema, with concurrent writers.

    A write (`transact`) runs at its operator's level: it reads its keys' events, decides,
    moves each written key's head row with `UPDATE … WHERE pos = <read pos>` (0 rows: a
    concurrent writer won; retry from a fresh read), takes a transaction tick from a sequence
    and inserts its events into `toki_pending` with that tick, plus the projection rows of
    its keys. Writes to different keys touch different rows and never wait for each other.

    The dense global seq is assigned after commit by `sequence`, a short READ COMMITTED step
    under a transaction-scoped advisory lock, in (tick, key, key_seq) order, into the
    insert-only `toki_event` with a chain link. That order respects causality: a transaction
    T2 that read T1's events did so after T1 committed, and T1 took its tick before it
    committed, T2 after its read, so tick(T1) < tick(T2); and any sequencer run that sees T2
    committed starts after T2's commit, hence after T1's, so it sees T1 too (in one statement
    snapshot) and orders it first. Per key, the head row makes writes serial, so key_seq and
    tick agree. `load` returns only sequenced events.
    """

    concurrent = True
    reads_after_known = True
    """`transact` takes `known` (toki.store.base.transact_steps): the plan gets only the events
    after the known per-key positions, unless they need the whole partition."""

    def __init__(self, url: str, *, schema: str | None = None, existing: bool = False) -> None:
        """existing: open only a toki store that is there, creating and migrating nothing
        (`toki verify`, `toki shadow`): a missing schema is a StoreError."""
        dsn, url_schema = split_schema(url)
        self.dsn = dsn
        self.schema = check_schema_name(schema or url_schema)
        self._existing = existing
        self._lock = threading.RLock()
        self._depth = 0
        self._unvacuumed = 0  # events this store sequenced since its last VACUUM of toki_pending
        self._conn = self._connect()
        if self.schema is None:
            row = self._conn.execute("SELECT current_schema()").fetchone()
            if row is None or row[0] is None:
                raise StoreError(
                    f"url: {mask_dsn(dsn)} has no usable schema on its search_path "
                    "(create one, or pass ?schema=NAME in the URL)"
                )
            self.schema = str(row[0])
        self.url = dsn if schema is None and url_schema is None else with_schema(dsn, self.schema)
        if existing:
            self._check_exists()
        else:
            self._migrate()

    # -- connection -------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=5)
        except psycopg.Error as exc:
            raise StoreError(
                f"url: cannot connect to PostgreSQL at {mask_dsn(self.dsn)}: "
                f"{str(exc).strip()} (start a server, or point toki at one with "
                "Memory.open('postgresql://user@host:port/db') or $TOKI_PG_DSN)"
            ) from exc
        conn.execute("SET TIME ZONE 'UTC'")
        # toki sets each write's level itself; its own reads are single statements or
        # explicit snapshots, so the server's default level must not leak into them
        conn.execute("SET default_transaction_isolation TO 'read committed'")
        if self.schema is not None:
            if not self._existing:
                conn.execute(
                    sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                )
            conn.execute(
                sql.SQL("SET search_path TO {}, public").format(sql.Identifier(self.schema))
            )
        return conn

    def _live(self) -> psycopg.Connection[Any]:
        """The connection, reopened if the server dropped it while no transaction was open."""
        if self._conn.closed or self._conn.broken:
            if self._depth:
                raise StoreError(
                    f"url: the connection to {mask_dsn(self.dsn)} was lost inside a write; "
                    "nothing of that write was committed"
                )
            self._conn = self._connect()
        return self._conn

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Map driver errors onto toki's hierarchy (constraint names; lost connections)."""
        try:
            yield
        except (*_RETRYABLE, _HeadMoved):  # 40001 / 40P01 / a moved head: the caller retries
            raise
        except pg_errors.IntegrityError as exc:
            raise ConstraintViolation(describe(exc)) from exc
        except pg_errors.RestrictViolation as exc:
            raise ConstraintViolation(str(exc).strip()) from exc
        except psycopg.OperationalError as exc:
            raise StoreError(
                f"url: PostgreSQL at {mask_dsn(self.dsn)} failed: {str(exc).strip()}; "
                "nothing uncommitted was kept"
            ) from exc
        except psycopg.Error as exc:
            raise StoreError(
                f"url: PostgreSQL at {mask_dsn(self.dsn)} refused the statement: "
                f"{describe(exc)}; nothing uncommitted was kept"
            ) from exc

    def _check_exists(self) -> None:
        """Refuse a schema that holds no toki store, or one of another schema version."""
        with self._errors():
            version = stored_version(self._conn, self.schema)
        if version != SCHEMA_VERSION:
            self._conn.close()
            raise StoreError(version_refusal(version, self.schema, mask_dsn(self.dsn)))

    def _migrate(self) -> None:
        with self._errors(), self._conn.transaction(), self._conn.cursor() as cur:
            migrate(cur, self.schema, mask_dsn(self.dsn))

    # -- the protocol -----------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            conn = self._live()
            with self._errors(), conn.transaction():
                advisory_lock(conn, LOCK_CLASS, self.schema)
                self._depth = 1
                try:
                    yield
                finally:
                    self._depth = 0

    def write_lock(self) -> AbstractContextManager[None]:
        return self._locked()

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
    ) -> None:
        with self._locked(), self._conn.cursor() as cur:
            if events:
                pg_log.write_log(cur, events, pg_log.last_link(cur, self.url)[1])
                tops: dict[FactKey, int] = {}
                for e in events:
                    tops[e.key] = max(tops.get(e.key, 0), e.key_seq)
                cur.executemany(  # the head rows follow, as a transact write moves them
                    "INSERT INTO toki_head VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, "
                    "subject, scope_kind, scope_key, fact_key) DO UPDATE SET pos = "
                    "greatest(toki_head.pos, excluded.pos)",
                    [(*key_row(k), top) for k, top in tops.items()],
                )
                pg_log.insert_versions(cur, events, sequenced=True)
            if replace:
                pg_log.rebuild_versions(cur, self.url)
            write_projection(cur, summaries, replace=replace)
            cur.execute(
                "UPDATE toki_meta SET value = %s WHERE name = 'watermark'", (str(watermark),)
            )

    # -- the write shell ---------------------------------------------------------------

    statement_hook: Callable[[str, str], None] | None = None
    """Called ("before" | "after", statement) around each statement of a write's transaction,
    COMMIT included (the fault-injection tests kill the connection there)."""

    def transact(
        self,
        keys: frozenset[FactKey],
        level: Isolation,
        plan: Plan,
        op: Operation | None = None,
        known: Mapping[FactKey, int] | None = None,
    ) -> int:
        """Run one write at `level`; retry serialization failures, deadlocks and moved heads
        with bounded jittered backoff; sequence after commit. Returns the retries taken.

        op: the write's operation id, stored in its transaction. A write whose op id is
        stored already runs no plan (op.replayed, op.result: the first run's outcome). If the
        connection is lost, the outcome is looked up by the op id before anything is
        reported: committed is success, not committed a StoreError, and a lookup that cannot
        be made OutcomeUnknown (retry with the same op id: it never stores twice).

        known: per key, the per-key position up to which the caller holds the key's events
        folded. The transaction first reads only the events after it and, when the caller can
        fold them onto what it holds (`partition.extends`: none is a HOLD or a judge
        verdict), `plan` gets just those (possibly none; a hot key costs no re-read of its
        history); else it gets the keys' whole partition, as without `known`."""
        ordered = sorted(keys, key=key_row)
        self._ensure_heads(ordered)
        retries = 0
        while True:
            try:
                with self._lock, self._errors():
                    wrote = self._attempt(ordered, level, plan, op, known)
            except (*_RETRYABLE, _HeadMoved) as exc:
                retries += 1
                if retries > MAX_RETRIES:
                    raise WriteConflict(
                        f"write to {', '.join(str(k) for k in ordered)} at {level.value} "
                        f"still conflicted after {MAX_RETRIES} retries ({cause(exc)}); "
                        "nothing was written"
                    ) from exc
                time.sleep(random.uniform(0, min(0.2, 0.002 * 2**retries)))
                continue
            except StoreError as exc:
                if op is None or not (self._conn.broken or self._conn.closed):
                    raise  # a refusal, not a lost connection: nothing was committed
                wrote = self._outcome_after_loss(op, exc)
            if wrote:
                with suppress(StoreError):  # committed: any later reader sequences it
                    self.sequence()
            return retries

    def _outcome_after_loss(self, op: Operation, lost: StoreError) -> bool:
        """The connection died inside the write: committed or not, by its op id."""
        try:
            found = self.op_result(op.op_id)
        except StoreError as exc:
            raise OutcomeUnknown(op.op_id, f"{lost}; looking it up failed too: {exc}") from exc
        if found is None:
            raise StoreError(
                f"{lost} (operation {op.op_id} is not in the store: the write was not "
                "committed; it may be retried)"
            ) from lost
        op.result = found if not op.result else op.result
        return True

    def op_result(self, op_id: str) -> str | None:
        """The recorded outcome of a committed operation id, None if it never committed."""
        with self._lock, self._errors():
            row = (
                self._live()
                .execute("SELECT result FROM toki_op WHERE op_id = %s", (op_id,))
                .fetchone()
            )
        return None if row is None else str(row[0])

    def _ensure_heads(self, keys: Sequence[FactKey]) -> None:
        """Create missing head rows (pos 0) before the write's transaction, so that the
        transaction only ever updates them (an insert race would be a unique violation)."""
        cols = [list(c) for c in zip(*(key_row(k) for k in keys), strict=True)]
        with self._lock, self._errors():
            self._live().execute(
                "INSERT INTO toki_head SELECT a, b, c, d, e, 0 FROM unnest(%s::text[], "
                "%s::text[], %s::text[], %s::text[], %s::text[]) AS k(a, b, c, d, e) "
                "ON CONFLICT DO NOTHING",
                cols,
            )

    def _attempt(
        self,
        keys: Sequence[FactKey],
        level: Isolation,
        plan: Plan,
        op: Operation | None,
        known: Mapping[FactKey, int] | None = None,
    ) -> bool:
        """One transaction: read the partition, plan, move heads, tick, insert, commit (an
        explicit BEGIN … COMMIT on the autocommit connection: every statement, COMMIT too,
        goes through `Hooked`)."""
        conn = self._live()
        self._depth = 1
        try:
            with conn.cursor() as raw:
                cur = cast("psycopg.Cursor[Any]", Hooked(raw, self.statement_hook))
                self._step("begin", cur, f"BEGIN ISOLATION LEVEL {_LEVELS[level]}".encode())
                try:
                    done = self._write_in(cur, keys, plan, op, known)
                    if done:
                        self._step("commit", cur, None)
                    cur.execute(b"COMMIT" if done else b"ROLLBACK")
                except BaseException:
                    if not conn.broken and not conn.closed:
                        with suppress(psycopg.Error):
                            raw.execute(b"ROLLBACK")
                    raise
            return done
        finally:
            self._depth = 0

    def _write_in(
        self,
        cur: psycopg.Cursor[Any],
        keys: Sequence[FactKey],
        plan: Plan,
        op: Operation | None,
        known: Mapping[FactKey, int] | None = None,
    ) -> bool:
        """The statements of one write inside its open transaction; False: nothing to commit."""
        if op is not None:
            row = cur.execute("SELECT result FROM toki_op WHERE op_id = %s", (op.op_id,)).fetchone()
            if row is not None:  # a retry of a committed operation: its outcome, no new write
                op.result, op.replayed = str(row[0]), True
                return False
        read_pos = {k: 0 for k in keys}
        partition = None
        if known is not None:  # what came after what the caller holds: it plans from both
            partition = self._read_partition(cur, keys, known)
            if extends(known, partition) and not _logged_twice(cur, partition):
                read_pos.update((k, known.get(k, 0)) for k in keys)
            else:
                partition = None
        if partition is None:
            partition = self._read_partition(cur, keys)
        events, summaries = plan(partition, 0)
        if not events:
            return False
        for e in partition:
            read_pos[e.key] = max(read_pos[e.key], e.key_seq)
        new_pos: dict[FactKey, int] = {}
        for e in events:
            new_pos[e.key] = max(new_pos.get(e.key, 0), e.key_seq)
        for key in sorted(new_pos, key=key_row):
            self._step(
                "head",
                cur,
                "UPDATE toki_head SET pos = %s WHERE tenant = %s AND subject = %s "
                "AND scope_kind = %s AND scope_key = %s AND fact_key = %s AND pos = %s",
                (new_pos[key], *key_row(key), read_pos.get(key, 0)),
            )
            if cur.rowcount != 1:
                raise _HeadMoved(f"head of {key} moved")
        row = cur.execute("SELECT nextval('toki_tick')").fetchone()
        tick = int(row[0]) if row else 0
        self._step("pending", cur, None, (tick, events))
        pg_log.insert_versions(cur, events, sequenced=False)
        self._write_projection(cur, summaries)
        if op is not None:
            cur.execute("INSERT INTO toki_op VALUES (%s, %s)", (op.op_id, op.result))
        return True

    def _step(self, name: str, cur: psycopg.Cursor[Any], query: Any, params: Any = None) -> None:
        """A named statement of the write: begin, head, pending, commit (a no-op: the
        point just before COMMIT). Tests and benchmarks override it to inject failures and
        races by name; `statement_hook` sees every statement."""
        if name == "pending":
            tick, events = params
            with cur.copy(f"COPY toki_pending ({PENDING_ROW_COLS}) FROM STDIN") as copy:
                for e in events:
                    copy.write_row((tick, *event_row(e)[1:]))
        elif query is not None:
            cur.execute(query, params)

    def _read_partition(
        self,
        cur: psycopg.Cursor[Any],
        keys: Sequence[FactKey],
        after: Mapping[FactKey, int] | None = None,
    ) -> list[Event]:
        """The keys' events, sequenced or not, in one statement (one snapshot even at RC);
        with `after`, only each key's events after the per-key position it gives."""
        cols = [list(c) for c in zip(*(key_row(k) for k in keys), strict=True)]
        cols.append([0 if after is None else after.get(k, 0) for k in keys])
        rows = cur.execute(
            "WITH k AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::text[], %s::int8[]) AS k(a, b, c, d, e, pos)) "
            f"SELECT {EVENT_COLUMNS} FROM toki_event t JOIN k ON t.tenant = k.a "
            "AND t.subject = k.b AND t.scope_kind = k.c AND t.scope_key = k.d "
            "AND t.fact_key = k.e AND t.key_seq > k.pos UNION ALL "
            "SELECT 0, key_seq, kind, payload, payload_hash, event_id FROM toki_pending t "
            "JOIN k ON t.tenant = k.a AND t.subject = k.b AND t.scope_kind = k.c "
            "AND t.scope_key = k.d AND t.fact_key = k.e AND t.key_seq > k.pos",
            cols,
        ).fetchall()
        return list(events_from_rows(rows, self.url))

    def _write_projection(
        self, cur: psycopg.Cursor[Any], summaries: Mapping[FactKey, KeySummary]
    ) -> None:
        """Replace the projection rows of the written keys (the head rows make them ours)."""
        write_projection(cur, summaries)

    # -- the sequencer and the reads (toki/store/pg_log.py, pg_projection.py) -----------

    def sequence(self) -> int:
        """Give committed pending events the dense global seq (`pg_log.sequence`); every
        VACUUM_PENDING_EVERY events, VACUUM toki_pending (outside any transaction)."""
        with self._lock, self._errors():
            conn = self._live()
            with conn.transaction(), conn.cursor() as cur:
                moved = pg_log.sequence(cur, self.schema, self.url)
            self._unvacuumed += moved
            idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
            if self._unvacuumed >= VACUUM_PENDING_EVERY and idle:
                self._unvacuumed = 0
                # SKIP_LOCKED: another writer's VACUUM of it is running, which does the same;
                # a role that does not own the table gets a warning and nothing is vacuumed
                conn.execute("VACUUM (SKIP_LOCKED) toki_pending")
            return moved

    def load_state(self) -> tuple[list[Event], list[Event], int, dict[FactKey, KeySummary]]:
        """Log, unsequenced events and projection in one REPEATABLE READ snapshot."""
        with self._lock, self._errors(), self._snapshot() as cur:
            seal = read_seal(cur, self.url)
            events = pg_log.read_log(cur, self.url)
            pending = cur.execute(
                "SELECT 0, key_seq, kind, payload, payload_hash, event_id FROM toki_pending "
                f"ORDER BY tick, {KEY_COLS}, key_seq"
            ).fetchall()
            watermark, projection = read_projection(cur)
            version_rows = version_table(cur)
        unsequenced = list(events_from_rows(pending, self.url))
        check_seal(self.url, events, seal)  # no downgrade: a stripped or shortened chain
        for key, vid in version_drift(version_rows, [*events, *unsequenced]).items():
            # toki_version is part of a key's projection: a row that is not its ASSERT's
            # makes the key differ from the log (open refuses; repair rebuilds the table)
            projection[key] = KeySummary(f"toki_version row {vid} differs from the log", (), 0, 0)
        return events, unsequenced, watermark, projection

    def load_log(self) -> tuple[list[Event], Digest | None]:
        """Every logged event (with its link) and the chain seal, in one snapshot."""
        with self._lock, self._errors(), self._snapshot() as cur:
            return pg_log.read_log(cur, self.url), read_seal(cur, self.url)

    def version_drift(self) -> dict[FactKey, str]:
        """Keys whose toki_version rows differ from the log's ASSERTs (verify reports them)."""
        with self._lock, self._errors(), self._snapshot() as cur:
            version_rows = version_table(cur)
            events = pg_log.read_log(cur, self.url)
        return version_drift(version_rows, events)

    def set_links(self, links: Sequence[tuple[int, str]]) -> None:
        """The one-time chaining of an unchained log (`pg_log.set_links`)."""
        with self._locked(), self._errors(), self._conn.cursor() as cur:
            pg_log.set_links(cur, self.url, links)

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        with self._lock, self._errors():
            rows = self._live().execute(EVENTS_AFTER, (after_seq,)).fetchall()
        return events_from_rows(rows, self.url)

    def last_seq(self) -> int:
        with self._lock, self._errors():
            row = self._live().execute("SELECT coalesce(max(seq), 0) FROM toki_event").fetchone()
        return int(row[0]) if row else 0

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        with self._lock, self._errors(), self._snapshot() as cur:
            return read_projection(cur)

    @contextmanager
    def _snapshot(self) -> Iterator[psycopg.Cursor[Any]]:
        """A consistent read: inside the write lock its transaction, else a read-only one."""
        conn = self._live()
        if self._depth:
            with conn.cursor() as cur:
                yield cur
            return
        with conn.transaction(), conn.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield cur

    def index_problem(self) -> str | None:
        """A key whose head row (`toki_head.pos`) is not the last per-key seq the log and the
        pending events hold (an edited head wedges that key's writes; `toki verify`)."""
        with self._lock, self._errors(), self._snapshot() as cur:
            row = cur.execute(
                f"WITH logged AS (SELECT {KEY_COLS}, max(key_seq) AS top FROM (SELECT "
                f"{KEY_COLS}, key_seq FROM toki_event UNION ALL SELECT {KEY_COLS}, key_seq "
                f"FROM toki_pending) e GROUP BY {KEY_COLS}) "
                f"SELECT {KEY_COLS}, h.pos, l.top FROM toki_head h FULL JOIN logged l "
                f"USING ({KEY_COLS}) WHERE coalesce(h.pos, 0) <> coalesce(l.top, 0) LIMIT 1"
            ).fetchone()
        if row is None:
            return None
        tenant, subject, kind, skey, fkey, pos, top = row
        return (
            f"{self.url}: toki_head says key {FactKey(tenant, subject, fkey, kind, skey)} is at "
            f"per-key seq {pos}, the log at {top or 0}: toki_head was changed outside toki"
        )

    # -- checkpoints (toki.checkpoint; toki/store/pg_checkpoint.py) ----------------------

    def load_checkpoint(self) -> tuple[str, str | None] | None:
        """The checkpoint record and the digest stored beside it; None if there is none."""
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.load_record(cur)

    def save_checkpoint(self, text: str, text_digest: str) -> None:
        """Store the record (Memory.checkpoint holds the write lock); refused if its seq is
        not sequenced with the head it names."""
        with self._locked(), self._conn.cursor() as cur:
            pg_checkpoint.save_record(cur, self.url, text, text_digest)

    def load_tail(
        self, seq: int, known: Mapping[str, FactKey] | None = None
    ) -> pg_checkpoint.Tail | None:
        """The consistent read of an open from a checkpoint at `seq`
        (`pg_checkpoint.load_tail`), sequencing pending events first; None if concurrent
        writers kept committing unsequenced events across a few tries. (`known` is for
        the SQLite store's key texts; this backend's tail names keys by their columns.)"""
        for _ in range(TAIL_TRIES):
            with self._lock, self._errors(), self._snapshot() as cur:
                found = pg_checkpoint.load_tail(cur, self.url, seq)
            if found is not None:
                return found
            self.sequence()
        return None

    def key_text(self, key: FactKey) -> str:
        return pg_checkpoint.key_text(key)

    def projection_digest(self, key: FactKey, summary: KeySummary) -> str:
        """The digest of the projection row (summary and segments) `append` writes."""
        return pg_checkpoint.digest_row(pg_checkpoint.row_of_summary(key, summary))

    def digest_row(self, row: Sequence[Any]) -> str:
        return pg_checkpoint.digest_row(row)

    def parse_row(self, row: Sequence[Any]) -> tuple[FactKey, KeySummary]:
        return pg_checkpoint.parse_row(row)

    def key_events(self, key: FactKey, upto: int) -> list[Event]:
        with self._lock, self._errors(), self._snapshot() as cur:
            return pg_checkpoint.key_events(cur, self.url, key, upto)

    def has_event(self, event_id: str, upto: int) -> bool:
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.has_event(cur, event_id, upto)

    def event_ids(self, upto: int) -> list[str]:
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.event_ids(cur, upto)

    def version_key(self, version_id: str, upto: int) -> FactKey | None:
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.version_key(cur, version_id, upto)

    def hold_key(self, token: str, upto: int) -> FactKey | None:
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.hold_key(cur, token, upto)

    def version_keys(self, upto: int) -> dict[str, FactKey]:
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.version_keys(cur, upto)

    def decision_events(self, upto: int) -> list[Event]:
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.decision_events(cur, self.url, upto)

    def prefix_events(self, upto: int) -> list[Event]:
        with self._lock, self._errors(), self._live().cursor() as cur:
            return pg_checkpoint.prefix_events(cur, self.url, upto)

    # -- the consumption log (named reads; toki/store/pg_consumption.py) ----------------

    def append_consumption(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Append (record id, consumer, read_at, payload) rows; a known id is a no-op. Its
        own transaction: no write lock, no head row, nothing of the event log."""
        if not rows:
            return
        with self._lock, self._errors():
            conn = self._live()
            with conn.transaction(), conn.cursor() as cur:
                pg_consumption.append_consumption(cur, self.schema, self.url, rows)

    def load_consumption_log(self) -> tuple[list[tuple[str, str, str | None]], Digest | None]:
        """Every consumption record (id, payload, link) in append order, and the seal."""
        with self._lock, self._errors(), self._snapshot() as cur:
            return pg_consumption.load_consumption_log(cur, self.url)

    def load_consumption(self, consumer: str | None = None) -> list[tuple[str, str]]:
        """(record id, payload) rows in append order, of one consumer or all."""
        with self._lock, self._errors():
            return pg_consumption.load_consumption(self._live(), consumer)

    def execute(self, query: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Run raw SQL in this store's schema (tests use it to prove triggers and constraints
        hold and to corrupt projections). Driver errors are not mapped."""
        with self._lock:
            cur = self._live().execute(query.encode(), params)  # bytes: not a LiteralString
            return list(cur.fetchall()) if cur.description else []

    def backend_pid(self) -> int:
        """The server process of this store's connection (tests terminate it)."""
        with self._lock:
            return int(self._live().info.backend_pid)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
