"""mem0's `AsyncMemory` (mem0ai 1.x and 2.x), driven as an asynchronous agent.

The same library, files, stubs and gate points as `mem0.py`, but each agent awaits
`AsyncMemory`'s calls: claims are `add` calls, programs (`toki/real/program.py`) await each
step's operation. AsyncMemory runs its vector-store, LLM and history calls through
`asyncio.to_thread`, 1.x's `add` runs each memory action of one decision as a task of its own
(`asyncio.create_task`), and `delete_all` gathers one `_delete_memory` per memory
(`asyncio.gather`). Those tasks and threads are units of the agent (`controller.py`): with
`--faults tasks:<n>` the explorer interleaves them.

The clock: `datetime.now` is read in the coroutines themselves (on the agent's loop thread,
which must never block), so it is a stream per agent, as Graphiti's: agent i's n-th read is
BASE + n s + i ms; a per-agent clock is not shared state. The host half is mem0 1.x's.
Observations go through the same instance's async API, each run on a loop of its own in
the worker's thread (no agent there: its gate points pass through).
"""

from __future__ import annotations

import asyncio
import inspect
from datetime import timedelta, tzinfo
from typing import Any

from . import mem0 as sync_mem0
from . import stubs
from .controller import CURRENT, Controller

__all__ = ["Adapter"]


class _AgentClock(stubs.GatedDatetime):
    """`datetime.now` as one stream per agent (never parks: it runs on the loop thread)."""

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> Any:
        ctl = stubs._controller()
        agent = CURRENT.get()
        if agent is None:
            base = stubs.BASE + timedelta(seconds=ctl.clock_ticks)
        else:
            stream = f"clock/{agent}"
            n = ctl.ids.get(stream, 0) + 1
            ctl.ids[stream] = n
            base = stubs.BASE + timedelta(seconds=n, milliseconds=agent)
        out = cls.fromtimestamp(base.timestamp(), tz=base.tzinfo)
        return out if tz is None else out.astimezone(tz)

    @classmethod
    def utcnow(cls) -> Any:
        return cls.now()


class _Sync:
    """The few synchronous calls the mem0 adapter's observations make, on AsyncMemory."""

    def __init__(self, amemory: Any) -> None:
        self.amemory = amemory
        self.db = amemory.db
        self.vector_store = amemory.vector_store

    def get_all(self, **kw: Any) -> Any:
        return asyncio.run(self.amemory.get_all(**kw))

    def history(self, memory_id: str) -> Any:
        return asyncio.run(self.amemory.history(memory_id))

    def search(self, query: str, **kw: Any) -> Any:
        return asyncio.run(self.amemory.search(query, **kw))

    @property
    def _entity_store(self) -> Any:  # the entity store, once built (2.x, entities on)
        return getattr(self.amemory, "_entity_store", None)

    def close(self) -> None:
        close = getattr(self.amemory, "close", None)
        if close is not None:
            result = close()
            if asyncio.iscoroutine(result):
                asyncio.run(result)


class Adapter(sync_mem0.Adapter):
    is_async = True

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller)
        self.main.datetime = _AgentClock
        self.amemory: Any = None

    def describe(self) -> dict[str, Any]:
        return {"library": "mem0ai", "version": self.version, "api": "AsyncMemory"}

    def open(self, config: dict[str, Any]) -> None:
        super().open(config)  # the files and the config; its sync instance is replaced
        self.memory = None
        self.amemory = self.main.AsyncMemory.from_config(self.cfg)
        self.memory = _Sync(self.amemory)

    def reopen(self) -> None:
        self.amemory = self.main.AsyncMemory.from_config(self.cfg)
        self.memory = _Sync(self.amemory)

    def _instance(self) -> Any:
        return self.amemory

    async def _aprogram(self, agent: int, steps: list[dict[str, Any]]) -> list[Any]:
        """`_program` with each step's operation awaited (its tasks and threads are units);
        the step's return is a gate point of the agent's task, as there."""
        out = []
        for n, step in enumerate(steps):
            entry = self._begin(agent, n, step)
            if "error" not in entry:
                op = entry["op"]
                try:
                    got = self._request(self.amemory, op, entry["args"])
                    if inspect.isawaitable(got):
                        got = await got
                    self._returned(entry, step, self._answer(op, entry["args"], got))
                except Exception as exc:  # an application logs a failed call and goes on
                    entry["error"] = f"{type(exc).__name__}: {exc}"
            detail = {"op": entry["op"], "step": n}
            await self.controller.agate("program", "program.return", detail, *sync_mem0._LOG)
            out.append(self._end(entry))
        return out

    async def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:  # type: ignore[override]
        if inbox and "op" in inbox[0]:
            return await self._aprogram(agent, inbox)
        out = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            sync_mem0.CLAIM.set(claim)
            try:
                result = await self.amemory.add(
                    sync_mem0.message(claim), user_id=sync_mem0.subject(str(claim["key"]))
                )
            except Exception as exc:  # an agent logs a failed add and goes on, as apps do
                out.append([f"error: {type(exc).__name__}: {exc}"])
                continue
            rows = result.get("results", []) if isinstance(result, dict) else result
            out.append(sorted(str(r.get("event")) for r in rows or []))
        return out
