"""Faults inside the worker: the exceptions an injected store failure raises, and torn writes.

Standard library only (this module runs in every library's environment).

* `make_error(kind)`: the exception a failed boundary call raises, by kind — what the
  library would see from its store: `timeout` (TimeoutError), `locked`
  (sqlite3.OperationalError "database is locked"), `unique` (sqlite3.IntegrityError
  "UNIQUE constraint failed"), `reset` (ConnectionResetError).
* `FileWatch`: which of the library's durable files (the adapter's `durable_files()`)
  changed last, so that a process death can tear that write.
* `tear(path)`: the write reached disk only in part: the file keeps the first half of the
  bytes its last write wrote (a file rewritten whole, e.g. `pickle.dump` to a file opened
  "wb", truncates first, so a prefix of the new content is what a death mid-write leaves).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable
from typing import Any

__all__ = ["ERRORS", "FileWatch", "make_error", "tear"]

ERRORS = {
    "timeout": (TimeoutError, "timed out (injected by toki)"),
    "locked": (sqlite3.OperationalError, "database is locked (injected by toki)"),
    "unique": (sqlite3.IntegrityError, "UNIQUE constraint failed (injected by toki)"),
    "reset": (ConnectionResetError, "[Errno 104] Connection reset by peer (injected by toki)"),
}


def make_error(kind: str) -> BaseException:
    if kind not in ERRORS:
        raise ValueError(f"fail: unknown error kind {kind!r} (use {', '.join(ERRORS)})")
    cls, text = ERRORS[kind]
    return cls(text)


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


class FileWatch:
    """The order in which the library's durable files were last written (content changes
    seen after each released step; within one step, by modification time then by the
    adapter's order of its files)."""

    def __init__(self) -> None:
        self.seen: dict[str, str | None] = {}
        self.order: list[str] = []  # least recently written first

    def reset(self, files: Iterable[str]) -> None:
        self.seen = {f: _digest(f) for f in files}
        self.order = [f for f, d in self.seen.items() if d is not None]

    def after_step(self, files: Iterable[str]) -> None:
        changed = []
        for rank, f in enumerate(files):
            d = _digest(f)
            if d != self.seen.get(f):
                self.seen[f] = d
                if d is not None:
                    mtime = os.stat(f).st_mtime_ns
                    changed.append((mtime, rank, f))
        for _, _, f in sorted(changed):
            if f in self.order:
                self.order.remove(f)
            self.order.append(f)

    def last(self) -> str | None:
        return self.order[-1] if self.order else None


def tear(path: str) -> dict[str, Any]:
    """Keep the first half of the file's bytes (what reached disk of its last write)."""
    with open(path, "rb") as f:
        data = f.read()
    kept = len(data) // 2
    with open(path, "wb") as f:
        f.write(data[:kept])
    return {"file": os.path.basename(path), "bytes": len(data), "kept": kept}
