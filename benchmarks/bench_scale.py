"""The growth table (issue #37): open, write, replay and check from 10^3 to 10^6 events, each
with its fitted growth exponent (least-squares slope of log cost on log n; target <= 1.1 for
the cost of the whole job, i.e. <= 0.1 for a cost per write).

Measured here, in one run, on the core benchmark's workload (a supersession chain on each of
1,000 keys, so a key holds n / 1,000 versions):

- replay: `toki.replay.replay` of the n events (in memory), seconds for all of them;
- write: 300 `assert_fact` calls on 300 keys of a SQLite store that already holds n events
  (opened from its checkpoint), seconds per write, twice: the first write to each key after
  open (which builds that key's state from its own events: the cost the checkpoint moved to
  first use, O(versions of the key), paid once per key, so that using every key once costs
  what the replay it replaced did: O(n)) and then the same keys again, three windows of 300
  writes, the fastest kept (the steady state), split into the seconds spent inside sqlite3
  (`TimedConnection`: the database's own work, which grows as its B-trees and the file
  outgrow its page cache) and toki's own (the rest); at `synchronous=OFF` for this benchmark
  only (the fsync of FULL is the disk's, the same at every size, and dominated the noise);
  the writes touch keys with n / 1,000 versions each, so a write that cloned or rescanned a
  key's versions would show here.

Read from the result files of the benchmarks that own them (their sizes and dates are copied
beside the exponent, so a stale entry shows):

- open: `benchmarks/results/open.json` (bench_open: checkpointed open with a 999-event
  tail, and full replay);
- check: `benchmarks/results/toki_check.json` (bench_history --toki-check: `toki check` end
  to end on list-append histories).

Beside the table, not a target: after the writes, one full pass of CPython's cyclic garbage
collector with every key of the n-event store built (`full_collection`): the pause a
long-lived process holding the store meets now and then.

Writes benchmarks/results/scale.json.

    python -m benchmarks.bench_scale            # 10^3 … 10^6
    python -m benchmarks.bench_scale --quick    # 10^3 … 10^5, writes nothing
"""

from __future__ import annotations

import argparse
import gc
import json
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.bench_core import BASE, make_events
from benchmarks.bench_growth import growth_exponent
from benchmarks.bench_open import _append, stream_events
from benchmarks.common import machine_info, write_results
from toki.memory import Memory
from toki.model import FactKey
from toki.replay import Snapshot, gc_paused, replay
from toki.store.sqlite import SQLiteStore

RESULTS = Path(__file__).resolve().parent / "results"
KEYS = 1_000
WRITES = 300
WINDOWS = 3
TARGET = 1.1


def replay_seconds(n: int, repeat: int) -> float:
    events = make_events(n, KEYS)
    best = float("inf")
    for _ in range(repeat):
        with gc_paused():
            t0 = time.perf_counter()
            replay(events)
            best = min(best, time.perf_counter() - t0)
    return best


class TimedConnection:
    """Stands in for the store's sqlite3 connection and adds up the seconds spent inside
    sqlite3 (execute, executemany and the fetches of their cursors' rows), so that a write's
    time splits into the database's and toki's own."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.seconds = 0.0

    def execute(self, sql: str, params: Any = ()) -> _TimedCursor:
        t0 = time.perf_counter()
        try:
            return _TimedCursor(self, self.conn.execute(sql, params))
        finally:
            self.seconds += time.perf_counter() - t0

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        rows = list(rows)  # toki's generator of rows is toki's work, not the database's
        t0 = time.perf_counter()
        try:
            return self.conn.executemany(sql, rows)
        finally:
            self.seconds += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


class _TimedCursor:
    def __init__(self, owner: TimedConnection, cursor: sqlite3.Cursor) -> None:
        self.owner, self.cursor = owner, cursor

    def _timed(self, fetch: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        try:
            return fetch()
        finally:
            self.owner.seconds += time.perf_counter() - t0

    def fetchone(self) -> Any:
        return self._timed(self.cursor.fetchone)

    def fetchall(self) -> Any:
        return self._timed(self.cursor.fetchall)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)


def write_seconds(n: int) -> dict[str, float]:
    """Seconds per assert_fact on a SQLite store of n events (opened from its checkpoint),
    and of them the seconds inside sqlite3."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.db"
        store = SQLiteStore(path)
        _append(store, Snapshot(), stream_events(n), n)
        store.close()
        t0 = time.perf_counter()
        Memory.open(f"sqlite:///{path}").close()  # no checkpoint yet: replays, writes one
        first_open = time.perf_counter() - t0
        mem = Memory.open(f"sqlite:///{path}")
        assert mem.open_report is not None and mem.open_report.opened_from.startswith(
            "checkpoint"
        ), mem.open_report.opened_from
        sqlite_store = mem._store
        assert isinstance(sqlite_store, SQLiteStore)
        sqlite_store._conn.execute("PRAGMA synchronous=OFF")
        timed = TimedConnection(sqlite_store._conn)
        sqlite_store._conn = timed  # type: ignore[assignment]
        recorded = BASE + timedelta(days=10**5)

        def writes(start: int) -> tuple[float, float]:
            timed.seconds = 0.0
            t0 = time.perf_counter()
            for i in range(start, start + WRITES):
                key = FactKey("bench", f"s{(i % WRITES) * 7 % min(KEYS, n)}", "city")
                mem.assert_fact(key, f"city-w{i}", valid_from=BASE + timedelta(days=10**4 + i),
                                recorded_at=recorded + timedelta(seconds=i), source_id="scale")
            return (time.perf_counter() - t0) / WRITES, timed.seconds / WRITES

        cold, _ = writes(0)  # each key's first use after open: its state is built from rows
        # the same keys again, best of WINDOWS windows (one window is 300 writes)
        warm, sql = min(writes(WRITES * k) for k in range(1, WINDOWS + 1))
        sqlite_store._conn = timed.conn
        pause = full_collection(mem)
        mem.close()
    return {"per_write_s": warm, "per_write_sql_s": sql, "first_write_s": cold,
            "first_open_s": first_open, **pause}


