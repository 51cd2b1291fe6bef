"""Letta's database: a private PostgreSQL 16 with pgvector, started from the `pgserver` wheel.

Letta 0.16.8's server always connects to PostgreSQL (`letta/server/db.py` builds its asyncpg
engine from `settings.letta_pg_uri`, default `localhost:5432`), and its ORM declares pgvector
columns (archival passages). The machine's PostgreSQL has no pgvector and Debian's archive
has no package of it, so the Letta environment carries `pgserver` (PostgreSQL 16.2 with
pgvector 0.6.2 in a wheel). `start` runs one in a directory, listening on a Unix socket only
(no TCP port), and returns the URI Letta reads from `LETTA_PG_URI`; `create_schema` makes
the tables the way the repository's migrations end (the wheel ships no migrations).

Must run before `letta` is imported: Letta reads its settings at import time.

`python -m inenv.letta_db` (in the Letta environment, `toki/real` on PYTHONPATH) is the
smoke test docs/real.md reports: a server, the schema, SyncServer's managers, an agent with
a core-memory block, the block updated through the block manager and read back, and the
network guard's record (it must be empty).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["create_schema", "start"]


def start(directory: str) -> tuple[Any, str]:
    """Start (or reuse) a pgserver in `directory`/pgdata; returns (server, Letta's URI).

    pgserver listens on a socket in the data directory ('-h ""': no IP address). Letta's
    URI parser (`letta/database_utils.py`) drops an empty host and keeps the query, so the
    socket directory travels as `?host=`, which asyncpg and psycopg2 both read; the netloc
    keeps a user and a placeholder host ('localhost', overridden by the query)."""
    import pgserver

    pgdata = Path(directory) / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    socket_dir = server.get_postmaster_info().socket_dir
    if socket_dir is None:
        raise RuntimeError(f"pgserver in {pgdata} did not report a socket directory")
    return server, f"postgresql://postgres@localhost/postgres?host={socket_dir}"


def create_schema(uri: str) -> None:
    """The vector extension, then every table of Letta's ORM (a sync psycopg2 engine).

    A column the ORM declares `server_default=FetchedValue()` (messages.sequence_id) gets
    its value from a sequence that only a migration creates (`message_seq_id`, revision
    e991d2e3b428); `create_all` leaves it without a default, so each such column gets a
    sequence and `default nextval(...)` here, as the migration gives it."""
    from letta.orm import Base
    from sqlalchemy import FetchedValue, create_engine, text

    engine = create_engine(uri.replace("postgresql://", "postgresql+psycopg2://", 1))
    try:
        with engine.begin() as conn:
            conn.execute(text("create extension if not exists vector"))
        Base.metadata.create_all(engine)
        with engine.begin() as conn:
            for table in Base.metadata.sorted_tables:
                for column in table.columns:
                    if type(column.server_default) is FetchedValue:  # not a DefaultClause
                        seq = f"{table.name}_{column.name}_seq"
                        conn.execute(text(f"create sequence if not exists {seq}"))
                        conn.execute(
                            text(
                                f"alter table {table.name} alter column {column.name} "
                                f"set default nextval('{seq}')"
                            )
                        )
    finally:
        engine.dispose()


def stub_configs(context_window: int) -> dict[str, Any]:
    """The LLM and embedding configurations of an agent whose model is never called (the
    endpoint is a closed loopback port: toki answers the LLM at a gate point)."""
    from letta.schemas.embedding_config import EmbeddingConfig
    from letta.schemas.llm_config import LLMConfig

    return {
        "llm_config": LLMConfig(
            model="stub",
            model_endpoint_type="openai",
            model_endpoint="http://127.0.0.1:9/v1",
            context_window=context_window,
        ),
        "embedding_config": EmbeddingConfig(
            embedding_model="stub",
            embedding_endpoint_type="openai",
            embedding_endpoint="http://127.0.0.1:9/v1",
            embedding_dim=64,
        ),
    }


async def _smoke() -> dict[str, Any]:
    from letta.schemas.agent import CreateAgent
    from letta.schemas.block import BlockUpdate, CreateBlock
    from letta.server.db import db_registry
    from letta.server.server import SyncServer
    from sqlalchemy import text

    server = SyncServer(init_with_default_org_and_user=False)
    org = await server.organization_manager.create_default_organization_async()
    user = await server.user_manager.create_default_actor_async(org_id=org.id)
    agent = await server.agent_manager.create_agent_async(
        CreateAgent(
            name="a1",
            memory_blocks=[CreateBlock(label="shared", value="alice lives in paris")],
            **stub_configs(8192),
            include_base_tools=False,
        ),
        actor=user,
    )
    block = next(b for b in agent.memory.blocks if b.label == "shared")
    await server.block_manager.update_block_async(
        block.id, BlockUpdate(value="alice lives in rome"), actor=user
    )
    again = await server.block_manager.get_block_by_id_async(block.id, actor=user)
    state = await server.agent_manager.get_agent_by_id_async(agent.id, actor=user)
    async with db_registry.async_session() as session:  # Letta's own engine: which server?
        served_by = (await session.execute(text("select version()"))).scalar_one()
        row = (
            await session.execute(
                text("select value, version from block where id = :id"), {"id": block.id}
            )
        ).one()
    return {
        "letta_engine_server": served_by,
        "block_row": list(row),
        "agent": agent.id,
        "block": block.id,
        "value_before": block.value,
        "value_after": again.value if again else None,
        "agent_sees": [b.value for b in state.memory.blocks if b.label == "shared"],
    }


def main() -> int:
    import asyncio
    import json

    from . import guard

    guard.install()
    work = tempfile.mkdtemp(prefix="toki-letta-")
    atexit.register(shutil.rmtree, work, True)  # registered first: runs after pgserver's stop
    os.environ["HOME"] = work  # LettaConfig writes ~/.letta/config
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the libraries' prints (and pg_ctl's, at exit) go to stderr
    server, uri = start(work)
    os.environ["LETTA_PG_URI"] = uri
    create_schema(uri)
    version = server.psql(
        "select version(); select extversion from pg_extension where extname = 'vector';"
    )
    result = asyncio.run(_smoke())
    result["uri"] = uri
    result["server"] = [line.strip() for line in version.splitlines() if line.strip()]
    result["network"] = guard.drain()
    out.write(json.dumps(result, default=str) + "\n")
    out.flush()
    return 1 if result["network"] else 0


if __name__ == "__main__":
    sys.exit(main())
