"""SQLite backend: one file, one writer, WAL, an event table that triggers keep append-only.

Events and the projection rows they change are written in one transaction (BEGIN IMMEDIATE
holds the single-writer lock across read-validate-append), so a process killed mid-write
leaves either the whole change or none of it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from json.encoder import encode_basestring_ascii as _json_string
from pathlib import Path
from typing import Any

from toki.canonical import canonical_json, decode_json
from toki.chain import GENESIS, Digest, check_seal, consumption_link, link
from toki.checkpoint import check_key_events, row_digest
from toki.errors import (
    ConstraintViolation,
    IntegrityError,
    InvalidInput,
    StoreBusy,
    StoreError,
)
from toki.isolation import Isolation
from toki.log import Event
from toki.model import FactKey, fact_key_of_text, fact_key_text
from toki.replay import KeySummary
from toki.store.base import (
    ALL_SEQS,
    EVENT_COLUMNS,
    LOG_COLUMNS,
    Operation,
    Plan,
    events_from_rows,
    lazy_events_from_rows,
)
from toki.time import format_instant, parse_instant

_LAZY_SELECT = ", ".join("e." + c for c in LOG_COLUMNS.split(", ")) + ", k.fact_key"
"""`LOG_COLUMNS` from toki_event e and the key text from toki_key k: the rows
`lazy_events_from_rows` reads."""

__all__ = [
    "INSERT_EVENT",
    "SCHEMA_VERSION",
    "SQLiteStore",
    "event_row",
    "id_prefix",
    "row_digest",
    "summary_of_row",
]

SCHEMA_VERSION = 4
"""1: events and projection; 2: each event's chain link (toki.chain; NULL before it);
3: the consumption log (toki.consumption), append-only like the event log;
4: events name their fact key by an integer id (`toki_key`), the event-id uniqueness check
goes through an integer index of the id's first 8 bytes, no `recorded_at` index (no query
used it). Files of versions 1-3 are rebuilt into this layout on open (`_migrate`)."""

CACHE_KIB = 65536
"""`PRAGMA cache_size` in KiB (a per-connection ceiling, filled on demand): the two event
indexes of a 10^6-event log fit in it, so a batch's random index inserts stay in memory."""

CHECKPOINT_PAGES = 10_000
"""`PRAGMA wal_autocheckpoint`: copy the WAL into the database file once it holds this many
pages (40 MB at 4 KiB pages; SQLite's default is 1,000). A 10,000-event batch writes more
than 1,000 pages, so the default checkpointed after every such commit."""

_NO_UPDATE = (
    "CREATE TRIGGER IF NOT EXISTS toki_event_no_update BEFORE UPDATE ON toki_event\n"
    "BEGIN SELECT RAISE(ABORT, 'toki_event is append-only: UPDATE is not allowed'); END"
)

VERSION_OF = (
    "CASE WHEN json_valid(payload) THEN json_extract(payload, '$._version_ids[0]') END"
)
"""The version id an ASSERT row's payload names, the expression toki_event_version indexes
(NULL, not an error, for a payload that is not JSON: reading that row names its seq)."""

TOKEN_OF = "CASE WHEN json_valid(payload) THEN json_extract(payload, '$.token') END"
"""The token a DECISION row's payload names, the expression toki_event_token indexes (a HOLD
decision's token is what confirm and reject are given)."""

