"""The PostgreSQL backend's consumption log (named reads, docs/consumption.md): records in
`toki_consumption`, chained and sealed like the event log but apart from it.

Named reads never take the write lock, a head row or anything of the event log: they
serialise among themselves under their own advisory lock. `PostgresStore`'s methods of the
same names call these inside its error mapping.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from toki.chain import GENESIS, Digest, consumption_link
from toki.store.pg_rows import CONSUME_CLASS, advisory_lock, parse_text_seal


def append_consumption(
    cur: psycopg.Cursor[Any],
    schema: str | None,
    where: str,
    rows: Sequence[tuple[str, str, str, str]],
) -> None:
    """Append (record id, consumer, read_at, payload) rows in the caller's transaction,
    chained on from the consumption seal; a known id is a no-op."""
    advisory_lock(cur, CONSUME_CLASS, schema)
    seal = cur.execute("SELECT value FROM toki_meta WHERE name = 'consumption_seal'").fetchone()
    if seal is None:  # the first chained record: after any unchained ones
        count = cur.execute("SELECT count(*) FROM toki_consumption").fetchone()
        position, head = int(count[0]) if count else 0, GENESIS
    else:
        sealed = parse_text_seal(where, str(seal[0]))
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
            "INSERT INTO toki_consumption (record_id, consumer, read_at, payload, chain) "
            "VALUES (%s, %s, %s, %s, %s)",
            fresh,
        )
        cur.execute(
            "INSERT INTO toki_meta VALUES ('consumption_seal', %s) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (f"{position}:{head}",),
        )


def load_consumption_log(
    cur: psycopg.Cursor[Any], where: str
) -> tuple[list[tuple[str, str, str | None]], Digest | None]:
    """Every record (id, payload, link) in append order, and the seal (one snapshot: `cur`)."""
    rows = cur.execute(
        "SELECT record_id, payload, chain FROM toki_consumption ORDER BY n"
    ).fetchall()
    seal = cur.execute("SELECT value FROM toki_meta WHERE name = 'consumption_seal'").fetchone()
    parsed = None if seal is None else parse_text_seal(where, str(seal[0]))
    return [(str(a), str(b), None if c is None else str(c)) for a, b, c in rows], parsed


def load_consumption(conn: psycopg.Connection[Any], consumer: str | None) -> list[tuple[str, str]]:
    """(record id, payload) rows in append order, of one consumer or all (md5(consumer):
    the index that any length of consumer name fits, migration 5)."""
    if consumer is None:
        cur = conn.execute("SELECT record_id, payload FROM toki_consumption ORDER BY n")
    else:
        cur = conn.execute(
            "SELECT record_id, payload FROM toki_consumption WHERE md5(consumer) = md5(%s) "
            "AND consumer = %s ORDER BY n",
            (consumer, consumer),
        )
    return [(str(a), str(b)) for a, b in cur.fetchall()]
