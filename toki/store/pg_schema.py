"""The PostgreSQL backend's schema: its migrations, in order, each one idempotent, and the
runner that applies them.

`migrate` runs the ones a schema lacks under an advisory lock, in one transaction, and
records the version in `toki_meta`. A reader looking for a table's columns looks here.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors as pg_errors

from toki.errors import StoreError
from toki.store.pg_rows import MIGRATE_CLASS, advisory_lock

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "TOKEN_OF",
    "migrate",
    "stored_version",
    "version_refusal",
]

_M1 = """
CREATE TABLE IF NOT EXISTS toki_event (
    seq          bigint PRIMARY KEY,
    key_seq      bigint NOT NULL,
    kind         text NOT NULL,
    tenant       text NOT NULL,
    subject      text NOT NULL,
    scope_kind   text NOT NULL,
    scope_key    text NOT NULL,
    fact_key     text NOT NULL,
    recorded_at  timestamptz NOT NULL,
    version_ids  text[] NOT NULL,
    payload      text NOT NULL,
    payload_hash text NOT NULL,
    event_id     text NOT NULL UNIQUE,
    UNIQUE (tenant, subject, scope_kind, scope_key, fact_key, key_seq)
);
CREATE INDEX IF NOT EXISTS toki_event_recorded ON toki_event (recorded_at);

CREATE TABLE IF NOT EXISTS toki_version (
    id           text PRIMARY KEY,
    tenant       text NOT NULL,
    subject      text NOT NULL,
    scope_kind   text NOT NULL,
    scope_key    text NOT NULL,
    fact_key     text NOT NULL,
    value        jsonb,
    value_json   text NOT NULL,
    valid_during tstzrange NOT NULL,
    recorded_at  timestamptz NOT NULL,
    source_id    text NOT NULL,
    source_hash  text NOT NULL,
    supersedes   text,
    weight       double precision NOT NULL,
    event_seq    bigint NOT NULL REFERENCES toki_event (seq)
);
CREATE INDEX IF NOT EXISTS toki_version_key
    ON toki_version USING gist (tenant, subject, scope_kind, scope_key, fact_key, valid_during);

CREATE OR REPLACE FUNCTION toki_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% is append-only: % is not allowed', TG_TABLE_NAME, TG_OP
        USING ERRCODE = 'restrict_violation';
END $$;
CREATE OR REPLACE TRIGGER toki_event_append_only BEFORE UPDATE OR DELETE ON toki_event
    FOR EACH ROW EXECUTE FUNCTION toki_append_only();
CREATE OR REPLACE TRIGGER toki_event_no_truncate BEFORE TRUNCATE ON toki_event
    FOR EACH STATEMENT EXECUTE FUNCTION toki_append_only();
CREATE OR REPLACE TRIGGER toki_version_append_only BEFORE UPDATE OR DELETE ON toki_version
    FOR EACH ROW EXECUTE FUNCTION toki_append_only();
CREATE OR REPLACE TRIGGER toki_version_no_truncate BEFORE TRUNCATE ON toki_version
    FOR EACH STATEMENT EXECUTE FUNCTION toki_append_only();

CREATE TABLE IF NOT EXISTS toki_current (
    tenant         text NOT NULL,
    subject        text NOT NULL,
    scope_kind     text NOT NULL,
    scope_key      text NOT NULL,
    fact_key       text NOT NULL,
    value_hash     text NOT NULL,
    version_ids    text[] NOT NULL,
    open_conflicts integer NOT NULL,
    open_intervals integer NOT NULL,
    PRIMARY KEY (tenant, subject, scope_kind, scope_key, fact_key)
);

