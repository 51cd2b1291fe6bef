"""A small asynchronous memory whose one call runs two units: the shape of mem0's
`AsyncMemory.add`, which writes the vector store and the history through
`asyncio.gather` / `asyncio.to_thread`, reduced to what shows a race between the units of
ONE agent (tests/real/test_units.py; docs/real.md, Faults and units).

`add(claim)` gathers two coroutines that each read-modify-write the same JSON document on
disk through `asyncio.to_thread` (as mem0's FAISS store pickles its whole docstore on every
write): `_store` puts the memory, `_count` bumps a counter. Each file read and write is a
gate point in the executor thread (footprint: reads or writes ("doc", "*")). Released
oldest first, `_store` finishes before `_count` reads; when `_count` reads before `_store`
writes, its write puts back a document without the memory: a lost update inside one call.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from typing import Any

from .controller import Controller

__all__ = ["Adapter"]

DOC = [("doc", "*")]


class Adapter:
    is_async = True

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.root = tempfile.mkdtemp(prefix="toki-real-async-demo-")
        self.path = ""

    def describe(self) -> dict[str, Any]:
        return {"library": "toki-async-demo", "version": "1"}

    def open(self, config: dict[str, Any]) -> None:
        self.path = os.path.join(tempfile.mkdtemp(dir=self.root), "doc.json")
        self._dump({"memories": {}, "count": 0})

    def _dump(self, doc: dict[str, Any]) -> None:
        with open(self.path, "w") as f:
            json.dump(doc, f, sort_keys=True)

    def _read(self) -> dict[str, Any]:
        self.controller.gate("file", "doc.read", None, DOC, [])
        with open(self.path) as f:
            doc: dict[str, Any] = json.load(f)
        return doc

    def _write(self, doc: dict[str, Any]) -> None:
        self.controller.gate("file", "doc.write", None, [], DOC)
        self._dump(doc)

    async def _store(self, claim: dict[str, Any]) -> None:
        doc = await asyncio.to_thread(self._read)
        doc["memories"][str(claim["key"])] = str(claim["value"])
        await asyncio.to_thread(self._write, doc)

    async def _count(self) -> None:
        doc = await asyncio.to_thread(self._read)
        doc["count"] += 1
        await asyncio.to_thread(self._write, doc)

    async def add(self, claim: dict[str, Any]) -> list[str]:
        await asyncio.gather(self._store(claim), self._count())
        return ["ADD"]

    async def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        out = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            out.append(await self.add(claim))
        return out

    def snapshot(self) -> dict[str, Any]:
        with open(self.path) as f:
            doc: dict[str, Any] = json.load(f)
        return doc

    def observe(self) -> dict[str, Any]:
        return self.snapshot()

    def recover(self, config: dict[str, Any]) -> Any:
        return None

    def on_crash(self, agent: int) -> None:
        pass

    def close(self) -> None:
        pass  # the worker removes `root` when it closes