_EVENT_TABLE = """
CREATE TABLE IF NOT EXISTS toki_event (
    seq          INTEGER PRIMARY KEY,
    key_id       INTEGER NOT NULL REFERENCES toki_key (id),
    key_seq      INTEGER NOT NULL,
    kind         TEXT NOT NULL,
    recorded_at  TEXT NOT NULL,
    payload      TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    id_prefix    INTEGER NOT NULL,
    chain        TEXT,
    UNIQUE (key_id, key_seq)
);
CREATE INDEX IF NOT EXISTS toki_event_id_prefix ON toki_event (id_prefix);
CREATE INDEX IF NOT EXISTS toki_event_version ON toki_event ({version_of}) WHERE kind = 'ASSERT';
CREATE INDEX IF NOT EXISTS toki_event_token ON toki_event ({token_of}) WHERE kind = 'DECISION';
""".replace("{version_of}", VERSION_OF).replace("{token_of}", TOKEN_OF)

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS toki_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS toki_key (id INTEGER PRIMARY KEY, fact_key TEXT NOT NULL UNIQUE);
CREATE TRIGGER IF NOT EXISTS toki_key_no_update BEFORE UPDATE ON toki_key
BEGIN SELECT RAISE(ABORT, 'toki_key is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER IF NOT EXISTS toki_key_no_delete BEFORE DELETE ON toki_key
BEGIN SELECT RAISE(ABORT, 'toki_key is append-only: DELETE is not allowed'); END;
"""
    + _EVENT_TABLE
    + """
CREATE TRIGGER IF NOT EXISTS toki_event_unique_id BEFORE INSERT ON toki_event
WHEN EXISTS (SELECT 1 FROM toki_event WHERE id_prefix = NEW.id_prefix AND event_id = NEW.event_id)
BEGIN SELECT RAISE(ABORT, 'UNIQUE constraint failed: toki_event.event_id'); END;
{no_update};
CREATE TRIGGER IF NOT EXISTS toki_event_no_delete BEFORE DELETE ON toki_event
BEGIN SELECT RAISE(ABORT, 'toki_event is append-only: DELETE is not allowed'); END;
CREATE TABLE IF NOT EXISTS toki_current (
    fact_key       TEXT PRIMARY KEY,
    value_hash     TEXT NOT NULL,
    version_ids    TEXT NOT NULL,
    open_conflicts INTEGER NOT NULL,
    open_intervals INTEGER NOT NULL,
    segments       TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS toki_consumption (
    n         INTEGER PRIMARY KEY AUTOINCREMENT,
    record_id TEXT NOT NULL UNIQUE,
    consumer  TEXT NOT NULL,
    read_at   TEXT NOT NULL,
    payload   TEXT NOT NULL,
    chain     TEXT
);
CREATE INDEX IF NOT EXISTS toki_consumption_consumer ON toki_consumption (consumer);
CREATE TRIGGER IF NOT EXISTS toki_consumption_no_update BEFORE UPDATE ON toki_consumption
BEGIN SELECT RAISE(ABORT, 'toki_consumption is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER IF NOT EXISTS toki_consumption_no_delete BEFORE DELETE ON toki_consumption
BEGIN SELECT RAISE(ABORT, 'toki_consumption is append-only: DELETE is not allowed'); END;
CREATE TABLE IF NOT EXISTS toki_op (op_id TEXT PRIMARY KEY, result TEXT NOT NULL);
CREATE TRIGGER IF NOT EXISTS toki_op_no_update BEFORE UPDATE ON toki_op
BEGIN SELECT RAISE(ABORT, 'toki_op is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER IF NOT EXISTS toki_op_no_delete BEFORE DELETE ON toki_op
BEGIN SELECT RAISE(ABORT, 'toki_op is append-only: DELETE is not allowed'); END;
"""
).replace("{no_update}", _NO_UPDATE)


INSERT_EVENT = (
    "INSERT INTO toki_event (seq, key_id, key_seq, kind, recorded_at, payload, payload_hash, "
    "event_id, id_prefix, chain) VALUES (?,?,?,?,?,?,?,?,?,?)"
)


VERSION_KEY = (
    "SELECT k.fact_key FROM toki_event e JOIN toki_key k ON k.id = e.key_id "
    f"WHERE e.kind = 'ASSERT' AND {VERSION_OF.replace('payload', 'e.payload')} = ? "
    "AND e.seq <= ?"
)
"""One version's key: through toki_event_version, whose expression it repeats exactly."""

HOLD_KEY = (
    "SELECT k.fact_key FROM toki_event e JOIN toki_key k ON k.id = e.key_id "
    f"WHERE e.kind = 'DECISION' AND {TOKEN_OF.replace('payload', 'e.payload')} = ? "
    "AND CASE WHEN json_valid(e.payload) THEN json_extract(e.payload, '$.action') END = 'HOLD' "
    "AND e.seq <= ? ORDER BY e.seq DESC LIMIT 1"
)
"""The key of the HOLD decision a token names (the last, as a fold keeps it): through
toki_event_token, whose expression it repeats exactly."""


def id_prefix(event_id: str) -> int:
    """The first 8 bytes of an event id (`e-` + hex) as a signed 64-bit integer: the key of
    the index through which the event-id uniqueness check goes. Distinct ids may share it
    (the check compares the whole id among the rows that do), so any deterministic value is
    correct; an id whose characters 3-18 are not hex gets a hash of its text instead."""
    try:
        value = int(event_id[2:18], 16)
    except ValueError:
        value = int.from_bytes(hashlib.sha256(event_id.encode()).digest()[:8], "big")
    return value - _2_64 if value >= _2_63 else value


_2_63 = 1 << 63
_2_64 = 1 << 64


def event_row(e: Event, key_id: int, link: str | None = None) -> tuple[object, ...]:
    """An event as a `toki_event` row (the columns of `INSERT_EVENT`, in order); `key_id`
    is its fact key's id in `toki_key`."""
    event_id = e.event_id
    return (
        e.seq,
        key_id,
        e.key_seq,
        e.kind._value_,  # the enum's value without the property lookup (hot in append)
        e.body["_recorded_at"],
        e.payload,
        e.payload_hash,
        event_id,
        id_prefix(event_id),
        link,
    )


class SQLiteStore:
    """Durable events and projection in one SQLite file."""

    def __init__(
        self, path: str | Path, *, busy_timeout: float = 30.0, existing: bool = False
    ) -> None:
        """existing: open only a toki store that is there, read-only, creating and migrating
        nothing (`toki verify`, `toki shadow`). A file that cannot be opened for writing
        (read-only media) is opened read-only too: readable and verifiable, writes refused."""
        self.path = str(path)
        self.read_only = False
        self.url = f"sqlite:///{self.path}"
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._driver_errors = _DriverErrors(self)
        self._depth = 0
        self._head: tuple[int, str | None] | None = None  # (seq, link) read in this transaction
        self._key_ids: dict[str, int] = {}
        """fact key text → its toki_key id, for ids this connection has seen committed or
        written in the open transaction (forgotten on rollback; toki_key never changes a row)"""
        on_disk = self.path != ":memory:" and Path(self.path).is_file()
        if existing and not on_disk:
            raise StoreError(
                f"url: there is no toki store at {self.path} (no such file; nothing was created)"
            )
        if existing:
            self._open_read_only()
            return
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
        except sqlite3.Error as exc:
            raise StoreError(f"url: cannot open SQLite file {self.path!r}: {exc}") from exc
        try:
            with self._errors():
                self._init_schema()
        except StoreError as exc:
            self._conn.close()
            if not (on_disk and _read_only_media(exc)):
                raise
            self._open_read_only()
        except BaseException:
            self._conn.close()
            raise

    def _open_read_only(self) -> None:
        """Open the file with SQLite's mode=ro (immutable=1 where even that fails: a WAL file
        on media where its -shm cannot be created); refuse anything but a current toki store."""
        uri = Path(self.path).resolve().as_uri()
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            conn = None
            try:
                conn = sqlite3.connect(
                    uri + query, uri=True, isolation_level=None, check_same_thread=False
                )
                tables = _tables(conn)
                break
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                conn_error: sqlite3.Error = exc
        else:
            raise StoreError(f"url: cannot open SQLite file {self.path!r}: {conn_error}")
        self._conn, self.read_only = conn, True
        try:
            version = self._version(tables) if "toki_meta" in tables else None
        except BaseException:
            conn.close()
            raise
        if version != SCHEMA_VERSION:
            conn.close()
            what = "is not a toki store" if version is None else f"has schema version {version}"
            raise StoreError(
                f"url: {self.path} {what}; read-only, this toki reads only version "
                f"{SCHEMA_VERSION} (open it writable once to migrate); it was left untouched"
            )

    def _init_schema(self) -> None:
        conn = self._conn
        tables = _tables(conn)
        if tables and "toki_meta" not in tables:  # before any PRAGMA: leave the file untouched
            raise StoreError(
                f"url: {self.path} is a SQLite database but not a toki store (it has tables "
                f"{', '.join(sorted(tables)[:5])} and no toki_meta); it was left untouched "
                "(open a new file, or the toki store you meant)"
            )
        version = self._version(tables)  # a newer file is refused before anything is written
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        conn.execute(f"PRAGMA wal_autocheckpoint={CHECKPOINT_PAGES}")
        if version is None or version < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")  # a second process opening the same old file waits
            try:
                tables = _tables(conn)
                version = self._version(tables)  # what the file holds now, under the lock
                if version is None or version < SCHEMA_VERSION:
                    self._migrate(tables)
                    for statement in _STATEMENTS:
                        conn.execute(statement)
                    conn.execute(
                        "INSERT OR REPLACE INTO toki_meta VALUES ('schema_version', ?)",
                        (str(SCHEMA_VERSION),),
                    )
                    conn.execute("INSERT OR IGNORE INTO toki_meta VALUES ('watermark', '0')")
                conn.execute("COMMIT")
            except BaseException:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        conn.executescript(_SCHEMA)  # recreates a dropped trigger or index
        if "chain" not in {r[1] for r in conn.execute("PRAGMA table_info(toki_consumption)")}:
            conn.execute("ALTER TABLE toki_consumption ADD COLUMN chain TEXT")  # issue #36
        # a store chained before the seal existed is sealed at its head (check_seal); read
        # first: a write would wait for the lock another connection may hold
        head = conn.execute(
            "SELECT seq || ':' || chain FROM toki_event WHERE chain IS NOT NULL AND seq = "
            "(SELECT max(seq) FROM toki_event) AND NOT EXISTS (SELECT 1 FROM toki_meta WHERE "
            "name = 'chain_seal')"
        ).fetchone()
        if head is not None:
            conn.execute("INSERT OR IGNORE INTO toki_meta VALUES ('chain_seal', ?)", head)

    def _version(self, tables: set[str]) -> int | None:
        """The file's schema version (None: a new file); a newer one than ours is refused."""
        if "toki_meta" not in tables:
            return None
        row = self._conn.execute(
            "SELECT value FROM toki_meta WHERE name='schema_version'"
        ).fetchone()
        if row is None:
            return None
        if int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"url: {self.path} has schema version {row[0]}, newer than this toki "
                f"({SCHEMA_VERSION}); upgrade toki"
            )
        return int(row[0])

    def _migrate(self, tables: set[str]) -> None:
        """Inside the open transaction: bring a version 1-3 event table to version 4's layout.
        Versions 1-3 keyed events by the fact key's text (`fact_key` column, UNIQUE with
        key_seq) and checked event ids by a UNIQUE text index; the rows are copied in seq
        order into the new table (every column kept, the fact key through its id), which
        re-runs every check of the new schema on them. Version 1 had no chain column: its
        links stay NULL until Memory.open chains the log. The consumption table (3) comes
        from the schema statements that follow."""
        conn = self._conn
        if "toki_event" not in tables:
            return
        columns = {r[1] for r in conn.execute("PRAGMA table_info(toki_event)")}
        if "fact_key" not in columns:  # already keyed by id (a version-4 table)
            if "chain" not in columns:
                conn.execute("ALTER TABLE toki_event ADD COLUMN chain TEXT")
            return
        conn.execute("ALTER TABLE toki_event RENAME TO toki_event_old")
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='trigger' AND tbl_name='toki_event_old'"
        ).fetchall():
            conn.execute(f'DROP TRIGGER "{name}"')
        for statement in _STATEMENTS:
            conn.execute(statement)
        conn.create_function("toki_id_prefix", 1, id_prefix, deterministic=True)
        conn.execute(
            "INSERT OR IGNORE INTO toki_key (fact_key) SELECT fact_key FROM toki_event_old "
            "ORDER BY seq"
        )
        chain = "o.chain" if "chain" in columns else "NULL"
        conn.execute(
            "INSERT INTO toki_event (seq, key_id, key_seq, kind, recorded_at, payload, "
            "payload_hash, event_id, id_prefix, chain) "
            "SELECT o.seq, k.id, o.key_seq, o.kind, o.recorded_at, o.payload, o.payload_hash, "
            f"o.event_id, toki_id_prefix(o.event_id), {chain} "
            "FROM toki_event_old o JOIN toki_key k ON k.fact_key = o.fact_key ORDER BY o.seq"
        )
        conn.execute("DROP TABLE toki_event_old")

    def _errors(self) -> _DriverErrors:
        """Map driver errors onto toki's hierarchy, naming the file."""
        return self._driver_errors

    def _mapped(self, exc: sqlite3.DatabaseError) -> StoreError:
        if isinstance(exc, sqlite3.IntegrityError):
            return ConstraintViolation(
                f"{self.path}: the database refused the write ({exc}); nothing of it was kept"
            )
        if isinstance(exc, sqlite3.OperationalError):
            if "locked" in str(exc) or "busy" in str(exc):
                return StoreBusy(
                    f"{self.path}: another connection held the write lock for longer than the "
                    f"busy timeout ({self.busy_timeout:g} s); nothing was written (retry, or "
                    "open with a longer busy_timeout)"
                )
            return StoreError(f"{self.path}: SQLite failed: {exc}")
        return StoreError(
            f"url: {self.path} cannot be used as a SQLite database ({exc}); it was left untouched"
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """BEGIN IMMEDIATE … COMMIT; on any failure (the commit's too) ROLLBACK, so the
        connection never stays inside a transaction after an error."""
        with self._lock:
            outermost = self._depth == 0
            if outermost:
                self._run("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
                if outermost:
                    self._run("COMMIT")
            except BaseException:
                if outermost:
                    self._key_ids.clear()  # ids inserted by the rolled-back transaction are gone
                    if self._conn.in_transaction:
                        with suppress(sqlite3.Error):  # the original error is the one to report
                            self._conn.execute("ROLLBACK")
                raise
            finally:
                self._depth -= 1
                if outermost:
                    self._head = None  # another process may append once the lock is released

    def _run(self, statement: str) -> None:
        with self._errors():
            self._conn.execute(statement)

    def write_lock(self) -> AbstractContextManager[None]:
        return self._locked()

    def transact(self, keys: frozenset[FactKey], level: Isolation, plan: Plan) -> int:
        """One writer (BEGIN IMMEDIATE is SQLite's serialisation; `level` is not needed):
        read the partition, plan, append, commit; a failure anywhere rolls everything back."""
        with self._locked(), self._errors():
            texts = sorted(_key_text(k) for k in keys)
            rows = self._conn.execute(
                f"SELECT {EVENT_COLUMNS} FROM toki_event WHERE key_id IN (SELECT id FROM "
                f"toki_key WHERE fact_key IN ({','.join('?' * len(texts))})) ORDER BY key_seq",
                texts,
            ).fetchall()
            partition = list(events_from_rows(rows, self.path))
            stray = next((e for e in partition if e.key not in keys), None)
            if stray is not None:
                raise IntegrityError(
                    f"{self.path}: event seq {stray.seq} is stored under another fact key "
                    f"than its payload's ({stray.key}): toki_key or toki_event.key_id was "
                    "changed outside toki; run `toki verify URL`"
                )
            events, summaries = plan(partition, self.last_seq())
            if events:
                self.append(events, summaries, events[-1].seq)
        return 0

    def sequence(self) -> int:
        return 0

    def load_state(self) -> tuple[list[Event], list[Event], int, dict[FactKey, KeySummary]]:
        """Log and projection in one read transaction (a concurrent writer cannot split them)."""
        with self._lock:
            self._run("BEGIN")
            try:
                seal = self.chain_seal()
                events = list(self.load(ALL_SEQS))
                watermark, projection = self.load_projection()
            finally:
                self._conn.execute("COMMIT")
        check_seal(self.url, events, seal)  # no downgrade: a stripped or shortened chain
        return events, [], watermark, projection

    # -- checkpoints (toki.checkpoint): the record in toki_meta, reads of the log up to it --

    def load_checkpoint(self) -> tuple[str, str | None] | None:
        """The checkpoint record and the digest stored beside it; None if there is none."""
        with self._lock, self._errors():
            rows = dict(
                self._conn.execute(
                    "SELECT name, value FROM toki_meta WHERE name IN "
                    "('checkpoint', 'checkpoint_digest')"
                ).fetchall()
            )
        text = rows.get("checkpoint")
        return None if text is None else (str(text), rows.get("checkpoint_digest"))

    def save_checkpoint(self, text: str, text_digest: str) -> None:
        with self._locked(), self._errors():
            self._conn.executemany(
                "INSERT OR REPLACE INTO toki_meta VALUES (?, ?)",
                [("checkpoint", text), ("checkpoint_digest", text_digest)],
            )

    def load_tail(
        self, seq: int, known: Mapping[str, FactKey] | None = None
    ) -> tuple[str | None, list[Event], Digest | None, str | None, int, dict[str, tuple[Any, ...]]]:
        """One consistent read for an open from a checkpoint at `seq`: (the stored link at
        seq, the events after it (LazyEvents: decoded on first use), the chain seal, the
        stored link at the seal's seq, projection watermark, projection rows as stored, by
        key text: `row_digest` and `summary_of_row` read them). `known`: key texts
        already parsed (the record's)."""
        with self._lock:
            self._run("BEGIN")
            try:
                seal = self.chain_seal()
                at = self._link_at(seq)
                at_seal = None if seal is None else self._link_at(seal.seq)
                with self._errors():
                    rows = self._conn.execute(
                        f"SELECT {_LAZY_SELECT} FROM toki_event e JOIN toki_key k "
                        "ON k.id = e.key_id WHERE e.seq > ? ORDER BY e.seq",
                        (seq,),
                    ).fetchall()
                tail = lazy_events_from_rows(rows, self.url, known)
                with self._errors():
                    wm = self._conn.execute(
                        "SELECT value FROM toki_meta WHERE name='watermark'"
                    ).fetchone()
                    rows = self._conn.execute("SELECT * FROM toki_current").fetchall()
            finally:
                self._conn.execute("COMMIT")
        watermark = int(wm[0]) if wm else 0
        return at, tail, seal, at_seal, watermark, {str(r[0]): tuple(r) for r in rows}

    def key_text(self, key: FactKey) -> str:
        return _key_text(key)

    def projection_digest(self, key: FactKey, summary: KeySummary) -> str:
        """The digest of the projection row `append` writes for (key, summary)."""
        return row_digest(_projection_row(key, summary))

    def digest_row(self, row: Sequence[object]) -> str:
        return row_digest(row)

    def parse_row(self, row: Sequence[Any]) -> tuple[FactKey, KeySummary]:
        return summary_of_row(row)

    def _link_at(self, seq: int) -> str | None:
        with self._errors():
            row = self._conn.execute(
                "SELECT chain FROM toki_event WHERE seq = ?", (seq,)
            ).fetchone()
        return None if row is None or row[0] is None else str(row[0])

    def key_events(self, key: FactKey, upto: int) -> list[Event]:
        """The key's events with seq <= upto in per-key order, each event's stored link
        checked against the link of the row before it (toki.checkpoint)."""
        with self._lock, self._errors():
            rows = self._conn.execute(
                f"SELECT {', '.join('e.' + c for c in LOG_COLUMNS.split(', '))}, p.chain "
                "FROM toki_event e LEFT JOIN toki_event p ON p.seq = e.seq - 1 "
                "WHERE e.key_id = (SELECT id FROM toki_key WHERE fact_key = ?) AND e.seq <= ? "
                "ORDER BY e.key_seq",
                (_key_text(key), upto),
            ).fetchall()
        events = list(events_from_rows([r[:-1] for r in rows], self.path))
        check_key_events(
            self.path, key, events, [r[-1] for r in rows], "toki_key or toki_event.key_id"
        )
        return events

    def has_event(self, event_id: str, upto: int) -> bool:
        with self._lock, self._errors():
            row = self._conn.execute(
                "SELECT 1 FROM toki_event WHERE id_prefix = ? AND event_id = ? AND seq <= ?",
                (id_prefix(event_id), event_id, upto),
            ).fetchone()
        return row is not None

    def event_ids(self, upto: int) -> list[str]:
        with self._lock, self._errors():
            rows = self._conn.execute(
                "SELECT event_id FROM toki_event WHERE seq <= ?", (upto,)
            ).fetchall()
        return [str(r[0]) for r in rows]

    def version_key(self, version_id: str, upto: int) -> FactKey | None:
        """The fact key of the version an ASSERT with seq <= upto made (an index lookup:
        toki_event_version), None if there is none."""
        with self._lock, self._errors():
            row = self._conn.execute(VERSION_KEY, (version_id, upto)).fetchone()
        return None if row is None else fact_key_of_text(str(row[0]), strict=False)

    def hold_key(self, token: str, upto: int) -> FactKey | None:
        """The fact key of the HOLD decision with seq <= upto that `token` names (an index
        lookup: toki_event_token), None if there is none."""
        with self._lock, self._errors():
            row = self._conn.execute(HOLD_KEY, (token, upto)).fetchone()
        return None if row is None else fact_key_of_text(str(row[0]), strict=False)

    def version_keys(self, upto: int) -> dict[str, FactKey]:
        """version id -> fact key of every ASSERT with seq <= upto (from the payloads)."""
        with self._lock, self._errors():
            rows = self._conn.execute(
                "SELECT json_extract(e.payload, '$._version_ids[0]'), k.fact_key FROM "
                "toki_event e JOIN toki_key k ON k.id = e.key_id "
                "WHERE e.kind = 'ASSERT' AND e.seq <= ?",
                (upto,),
            ).fetchall()
        keys: dict[str, FactKey] = {}
        out = {}
        for vid, text in rows:
            key = keys.get(text)
            if key is None:
                key = keys[text] = fact_key_of_text(text, strict=False)
            out[str(vid)] = key
        return out

    def decision_events(self, upto: int) -> list[Event]:
        with self._lock, self._errors():
            rows = self._conn.execute(
                f"SELECT {LOG_COLUMNS} FROM toki_event WHERE kind = 'DECISION' AND seq <= ? "
                "ORDER BY seq",
                (upto,),
            ).fetchall()
        return list(events_from_rows(rows, self.path))

    def prefix_events(self, upto: int) -> list[Event]:
        with self._lock, self._errors():
            rows = self._conn.execute(
                f"SELECT {LOG_COLUMNS} FROM toki_event WHERE seq <= ? ORDER BY seq", (upto,)
            ).fetchall()
        return list(events_from_rows(rows, self.path))

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
        op: Operation | None = None,
    ) -> None:
        """op: the write's operation id and outcome, stored in the same transaction."""
        with self._locked(), self._errors():
            seal = self._insert(events) if events else None
            if op is not None:
                self._conn.execute("INSERT INTO toki_op VALUES (?, ?)", (op.op_id, op.result))
            if replace:
                self._conn.execute("DELETE FROM toki_current")
            self._conn.executemany(
                "INSERT OR REPLACE INTO toki_current VALUES (?,?,?,?,?,?)",
                [_projection_row(k, s) for k, s in summaries.items()],
            )
            if seal is None:
                self._conn.execute(
                    "UPDATE toki_meta SET value=? WHERE name='watermark'", (str(watermark),)
                )
            else:  # the seal and the watermark in one statement (both rows always exist)
                self._conn.execute(
                    "INSERT OR REPLACE INTO toki_meta VALUES ('chain_seal', ?), ('watermark', ?)",
                    (seal, str(watermark)),
                )

    def _insert(self, events: Sequence[Event]) -> str:
        """Insert events with their key ids and chain links, continuing from the last stored
        event's link; the chain seal of the new head for the caller to store in the same
        transaction (toki.chain.check_seal)."""
        prev, key_ids = self._link_start(), self._key_ids_for(events)
        rows = _rows(events, key_ids, prev)
        self._conn.executemany(INSERT_EVENT, rows)
        seq, link_ = events[-1].seq, str(rows[-1][-1])
        self._head = (seq, link_)
        return f"{seq}:{link_}"

    def _seal(self, text: str) -> None:
        self._conn.execute("INSERT OR REPLACE INTO toki_meta VALUES ('chain_seal', ?)", (text,))

    def op_result(self, op_id: str) -> str | None:
        """The recorded outcome of a committed operation id, None if it never committed."""
        with self._lock, self._errors():
            if self.read_only and "toki_op" not in _tables(self._conn):
                return None  # a file written before operation ids, opened read-only
            row = self._conn.execute(
                "SELECT result FROM toki_op WHERE op_id = ?", (op_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def chain_seal(self) -> Digest | None:
        """The (seq, link) the store sealed its chain at; None before it was chained."""
        with self._lock, self._errors():
            row = self._conn.execute(
                "SELECT value FROM toki_meta WHERE name = 'chain_seal'"
            ).fetchone()
        return None if row is None else _parse_seal(self.path, str(row[0]))

    def load_log(self) -> tuple[list[Event], Digest | None]:
        """Every stored event (with its link) and the chain seal, in one read transaction."""
        with self._lock:
            self._run("BEGIN")
            try:
                seal = self.chain_seal()
                events = list(self.load(ALL_SEQS))
            finally:
                self._conn.execute("COMMIT")
        return events, seal

    def _read_head(self) -> tuple[int, str | None]:
        """(seq, link) of the last stored event, (0, GENESIS) for an empty log; inside a
        write transaction it is kept until the transaction ends, so that a write reads its
        log's head once (`last_seq` then `_link_start`) and nobody else can move it."""
        if self._head is not None:
            return self._head
        last = self._conn.execute(
            "SELECT seq, chain FROM toki_event ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        head = (0, GENESIS) if last is None else (int(last[0]), last[1])
        if self._depth > 0:
            self._head = head
        return head

    def _link_start(self) -> str:
        """The link of the last stored event (GENESIS for an empty log)."""
        seq, prev = self._read_head()
        if prev is None:
            raise IntegrityError(
                f"{self.path}: event seq {seq} has no chain link: the log was written by "
                "an earlier toki and is not chained yet (open it with Memory.open once, which "
                "chains it and records that as a CHAIN event)"
            )
        return str(prev)

    def _key_ids_for(self, events: Sequence[Event]) -> list[int]:
        """Each event's toki_key id, in order."""
        texts = [_key_text(e.key) for e in events]
        ids = self._key_ids
        missing = [t for t in dict.fromkeys(texts) if t not in ids]
        if missing:
            self._key_ids_of(missing)
        return [ids[t] for t in texts]

    def _key_ids_of(self, texts: Sequence[str]) -> None:
        """Learn the toki_key ids of fact keys, inserting those that have none (inside the
        write transaction: a rollback forgets them again, see `_locked`)."""
        conn = self._conn
        conn.executemany(
            "INSERT OR IGNORE INTO toki_key (fact_key) VALUES (?)", [(t,) for t in texts]
        )
        for i in range(0, len(texts), 500):
            part = texts[i : i + 500]
            marks = ",".join("?" * len(part))
            found = conn.execute(
                f"SELECT fact_key, id FROM toki_key WHERE fact_key IN ({marks})", part
            ).fetchall()
            self._key_ids.update((str(t), int(k)) for t, k in found)
        lost = [t for t in texts if t not in self._key_ids]
        if lost:  # pragma: no cover - the INSERT above gave each one an id
            raise StoreError(f"{self.path}: toki_key has no id for {lost[0]}")

    def set_links(self, links: Sequence[tuple[int, str]]) -> None:
        """The one-time migration of an unchained log: store the links of events that have
        none (the append-only trigger is lifted for this statement only, in one transaction)."""
        with self._locked(), self._errors():
            if self.chain_seal() is not None:  # once chained, never again (check_seal)
                raise IntegrityError(
                    f"{self.path}: the store's chain is sealed; it cannot be chained again"
                )
            self._conn.execute("DROP TRIGGER toki_event_no_update")
            self._head = None  # the links it read are being written
            self._conn.executemany(
                "UPDATE toki_event SET chain = ? WHERE seq = ? AND chain IS NULL",
                [(link_, seq) for seq, link_ in links],
            )
            self._conn.execute(_NO_UPDATE)
            if links:
                self._seal(f"{links[-1][0]}:{links[-1][1]}")

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        with self._lock, self._errors():
            rows = self._conn.execute(
                f"SELECT {LOG_COLUMNS} FROM toki_event WHERE seq > ? ORDER BY seq",
                (after_seq,),
            ).fetchall()
        return events_from_rows(rows, str(self.path))

    def last_seq(self) -> int:
        with self._lock, self._errors():
            return self._read_head()[0]

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        with self._lock, self._errors():
            wm = self._conn.execute("SELECT value FROM toki_meta WHERE name='watermark'").fetchone()
            rows = self._conn.execute("SELECT * FROM toki_current").fetchall()
        out = dict(map(summary_of_row, rows))
        return int(wm[0]) if wm else 0, out

    def append_consumption(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Append (record id, consumer, read_at, payload) rows; a known id is a no-op. Its own
        short transaction: it never touches the event log or the projection."""
        with self._locked(), self._errors():
            conn = self._conn
            seal = conn.execute(
                "SELECT value FROM toki_meta WHERE name = 'consumption_seal'"
            ).fetchone()
            if seal is None:  # the first chained record: after any unchained ones
                count = conn.execute("SELECT count(*) FROM toki_consumption").fetchone()
                position, head = int(count[0]), GENESIS
            else:
                sealed = _parse_seal(self.path, str(seal[0]))
                position, head = sealed.seq, sealed.head
            for record_id, consumer, read_at, payload in rows:
                known = conn.execute(
                    "SELECT 1 FROM toki_consumption WHERE record_id = ?", (record_id,)
                ).fetchone()
                if known:  # a known id is a no-op
                    continue
                head = consumption_link(head, record_id, payload)
                position += 1
                conn.execute(
                    "INSERT INTO toki_consumption (record_id, consumer, read_at, payload, chain) "
                    "VALUES (?,?,?,?,?)",
                    (record_id, consumer, read_at, payload, head),
                )
            conn.execute(
                "INSERT OR REPLACE INTO toki_meta VALUES ('consumption_seal', ?)",
                (f"{position}:{head}" if position else "0:",),
            )

    def index_problem(self) -> str | None:
        """The first event whose `toki_key` row names another fact key than its payload does
        (toki_key is an index of the log: an edit there misfiles events; `toki verify`)."""
        with self._lock, self._errors():
            rows = self._conn.execute(
                "SELECT e.seq, e.payload, k.fact_key FROM toki_event e LEFT JOIN toki_key k "
                "ON k.id = e.key_id ORDER BY e.seq"
            ).fetchall()
        for seq, payload, key_text in rows:
            key = decode_json(payload)["_key"]
            if key_text is None or canonical_json(key) != key_text:
                return (
                    f"{self.path}: event seq {seq} is filed under toki_key "
                    f"{key_text!r:.80}, not its own key: toki_key or toki_event.key_id was "
                    "changed outside toki"
                )
        return None

    def load_consumption_log(self) -> tuple[list[tuple[str, str, str | None]], Digest | None]:
        """Every consumption record (id, payload, link) in append order, and the seal."""
        with self._lock:
            self._run("BEGIN")
            try:
                with self._errors():
                    info = self._conn.execute("PRAGMA table_info(toki_consumption)")
                    columns = {r[1] for r in info}
                    chain = "chain" if "chain" in columns else "NULL"  # read-only, pre-#36
                    rows = self._conn.execute(
                        f"SELECT record_id, payload, {chain} FROM toki_consumption ORDER BY n"
                    ).fetchall()
                    seal = self._conn.execute(
                        "SELECT value FROM toki_meta WHERE name = 'consumption_seal'"
                    ).fetchone()
            finally:
                self._conn.execute("COMMIT")
        parsed = None if seal is None else _parse_seal(self.path, str(seal[0]))
        return [(str(a), str(b), None if c is None else str(c)) for a, b, c in rows], parsed

    def load_consumption(self, consumer: str | None = None) -> list[tuple[str, str]]:
        """(record id, payload) rows in append order, of one consumer or all."""
        with self._lock, self._errors():
            if consumer is None:
                cur = self._conn.execute(
                    "SELECT record_id, payload FROM toki_consumption ORDER BY n"
                )
            else:
                cur = self._conn.execute(
                    "SELECT record_id, payload FROM toki_consumption WHERE consumer = ? ORDER BY n",
                    (consumer,),
                )
            return [(str(a), str(b)) for a, b in cur.fetchall()]

    def execute(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        """Run raw SQL (tests use it to prove the triggers hold and to corrupt projections)."""
        with self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class _DriverErrors:
    """`SQLiteStore._errors`: a plain context manager rather than a generator one (a write
    enters it five times; it holds no state, so one instance serves nested uses)."""

    __slots__ = ("store",)

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, sqlite3.DatabaseError):
            raise self.store._mapped(exc) from exc


def _rows(events: Sequence[Event], key_ids: Sequence[int], prev: str) -> list[tuple[object, ...]]:
    """`toki_event` rows of consecutive events, chained on from `prev`."""
    rows = []
    for e, key_id in zip(events, key_ids, strict=True):
        prev = link(prev, e)
        rows.append(event_row(e, key_id, prev))
    return rows


def _projection_row(key: FactKey, s: KeySummary) -> tuple[object, ...]:
    """A `toki_current` row."""
    return (
        _key_text(key),
        s.value_hash,
        json_list(s.version_ids),
        s.open_conflicts,
        s.open_intervals,
        "[" + ", ".join([json_list(seg) for seg in s.segments]) + "]",
    )


def json_list(items: Iterable[str | None]) -> str:
    """`json.dumps(list(items))` of strings and None, byte for byte (a checkpoint digests
    the stored text), through json's own C string encoder: a write stores two such lists
    per key it touches, and json.dumps's Python layers cost more than the encoding."""
    return "[" + ", ".join(["null" if s is None else _json_string(s) for s in items]) + "]"


def summary_of_row(row: Sequence[Any]) -> tuple[FactKey, KeySummary]:
    """A `toki_current` row read back."""
    key_text, value_hash, version_ids, conflicts, intervals, segments = row
    key = fact_key_of_text(key_text, strict=False)
    segs = tuple((a, b, _bound(c), _bound(d)) for a, b, c, d in json.loads(segments))
    return key, KeySummary(value_hash, tuple(json.loads(version_ids)), conflicts, intervals, segs)


def _parse_seal(where: str, text: str) -> Digest:
    try:
        return Digest.parse(text)
    except InvalidInput:
        raise IntegrityError(
            f"{where}: the chain seal in toki_meta ({text!r}) is not a digest: it was changed "
            "outside toki; run `toki verify URL --digest D` with a digest saved earlier"
        ) from None


def _read_only_media(exc: StoreError) -> bool:
    """Whether opening for writing failed only because the file or its folder is read-only."""
    text = str(exc.__cause__ or exc).lower()
    return "readonly" in text or "read-only" in text or "unable to open" in text


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _statements(script: str) -> list[str]:
    """A script's statements one by one (to run them inside a transaction we hold)."""
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            out.append(current.strip())
            current = ""
    return out


_STATEMENTS = _statements(_SCHEMA)


def _bound(text: str | None) -> str | None:
    """A stored segment bound in today's canonical form (years before 1000 were unpadded)."""
    if text is None or (len(text) >= 20 and text[4] == "-"):
        return text
    return format_instant(parse_instant(text, "segment bound"))


_key_text = functools.lru_cache(maxsize=65536)(fact_key_text)
