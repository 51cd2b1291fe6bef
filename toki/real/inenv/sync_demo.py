"""A small synchronous memory whose one call runs two pool threads: the shape of mem0 1.x's
`Memory.add`, which submits its vector-store and graph work to a `ThreadPoolExecutor` and
waits for both, reduced to what shows a race between the pool threads of ONE agent
(tests/real/test_units.py; docs/real.md, Units inside a call).

`add(claim)` submits two read-modify-writes of the same JSON document on disk to a pool and
leaves the `with` block (which waits for them): `_store` puts the memory, `_count` bumps a
counter. Each file read and write is a gate point (footprint: reads or writes ("doc", "*")).
Run inline (`TOKI_REAL_POOLS=inline`, the earlier behaviour) or released oldest unit first,
`_store` finishes before `_count` reads; when `_count` reads before `_store` writes, its
write puts back a document without the memory: a lost update inside one call.
"""

from __future__ import annotations

import concurrent.futures
from typing import Any

from . import pools
from .controller import Controller
from .demo_doc import DocumentLibrary

__all__ = ["Adapter"]


class Adapter(DocumentLibrary):
    units = True
    name = "toki-sync-demo"

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller)
        pools.install_from_env(controller)

    def _store(self, claim: dict[str, Any]) -> None:
        doc = self._read()
        doc["memories"][str(claim["key"])] = str(claim["value"])
        self._write(doc)

    def _count(self) -> None:
        doc = self._read()
        doc["count"] += 1
        self._write(doc)

    def add(self, claim: dict[str, Any]) -> list[str]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            stored = pool.submit(self._store, claim)
            counted = pool.submit(self._count)
        stored.result(), counted.result()
        return ["ADD"]

    def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        out = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            out.append(self.add(claim))
        return out
