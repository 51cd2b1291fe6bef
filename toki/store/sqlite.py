"""SQLite backend: one file, one writer, WAL, an event table that triggers keep append-only.

Events and the projection rows they change are written in one transaction (BEGIN IMMEDIATE
holds the single-writer lock across read-validate-append), so a process killed mid-write
leaves either the whole change or none of it.
"""

from __future__ import annotations

import functools
import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

from toki.canonical import canonical_json
from toki.chain import GENESIS, link
from toki.errors import ConstraintViolation, IntegrityError, StoreBusy, StoreError
from toki.isolation import Isolation
from toki.log import Event
from toki.model import FactKey
from toki.replay import KeySummary
from toki.store.base import ALL_SEQS, EVENT_COLUMNS, LOG_COLUMNS, Plan, events_from_rows
from toki.time import format_instant, parse_instant

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

SCHEMA_VERSION = 3
"""1: events and projection; 2: each event's chain link (toki.chain; NULL before it);
3: the consumption log (toki.consumption), append-only like the event log."""

_NO_UPDATE = (
    "CREATE TRIGGER IF NOT EXISTS toki_event_no_update BEFORE UPDATE ON toki_event\n"
    "BEGIN SELECT RAISE(ABORT, 'toki_event is append-only: UPDATE is not allowed'); END"
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS toki_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS toki_event (
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
CREATE INDEX IF NOT EXISTS toki_event_recorded ON toki_event (recorded_at);
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
    payload   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS toki_consumption_consumer ON toki_consumption (consumer);
CREATE TRIGGER IF NOT EXISTS toki_consumption_no_update BEFORE UPDATE ON toki_consumption
BEGIN SELECT RAISE(ABORT, 'toki_consumption is append-only: UPDATE is not allowed'); END;
CREATE TRIGGER IF NOT EXISTS toki_consumption_no_delete BEFORE DELETE ON toki_consumption
BEGIN SELECT RAISE(ABORT, 'toki_consumption is append-only: DELETE is not allowed'); END;
""".replace("{no_update}", _NO_UPDATE)


INSERT_EVENT = (
    "INSERT INTO toki_event (seq, key_seq, kind, fact_key, recorded_at, payload, payload_hash, "
    "event_id, chain) VALUES (?,?,?,?,?,?,?,?,?)"
)


def event_row(e: Event, link: str | None = None) -> tuple[object, ...]:
    """An event as a `toki_event` row (the columns of `INSERT_EVENT`, in order)."""
    return (
        e.seq,
        e.key_seq,
        e.kind.value,
        _key_text(e.key),
        e.body["_recorded_at"],
        e.payload,
        e.payload_hash,
        e.event_id,
        link,
    )


class SQLiteStore:
    """Durable events and projection in one SQLite file."""

    def __init__(self, path: str | Path, *, busy_timeout: float = 30.0) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        self.busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._depth = 0
        try:
            self._conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=busy_timeout
            )
        except sqlite3.Error as exc:
            raise StoreError(f"url: cannot open SQLite file {self.path!r}: {exc}") from exc
        try:
            with self._errors():
                self._init_schema()
        except BaseException:
            self._conn.close()
            raise

    def _init_schema(self) -> None:
        conn = self._conn
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "toki_meta" not in tables:  # before any PRAGMA: leave the file untouched
            raise StoreError(
                f"url: {self.path} is a SQLite database but not a toki store (it has tables "
                f"{', '.join(sorted(tables)[:5])} and no toki_meta); it was left untouched "
                "(open a new file, or the toki store you meant)"
            )
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.executescript(_SCHEMA)
        row = conn.execute("SELECT value FROM toki_meta WHERE name='schema_version'").fetchone()
        if row is None:
            conn.execute(
                "INSERT OR IGNORE INTO toki_meta VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            conn.execute("INSERT OR IGNORE INTO toki_meta VALUES ('watermark', '0')")
        elif int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"url: {self.path} has schema version {row[0]}, newer than this toki "
                f"({SCHEMA_VERSION}); upgrade toki"
            )
        elif int(row[0]) < SCHEMA_VERSION:
            # 2: the chain column (Memory chains the old events on open); 3: the consumption
            # table, which the CREATE … IF NOT EXISTS script above has already added
            conn.execute("BEGIN IMMEDIATE")
            columns = {r[1] for r in conn.execute("PRAGMA table_info(toki_event)")}
            if "chain" not in columns:
                conn.execute("ALTER TABLE toki_event ADD COLUMN chain TEXT")
            conn.execute(
                "UPDATE toki_meta SET value=? WHERE name='schema_version'", (str(SCHEMA_VERSION),)
            )
            conn.execute("COMMIT")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Map driver errors onto toki's hierarchy, naming the file."""
        try:
            yield
        except sqlite3.IntegrityError as exc:
            raise ConstraintViolation(
                f"{self.path}: the database refused the write ({exc}); nothing of it was kept"
            ) from exc
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreBusy(
                    f"{self.path}: another connection held the write lock for longer than the "
                    f"busy timeout ({self.busy_timeout:g} s); nothing was written (retry, or "
                    "open with a longer busy_timeout)"
                ) from exc
            raise StoreError(f"{self.path}: SQLite failed: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"url: {self.path} cannot be used as a SQLite database ({exc}); "
                "it was left untouched"
            ) from exc

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
                if outermost and self._conn.in_transaction:
                    with suppress(sqlite3.Error):  # the original error is the one to report
                        self._conn.execute("ROLLBACK")
                raise
            finally:
                self._depth -= 1

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
                f"SELECT {EVENT_COLUMNS} FROM toki_event WHERE fact_key IN "
                f"({','.join('?' * len(texts))}) ORDER BY key_seq",
                texts,
            ).fetchall()
            partition = list(events_from_rows(rows, self.path))
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
                events = list(self.load(ALL_SEQS))
                watermark, projection = self.load_projection()
            finally:
                self._conn.execute("COMMIT")
        return events, [], watermark, projection

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
    ) -> None:
        with self._locked(), self._errors():
            if events:
                self._conn.executemany(INSERT_EVENT, self._linked(events))
            if replace:
                self._conn.execute("DELETE FROM toki_current")
            self._conn.executemany(
                "INSERT OR REPLACE INTO toki_current VALUES (?,?,?,?,?,?)",
                [
                    (
                        _key_text(k),
                        s.value_hash,
                        json.dumps(list(s.version_ids)),
                        s.open_conflicts,
                        s.open_intervals,
                        json.dumps([list(seg) for seg in s.segments]),
                    )
                    for k, s in summaries.items()
                ],
            )
            self._conn.execute(
                "UPDATE toki_meta SET value=? WHERE name='watermark'", (str(watermark),)
            )

    def _linked(self, events: Sequence[Event]) -> list[tuple[object, ...]]:
        """Rows with their chain links, continuing from the last stored event's link."""
        last = self._conn.execute(
            "SELECT seq, chain FROM toki_event ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        prev = GENESIS if last is None else last[1]
        if prev is None:
            raise IntegrityError(
                f"{self.path}: event seq {last[0]} has no chain link: the log was written by "
                "an earlier toki and is not chained yet (open it with Memory.open once, which "
                "chains it and records that as a CHAIN event)"
            )
        rows = []
        for e in events:
            prev = link(prev, e)
            rows.append(event_row(e, prev))
        return rows

    def set_links(self, links: Sequence[tuple[int, str]]) -> None:
        """The one-time migration of an unchained log: store the links of events that have
        none (the append-only trigger is lifted for this statement only, in one transaction)."""
        with self._locked(), self._errors():
            self._conn.execute("DROP TRIGGER toki_event_no_update")
            self._conn.executemany(
                "UPDATE toki_event SET chain = ? WHERE seq = ? AND chain IS NULL",
                [(link_, seq) for seq, link_ in links],
            )
            self._conn.execute(_NO_UPDATE)

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        with self._lock, self._errors():
            rows = self._conn.execute(
                f"SELECT {LOG_COLUMNS} FROM toki_event WHERE seq > ? ORDER BY seq",
                (after_seq,),
            ).fetchall()
        return events_from_rows(rows, str(self.path))

    def last_seq(self) -> int:
        with self._lock, self._errors():
            row = self._conn.execute("SELECT coalesce(max(seq), 0) FROM toki_event").fetchone()
        return int(row[0])

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        with self._lock, self._errors():
            wm = self._conn.execute("SELECT value FROM toki_meta WHERE name='watermark'").fetchone()
            rows = self._conn.execute("SELECT * FROM toki_current").fetchall()
        out = {}
        for key_text, value_hash, version_ids, conflicts, intervals, segments in rows:
            key = FactKey.from_json(json.loads(key_text))
            segs = tuple((a, b, _bound(c), _bound(d)) for a, b, c, d in json.loads(segments))
            out[key] = KeySummary(
                value_hash,
                tuple(json.loads(version_ids)),
                conflicts,
                intervals,
                segs,
            )
        return int(wm[0]) if wm else 0, out

    def append_consumption(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Append (record id, consumer, read_at, payload) rows; a known id is a no-op. Its own
        short transaction: it never touches the event log or the projection."""
        with self._locked(), self._errors():
            self._conn.executemany(
                "INSERT OR IGNORE INTO toki_consumption (record_id, consumer, read_at, payload) "
                "VALUES (?,?,?,?)",
                rows,
            )

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


def _bound(text: str | None) -> str | None:
    """A stored segment bound in today's canonical form (years before 1000 were unpadded)."""
    if text is None or (len(text) >= 20 and text[4] == "-"):
        return text
    return format_instant(parse_instant(text, "segment bound"))


@functools.lru_cache(maxsize=65536)
def _key_text(key: FactKey) -> str:
    return canonical_json(key.to_json())
