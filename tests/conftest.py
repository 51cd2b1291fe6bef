"""Shared fixtures: one backend suite runs against every store backend."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from toki import Memory

# Fixed, printed seeds: derandomized hypothesis everywhere (a CI run is reproducible).
settings.register_profile("toki", derandomize=True, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("TOKI_HYPOTHESIS_PROFILE", "toki"))

NOW = datetime(2026, 11, 29, tzinfo=UTC)

BACKENDS = ["memory", "sqlite", "postgres"]

MemoryFactory = Callable[[], Memory]


def fixed_clock() -> datetime:
    return NOW


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_memory(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[MemoryFactory]:
    """A factory of fresh Memory objects on the parametrized backend (fixed clock)."""
    opened: list[Memory] = []
    counter = iter(range(10**6))

    def factory() -> Memory:
        if backend == "memory":
            mem = Memory(clock=fixed_clock)
        elif backend == "postgres":
            mem = Memory(request.getfixturevalue("pg_store")(), clock=fixed_clock)
        else:
            mem = Memory.open(
                f"sqlite:///{tmp_path / f'store-{next(counter)}.db'}", clock=fixed_clock
            )
        opened.append(mem)
        return mem

    yield factory
    for mem in opened:
        mem.close()


@pytest.fixture
def mem(make_memory: MemoryFactory) -> Memory:
    return make_memory()


# -- PostgreSQL: each store gets its own schema `toki_test_<random>`, dropped afterwards ----


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    """A reachable server ($TOKI_PG_DSN); skip without one, or fail if TOKI_REQUIRE_PG=1."""
    import psycopg

    from toki.store.postgres import default_dsn, mask_dsn

    try:
        psycopg.connect(default_dsn(), connect_timeout=5).close()
    except psycopg.Error as exc:
        why = f"PostgreSQL at {mask_dsn(default_dsn())} is unreachable ({exc}); set TOKI_PG_DSN"
        if os.environ.get("TOKI_REQUIRE_PG") == "1":
            pytest.fail(f"TOKI_REQUIRE_PG=1 but {why}")
        pytest.skip(why)
    return default_dsn()


@pytest.fixture
def pg_store(pg_dsn: str) -> Iterator[Callable[..., Any]]:
    """factory(schema=None) -> a PostgresStore on `schema` (None: a fresh one)."""
    import psycopg

    from toki.store.postgres import PostgresStore

    schemas: set[str] = set()
    stores: list[PostgresStore] = []

    def factory(schema: str | None = None) -> PostgresStore:
        schema = schema or f"toki_test_{uuid.uuid4().hex[:12]}"
        schemas.add(schema)
        stores.append(PostgresStore(pg_dsn, schema=schema))
        return stores[-1]

    yield factory
    for store in stores:
        store.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`heavy` tests (the long real explorations an issue's target names: 50 schedules of a
    library whose schedule takes seconds) run with TOKI_HEAVY=1, as `make reproduce` does;
    `make test` and CI skip them, saying how to run them."""
    if os.environ.get("TOKI_HEAVY") == "1":
        return
    skip = pytest.mark.skip(reason="heavy: run with TOKI_HEAVY=1 pytest -m heavy "
                            "(make reproduce runs them)")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)
