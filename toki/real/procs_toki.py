"""One writer process of a free-running deployment of toki's SQLite store (toki.real.procs).

`python -m toki.real.procs_toki SPEC INDEX`: open the store named in the JSON file SPEC, wait
at the file barrier until every process has opened it, write this process's part of the
workload, report every attempt (acknowledged or failed, and why), wait until every process
has finished writing, then catch up and report the state it sees. Nothing here is
scheduled: the operating system interleaves the processes, and SQLite's lock decides who
writes when. A write refused with `StoreBusy` (the lock stayed held past the busy timeout;
the store says nothing was written) is retried under a new source id, so the checks can tell
each attempt's fate from the log.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from toki.errors import StoreBusy, StoreError
from toki.memory import Memory
from toki.model import Claim, FactKey
from toki.store.sqlite import SQLiteStore

__all__ = ["key_of", "main", "plan_writes"]

MAX_ATTEMPTS = 50
"""Attempts per write before the process gives up on it (reported as given up)."""


def key_of(name: str) -> FactKey:
    """'shared:k0' / 'p1:k0' -> the FactKey the workload writes (tenant 'procs')."""
    subject, _, fact = name.partition(":")
    return FactKey("procs", subject, fact)


def plan_writes(
    seed: int, process: int, writes: int, shared_keys: int, private_keys: int, share: float
) -> list[str]:
    """The key names this process writes, in order: a fixed function of the seed (the
    interleaving with the other processes is not)."""
    rng = random.Random(f"{seed}/{process}")
    out = []
    for _ in range(writes):
        if shared_keys and (not private_keys or rng.random() < share):
            out.append(f"shared:k{rng.randrange(shared_keys)}")
        else:
            out.append(f"p{process}:k{rng.randrange(private_keys)}")
    return out


def _wait(path: Path, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > end:
            raise TimeoutError(f"barrier: {path} did not appear within {timeout:g} s")
        time.sleep(0.001)


def _open(spec: dict[str, Any], counts: dict[str, int]) -> Memory:
    """Open the store, retrying while another process holds the lock past the timeout."""
    for attempt in range(MAX_ATTEMPTS):
        try:
            return Memory(SQLiteStore(spec["path"], busy_timeout=spec["busy_timeout"]))
        except StoreBusy:
            counts["busy_open"] += 1
            time.sleep(0.001 * (attempt + 1))
    raise StoreBusy(f"{spec['path']}: could not open after {MAX_ATTEMPTS} busy attempts")


def _write_one(memory: Memory, name: str, value: str, sid: str, mine: dict[str, str]) -> str:
    """One attempt; returns the version id the store acknowledged."""
    key = key_of(name)
    if name.startswith("shared:"):  # several processes: through the operator (LWW)
        decision = memory.write(Claim(key, value, source_id=sid))
        assert decision.claim_id is not None
        return decision.claim_id
    if name in mine:  # only this process writes it: supersede its own last version
        return memory.supersede(mine[name], value, source_id=sid).id
    return memory.assert_fact(key, value, source_id=sid).id


def run(spec: dict[str, Any], index: int) -> dict[str, Any]:
    sync = Path(spec["sync"])
    counts = {
        "busy_open": 0,
        "busy_write": 0,
        "busy_checkpoint": 0,
        "other_errors": 0,
        "given_up": 0,
        "checkpoints": 0,
    }
    memory = _open(spec, counts)
    (sync / f"ready-{index}").touch()
    _wait(sync / "go", spec["barrier_timeout"])
    names = plan_writes(
        spec["seed"],
        index,
        spec["writes"],
        spec["shared_keys"],
        spec["private_keys"],
        spec["share"],
    )
    attempts: list[dict[str, Any]] = []
    mine: dict[str, str] = {}
    waits: list[float] = []
    backoff = random.Random(f"{spec['seed']}/backoff/{index}")
    for i, name in enumerate(names):
        value = f"p{index}-w{i}"
        for attempt in range(MAX_ATTEMPTS):
            sid = f"{value}-a{attempt}"
            t0 = time.perf_counter()
            try:
                vid = _write_one(memory, name, value, sid, mine)
            except StoreBusy as exc:
                counts["busy_write"] += 1
                attempts.append({"write": i, "key": name, "source_id": sid, "error": str(exc)})
                time.sleep(backoff.uniform(0.0, 0.002 * (attempt + 1)))
                continue
            except StoreError as exc:
                counts["other_errors"] += 1
                attempts.append(
                    {
                        "write": i,
                        "key": name,
                        "source_id": sid,
                        "error": f"{type(exc).__name__}: {exc}",
                    }
                )
                continue
            finally:
                waits.append(time.perf_counter() - t0)
            if not name.startswith("shared:"):
                mine[name] = vid
            attempts.append({"write": i, "key": name, "source_id": sid, "version_id": vid})
            break
        else:
            counts["given_up"] += 1
        every = spec["checkpoint_every"]
        if every and (i + 1) % every == 0:  # while the others keep writing
            try:
                counts["checkpoints"] += memory.checkpoint() is not None
            except StoreBusy:
                counts["busy_checkpoint"] += 1
    stats = memory.write_stats
    (sync / f"done-{index}").touch()
    _wait(sync / "finish", spec["barrier_timeout"])
    memory.refresh()  # what this process sees once every process has written
    seen = {"state_hash": memory.state_hash(), "watermark": memory.watermark}
    memory.close()
    return {
        "process": index,
        "attempts": attempts,
        "counts": counts,
        "write_stats": {"writes": stats.writes, "retries": stats.retries},
        "call_seconds": {"max": max(waits, default=0.0), "sum": sum(waits)},
        "seen": seen,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m toki.real.procs_toki SPEC INDEX", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text())
    index = int(argv[1])
    report = run(spec, index)
    out = Path(spec["sync"]) / f"report-{index}.json"
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, sort_keys=True))
    tmp.replace(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
