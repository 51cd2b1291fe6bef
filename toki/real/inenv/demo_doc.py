"""What the two demo libraries (async_demo, sync_demo) share: one JSON document on disk whose
every read and write is a gate point (footprint ("doc", "*")), and the worker protocol's
parts that do nothing for them. They differ only in how one `add()` runs its two units."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from .controller import Controller

__all__ = ["DOC", "DocumentLibrary"]

DOC = [("doc", "*")]


class DocumentLibrary:
    """A memory kept in one JSON document, {"memories": {key: value}, "count": n}."""

    name = "toki-demo"

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.root = tempfile.mkdtemp(prefix=f"{self.name}-")
        self.path = ""

    def describe(self) -> dict[str, Any]:
        return {"library": self.name, "version": "1"}

    def open(self, config: dict[str, Any]) -> None:
        self.path = os.path.join(tempfile.mkdtemp(dir=self.root), "doc.json")
        self._dump({"memories": {}, "count": 0})

    def _dump(self, doc: dict[str, Any]) -> None:
        with open(self.path, "w") as f:
            json.dump(doc, f, sort_keys=True)

    def _read(self) -> dict[str, Any]:
        self.controller.gate("file", "doc.read", None, DOC, [])
        return self.snapshot()

    def _write(self, doc: dict[str, Any]) -> None:
        self.controller.gate("file", "doc.write", None, [], DOC)
        self._dump(doc)

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
