"""A small library with restart hooks and module-level state: what a restart fault must not
let survive (tests/real/test_fresh_process.py; docs/real.md, Restart).

The memory is one JSON document on disk (`demo_doc`); the library also keeps, at module
level, the last document it wrote per path (`_CACHE`, as a process-wide cache or singleton
would) and serves reads from it. Reopened in the process that wrote it, it is served from
that cache: a torn file goes unseen. Reopened in a new process, as after a real death, the
cache is empty and the file is what there is. `integrity` says which: where the reopened
instance got its document ("cache", "file", or None when the file does not parse) and how
many instances this process has built.
"""

from __future__ import annotations

import json
from typing import Any

from .controller import Controller
from .demo_doc import DocumentLibrary

__all__ = ["Adapter"]

_CACHE: dict[str, dict[str, Any]] = {}  # path -> the last document this process wrote
_BUILT = [0]  # library instances this process has built (open and reopen)


class Adapter(DocumentLibrary):
    name = "toki-restart-demo"

    def __init__(self, controller: Controller) -> None:
        super().__init__(controller)
        self.source: str | None = None  # where the last reopen read the document from
        self.unopenable: str | None = None

    def open(self, config: dict[str, Any]) -> None:
        super().open(config)
        _BUILT[0] += 1
        self.source, self.unopenable = None, None

    def _read(self) -> dict[str, Any]:
        self.controller.gate("file", "doc.read", None, [("doc", "*")], [])
        cached = _CACHE.get(self.path)
        return json.loads(json.dumps(cached)) if cached is not None else self.snapshot()

    def _write(self, doc: dict[str, Any]) -> None:
        super()._write(doc)
        _CACHE[self.path] = json.loads(json.dumps(doc))

    def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        out = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            doc = self._read()
            doc["memories"][str(claim["key"])] = str(claim["value"])
            doc["count"] += 1
            self._write(doc)
            out.append(["ADD"])
        return out

    def snapshot(self) -> dict[str, Any]:
        if self.unopenable is not None:
            return {"memories": {}, "count": 0}
        return super().snapshot()

    # -- restart hooks --------------------------------------------------------------------

    def durable_files(self) -> list[str]:
        return [self.path] if self.path else []

    HANDOVER = ("path",)

    def reopen(self) -> None:
        _BUILT[0] += 1
        self.unopenable = None
        if self.path in _CACHE:
            self.source = "cache"
            return
        try:
            with open(self.path) as f:
                json.load(f)
        except ValueError as exc:
            self.source, self.unopenable = None, f"{type(exc).__name__}: {exc}"
            return
        self.source = "file"

    def integrity(self) -> dict[str, Any]:
        return {"source": self.source, "built_in_this_process": _BUILT[0]}
