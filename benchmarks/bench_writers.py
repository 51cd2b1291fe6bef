"""Write throughput against writer processes on PostgreSQL: the per-key write path beside a
global writer lock, in the same run.

For each operator at its declared level (LWW and AWAIT READ COMMITTED, EWM and RULE
SERIALIZABLE) and 1, 2, 4, 8 writer processes (each its own `Memory` and connection, started
together on a barrier), `WRITES` contradicting claims in total, split evenly:

- distinct keys: each writer writes its own key (no two writers share a key);
- hot key: every writer writes the same key.

Two write paths, each on a fresh schema:

- per-key (the product): `PostgresStore.transact`, the key's head row moved by a conditional
  update, retries on 40001 / 40P01 / a moved head;
- global lock (the path before issue 16, emulated): the same transaction at READ COMMITTED
  (the old path's level: the server default) with `pg_advisory_xact_lock(0x70C1,
  hashtext(schema))` taken as its first statement, so that writes to any keys queue on one
  lock. The old path is gone from the library; this subclass adds the lock to the same
  statements (`GlobalLockStore`). Taken at READ COMMITTED, each later statement sees every
  write committed before the lock was granted, as in the old path.

Throughput = writes / (last writer's end - first writer's start), monotonic clock. Writes to
results/writers.json (full run only). The machine is shared (2 cores, other engineers'
jobs): read the numbers as orders of magnitude and the ratios as the finding.

    python -m benchmarks.bench_writers           # 64 writes per cell (about 3 minutes)
    python -m benchmarks.bench_writers --quick   # 16 writes per cell, no results file
"""

from __future__ import annotations

import argparse
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.common import machine_info, write_results
from toki.algebra import OPERATORS
from toki.experiments.pg_product import BASE, POLICY, TENANT, WriterPool
from toki.isolation import Isolation
from toki.memory import Memory
from toki.model import Claim, FactKey
from toki.store.pg_rows import LOCK_CLASS, advisory_lock
from toki.store.postgres import PostgresStore, default_dsn, mask_dsn

WRITES = 64
WRITERS = (1, 2, 4, 8)
WORKLOADS = ("distinct", "hot")
PATHS = ("per-key", "global-lock")
VALUES = ("Lisbon", "Berlin", "Prague", "Oslo", "Rome")


class GlobalLockStore(PostgresStore):
    """The per-key transaction with one schema-wide advisory lock taken first (the old
    global writer lock, emulated)."""

    def _step(self, name: str, cur: Any, query: Any, params: Any = None) -> None:
        super()._step(name, cur, query, params)
        if name == "begin":
            advisory_lock(cur, LOCK_CLASS, self.schema)


def _claims(writer: int, writers: int, per: int, workload: str) -> list[Claim]:
    subject = "hot" if workload == "hot" else f"w{writer}"
    out = []
    for j in range(per):
        n = j * writers + writer  # distinct recording times across writers
        out.append(
            Claim(
                FactKey(TENANT, subject, "city"),
                VALUES[n % len(VALUES)],
                f"writer{writer}",
                valid_from=BASE + timedelta(days=n),
                recorded_at=BASE + timedelta(seconds=n),
                weight=1.0 + (n % 3),
            )
        )
    return out


def write_job(index: int, barrier: Any, task: Mapping[str, Any]) -> dict[str, Any]:
    """One writer process's part of a cell (run by WriterPool in a spawned process)."""
    cls = GlobalLockStore if task["path"] == "global-lock" else PostgresStore
    op = OPERATORS[task["operator"]]
    level = Isolation(task["level"])
    mem = Memory(cls(task["dsn"], schema=task["schema"]), isolation=level)
    claims = _claims(index, int(task["writers"]), int(task["per"]), task["workload"])
    try:
        barrier.wait(60.0)
        start = time.monotonic()
        for c in claims:
            mem.write(c, op, allow_weaker_isolation=True)
        end = time.monotonic()
        return {
            "start": start,
            "end": end,
            "writes": len(claims),
            "retries": mem.write_stats.retries,
        }
    finally:
        mem.close()


def _cell(
    pool: WriterPool, dsn: str, op: str, workload: str, path: str, writes: int
) -> dict[str, Any]:
    schema = f"toki_bench_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(dsn, schema=schema)
    admin = Memory(store)
    level = Isolation.READ_COMMITTED if path == "global-lock" else OPERATORS[op].requires
    try:
        if op == "RULE":
            admin.set_policy(TENANT, "city", POLICY, recorded_at=BASE - timedelta(days=1))
        task = {
            "dsn": dsn,
            "schema": schema,
            "operator": op,
            "level": level.value,
            "path": path,
            "workload": workload,
            "writers": pool.n,
            "per": writes // pool.n,
        }
        results = pool.run([task] * pool.n)
    finally:
        store.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()
    done = sum(int(r["writes"]) for r in results)
    seconds = max(r["end"] for r in results) - min(r["start"] for r in results)
    return {
        "operator": op,
        "level": level.value,
        "path": path,
        "workload": workload,
        "writers": pool.n,
        "writes": done,
        "retries": sum(int(r["retries"]) for r in results),
        "seconds": round(seconds, 4),
        "writes_per_s": round(done / seconds, 1),
    }


