"""PostgreSQL backend: an append-only event table, versions with tstzrange valid time, and an
adjudicated projection that a btree_gist EXCLUDE constraint keeps free of contradictions.

It behaves like the SQLite backend: events and the projection rows they change commit in one
transaction, and `write_lock` holds a transaction-scoped advisory lock so that
read-validate-append is serialised across processes. The server adds what SQLite cannot:
range types, an exclusion constraint on the adjudicated rows, and real isolation levels.
"""

from __future__ import annotations

import dataclasses
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
from psycopg import sql

from toki.canonical import digest
from toki.chain import GENESIS, Digest, check_seal, consumption_link, link
from toki.errors import (
    ConstraintViolation,
    IntegrityError,
    OutcomeUnknown,
    StoreError,
    WriteConflict,
)
from toki.isolation import Isolation
from toki.log import Event, EventKind
from toki.model import FactKey
from toki.replay import KeySummary
from toki.store.base import EVENT_COLUMNS, LOG_COLUMNS, Operation, Plan, events_from_rows
from toki.store.pg_rows import (
    Hooked,
    bounds,
    cause,
    check_schema_name,
    describe,
    event_row,
    jsonb,
    key_row,
    overlap_message,
    parse_text_seal,
    read_seal,
    split_schema,
    version_drift,
    version_row,
    version_table,
    with_schema,
    write_seal,
)
from toki.store.pg_schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["DEFAULT_DSN", "MIGRATIONS", "SCHEMA_VERSION", "PostgresStore", "default_dsn"]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"

# pg_advisory_xact_lock(classid, objid): classid fixed for toki, objid per schema, so two
# toki stores in different schemas of one database do not serialise each other.
_LOCK_CLASS = 0x70C1  # "toki" writer lock
_MIGRATE_CLASS = 0x70C2  # schema migrations

