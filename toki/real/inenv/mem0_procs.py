"""One mem0 process of a free-running deployment (toki.real.procs), in mem0's environment.

`python -m inenv.mem0_procs SPEC add INDEX`: build this process's own mem0 `Memory` over the
FAISS path and history database named in SPEC (as each process of one service would), wait
at the file barrier, `add` this process's messages with nothing scheduling it, and write a
report: each add's results or the error it raised, and what mem0 logged at WARNING or above
(it logs, rather than raises, a failed FAISS save and a failed action of an add).
`python -m inenv.mem0_procs SPEC inspect`: what a fresh process loads from the files (ids in
the docstore and the index map, the index size) and the history rows, as one JSON line.

The LLM and embedder are toki's offline stand-ins, without gate points: extraction returns
the message as the one fact, the update decision adds it (every add makes one memory, so
every acknowledged id should be in the files). No network: the guard refuses all but
loopback.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import sys
import time
import types
from pathlib import Path
from typing import Any

from . import guard
from .mem0 import faiss_config

__all__ = ["main"]

DIMS = 64
CURRENT: list[str] = []  # the message of the add in progress (one add at a time)
DECIDING: list[bool] = []  # the next LLM call is the update decision


class FreeLlm:
    """Extraction: the message is the fact; decision: ADD it."""

    def __init__(self) -> None:
        self.config = types.SimpleNamespace(model="toki-procs-stub", temperature=0.0)

    def generate_response(self, messages: Any = None, *args: Any, **kw: Any) -> str:
        text = CURRENT[0] if CURRENT else ""
        if DECIDING:
            DECIDING.clear()
            return json.dumps({"memory": [{"id": "new", "text": text, "event": "ADD"}]})
        return json.dumps({"facts": [text]})


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name}: {record.getMessage()}"[:300])


def _install() -> Any:
    import mem0.memory.main as main
    from mem0.utils import factory

    from .stubs import Embedder

    llm, embedder = FreeLlm(), Embedder(DIMS)
    factory.LlmFactory.create = classmethod(lambda cls, *a, **k: llm)
    factory.EmbedderFactory.create = classmethod(lambda cls, *a, **k: embedder)
    original = main.get_update_memory_messages

    def deciding(*a: Any, **k: Any) -> Any:
        DECIDING[:] = [True]
        return original(*a, **k)

    main.get_update_memory_messages = deciding
    return main


def _wait(path: Path, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"barrier: {path} did not appear within {timeout:g} s")
        time.sleep(0.001)


def _build(main: Any, spec: dict[str, Any], counts: dict[str, int], errors: list[str]) -> Any:
    """mem0's Memory over the shared files (loading them), retrying an open that fails."""
    for attempt in range(50):
        try:
            return main.Memory.from_config(faiss_config(spec["dir"], DIMS))
        except sqlite3.OperationalError as exc:  # e.g. "database is locked" creating the table
            counts["locked_at_open"] += "locked" in str(exc) or "busy" in str(exc)
            errors.append(f"{type(exc).__name__}: {exc}")
            time.sleep(0.01 * (attempt + 1))
    raise RuntimeError(f"mem0 Memory could not be built: {errors[-1]}")


def add(spec: dict[str, Any], index: int) -> dict[str, Any]:
    capture = Capture()
    logging.getLogger().addHandler(capture)
    main = _install()
    sync = Path(spec["sync"])
    os.makedirs(spec["dir"], exist_ok=True)
    counts = {"locked_at_open": 0}
    open_errors: list[str] = []
    memory = _build(main, spec, counts, open_errors)
    (sync / f"ready-{index}").touch()
    _wait(sync / "go", spec["barrier_timeout"])
    rng = random.Random(f"{spec['seed']}/{index}")
    adds: list[dict[str, Any]] = []
    for i in range(spec["adds"]):
        user = f"user{rng.randrange(spec['users'])}"
        text = f"{user} noted item p{index}n{i} with tag {rng.randrange(1000)}"
        CURRENT[:] = [text]
        DECIDING.clear()
        try:
            if spec["reload"]:  # a process per request: it loads the files, then adds
                memory.db.close()
                memory = _build(main, spec, counts, open_errors)
            got = memory.add(text, user_id=user)
        except Exception as exc:  # the caller sees it: recorded, and the process goes on
            adds.append({"text": text, "error": f"{type(exc).__name__}: {exc}"})
            continue
        rows = got.get("results", []) if isinstance(got, dict) else got
        adds.append({"text": text, "results": [dict(r) for r in rows or []]})
    (sync / f"done-{index}").touch()
    _wait(sync / "finish", spec["barrier_timeout"])
    return {
        "process": index,
        "adds": adds,
        "locked_at_open": counts["locked_at_open"],
        "open_errors": open_errors,
        "warnings": capture.lines,
    }


def inspect(spec: dict[str, Any]) -> dict[str, Any]:
    """What a new process is served: mem0's FAISS store loading the files, and the rows."""
    capture = Capture()
    logging.getLogger().addHandler(capture)
    from mem0.vector_stores.faiss import FAISS

    store = FAISS(
        collection_name="toki",
        path=os.path.join(spec["dir"], "faiss"),
        distance_strategy="cosine",
        embedding_model_dims=DIMS,
    )
    conn = sqlite3.connect(os.path.join(spec["dir"], "history.db"))
    try:
        rows = conn.execute("SELECT memory_id, event, new_memory FROM history").fetchall()
    finally:
        conn.close()
    return {
        "docstore_ids": sorted(store.docstore),
        "index_to_id": sorted(str(v) for v in store.index_to_id.values()),
        "index_ntotal": int(store.index.ntotal) if store.index is not None else -1,
        "history": [{"memory_id": m, "event": e, "text": t} for m, e, t in rows],
        "warnings": capture.lines,
    }


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[1] not in ("add", "inspect") or (argv[1] == "add") != (len(argv) == 3):
        print("usage: python -m inenv.mem0_procs SPEC add INDEX | SPEC inspect", file=sys.stderr)
        return 2
    guard.install()
    spec = json.loads(Path(argv[0]).read_text())
    if argv[1] == "inspect":
        found = inspect(spec)
        attempts = guard.drain()
        if attempts:
            raise RuntimeError(f"network attempts refused: {attempts}")
        print(json.dumps(found, sort_keys=True))
        return 0
    index = int(argv[2])
    report = add(spec, index)
    report["network"] = guard.drain()
    if report["network"]:
        raise RuntimeError(f"network attempts refused: {report['network']}")
    out = Path(spec["sync"]) / f"report-{index}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, sort_keys=True, default=str))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