def run(dsn: str, writes: int, writers: Sequence[int] = WRITERS) -> list[dict[str, Any]]:
    cells = []
    for n in writers:
        pool = WriterPool(n, write_job)
        try:
            for op in OPERATORS:
                for workload in WORKLOADS:
                    for path in PATHS:
                        cells.append(_cell(pool, dsn, op, workload, path, writes))
                        c = cells[-1]
                        print(
                            f"{op:5} {workload:8} {path:11} writers={n}: "
                            f"{c['writes_per_s']:8.1f} writes/s, {c['retries']} retries"
                        )
        finally:
            pool.close()
    return cells


def ratios(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per (operator, workload, writers): per-key / global-lock throughput."""
    by = {(c["operator"], c["workload"], c["writers"], c["path"]): c for c in cells}
    out = []
    for (op, workload, n, path), c in sorted(by.items()):
        if path != "per-key":
            continue
        g = by.get((op, workload, n, "global-lock"))
        if g:
            out.append(
                {
                    "operator": op,
                    "workload": workload,
                    "writers": n,
                    "per_key_writes_per_s": c["writes_per_s"],
                    "global_lock_writes_per_s": g["writes_per_s"],
                    "ratio": round(c["writes_per_s"] / g["writes_per_s"], 3),
                }
            )
    return out


DOC = Path(__file__).resolve().parents[1] / "docs" / "postgres.md"
BEGIN, END = "<!-- bench-writers:begin -->", "<!-- bench-writers:end -->"


def doc_table(data: Mapping[str, Any]) -> str:
    """The table in docs/postgres.md: writes/s per writer count, per-key and global-lock,
    and their ratio, per operator and workload (from results/writers.json)."""
    cells = {(c["operator"], c["workload"], c["writers"], c["path"]): c for c in data["cells"]}
    counts = sorted({c["writers"] for c in data["cells"]})
    head = ["operator (level)", "keys", "path"] + [f"{n} writer{'s' * (n > 1)}" for n in counts]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in OPERATORS:
        for workload in WORKLOADS:
            for path in PATHS:
                row = [cells.get((op, workload, n, path)) for n in counts]
                level = next((c["level"] for c in row if c), "?")
                cols = [
                    "—" if c is None else f"{c['writes_per_s']:.0f} ({c['retries']} retries)"
                    for c in row
                ]
                lines.append("| " + " | ".join([f"{op} ({level})", workload, path, *cols]) + " |")
            ratio = [
                cells[(op, workload, n, "per-key")]["writes_per_s"]
                / cells[(op, workload, n, "global-lock")]["writes_per_s"]
                if (op, workload, n, "global-lock") in cells
                and (op, workload, n, "per-key") in cells
                else None
                for n in counts
            ]
            cols = ["—" if r is None else f"{r:.2f}" for r in ratio]
            lines.append("| " + " | ".join([op, workload, "**ratio**", *cols]) + " |")
    note = (
        f"\n{data['writes_per_cell']} writes per cell; {data['note']}; measured "
        f"{data['machine']['measured_at']}.\n"
    )
    return "\n".join(lines) + "\n" + note


def write_doc(data: Mapping[str, Any], path: Path = DOC) -> None:
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no {BEGIN} … {END} markers")
    block = f"{BEGIN}\n{doc_table(data)}{END}"
    path.write_text(pattern.sub(lambda _m: block, text), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--writes", type=int, default=None)
    args = parser.parse_args(argv)
    writes = args.writes or (16 if args.quick else WRITES)
    try:
        psycopg.connect(default_dsn(), connect_timeout=5).close()
    except psycopg.Error as exc:
        print(f"skipped: no PostgreSQL server at {mask_dsn(default_dsn())} ({exc})")
        return 0
    started = time.perf_counter()
    cells = run(default_dsn(), writes)
    summary = {
        f"{r['operator']} {r['workload']} x{r['writers']}: per-key / global-lock": r["ratio"]
        for r in ratios(cells)
        if r["writers"] == max(WRITERS)
    }
    data = {
        "machine": machine_info(),
        "note": "shared 2-core machine (other engineers' jobs were running); one run",
        "writes_per_cell": writes,
        "cells": cells,
        "ratios": ratios(cells),
        "summary": summary,
        "seconds": round(time.perf_counter() - started, 1),
    }
    if args.quick:
        print(f"quick run: {data['seconds']} s; no results file written")
    else:
        write_results("writers", data)
        write_doc(data)
        print(f"wrote the table in {DOC}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
