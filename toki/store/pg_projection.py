"""The PostgreSQL backend's projection: per-key summaries in `toki_current`, the adjudicated
segments in `toki_adjudicated` (whose EXCLUDE constraint refuses a contradiction), and the
watermark; written in the write's transaction, read back as `KeySummary`s.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from toki.canonical import digest
from toki.errors import ConstraintViolation
from toki.log import shared_key
from toki.model import FactKey
from toki.replay import KeySummary
from toki.store.pg_rows import KEY_COLS, instant_text, jsonb, key_row, overlap_message


def write_projection(
    cur: psycopg.Cursor[Any], summaries: Mapping[FactKey, KeySummary], *, replace: bool = False
) -> None:
    """Replace the projection rows of the summaries' keys (replace: of every key) in the
    caller's transaction; a contradiction is a ConstraintViolation naming the key."""
    if replace:
        cur.execute("DELETE FROM toki_adjudicated")
        cur.execute("DELETE FROM toki_current")
    if not summaries:
        return
    if not replace:
        cols = [list(c) for c in zip(*(key_row(k) for k in summaries), strict=True)]
        for table in ("toki_adjudicated", "toki_current"):
            cur.execute(
                sql.SQL(
                    "DELETE FROM {} t USING unnest(%s::text[], %s::text[], %s::text[], "
                    "%s::text[], %s::text[]) AS k(a, b, c, d, e) WHERE t.tenant = k.a "
                    "AND t.subject = k.b AND t.scope_kind = k.c AND t.scope_key = k.d "
                    "AND t.fact_key = k.e"
                ).format(sql.Identifier(table)),
                cols,
            )
    cur.executemany(
        "INSERT INTO toki_current VALUES (%s,%s,%s,%s,%s,%s,%s::text[],%s,%s)",
        [
            (*key_row(k), s.value_hash, list(s.version_ids), s.open_conflicts, s.open_intervals)
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


def read_projection(cur: psycopg.Cursor[Any]) -> tuple[int, dict[FactKey, KeySummary]]:
    """The watermark and every key's summary with its segments; adjudicated rows without a
    summary come back as a summary of nothing (drift that `reconcile` finds)."""
    wm = cur.execute("SELECT value FROM toki_meta WHERE name = 'watermark'").fetchone()
    rows = cur.execute(
        f"SELECT {KEY_COLS}, value_hash, version_ids, open_conflicts, open_intervals "
        "FROM toki_current"
    ).fetchall()
    segs = cur.execute(  # the bounds as timestamps: psycopg parses a range in Python
        f"SELECT {KEY_COLS}, version_id, value_json, lower(valid_during), upper(valid_during) "
        f"FROM toki_adjudicated ORDER BY {KEY_COLS}, ord"
    ).fetchall()
    by_key: dict[FactKey, list[tuple[str, str, str | None, str | None]]] = {}
    for tenant, subject, kind, skey, fkey, vid, value, lo, hi in segs:
        key = shared_key(tenant, subject, fkey, kind, skey)
        by_key.setdefault(key, []).append((vid, value, instant_text(lo), instant_text(hi)))
    out: dict[FactKey, KeySummary] = {}
    for tenant, subject, kind, skey, fkey, value_hash, vids, conflicts, intervals in rows:
        key = shared_key(tenant, subject, fkey, kind, skey)
        out[key] = KeySummary(
            value_hash, tuple(vids), conflicts, intervals, tuple(by_key.pop(key, ()))
        )
    for key, orphan in by_key.items():  # adjudicated rows without a summary: drift
        out[key] = KeySummary("", (), 0, 0, tuple(orphan))
    return int(wm[0]) if wm else 0, out
