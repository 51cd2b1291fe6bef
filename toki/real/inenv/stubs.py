"""Deterministic stand-ins for what makes a library's run differ between two executions:
the wall clock, uuid4, the embedding model.

* The clock is a gate point ("clock.now", writing the shared resource ("clock", None)): the
  value read depends on which agents read it before, so reading it is ordered against every
  other read, and the n-th read of a run returns BASE + n seconds (`tick`). A second per read
  stands for the LLM calls between two changes in a real run, and keeps timestamps distinct at
  the one-second resolution SQLite's DATETIME() compares them with. Outside an agent
  (building or observing) it returns the current value without advancing.
* uuid4 draws from a stream per agent (sha256 of run seed, agent, counter), so which id an
  agent gets does not depend on how the other agents were interleaved.
* The embedder hashes word features into a fixed number of dimensions (signed feature
  hashing, L2-normalised): equal texts embed equally, texts sharing words are close.
"""

from __future__ import annotations

import hashlib
import math
import types
import uuid
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from .controller import Controller

__all__ = ["BASE", "Embedder", "GatedDatetime", "clock_now", "embed", "uuid4"]

BASE = datetime(2026, 1, 1, tzinfo=UTC)
CLOCK: list[Controller] = []  # the worker's controller, set by `install`


def install(controller: Controller) -> None:
    CLOCK[:] = [controller]


def _controller() -> Controller:
    if not CLOCK:
        raise RuntimeError("toki.real stubs used before install(controller)")
    return CLOCK[0]


def tick(gated: bool = True) -> datetime:
    """Read the clock: inside an agent, advance it by one second (first parking at the
    "clock.now" gate point unless the caller's own gate point already declared the clock)."""
    ctl = _controller()
    if ctl.agent() is not None:
        if gated:
            ctl.gate("clock", "clock.now", None, [("clock", None)], [("clock", None)])
        ctl.clock_ticks += 1
    return BASE + timedelta(seconds=ctl.clock_ticks)


def clock_now() -> datetime:
    """The patched wall clock (UTC), a gate point inside an agent."""
    return tick(True)


class GatedDatetime(datetime):
    """`datetime` with `now`/`utcnow`/`today` served by `clock_now` (patch a module's name
    `datetime` with it; everything else behaves like datetime)."""

    gated = True

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> GatedDatetime:
        t = tick(cls.gated)
        t = t.astimezone(tz) if tz is not None else t.replace(tzinfo=None)
        return cls(t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond, t.tzinfo)

    @classmethod
    def utcnow(cls) -> GatedDatetime:
        return cls.now(UTC).replace(tzinfo=None)

    @classmethod
    def today(cls) -> GatedDatetime:
        return cls.now()


def uuid4() -> uuid.UUID:
    """A version-4 uuid from the calling agent's own stream."""
    ctl = _controller()
    agent = ctl.agent()
    stream = "setup" if agent is None else f"agent{agent}"
    n = ctl.ids.get(stream, 0)
    ctl.ids[stream] = n + 1
    raw = hashlib.sha256(f"{ctl.seed}/{stream}/{n}".encode()).digest()[:16]
    return uuid.UUID(bytes=raw, version=4)


def embed(text: Any, dims: int) -> list[float]:
    """Signed feature hashing of the lower-cased words of `text`, L2-normalised."""
    vec = [0.0] * dims
    for word in str(text).lower().replace("'", " ").split():
        h = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "big")
        vec[h % dims] += 1.0 if (h >> 32) & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec))
    if norm == 0.0:
        vec[0], norm = 1.0, 1.0
    return [x / norm for x in vec]


class Embedder:
    """An embedding model for libraries that call `embed(text, action)` / `embed_batch`.
    Not a gate point: an embedding reads and writes nothing shared, so stopping there would
    only add schedules that are equivalent to ones without the stop."""

    def __init__(self, dims: int) -> None:
        self.dims = dims
        self.config = types.SimpleNamespace(embedding_dims=dims, model="toki-real-stub")

    def embed(self, text: Any, memory_action: Any = None, *args: Any, **kw: Any) -> list[float]:
        return embed(text, self.dims)

    def embed_batch(self, texts: Any, memory_action: Any = None, *a: Any, **k: Any) -> Any:
        return [embed(t, self.dims) for t in texts]
