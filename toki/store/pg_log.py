"""The PostgreSQL backend's log: how events get into the insert-only, chained `toki_event`
(the sequencer, `append`, the one-time chaining of an old log), reading it back, and the
`toki_version` rows of its ASSERTs.

`PostgresStore` calls these inside its transactions and error mapping; each takes the cursor
of the caller's transaction and `where` (the store's URL) for its error texts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import psycopg

from toki.chain import GENESIS, link
from toki.errors import IntegrityError
from toki.log import Event, EventKind
from toki.store.base import LOG_COLUMNS, events_from_rows
from toki.store.pg_rows import (
    EVENT_ROW_COLS,
    KEY_COLS,
    SEQ_CLASS,
    advisory_lock,
    event_row,
    read_seal,
    version_row,
    write_seal,
)


def read_log(cur: psycopg.Cursor[Any], where: str) -> list[Event]:
    """Every sequenced event, with its chain link, in seq order."""
    rows = cur.execute(f"SELECT {LOG_COLUMNS} FROM toki_event ORDER BY seq").fetchall()
    return list(events_from_rows(rows, where))


def last_link(cur: psycopg.Cursor[Any], where: str) -> tuple[int, str]:
    """(seq, chain link) of the last logged event: new links continue from it."""
    last = cur.execute("SELECT seq, chain FROM toki_event ORDER BY seq DESC LIMIT 1").fetchone()
    if last is None:
        return 0, GENESIS
    if last[1] is None:
        raise IntegrityError(
            f"{where}: event seq {last[0]} has no chain link: the log was written by an "
            "earlier toki and is not chained yet (open it with Memory once, which chains "
            "it and records that as a CHAIN event)"
        )
    return int(last[0]), str(last[1])


def write_log(cur: psycopg.Cursor[Any], events: Sequence[Event], prev: str) -> None:
    """Copy sequenced events into toki_event, each linked on from `prev`, and move the seal
    to the last one (`events` is not empty)."""
    with cur.copy(f"COPY toki_event ({EVENT_ROW_COLS}, chain) FROM STDIN") as copy:
        for e in events:
            prev = link(prev, e)
            copy.write_row((*event_row(e), prev))
    write_seal(cur, events[-1].seq, prev)


def sequence(cur: psycopg.Cursor[Any], schema: str | None, where: str) -> int:
    """Give committed pending events the dense global seq, in (tick, key, key_seq) order,
    with their chain links; move them into the log. Returns how many. One READ COMMITTED
    transaction (`cur`'s, just begun) under the sequencer's advisory lock."""
    cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    advisory_lock(cur, SEQ_CLASS, schema)
    # a pending row whose id is logged already (two identical events, which only a toki
    # before issue #36 could write) stays pending, a duplicate every reader ignores, instead
    # of wedging the sequencer; the rest are sequenced
    rows = cur.execute(
        "SELECT 0, key_seq, kind, payload, payload_hash, event_id FROM toki_pending p WHERE "
        "NOT EXISTS (SELECT 1 FROM toki_event e WHERE e.event_id = p.event_id) "
        f"ORDER BY tick, {KEY_COLS}, key_seq"
    ).fetchall()
    if not rows:
        return 0
    seq, prev = last_link(cur, where)
    events = []
    for e in events_from_rows(rows, where):
        seq += 1
        events.append(dataclasses.replace(e, seq=seq))
    write_log(cur, events, prev)
    cur.execute(
        "DELETE FROM toki_pending WHERE event_id = ANY(%s)", ([e.event_id for e in events],)
    )
    cur.execute("UPDATE toki_meta SET value = %s WHERE name = 'watermark'", (str(seq),))
    return len(events)


def set_links(cur: psycopg.Cursor[Any], where: str, links: Sequence[tuple[int, str]]) -> None:
    """The one-time chaining of an old log: store the links of events that have none (the
    append-only trigger is disabled for this statement only, in the caller's transaction)."""
    if read_seal(cur, where) is not None:  # once chained, never again
        raise IntegrityError(f"{where}: the store's chain is sealed; it cannot be chained again")
    cur.execute("ALTER TABLE toki_event DISABLE TRIGGER toki_event_append_only")
    cur.executemany(
        "UPDATE toki_event SET chain = %s WHERE seq = %s AND chain IS NULL",
        [(link_, seq) for seq, link_ in links],
    )
    cur.execute("ALTER TABLE toki_event ENABLE TRIGGER toki_event_append_only")
    if links:
        write_seal(cur, *links[-1])


def insert_versions(cur: psycopg.Cursor[Any], events: Sequence[Event], *, sequenced: bool) -> None:
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


def rebuild_versions(cur: psycopg.Cursor[Any], where: str) -> None:
    """The repair of toki_version (repair_projection): its rows again from the log's
    ASSERTs, the append-only trigger lifted for this transaction's statements only."""
    events = read_log(cur, where)
    cur.execute("DROP TRIGGER IF EXISTS toki_version_append_only ON toki_version")
    cur.execute("DELETE FROM toki_version")
    cur.execute(  # recreated, also where it had been dropped
        "CREATE TRIGGER toki_version_append_only BEFORE UPDATE OR DELETE ON toki_version "
        "FOR EACH ROW EXECUTE FUNCTION toki_append_only()"
    )
    insert_versions(cur, events, sequenced=True)