_SEQ_CLASS = 0x70C3  # the sequencer
_CONSUME_CLASS = 0x70C4  # the consumption log's chain (named reads)
_KEY_COLS = "tenant, subject, scope_kind, scope_key, fact_key"
_EVENT_COLS = (
    "seq, key_seq, kind, tenant, subject, scope_kind, scope_key, fact_key, recorded_at, "
    "version_ids, payload, payload_hash, event_id"
)
_PENDING_COLS = "tick" + _EVENT_COLS[len("seq") :]
_RETRYABLE = (
    pg_errors.SerializationFailure,  # 40001 (not a TransactionRollback subclass in psycopg)
    pg_errors.DeadlockDetected,  # 40P01
    pg_errors.TransactionRollback,
)
MAX_RETRIES = 64
"""Serialization failures, deadlocks and moved heads a write retries before WriteConflict."""

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

    def __init__(self, url: str, *, schema: str | None = None, existing: bool = False) -> None:
        """existing: open only a toki store that is there, creating and migrating nothing
        (`toki verify`, `toki shadow`): a missing schema is a StoreError."""
        dsn, url_schema = split_schema(url)
        self.dsn = dsn
        self.schema = check_schema_name(schema or url_schema)
        self._existing = existing
        self._lock = threading.RLock()
        self._depth = 0
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
            found = self._conn.execute(
                "SELECT to_regclass(format('%%I.toki_meta', %s::text)) IS NOT NULL", (self.schema,)
            ).fetchone()
            version = None
            if found and found[0]:
                row = self._conn.execute(
                    "SELECT value FROM toki_meta WHERE name = 'schema_version'"
                ).fetchone()
                version = None if row is None else int(row[0])
        if version is None:
            self._conn.close()
            raise StoreError(
                f"url: there is no toki store in schema {self.schema!r} at {mask_dsn(self.dsn)} "
                "(nothing was created; check the URL's ?schema=)"
            )
        if version != SCHEMA_VERSION:
            self._conn.close()
            raise StoreError(
                f"url: schema {self.schema!r} holds toki schema version {version}, this toki "
                f"reads {SCHEMA_VERSION} (open it once with Memory.open to migrate, or use "
                "the toki that wrote it); nothing was changed"
            )

    def _migrate(self) -> None:
        conn = self._conn
        with self._errors(), conn.transaction(), conn.cursor() as cur:
            cur.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_MIGRATE_CLASS, self.schema)
            )
            cur.execute(
                "CREATE TABLE IF NOT EXISTS toki_meta (name text PRIMARY KEY, value text NOT NULL)"
            )
            row = cur.execute("SELECT value FROM toki_meta WHERE name='schema_version'").fetchone()
            have = int(row[0]) if row else 0
            if have > SCHEMA_VERSION:
                raise StoreError(
                    f"url: schema {self.schema!r} at {mask_dsn(self.dsn)} has toki schema "
                    f"version {have}, newer than this toki ({SCHEMA_VERSION}); upgrade toki"
                )
            for number in range(have, SCHEMA_VERSION):
                MIGRATIONS[number](cur)
                cur.execute(
                    "INSERT INTO toki_meta VALUES ('schema_version', %s) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (str(number + 1),),
                )
            # a store chained before the seal existed is sealed at its head (check_seal)
            cur.execute(
                "INSERT INTO toki_meta SELECT 'chain_seal', seq || ':' || chain FROM toki_event "
                "WHERE chain IS NOT NULL AND seq = (SELECT max(seq) FROM toki_event) "
                "ON CONFLICT DO NOTHING"
            )

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
                conn.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS, self.schema)
                )
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
                _, prev = self._last_link(cur)
                with cur.copy(f"COPY toki_event ({_EVENT_COLS}, chain) FROM STDIN") as copy:
                    for e in events:
                        prev = link(prev, e)
                        copy.write_row((*event_row(e), prev))
                write_seal(cur, events[-1].seq, prev)
                tops: dict[FactKey, int] = {}
                for e in events:
                    tops[e.key] = max(tops.get(e.key, 0), e.key_seq)
                cur.executemany(  # the head rows follow, as a transact write moves them
                    "INSERT INTO toki_head VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (tenant, "
                    "subject, scope_kind, scope_key, fact_key) DO UPDATE SET pos = "
                    "greatest(toki_head.pos, excluded.pos)",
                    [(*key_row(k), top) for k, top in tops.items()],
                )
                self._insert_versions(cur, events, sequenced=True)
            if replace:
                cur.execute("DELETE FROM toki_adjudicated")
                cur.execute("DELETE FROM toki_current")
                self._rebuild_versions(cur)
            elif summaries:
                cols = list(zip(*(key_row(k) for k in summaries), strict=True))
                for table in ("toki_adjudicated", "toki_current"):
                    cur.execute(
                        sql.SQL(
                            "DELETE FROM {} t USING unnest(%s::text[], %s::text[], %s::text[], "
                            "%s::text[], %s::text[]) AS k(a, b, c, d, e) WHERE t.tenant = k.a "
                            "AND t.subject = k.b AND t.scope_kind = k.c AND t.scope_key = k.d "
                            "AND t.fact_key = k.e"
                        ).format(sql.Identifier(table)),
                        [list(c) for c in cols],
                    )
            if summaries:
                self._insert_summaries(cur, summaries)
            cur.execute(
                "UPDATE toki_meta SET value = %s WHERE name = 'watermark'", (str(watermark),)
            )

    # -- the write shell ---------------------------------------------------------------

    statement_hook: Callable[[str, str], None] | None = None
    """Called ("before" | "after", statement) around each statement of a write's transaction,
    COMMIT included (the fault-injection tests kill the connection there)."""

    def transact(
        self, keys: frozenset[FactKey], level: Isolation, plan: Plan, op: Operation | None = None
    ) -> int:
        """Run one write at `level`; retry serialization failures, deadlocks and moved heads
        with bounded jittered backoff; sequence after commit. Returns the retries taken.

        op: the write's operation id, stored in its transaction. A write whose op id is
        stored already runs no plan (op.replayed, op.result: the first run's outcome). If the
        connection is lost, the outcome is looked up by the op id before anything is
        reported: committed is success, not committed a StoreError, and a lookup that cannot
        be made OutcomeUnknown (retry with the same op id: it never stores twice)."""
        ordered = sorted(keys, key=key_row)
        self._ensure_heads(ordered)
        retries = 0
        while True:
            try:
                with self._lock, self._errors():
                    wrote = self._attempt(ordered, level, plan, op)
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
            row = self._live().execute(
                "SELECT result FROM toki_op WHERE op_id = %s", (op_id,)
            ).fetchone()
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
        self, keys: Sequence[FactKey], level: Isolation, plan: Plan, op: Operation | None
    ) -> bool:
        """One transaction: read the partition, plan, move heads, tick, insert, commit (an
        explicit BEGIN … COMMIT on the autocommit connection: every statement, COMMIT too,
        goes through `_Hooked`)."""
        conn = self._live()
        self._depth = 1
        try:
            with conn.cursor() as raw:
                cur = cast("psycopg.Cursor[Any]", Hooked(raw, self.statement_hook))
                self._step("begin", cur, f"BEGIN ISOLATION LEVEL {_LEVELS[level]}".encode())
                try:
                    done = self._write_in(cur, keys, plan, op)
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
    ) -> bool:
        """The statements of one write inside its open transaction; False: nothing to commit."""
        if op is not None:
            row = cur.execute("SELECT result FROM toki_op WHERE op_id = %s", (op.op_id,)).fetchone()
            if row is not None:  # a retry of a committed operation: its outcome, no new write
                op.result, op.replayed = str(row[0]), True
                return False
        partition = self._read_partition(cur, keys)
        events, summaries = plan(partition, 0)
        if not events:
            return False
        read_pos = {k: 0 for k in keys}
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
        self._insert_versions(cur, events, sequenced=False)
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
            with cur.copy(f"COPY toki_pending ({_PENDING_COLS}) FROM STDIN") as copy:
                for e in events:
                    copy.write_row((tick, *event_row(e)[1:]))
        elif query is not None:
            cur.execute(query, params)

    def _read_partition(self, cur: psycopg.Cursor[Any], keys: Sequence[FactKey]) -> list[Event]:
        """The keys' events, sequenced or not, in one statement (one snapshot even at RC)."""
        cols = [list(c) for c in zip(*(key_row(k) for k in keys), strict=True)]
        rows = cur.execute(
            "WITH k AS (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::text[]) AS k(a, b, c, d, e)) "
            f"SELECT {EVENT_COLUMNS} FROM toki_event t JOIN k ON t.tenant = k.a "
            "AND t.subject = k.b AND t.scope_kind = k.c AND t.scope_key = k.d "
            "AND t.fact_key = k.e UNION ALL "
            "SELECT 0, key_seq, kind, payload, payload_hash, event_id FROM toki_pending t "
            "JOIN k ON t.tenant = k.a AND t.subject = k.b AND t.scope_kind = k.c "
            "AND t.scope_key = k.d AND t.fact_key = k.e",
            cols,
        ).fetchall()
        return list(events_from_rows(rows, self.url))

    def _write_projection(
        self, cur: psycopg.Cursor[Any], summaries: Mapping[FactKey, KeySummary]
    ) -> None:
        """Replace the projection rows of the written keys (the head rows make them ours)."""
        if not summaries:
            return
        cols = list(zip(*(key_row(k) for k in summaries), strict=True))
        for table in ("toki_adjudicated", "toki_current"):
            cur.execute(
                sql.SQL(
                    "DELETE FROM {} t USING unnest(%s::text[], %s::text[], %s::text[], "
                    "%s::text[], %s::text[]) AS k(a, b, c, d, e) WHERE t.tenant = k.a "
                    "AND t.subject = k.b AND t.scope_kind = k.c AND t.scope_key = k.d "
                    "AND t.fact_key = k.e"
                ).format(sql.Identifier(table)),
                [list(c) for c in cols],
            )
        self._insert_summaries(cur, summaries)

    def _insert_summaries(
        self, cur: psycopg.Cursor[Any], summaries: Mapping[FactKey, KeySummary]
    ) -> None:
        cur.executemany(
            "INSERT INTO toki_current VALUES (%s,%s,%s,%s,%s,%s,%s::text[],%s,%s)",
            [
                (
                    *key_row(k),
                    s.value_hash,
                    list(s.version_ids),
                    s.open_conflicts,
                    s.open_intervals,
                )
                for k, s in summaries.items()
            ],
        )
        segments = [  # the EXCLUDE constraint compares value_digest (any value size fits)
            (*key_row(k), i, vid, jsonb(value), value, start, end, digest(value, 64))
            for k, s in summaries.items()
            for i, (vid, value, start, end) in enumerate(s.segments)
        ]
        if segments:
            try:
                with cur.connection.transaction():  # a savepoint: name the key on failure
                    cur.executemany(
                        "INSERT INTO toki_adjudicated (tenant, subject, scope_kind, scope_key, "
                        "fact_key, ord, version_id, value, value_json, valid_during, "
                        "value_digest) VALUES (%s,%s,%s,%s,%s,%s,%s,%s::jsonb,%s,"
                        "tstzrange(%s,%s,'[)'),%s)",
                        segments,
                    )
            except pg_errors.ExclusionViolation as exc:
                raise ConstraintViolation(overlap_message(summaries, exc)) from exc

    def sequence(self) -> int:
        """Give committed pending events the dense global seq, in (tick, key, key_seq) order,
        with their chain links; move them into the insert-only log. Returns how many."""
        with self._lock, self._errors():
            conn = self._live()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                cur.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SEQ_CLASS, self.schema)
                )
                # a pending row whose id is logged already (two identical events, which only
                # a toki before issue #36 could write) stays pending, a duplicate every reader
                # ignores, instead of wedging the sequencer; the rest are sequenced
                rows = cur.execute(
                    "SELECT 0, key_seq, kind, payload, payload_hash, event_id FROM toki_pending "
                    "p WHERE NOT EXISTS (SELECT 1 FROM toki_event e WHERE e.event_id = "
                    f"p.event_id) ORDER BY tick, {_KEY_COLS}, key_seq"
                ).fetchall()
                if not rows:
                    return 0
                seq, prev = self._last_link(cur)
                events = []
                links = []
                for e in events_from_rows(rows, self.url):
                    seq += 1
                    e = dataclasses.replace(e, seq=seq)
                    prev = link(prev, e)
                    events.append(e)
                    links.append(prev)
                with cur.copy(f"COPY toki_event ({_EVENT_COLS}, chain) FROM STDIN") as copy:
                    for e, chained in zip(events, links, strict=True):
                        copy.write_row((*event_row(e), chained))
                cur.execute(
                    "DELETE FROM toki_pending WHERE event_id = ANY(%s)",
                    ([e.event_id for e in events],),
                )
                cur.execute("UPDATE toki_meta SET value = %s WHERE name = 'watermark'", (str(seq),))
                write_seal(cur, seq, prev)
        return len(events)

    def _rebuild_versions(self, cur: psycopg.Cursor[Any]) -> None:
        """The repair of toki_version (repair_projection): its rows again from the log's
        ASSERTs, the append-only trigger lifted for this transaction's statements only."""
        logged = cur.execute(f"SELECT {LOG_COLUMNS} FROM toki_event ORDER BY seq").fetchall()
        events = list(events_from_rows(logged, self.url))
        cur.execute("DROP TRIGGER IF EXISTS toki_version_append_only ON toki_version")
        cur.execute("DELETE FROM toki_version")
        cur.execute(  # recreated, also where it had been dropped
            "CREATE TRIGGER toki_version_append_only BEFORE UPDATE OR DELETE ON toki_version "
            "FOR EACH ROW EXECUTE FUNCTION toki_append_only()"
        )
        self._insert_versions(cur, events, sequenced=True)

    def _insert_versions(
        self, cur: psycopg.Cursor[Any], events: Sequence[Event], *, sequenced: bool
    ) -> None:
        """Version rows of the ASSERTs, in the writer's transaction (so that a value the
        server refuses fails the write, never the sequencer); event_seq is set only for
        events written already sequenced, (key, key_seq) always names the event."""
        versions = [version_row(e, sequenced) for e in events if e.kind is EventKind.ASSERT]
        if versions:  # one statement; a version asserted again keeps its first row
            cur.execute(
                "INSERT INTO toki_version (id, tenant, subject, scope_kind, scope_key, "
                "fact_key, value, value_json, valid_during, recorded_at, source_id, "
                "source_hash, supersedes, weight, event_seq, key_seq) "
                "SELECT id, t, s, sk, skey, fk, v::jsonb, vj, "
                "tstzrange(lo, hi, '[)'), rec, src, sh, sup, w, seq, kseq FROM unnest("
                "%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], "
                "%s::text[], %s::text[], %s::timestamptz[], %s::timestamptz[], "
                "%s::timestamptz[], %s::text[], %s::text[], %s::text[], "
                "%s::float8[], %s::bigint[], %s::bigint[]) AS x(id, t, s, sk, skey, fk, v, vj, "
                "lo, hi, rec, src, sh, sup, w, seq, kseq) ON CONFLICT (id) DO NOTHING",
                [list(c) for c in zip(*versions, strict=True)],
            )

    def load_state(self) -> tuple[list[Event], list[Event], int, dict[FactKey, KeySummary]]:
        """Log, unsequenced events and projection in one REPEATABLE READ snapshot."""
        with self._lock, self._errors():
            conn = self._live()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                seal = read_seal(cur, self.url)
                rows = cur.execute(f"SELECT {LOG_COLUMNS} FROM toki_event ORDER BY seq").fetchall()
                pending = cur.execute(
                    "SELECT 0, key_seq, kind, payload, payload_hash, event_id FROM toki_pending "
                    f"ORDER BY tick, {_KEY_COLS}, key_seq"
                ).fetchall()
                watermark, projection = self._read_projection(cur)
                version_rows = version_table(cur)
        events = list(events_from_rows(rows, self.url))
        unsequenced = list(events_from_rows(pending, self.url))
        check_seal(self.url, events, seal)  # no downgrade: a stripped or shortened chain
        for key, vid in version_drift(version_rows, [*events, *unsequenced]).items():
            # toki_version is part of a key's projection: a row that is not its ASSERT's
            # makes the key differ from the log (open refuses; repair rebuilds the table)
            projection[key] = KeySummary(f"toki_version row {vid} differs from the log", (), 0, 0)
        return events, unsequenced, watermark, projection

    def load_log(self) -> tuple[list[Event], Digest | None]:
        """Every logged event (with its link) and the chain seal, in one snapshot."""
        with self._lock, self._errors():
            conn = self._live()
            with conn.transaction(), conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                seal = read_seal(cur, self.url)
                rows = cur.execute(f"SELECT {LOG_COLUMNS} FROM toki_event ORDER BY seq").fetchall()
        return list(events_from_rows(rows, self.url)), seal

    def version_drift(self) -> dict[FactKey, str]:
        """Keys whose toki_version rows differ from the log's ASSERTs (verify reports them)."""
        with self._lock, self._errors(), self._snapshot() as cur:
            version_rows = version_table(cur)
            rows = cur.execute(f"SELECT {LOG_COLUMNS} FROM toki_event ORDER BY seq").fetchall()
        return version_drift(version_rows, list(events_from_rows(rows, self.url)))

    def _last_link(self, cur: psycopg.Cursor[Any]) -> tuple[int, str]:
        """(seq, chain link) of the last logged event: new links continue from it."""
        last = cur.execute("SELECT seq, chain FROM toki_event ORDER BY seq DESC LIMIT 1").fetchone()
        if last is None:
            return 0, GENESIS
        if last[1] is None:
            raise IntegrityError(
                f"{self.url}: event seq {last[0]} has no chain link: the log was written by an "
                "earlier toki and is not chained yet (open it with Memory once, which chains "
                "it and records that as a CHAIN event)"
            )
        return int(last[0]), str(last[1])

    def set_links(self, links: Sequence[tuple[int, str]]) -> None:
        """The one-time migration of an unchained log: store the links of events that have
        none (the append-only trigger is disabled for this statement only, in one transaction)."""
        with self._locked(), self._errors(), self._conn.cursor() as cur:
            if read_seal(cur, self.url) is not None:  # once chained, never again
                raise IntegrityError(
                    f"{self.url}: the store's chain is sealed; it cannot be chained again"
                )
            cur.execute("ALTER TABLE toki_event DISABLE TRIGGER toki_event_append_only")
            cur.executemany(
                "UPDATE toki_event SET chain = %s WHERE seq = %s AND chain IS NULL",
                [(link_, seq) for seq, link_ in links],
            )
            cur.execute("ALTER TABLE toki_event ENABLE TRIGGER toki_event_append_only")
            if links:
                write_seal(cur, *links[-1])

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        with self._lock, self._errors():
            rows = (
                self._live()
                .execute(
                    f"SELECT {LOG_COLUMNS} FROM toki_event WHERE seq > %s ORDER BY seq",
                    (after_seq,),
                )
                .fetchall()
            )
        return events_from_rows(rows, self.url)

    def last_seq(self) -> int:
        with self._lock, self._errors():
            row = self._live().execute("SELECT coalesce(max(seq), 0) FROM toki_event").fetchone()
        return int(row[0]) if row else 0

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        with self._lock, self._errors(), self._snapshot() as cur:
            return self._read_projection(cur)

    def _read_projection(self, cur: psycopg.Cursor[Any]) -> tuple[int, dict[FactKey, KeySummary]]:
        wm = cur.execute("SELECT value FROM toki_meta WHERE name = 'watermark'").fetchone()
        rows = cur.execute(
            f"SELECT {_KEY_COLS}, value_hash, version_ids, open_conflicts, open_intervals "
            "FROM toki_current"
        ).fetchall()
        segs = cur.execute(
            f"SELECT {_KEY_COLS}, version_id, value_json, valid_during FROM toki_adjudicated "
            f"ORDER BY {_KEY_COLS}, ord"
        ).fetchall()
        by_key: dict[FactKey, list[tuple[str, str, str | None, str | None]]] = {}
        for tenant, subject, kind, skey, fkey, vid, value, during in segs:
            key = FactKey(tenant, subject, fkey, kind, skey)
            by_key.setdefault(key, []).append((vid, value, *bounds(during)))
        out: dict[FactKey, KeySummary] = {}
        for tenant, subject, kind, skey, fkey, value_hash, vids, conflicts, intervals in rows:
            key = FactKey(tenant, subject, fkey, kind, skey)
            out[key] = KeySummary(
                value_hash, tuple(vids), conflicts, intervals, tuple(by_key.pop(key, ()))
            )
        for key, orphan in by_key.items():  # adjudicated rows without a summary: drift
            out[key] = KeySummary("", (), 0, 0, tuple(orphan))
        return int(wm[0]) if wm else 0, out

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

    def append_consumption(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Append (record id, consumer, read_at, payload) rows; a known id is a no-op. One
        autocommit statement: no write lock, no head row, nothing of the event log."""
        if not rows:
            return
        with self._lock, self._errors():
            conn = self._live()
            with conn.transaction(), conn.cursor() as cur:
                # named reads serialise among themselves (their own lock), never with writes
                cur.execute(
                    "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_CONSUME_CLASS, self.schema)
                )
                seal = cur.execute(
                    "SELECT value FROM toki_meta WHERE name = 'consumption_seal'"
                ).fetchone()
                if seal is None:  # the first chained record: after any unchained ones
                    count = cur.execute("SELECT count(*) FROM toki_consumption").fetchone()
                    position, head = int(count[0]) if count else 0, GENESIS
                else:
                    sealed = parse_text_seal(self.url, str(seal[0]))
                    position, head = sealed.seq, sealed.head
                known = {
                    str(r[0])
                    for r in cur.execute(
                        "SELECT record_id FROM toki_consumption WHERE record_id = ANY(%s)",
                        ([r[0] for r in rows],),
                    ).fetchall()
                }
                fresh = []
                for record_id, consumer, read_at, payload in rows:
                    if record_id in known:  # a known id is a no-op
                        continue
                    known.add(record_id)
                    head = consumption_link(head, record_id, payload)
                    position += 1
                    fresh.append((record_id, consumer, read_at, payload, head))
                if fresh:
                    cur.executemany(
                        "INSERT INTO toki_consumption (record_id, consumer, read_at, payload, "
                        "chain) VALUES (%s, %s, %s, %s, %s)",
                        fresh,
                    )
                    cur.execute(
                        "INSERT INTO toki_meta VALUES ('consumption_seal', %s) "
                        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                        (f"{position}:{head}",),
                    )

    def index_problem(self) -> str | None:
        """A key whose head row (`toki_head.pos`) is not the last per-key seq the log and the
        pending events hold (an edited head wedges that key's writes; `toki verify`)."""
        with self._lock, self._errors(), self._snapshot() as cur:
            row = cur.execute(
                f"WITH logged AS (SELECT {_KEY_COLS}, max(key_seq) AS top FROM (SELECT "
                f"{_KEY_COLS}, key_seq FROM toki_event UNION ALL SELECT {_KEY_COLS}, key_seq "
                f"FROM toki_pending) e GROUP BY {_KEY_COLS}) "
                f"SELECT {_KEY_COLS}, h.pos, l.top FROM toki_head h FULL JOIN logged l "
                f"USING ({_KEY_COLS}) WHERE coalesce(h.pos, 0) <> coalesce(l.top, 0) LIMIT 1"
            ).fetchone()
        if row is None:
            return None
        tenant, subject, kind, skey, fkey, pos, top = row
        return (
            f"{self.url}: toki_head says key {FactKey(tenant, subject, fkey, kind, skey)} is at "
            f"per-key seq {pos}, the log at {top or 0}: toki_head was changed outside toki"
        )

    def load_consumption_log(self) -> tuple[list[tuple[str, str, str | None]], Digest | None]:
        """Every consumption record (id, payload, link) in append order, and the seal."""
        with self._lock, self._errors(), self._snapshot() as cur:
            rows = cur.execute(
                "SELECT record_id, payload, chain FROM toki_consumption ORDER BY n"
            ).fetchall()
            seal = cur.execute(
                "SELECT value FROM toki_meta WHERE name = 'consumption_seal'"
            ).fetchone()
        parsed = None if seal is None else parse_text_seal(self.url, str(seal[0]))
        return [(str(a), str(b), None if c is None else str(c)) for a, b, c in rows], parsed

    def load_consumption(self, consumer: str | None = None) -> list[tuple[str, str]]:
        """(record id, payload) rows in append order, of one consumer or all."""
        with self._lock, self._errors():
            if consumer is None:
                cur = self._live().execute(
                    "SELECT record_id, payload FROM toki_consumption ORDER BY n"
                )
            else:
                cur = self._live().execute(
                    "SELECT record_id, payload FROM toki_consumption WHERE md5(consumer) = "
                    "md5(%s) AND consumer = %s ORDER BY n",
                    (consumer, consumer),
                )
            return [(str(a), str(b)) for a, b in cur.fetchall()]

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
