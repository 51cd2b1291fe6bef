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
from typing import Any

from .demo_doc import DocumentLibrary

__all__ = ["Adapter"]


class Adapter(DocumentLibrary):
    is_async = True
    name = "toki-async-demo"

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
