"""Shared fixtures: one backend suite runs against every store backend."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import settings

from toki import Memory

# Fixed, printed seeds: derandomized hypothesis everywhere (a CI run is reproducible).
settings.register_profile("toki", derandomize=True, print_blob=True, deadline=None)
settings.load_profile(os.environ.get("TOKI_HYPOTHESIS_PROFILE", "toki"))

NOW = datetime(2026, 11, 29, tzinfo=UTC)

BACKENDS = ["memory", "sqlite"]

MemoryFactory = Callable[[], Memory]


def fixed_clock() -> datetime:
    return NOW


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_memory(backend: str, tmp_path: Path) -> Iterator[MemoryFactory]:
    """A factory of fresh Memory objects on the parametrized backend (fixed clock)."""
    opened: list[Memory] = []
    counter = iter(range(10**6))

    def factory() -> Memory:
        if backend == "memory":
            mem = Memory(clock=fixed_clock)
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
