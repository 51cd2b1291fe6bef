"""Backends side by side: batched append, replay on open, resolve_at and current latency on
the in-memory store, SQLite and PostgreSQL, on the same generated events.

Writes benchmarks/results/backends.json (full run only). PostgreSQL is `$TOKI_PG_DSN` (default
the local test server); each run works in a fresh schema and drops it. Without a server the
PostgreSQL row says why it was skipped.

    python -m benchmarks.bench_backends            # 10^5 events, 10^4 versions on one key
    python -m benchmarks.bench_backends --quick    # 10^4 events, 10^3 versions
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.bench_core import BASE, make_events
from benchmarks.common import machine_info, write_results
from toki.errors import StoreError
from toki.log import Event
from toki.memory import Memory
from toki.replay import replay
from toki.store.base import EventStore

BATCH = 5_000
QUERIES = 2_000

# a place to keep a log: each call opens a store on the same data
Opener = Callable[[], EventStore]


@contextmanager
def _memory_place(tag: str) -> Iterator[Opener]:
    from toki.store.memory import InMemoryStore

    store = InMemoryStore()
    yield lambda: store  # "reopening" memory is handing the same object to a new Memory


@contextmanager
def _sqlite_place(tag: str) -> Iterator[Opener]:
    from toki.store.sqlite import SQLiteStore

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{tag}.db"
        yield lambda: SQLiteStore(path)


@contextmanager
def _postgres_place(tag: str) -> Iterator[Opener]:
    import psycopg

    from toki.store.postgres import PostgresStore, default_dsn

    dsn, schema = default_dsn(), f"toki_bench_{tag}_{uuid.uuid4().hex[:8]}"
    try:
        yield lambda: PostgresStore(dsn, schema=schema)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE".encode())


PLACES = {"memory": _memory_place, "sqlite": _sqlite_place, "postgres": _postgres_place}


def _fill(open_store: Opener, events: list[Event]) -> dict[str, float]:
    """Append in batches (events only), then write the projection once; seconds for each."""
    store = open_store()
    t0 = time.perf_counter()
    for i in range(0, len(events), BATCH):
        chunk = events[i : i + BATCH]
        with store.write_lock():
            store.append(chunk, {}, chunk[-1].seq)
    append_s = time.perf_counter() - t0
    summaries = replay(events).summaries()
    t0 = time.perf_counter()
    with store.write_lock():
        store.append([], summaries, events[-1].seq, replace=True)
    projection_s = time.perf_counter() - t0
    store.close()  # a no-op in memory: the next Memory gets the same object
    return {"append_s": append_s, "projection_s": projection_s}


def _latency(fn: Callable[[], object]) -> dict[str, float]:
    lat = []
    for _ in range(QUERIES):
        t0 = time.perf_counter_ns()
        fn()
        lat.append((time.perf_counter_ns() - t0) / 1000.0)
    lat.sort()
    return {"median_us": statistics.median(lat), "p99_us": lat[int(0.99 * len(lat))]}


def bench_backend(
    name: str, events: list[Event], hot: list[Event], versions: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"events": len(events), "batch_size": BATCH}
    with PLACES[name]("log") as open_store:
        times = _fill(open_store, events)
        out["batched_append_events_per_s"] = len(events) / times["append_s"]
        out["projection_write_keys_per_s"] = len({e.key for e in events}) / times["projection_s"]
        t0 = time.perf_counter()
        mem = Memory(open_store())
        open_s = time.perf_counter() - t0
        assert mem.open_report is not None and mem.open_report.ok, "projection must reconcile"
        assert len(mem.events()) == len(events)
        out["open_and_replay_events_per_s"] = len(events) / open_s
        mem.close()
    with PLACES[name]("hot") as open_store:
        _fill(open_store, hot)
        mem = Memory(open_store())
        key = hot[0].key
        rng = random.Random(5)
        out["resolve_at_versions"] = versions
        out["resolve_at"] = _latency(
            lambda: mem.resolve_at(key, BASE + timedelta(seconds=rng.randint(1, versions)))
        )
        # current() first asks the store whether another writer appended (one round trip)
        out["current"] = _latency(lambda: mem.current(key))
        mem.close()
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n, versions = (10**4, 10**3) if args.quick else (10**5, 10**4)
    print(f"backends benchmark: {n} events over 1000 keys; {versions} versions on one key")
    events = make_events(n, 1_000)
    hot = make_events(2 * versions - 1, keys=1, seed=3)
    results: dict[str, Any] = {"machine": machine_info(), "quick": args.quick}
    for name in PLACES:
        try:
            results[name] = bench_backend(name, events, hot, versions)
        except StoreError as exc:
            results[name] = {"skipped": str(exc)}
        if name == "postgres" and "skipped" not in results[name]:
            import psycopg

            from toki.store.postgres import default_dsn

            with psycopg.connect(default_dsn()) as conn:
                results[name]["server"] = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
        print(f"  {name}:", json.dumps(results[name]))
    if not args.quick:
        write_results("backends", results)
    return results


if __name__ == "__main__":
    main()