def full_collection(mem: Memory) -> dict[str, float]:
    """What one full pass of CPython's cyclic garbage collector costs a process that holds
    `mem` with every key built (a long-lived writer that has used every key): the pass
    scans every tracked object, and CPython makes one each time the objects that survived
    two younger passes grow by a quarter, so its cost per write stays flat while each pause
    grows with the store. Counted with the process's own objects (imports, the benchmark)."""
    mem.state_hash()  # builds every key still unbuilt
    gc.collect()  # the garbage of the build and the writes, so the timed pass scans the live
    t0 = time.perf_counter()
    gc.collect()
    return {"gc_full_pass_s": time.perf_counter() - t0, "gc_tracked": len(gc.get_objects())}


def _from_file(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def owned_rows() -> list[dict[str, Any]]:
    """The open and check rows, from the files of the benchmarks that measure them."""
    rows: list[dict[str, Any]] = []
    opened = _from_file("open.json")
    if opened is not None:
        sizes = opened["sizes"]
        for label, field, exp in (
            ("open (checkpoint, 999-event tail)", "open_checkpoint_s",
             "checkpoint_growth_exponent"),
            ("open (full replay)", "open_full_replay_s", "full_replay_growth_exponent"),
        ):
            rows.append({
                "job": label,
                "n": [s["events"] for s in sizes],
                "seconds": [s[field] for s in sizes],
                "exponent": opened[exp],
                "source": "results/open.json, measured " + opened["machine"]["measured_at"],
            })
    checked = _from_file("toki_check.json")
    if checked is not None:
        runs = [r for r in checked.get("runs", []) if r.get("format") == "jsonl"]
        rows.append({
            "job": "check (toki check, JSON lines)",
            "n": [r["txns"] for r in runs],
            "seconds": [r["wall_s"] for r in runs],
            "exponent": checked["summary"]["exponent"],
            "source": "results/toki_check.json, measured " + checked["machine"]["measured_at"],
        })
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    ns = [10**3, 10**4, 10**5] + ([] if args.quick else [10**6])
    replays = [replay_seconds(n, args.repeat) for n in ns]
    writes = [write_seconds(n) for n in ns]
    per_write = [w["per_write_s"] for w in writes]
    sql = [w["per_write_sql_s"] for w in writes]
    own = [w - q for w, q in zip(per_write, sql, strict=True)]
    first_write = [w["first_write_s"] for w in writes]
    rows = [
        {"job": "replay (in memory)", "n": ns, "seconds": replays,
         "exponent": growth_exponent(ns, replays), "source": "this run"},
        {"job": "write (one assert_fact, SQLite, synchronous=OFF)", "n": ns,
         "seconds": per_write, "exponent": growth_exponent(ns, per_write),
         "per_write": True, "source": "this run"},
        {"job": "... of it, inside sqlite3 (its statements, timed in the same writes)", "n": ns,
         "seconds": sql, "exponent": growth_exponent(ns, sql), "per_write": True,
         "part": True, "source": "this run"},
        {"job": "... of it, toki's own (the write less its time inside sqlite3)", "n": ns,
         "seconds": own, "exponent": growth_exponent(ns, own), "per_write": True,
         "part": True, "source": "this run"},
        {"job": "first write to a key after open (builds the key's state)", "n": ns,
         "seconds": first_write, "exponent": growth_exponent(ns, first_write),
         "once_per_key": True, "source": "this run"},
        *owned_rows(),
    ]
    for row in rows:
        # a job's cost grows like n^e; a per-write cost must stay flat: n * cost ~ n^(1+e).
        # A key's first write after open is paid once per key: the job that pays it, every
        # one of the KEYS keys written once, grows as one such write does (KEYS is fixed)
        whole = row["exponent"] + (1.0 if row.get("per_write") else 0.0)
        row["job_exponent"] = whole
        row["meets_target"] = whole <= TARGET  # a part ("part": True) explains, not judged
        target = "a part of the write" if row.get("part") else f"target <= {TARGET}"
        print(f"{row['job']:52s} exponent {row['exponent']:+.3f} "
              f"(whole job {whole:.3f}, {target}) [{row['source']}]")
    pauses = [w["gc_full_pass_s"] for w in writes]
    gc_pass = {"n": ns, "seconds": pauses, "tracked": [w["gc_tracked"] for w in writes],
               "exponent": growth_exponent(ns, pauses)}
    print(f"full GC pass, every key built: {pauses} s, exponent {gc_pass['exponent']:+.3f}")
    out = {"machine": machine_info(), "quick": args.quick, "target": TARGET,
           "first_open_s": [w["first_open_s"] for w in writes], "rows": rows,
           "gc_full_pass": gc_pass}
    if not args.quick:
        write_results("scale", out)
    return out


if __name__ == "__main__":
    main()
