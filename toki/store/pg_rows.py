"""The PostgreSQL backend's row forms and small helpers: events, versions and keys as rows,
the URL's `schema` parameter and its rules, the advisory locks, the chain seals in `toki_meta`,
the comparison of `toki_version` with the log, the statement hook of a write, and error texts.

`toki.store.postgres.PostgresStore` is the store; `toki.store.pg_schema` its tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg

from toki.canonical import canonical_json
from toki.chain import Digest
from toki.errors import IntegrityError, InvalidInput
from toki.log import Event, EventKind
from toki.model import FactKey
from toki.replay import KeySummary
from toki.store.base import LOG_COLUMNS
from toki.time import format_instant, parse_instant


class Hooked:
    """A cursor whose statements call a hook before and after each one (fault injection)."""

    def __init__(self, cur: psycopg.Cursor[Any], hook: Callable[[str, str], None] | None):
        self._cur = cur
        self._hook = hook or (lambda stage, statement: None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def execute(self, query: Any, params: Any = None) -> psycopg.Cursor[Any]:
        text = _text(query)
        self._hook("before", text)
        result = self._cur.execute(query, params)
        self._hook("after", text)
        return result

    def executemany(self, query: Any, params: Any) -> None:
        text = _text(query)
        self._hook("before", text)
        self._cur.executemany(query, params)
        self._hook("after", text)

    @contextmanager
    def copy(self, statement: str) -> Iterator[Any]:
        self._hook("before", statement)
        with self._cur.copy(statement.encode()) as copy:
            yield copy
        self._hook("after", statement)


def _text(query: Any) -> str:
    if isinstance(query, bytes):
        return query.decode()
    return query if isinstance(query, str) else repr(query)


# pg_advisory_xact_lock(classid, objid): classid fixed per purpose, objid per schema, so two
# toki stores in different schemas of one database do not serialise each other.
LOCK_CLASS = 0x70C1  # the write lock (`write_lock`, `append`)
MIGRATE_CLASS = 0x70C2  # schema migrations
SEQ_CLASS = 0x70C3  # the sequencer
CONSUME_CLASS = 0x70C4  # the consumption log's chain (named reads)


def advisory_lock(
    cur: psycopg.Cursor[Any] | psycopg.Connection[Any], lock_class: int, schema: str | None
) -> None:
    """Take the transaction-scoped lock `lock_class` of `schema` (released at its end)."""
    cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (lock_class, schema))


MAX_SCHEMA_BYTES = 63
"""PostgreSQL's identifier limit (NAMEDATALEN - 1): a longer name is silently truncated."""


def check_schema_name(schema: str | None) -> str | None:
    """A schema name PostgreSQL keeps as given: at most 63 bytes of UTF-8, no control
    characters (a NUL cut the name short), not blank; checked before any DDL (issue #36)."""
    if schema is None:
        return None
    problem = None
    if not isinstance(schema, str) or not schema.strip():
        problem = "must be a non-empty name"
    elif any(ord(c) < 32 or ord(c) == 127 or 0xD800 <= ord(c) <= 0xDFFF for c in schema):
        problem = "contains a control character or lone surrogate"
    elif len(schema.encode("utf-8")) > MAX_SCHEMA_BYTES:
        problem = (
            f"is {len(schema.encode('utf-8'))} bytes; PostgreSQL keeps {MAX_SCHEMA_BYTES} and "
            "would cut it short, so two long names could name one store"
        )
    if problem is not None:
        raise InvalidInput(
            "schema", f"{schema!r} {problem}", f"use at most {MAX_SCHEMA_BYTES} printable bytes"
        )
    return schema


def split_schema(url: str) -> tuple[str, str | None]:
    """Take toki's own `schema` query parameter off the URL (libpq would refuse it)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"], quote_via=quote)  # libpq: no '+'

    return urlunsplit(parts._replace(query=rest)), schema or None


def with_schema(dsn: str, schema: str) -> str:
    parts = urlsplit(dsn)
    query = urlencode(
        [*parse_qsl(parts.query, keep_blank_values=True), ("schema", schema)], quote_via=quote
    )
    return urlunsplit(parts._replace(query=query))


def write_seal(cur: psycopg.Cursor[Any], seq: int, head: str) -> None:
    """Move the chain seal (toki.chain.check_seal) to (seq, head), in the caller's transaction."""
    cur.execute(
        "INSERT INTO toki_meta VALUES ('chain_seal', %s) "
        "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        (f"{seq}:{head}",),
    )


def read_seal(cur: psycopg.Cursor[Any], where: str) -> Digest | None:
    row = cur.execute("SELECT value FROM toki_meta WHERE name = 'chain_seal'").fetchone()
    return None if row is None else parse_text_seal(where, str(row[0]))


def parse_text_seal(where: str, text: str) -> Digest:
    try:
        return Digest.parse(text)
    except InvalidInput:
        raise IntegrityError(
            f"{where}: a seal in toki_meta ({text!r}) is not a digest: it was changed outside "
            "toki; run `toki verify URL --digest D` with a digest saved earlier"
        ) from None


_VERSION_SELECT = (
    "SELECT id, tenant, subject, scope_kind, scope_key, fact_key, value_json, "
    "lower(valid_during), upper(valid_during), recorded_at, source_id, source_hash, "
    "supersedes, weight, key_seq, value IS NOT DISTINCT FROM (CASE WHEN strpos(value_json, "
    "'\\u0000') > 0 THEN NULL ELSE value_json::jsonb END) FROM toki_version"
)