CREATE TABLE IF NOT EXISTS toki_adjudicated (
    tenant       text NOT NULL,
    subject      text NOT NULL,
    scope_kind   text NOT NULL,
    scope_key    text NOT NULL,
    fact_key     text NOT NULL,
    ord          integer NOT NULL,
    version_id   text NOT NULL,
    value        jsonb,
    value_json   text NOT NULL,
    valid_during tstzrange NOT NULL,
    PRIMARY KEY (tenant, subject, scope_kind, scope_key, fact_key, ord),
    CONSTRAINT toki_adjudicated_no_contradiction EXCLUDE USING gist (
        tenant WITH =, subject WITH =, scope_kind WITH =, scope_key WITH =, fact_key WITH =,
        valid_during WITH &&, value_json WITH <>
    )
);
"""


def _migration_1(cur: psycopg.Cursor[Any]) -> None:
    """Events, versions, the per-key summary and the adjudicated projection."""
    _create_btree_gist(cur)
    cur.execute(_M1)
    cur.execute("INSERT INTO toki_meta VALUES ('watermark', '0') ON CONFLICT DO NOTHING")


def _create_btree_gist(cur: psycopg.Cursor[Any]) -> None:
    """btree_gist in `public` where the role may create there: an extension created while
    toki's schema is first on the search_path lives in that schema, and `DROP SCHEMA …
    CASCADE` of it then drops the extension and, with it, every other schema's EXCLUDE
    constraint. A role without CREATE on public (PostgreSQL 15+ grants it to the database
    owner only) gets it in toki's schema, as before. Two stores migrating at once may both
    try to create it; the loser's unique violation is ignored."""
    for statement in (
        "CREATE EXTENSION IF NOT EXISTS btree_gist WITH SCHEMA public",
        "CREATE EXTENSION IF NOT EXISTS btree_gist",
    ):
        try:
            with cur.connection.transaction():  # a savepoint
                cur.execute(statement.encode())
            return
        except (pg_errors.UniqueViolation, pg_errors.DuplicateObject):
            return  # created concurrently by another migration
        except pg_errors.InsufficientPrivilege:
            continue
    raise StoreError(
        "btree_gist: this role may not create the extension, in public or in toki's schema "
        "(CREATE EXTENSION btree_gist once as a database owner)"
    )


_M2 = """
CREATE TABLE IF NOT EXISTS toki_head (
    tenant     text NOT NULL,
    subject    text NOT NULL,
    scope_kind text NOT NULL,
    scope_key  text NOT NULL,
    fact_key   text NOT NULL,
    pos        bigint NOT NULL,
    PRIMARY KEY (tenant, subject, scope_kind, scope_key, fact_key)
);
INSERT INTO toki_head
    SELECT tenant, subject, scope_kind, scope_key, fact_key, max(key_seq) FROM toki_event
    GROUP BY tenant, subject, scope_kind, scope_key, fact_key
ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS toki_pending (
    tick         bigint NOT NULL,
    key_seq      bigint NOT NULL,
    kind         text NOT NULL,
    tenant       text NOT NULL,
    subject      text NOT NULL,
    scope_kind   text NOT NULL,
    scope_key    text NOT NULL,
    fact_key     text NOT NULL,
    recorded_at  timestamptz NOT NULL,
    version_ids  text[] NOT NULL,
    payload      text NOT NULL,
    payload_hash text NOT NULL,
    event_id     text NOT NULL UNIQUE,
    UNIQUE (tenant, subject, scope_kind, scope_key, fact_key, key_seq)
);
CREATE SEQUENCE IF NOT EXISTS toki_tick;
ALTER TABLE toki_event ADD COLUMN IF NOT EXISTS chain text;
ALTER TABLE toki_version ALTER COLUMN event_seq DROP NOT NULL,
    DROP CONSTRAINT IF EXISTS toki_version_event_seq_fkey,
    ADD COLUMN IF NOT EXISTS key_seq bigint;
"""


def _migration_2(cur: psycopg.Cursor[Any]) -> None:
    """Concurrent writers: one head row per key, committed-but-unsequenced events, the
    transaction tick, and the log's chain column (NULL for events logged before it)."""
    cur.execute(_M2)


_M3 = """
ALTER TABLE toki_adjudicated ADD COLUMN IF NOT EXISTS value_digest text;
UPDATE toki_adjudicated
    SET value_digest = encode(sha256(convert_to(value_json, 'UTF8')), 'hex');
ALTER TABLE toki_adjudicated ALTER COLUMN value_digest SET NOT NULL;
ALTER TABLE toki_adjudicated DROP CONSTRAINT IF EXISTS toki_adjudicated_no_contradiction;
ALTER TABLE toki_adjudicated ADD CONSTRAINT toki_adjudicated_no_contradiction EXCLUDE USING gist (
    tenant WITH =, subject WITH =, scope_kind WITH =, scope_key WITH =, fact_key WITH =,
    valid_during WITH &&, value_digest WITH <>
);
"""


def _migration_3(cur: psycopg.Cursor[Any]) -> None:
    """The EXCLUDE constraint compares a sha256 of the value, not the value: a gist index
    row holds at most 8,191 bytes, so large values were refused on PostgreSQL only."""
    cur.execute(_M3)


_M4 = """
CREATE TABLE IF NOT EXISTS toki_consumption (
    n         bigserial PRIMARY KEY,
    record_id text NOT NULL UNIQUE,
    consumer  text NOT NULL,
    read_at   timestamptz NOT NULL,
    payload   text NOT NULL
);
CREATE INDEX IF NOT EXISTS toki_consumption_consumer ON toki_consumption (consumer, n);
CREATE OR REPLACE TRIGGER toki_consumption_append_only BEFORE UPDATE OR DELETE
    ON toki_consumption FOR EACH ROW EXECUTE FUNCTION toki_append_only();
CREATE OR REPLACE TRIGGER toki_consumption_no_truncate BEFORE TRUNCATE ON toki_consumption
    FOR EACH STATEMENT EXECUTE FUNCTION toki_append_only();
"""


def _migration_4(cur: psycopg.Cursor[Any]) -> None:
    """The consumption log (toki.consumption): named reads, append-only, beside the events."""
    cur.execute(_M4)


_M5 = """
CREATE TABLE IF NOT EXISTS toki_op (
    op_id  text PRIMARY KEY,
    result text NOT NULL
);
CREATE OR REPLACE TRIGGER toki_op_append_only BEFORE UPDATE OR DELETE
    ON toki_op FOR EACH ROW EXECUTE FUNCTION toki_append_only();
ALTER TABLE toki_consumption ADD COLUMN IF NOT EXISTS chain text;
DROP INDEX IF EXISTS toki_consumption_consumer;
CREATE INDEX IF NOT EXISTS toki_consumption_consumer_md5
    ON toki_consumption (md5(consumer), n);
"""


def _migration_5(cur: psycopg.Cursor[Any]) -> None:
    """Operation ids (issue #36): each write's id and outcome, committed with its events, so
    that after a lost connection the outcome is looked up and a retry never stores twice.
    Consumption records get a chain link of their own (toki.chain.consumption_link). The
    consumer index goes through md5(consumer): a btree row holds at most ~2.7 kB, so a
    longer consumer name failed on PostgreSQL only."""
    cur.execute(_M5)


_M6 = """
CREATE INDEX IF NOT EXISTS toki_version_key_seq
    ON toki_version (tenant, subject, scope_kind, scope_key, fact_key, key_seq);
"""


def _migration_6(cur: psycopg.Cursor[Any]) -> None:
    """Each key's versions by key_seq (issue #37): a checkpointed open checks the toki_version
    rows of every tail key at or after its first tail key_seq; through the gist index on key
    and valid time that read every version of the key (O(store), not O(tail))."""
    cur.execute(_M6)


_M7 = """
DROP INDEX IF EXISTS toki_version_key_seq;
CREATE INDEX IF NOT EXISTS toki_version_key_seq_c ON toki_version (tenant COLLATE "C",
    subject COLLATE "C", scope_kind COLLATE "C", scope_key COLLATE "C", fact_key COLLATE "C",
    key_seq);
"""


def _migration_7(cur: psycopg.Cursor[Any]) -> None:
    """Migration 6's index again, its key columns in collation "C" (issue #37): a planner
    without statistics chose between it and the gist index on key and valid time by guess,
    and on a 10^6-event store took the gist one (every version of each tail key: 0.44 s).
    Queried in "C", the key columns' equalities match this index only, so the open's
    per-key check walks it whatever the statistics. Equality is bytewise in both
    collations, so the rows are the same."""
    cur.execute(_M7)


TOKEN_OF = "toki_token_of(payload)"
"""The token a DECISION row's payload names, the expression toki_event_token indexes: NULL
where it names none, '' where PostgreSQL cannot read the payload (JSON holding \u0000 or a
lone surrogate, which toki's payloads may; or not JSON at all), so a lookup reads those
rows too and decodes them itself."""

_M8 = """
CREATE OR REPLACE FUNCTION toki_token_of(payload text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE STRICT AS $$
BEGIN
    RETURN payload::jsonb ->> 'token';
EXCEPTION WHEN others THEN
    RETURN '';  -- a payload jsonb cannot read: whoever looks a token up decodes it
END $$;
CREATE INDEX IF NOT EXISTS toki_event_token ON toki_event (toki_token_of(payload))
    WHERE kind = 'DECISION';
"""


def _migration_8(cur: psycopg.Cursor[Any]) -> None:
    """DECISION events by token (issue #37): confirm and reject name a HOLD by its token, and
    after a checkpointed open finding its key read every DECISION event of the log (0.33 s at
    10^6 events)."""
    cur.execute(_M8)


MIGRATIONS = (
    _migration_1,
    _migration_2,
    _migration_3,
    _migration_4,
    _migration_5,
    _migration_6,
    _migration_7,
    _migration_8,
)
SCHEMA_VERSION = len(MIGRATIONS)


def migrate(cur: psycopg.Cursor[Any], schema: str | None, server: str) -> None:
    """Bring `schema` to SCHEMA_VERSION in the caller's transaction (`server`: the masked
    DSN for the error text); a newer schema than this toki is a StoreError."""
    advisory_lock(cur, MIGRATE_CLASS, schema)
    cur.execute("CREATE TABLE IF NOT EXISTS toki_meta (name text PRIMARY KEY, value text NOT NULL)")
    row = cur.execute("SELECT value FROM toki_meta WHERE name='schema_version'").fetchone()
    have = int(row[0]) if row else 0
    if have > SCHEMA_VERSION:
        raise StoreError(
            f"url: schema {schema!r} at {server} has toki schema version {have}, newer than "
            f"this toki ({SCHEMA_VERSION}); upgrade toki"
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


def stored_version(conn: psycopg.Connection[Any], schema: str | None) -> int | None:
    """The toki schema version `schema` holds, None if it holds no toki store (creates
    nothing: `toki verify` and `toki shadow` open only what is there)."""
    found = conn.execute(
        "SELECT to_regclass(format('%%I.toki_meta', %s::text)) IS NOT NULL", (schema,)
    ).fetchone()
    if not (found and found[0]):
        return None
    row = conn.execute("SELECT value FROM toki_meta WHERE name = 'schema_version'").fetchone()
    return None if row is None else int(row[0])


def version_refusal(version: int | None, schema: str | None, server: str) -> str:
    """Why a store of `version` (`stored_version`) is not opened as it is."""
    if version is None:
        return (
            f"url: there is no toki store in schema {schema!r} at {server} "
            "(nothing was created; check the URL's ?schema=)"
        )
    return (
        f"url: schema {schema!r} holds toki schema version {version}, this toki "
        f"reads {SCHEMA_VERSION} (open it once with Memory.open to migrate, or use "
        "the toki that wrote it); nothing was changed"
    )
