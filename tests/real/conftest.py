"""Real-library fixtures: one worker per system and test module.

A system whose environment is missing is skipped with the setup command, except where
the environments are required (CI sets TOKI_REQUIRE_REAL=1 after creating them): there a
missing environment fails the test, so a broken setup can never pass as a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from toki.real import EnvironmentMissing, get_real_system, open_session
from toki.real.session import Session


def require(name: str) -> None:
    """Skip (or fail, where required) when the system's environment is missing."""
    from toki.real.systems import worker_python

    try:
        worker_python(get_real_system(name))
    except EnvironmentMissing as exc:
        if os.environ.get("TOKI_REQUIRE_REAL") == "1":
            pytest.fail(f"TOKI_REQUIRE_REAL=1 but {exc}")
        pytest.skip(str(exc))


def session_for(name: str) -> Iterator[Session]:
    require(name)
    with open_session(get_real_system(name)) as session:
        yield session


@pytest.fixture(scope="module")
def mem0_1() -> Iterator[Session]:
    yield from session_for("mem0-1.0.11")


@pytest.fixture(scope="module")
def mem0_2() -> Iterator[Session]:
    yield from session_for("mem0-2.2.1")


@pytest.fixture(scope="module")
def toki_sqlite() -> Iterator[Session]:
    yield from session_for("toki-sqlite")


@pytest.fixture(scope="module")
def toki_memory() -> Iterator[Session]:
    yield from session_for("toki-memory")


@pytest.fixture(scope="module")
def graphiti() -> Iterator[Session]:
    yield from session_for("graphiti-0.31.2")


@pytest.fixture(scope="module")
def langchain() -> Iterator[Session]:
    """One worker for the three systems of the langgraph-1.2.24 environment (the adapter
    is the same; each run's config names the store or LangMem)."""
    yield from session_for("langmem-0.0.30")


@pytest.fixture(scope="module")
def letta() -> Iterator[Session]:
    yield from session_for("letta-0.16.8")


@pytest.fixture(scope="module")
def cognee() -> Iterator[Session]:
    yield from session_for("cognee-1.6.5")