def version_table(cur: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    """Every toki_version row as the columns `version_drift` compares (the jsonb `value`
    as whether it still equals its exact text)."""
    return list(cur.execute(_VERSION_SELECT).fetchall())


def version_drift(rows: Sequence[tuple[Any, ...]], events: Sequence[Event]) -> dict[FactKey, str]:
    """{key: a version id} for each key whose toki_version rows are not exactly the rows of
    its first ASSERT per version (an edited, deleted or added row; issue #36 finding 5)."""
    want: dict[str, tuple[Any, ...]] = {}
    keys: dict[str, FactKey] = {}
    for e in events:
        if e.kind is EventKind.ASSERT and e.version_ids[0] not in want:
            row = version_row(e, False)
            want[row[0]] = (*row[:6], *row[7:14], float(row[14]), row[16], True)
            keys[row[0]] = e.key
    drift: dict[FactKey, str] = {}
    have = set()
    for row in rows:
        vid = str(row[0])
        have.add(vid)
        expected = want.get(vid)
        if row[14] is None and expected is not None:  # written before rows named key_seq
            expected = (*expected[:14], None, expected[15])
        if expected is None or _norm(row) != _norm(expected):
            key = keys.get(vid) or FactKey(row[1], row[2], row[5], row[3], row[4])
            drift.setdefault(key, vid)
    for vid in want.keys() - have:
        drift.setdefault(keys[vid], vid)
    return drift


def _norm(row: Sequence[Any]) -> tuple[Any, ...]:
    """A compared row with its instants (columns 7 to 9: valid start and end, recorded_at;
    timestamptz from the server, datetimes from an event) as toki's canonical text."""
    return (*row[:7], *(instant_text(x) if isinstance(x, datetime) else x for x in row[7:10]),
            *row[10:])


KEY_COLS = "tenant, subject, scope_kind, scope_key, fact_key"

EVENTS_AFTER = (
    f"SELECT {LOG_COLUMNS} FROM toki_event "
    "WHERE seq > %s AND seq <= (SELECT max(seq) FROM toki_event) ORDER BY seq"
)
"""The events after a seq, in order. The upper bound changes no result but the plan: with
`seq > %s` alone and no statistics yet (a table just loaded, before autovacuum analyzes it)
PostgreSQL guesses a third of the table and scans all of it (0.21 s at 10^6 events for the
two new events a write catches up on, and at every checkpointed open's tail read); with both
bounds it walks the primary key (0.1 ms)."""
EVENT_ROW_COLS = (
    "seq, key_seq, kind, tenant, subject, scope_kind, scope_key, fact_key, recorded_at, "
    "version_ids, payload, payload_hash, event_id"
)
"""The columns of `event_row`, in its order (COPY into toki_event)."""
PENDING_ROW_COLS = "tick" + EVENT_ROW_COLS[len("seq") :]
"""toki_pending's columns: the transaction tick in place of the seq."""


def key_row(key: FactKey) -> tuple[str, str, str, str, str]:
    return (key.tenant, key.subject, key.scope_kind, key.scope_key, key.fact_key)


def event_row(e: Event) -> tuple[Any, ...]:
    return (
        e.seq,
        e.key_seq,
        e.kind.value,
        *key_row(e.key),
        e.recorded_at,
        list(e.version_ids),
        e.payload,
        e.payload_hash,
        e.event_id,
    )


def version_row(e: Event, sequenced: bool) -> tuple[Any, ...]:
    v = e.version
    if v is None:  # pragma: no cover - event_from_record and make_event always set it
        raise IntegrityError(f"event seq {e.seq}: an ASSERT without its version")
    value_json = canonical_json(v.value)
    return (
        v.id,
        *key_row(v.key),
        jsonb(value_json),
        value_json,
        v.valid.start,
        v.valid.end,
        v.recorded_at,
        v.source_id,
        v.source_hash,
        v.supersedes,
        float(v.weight),
        e.seq if sequenced else None,
        e.key_seq,
    )


def jsonb(value_json: str) -> str | None:
    """jsonb cannot hold \\u0000; such a value keeps only its exact text column."""
    return None if "\\u0000" in value_json else value_json


def instant_text(at: datetime | None) -> str | None:
    """A timestamptz bound as toki's canonical text (None: unbounded)."""
    return None if at is None else format_instant(parse_instant(at))


def overlap_message(summaries: Mapping[FactKey, KeySummary], exc: psycopg.Error) -> str:
    """Name the key and the two intervals that the EXCLUDE constraint refused."""
    for key, s in summaries.items():
        segs = s.segments
        for i, (va, xa, sa, ea) in enumerate(segs):
            for vb, xb, sb, eb in segs[i + 1 :]:
                if xa != xb and _overlaps(sa, ea, sb, eb):
                    return (
                        f"toki_adjudicated: key {key} would hold {xa} ({va}) on [{sa}, {ea}) "
                        f"and {xb} ({vb}) on [{sb}, {eb}), which overlap (constraint "
                        "toki_adjudicated_no_contradiction); nothing was written"
                    )
    return f"toki_adjudicated: {describe(exc)}; nothing was written"


def _overlaps(sa: str | None, ea: str | None, sb: str | None, eb: str | None) -> bool:
    lo = max((parse_instant(x) for x in (sa, sb) if x is not None), default=None)
    hi = min((parse_instant(x) for x in (ea, eb) if x is not None), default=None)
    return lo is None or hi is None or lo < hi


def describe(exc: psycopg.Error) -> str:
    diag = exc.diag
    parts = [str(diag.message_primary or exc).strip()]
    if diag.message_detail:
        parts.append(diag.message_detail)
    if diag.constraint_name:
        parts.append(f"constraint {diag.constraint_name}")
    return "; ".join(parts)


def cause(exc: BaseException) -> str:
    if isinstance(exc, psycopg.Error):
        return f"SQLSTATE {exc.sqlstate}: {str(exc).strip()}"
    return str(exc)
