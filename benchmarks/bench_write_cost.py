"""Per-write cost: `Memory.assert_fact` on SQLite against sqlite3 running the same statements.

Issue #37's target: assert_fact on SQLite >= 0.7 of sqlite3 committing the same statements per
transaction. One run records every statement toki executes during N writes (with its
parameters, BEGIN IMMEDIATE and COMMIT included), then times, in alternating rounds, toki
making the same N writes into a fresh file and raw sqlite3 replaying exactly the recorded
statements, one transaction per write, into a fresh file of the same schema with the same
PRAGMAs (read back from toki's connection). Both sides must leave the same rows in every
table, so the ratio compares like with like. It is measured at toki's `synchronous=FULL`
(the issue's number) and, for both sides alike, at `synchronous=OFF` (benchmark only: the
fsync removed, what is left is per-write Python and SQL work). The same writes are also timed
on the in-memory store (`memory://`: no SQL, no file), the write path's planning and folding
alone: a floor under toki's own time per write on any backend.

Writes benchmarks/results/write_cost.json (full run only).

    python -m benchmarks.bench_write_cost            # 2,000 writes over 500 keys, best of 5
    python -m benchmarks.bench_write_cost --quick    # 300 writes
    python -m benchmarks.bench_write_cost --profile  # also cProfile one toki run: µs per write by part
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import random
import sqlite3
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info, write_results
from toki.memory import Memory
from toki.model import FactKey
from toki.store.sqlite import SQLiteStore

SEED = 37
BASE = datetime(2020, 1, 1, tzinfo=UTC)
PRAGMAS = ("journal_mode", "synchronous", "foreign_keys", "cache_size", "wal_autocheckpoint")
TABLES = ("toki_event", "toki_key", "toki_current", "toki_meta", "toki_op", "toki_consumption")

Statement = tuple[str, str, Any]  # (execute | executemany, sql, parameters)


@dataclass(frozen=True)
class Write:
    """One assert_fact call's arguments (fixed, so every round makes the same rows)."""

    key: FactKey
    value: str
    valid_from: datetime
    recorded_at: datetime


def make_writes(n: int, keys: int, seed: int = SEED) -> list[Write]:
    """n claims over `keys` keys on as many subjects, chosen at random (no key is hot); each
    claim has its own value, valid-from and recording time."""
    rng = random.Random(seed)
    key_list = [FactKey("bench", f"subject-{i}", "city") for i in range(keys)]
    return [
        Write(key_list[rng.randrange(keys)], f"city-{rng.randrange(10**6)}",
              BASE + timedelta(days=rng.randrange(3650)), BASE + timedelta(seconds=i + 1))
        for i in range(n)
    ]


class Recorder:
    """Stands in for the store's sqlite3 connection: records each statement with its
    parameters, then runs it on the real connection."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.log: list[Statement] = []

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        self.log.append(("execute", sql, params))
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        rows = list(rows)
        self.log.append(("executemany", sql, rows))
        return self.conn.executemany(sql, rows)

    def __getattr__(self, name: str) -> Any:
        """Only what runs no statement passes through: a new way of running one (a cursor,
        executescript) would otherwise go unrecorded."""
        if name not in ("in_transaction", "close"):
            raise AttributeError(f"Recorder does not record {name!r}: teach it, or the replay "
                                 "would miss statements")
        return getattr(self.conn, name)


def _assert(mem: Memory, w: Write) -> None:
    mem.assert_fact(w.key, w.value, valid_from=w.valid_from, recorded_at=w.recorded_at,
                    source_id="bench")


def _open_toki(path: Path, sync: str) -> Memory:
    mem = Memory.open(f"sqlite:///{path}")
    if sync != "FULL":  # benchmark only: toki itself always runs FULL
        mem._store._conn.execute(f"PRAGMA synchronous={sync}")  # type: ignore[attr-defined]
    return mem


def record(path: Path, writes: list[Write]) -> tuple[list[list[Statement]], dict[str, Any]]:
    """Every statement toki runs for each write (one list per write), and the connection's
    PRAGMAs."""
    mem = _open_toki(path, "FULL")
    store = mem._store
    assert isinstance(store, SQLiteStore)
    pragmas = {p: store._conn.execute(f"PRAGMA {p}").fetchone()[0] for p in PRAGMAS}
    recorder = Recorder(store._conn)
    store._conn = recorder  # type: ignore[assignment]
    per_write: list[list[Statement]] = []
    for w in writes:
        mark = len(recorder.log)
        _assert(mem, w)
        per_write.append(recorder.log[mark:])
    store._conn = recorder.conn
    mem.close()
    return per_write, pragmas


def run_toki(path: Path, writes: list[Write], sync: str) -> float:
    """Seconds for toki to make the writes into a fresh file (opening it is not timed)."""
    mem = _open_toki(path, sync)
    t0 = time.perf_counter()
    for w in writes:
        _assert(mem, w)
    seconds = time.perf_counter() - t0
    mem.close()
    return seconds


def run_memory(writes: list[Write]) -> tuple[float, str]:
    """Seconds for toki to make the writes on the in-memory store (the plan, the events and
    their hashes, the projection rows and the fold, without SQL), and the state they left."""
    mem = Memory.open("memory://")
    t0 = time.perf_counter()
    for w in writes:
        _assert(mem, w)
    seconds = time.perf_counter() - t0
    state = mem.state_hash()
    mem.close()
    return seconds, state


def state_of(path: Path) -> str:
    """The state hash of the toki store in `path` (what a run of the same writes must end in)."""
    mem = Memory.open(f"sqlite:///{path}")
    try:
        return mem.state_hash()
    finally:
        mem.close()


def memory_floor(writes: list[Write], rounds: int, sqlite_file: Path) -> dict[str, Any]:
    """Best of `rounds` runs on memory://; each must leave the state toki left in
    `sqlite_file` (the same writes), so the floor runs the same write path."""
    want = state_of(sqlite_file)
    runs = [run_memory(writes) for _ in range(rounds)]
    if any(state != want for _, state in runs):
        raise AssertionError("memory:// ended in another state than SQLite for the same writes")
    seconds = [s for s, _ in runs]
    return {"us_per_write": 1e6 * min(seconds) / len(writes), "round_s": seconds}


def fresh_schema(path: Path) -> None:
    """An empty toki file: the schema (and WAL mode) exactly as toki creates it."""
    SQLiteStore(path).close()


@dataclass(frozen=True)
class Replayed:
    """A replay's seconds, and the part of them spent in `between` (none: 0)."""

    seconds: float
    between_seconds: float = 0.0


def replay(path: Path, per_write: list[list[Statement]], pragmas: dict[str, Any],
           sync: str, between: Callable[[int], object] | None = None) -> Replayed:
    """Raw sqlite3 running the recorded statements, write by write, on a fresh file of toki's
    schema with toki's PRAGMAs (synchronous as given).

    between(i) runs before write i's statements: the controls (`control`, `spin`) that say how much
    of toki's time is its planning, and how much each side slows the other when they
    alternate."""
    fresh_schema(path)
    conn = sqlite3.connect(path, isolation_level=None)
    for name in PRAGMAS:
        value = sync if name == "synchronous" else pragmas[name]
        conn.execute(f"PRAGMA {name}={value}")
    spent = 0.0
    t0 = time.perf_counter()
    for i, statements in enumerate(per_write):
        if between is not None:
            t = time.perf_counter()
            between(i)
            spent += time.perf_counter() - t
        for how, sql, params in statements:
            if how == "execute":
                conn.execute(sql, params).fetchall()
            else:
                conn.executemany(sql, params)
    seconds = time.perf_counter() - t0
    conn.close()
    return Replayed(seconds, spent)


def control(path: Path, per_write: list[list[Statement]], pragmas: dict[str, Any], sync: str,
            writes: list[Write]) -> tuple[Replayed, str]:
    """The replay with each write first made on memory:// (toki's write path without SQL,
    as in `memory_floor`), and the state the in-memory writes left."""
    mem = Memory.open("memory://")
    done = replay(path, per_write, pragmas, sync, lambda i: _assert(mem, writes[i]))
    state = mem.state_hash()
    mem.close()
    return done, state


def spin(seconds: float) -> Callable[[int], object]:
    """A busy loop of `seconds` (the CPU kept busy, almost no memory touched)."""
    def run(_: int) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    return run


def contents(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of toki's tables, sorted: what both sides must have written."""
    conn = sqlite3.connect(path)
    try:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in TABLES}
    finally:
        conn.close()


def statement_counts(per_write: list[list[Statement]]) -> dict[str, Any]:
    """Statements per write, and how often each statement text ran."""
    counts = Counter(" ".join(sql.split())[:90] for stmts in per_write for _, sql, _ in stmts)
    sizes = Counter(len(s) for s in per_write)
    return {
        "per_write_mean": sum(len(s) for s in per_write) / len(per_write),
        "per_write_histogram": {str(k): v for k, v in sorted(sizes.items())},
        "by_statement": dict(counts.most_common()),
    }


def measure(writes: list[Write], rounds: int, sync: str, tmp: Path) -> dict[str, Any]:
    """Best of `rounds` alternating runs, each into a fresh file: toki; sqlite3 replaying the
    statements; the control (the replay with each write first made on memory://); and the
    replay with a busy loop as long as the control's in-memory write before each write.
    Every run must leave the rows of the recorded one; the control's in-memory writes the
    state toki's left."""
    per_write, pragmas = record(tmp / f"record-{sync}.db", writes)
    expected = contents(tmp / f"record-{sync}.db")
    state = state_of(tmp / f"record-{sync}.db")
    n = len(writes)
    toki_s: list[float] = []
    raw_s: list[float] = []
    mixed: list[Replayed] = []
    spun: list[Replayed] = []
    for r in range(rounds):
        paths = {side: tmp / f"{side}-{sync}-{r}.db"
                 for side in ("toki", "sqlite3", "control", "spin")}
        toki_s.append(run_toki(paths["toki"], writes, sync))
        raw_s.append(replay(paths["sqlite3"], per_write, pragmas, sync).seconds)
        done, left = control(paths["control"], per_write, pragmas, sync, writes)
        mixed.append(done)
        if left != state:
            raise AssertionError(f"control round {r} ({sync}): memory:// left another state")
        # the control's in-memory time, spent on a busy loop instead
        spun.append(replay(paths["spin"], per_write, pragmas, sync, spin(done.between_seconds / n)))
        for side, path in paths.items():
            if contents(path) != expected:
                raise AssertionError(f"{side} round {r} ({sync}) wrote other rows than recorded")
    toki_rate, raw_rate = n / min(toki_s), n / min(raw_s)

    def split(runs: list[Replayed]) -> dict[str, Any]:
        best = min(runs, key=lambda c: c.seconds)
        return {"us_per_write": 1e6 * best.seconds / n,
                "between_us_per_write": 1e6 * best.between_seconds / n,
                "sqlite3_us_per_write": 1e6 * (best.seconds - best.between_seconds) / n,
                "round_s": [c.seconds for c in runs]}

    return {
        "synchronous": sync,
        "pragmas": {**pragmas, "synchronous": sync},
        "toki_writes_per_s": toki_rate,
        "sqlite3_writes_per_s": raw_rate,
        "ratio": toki_rate / raw_rate,
        "toki_us_per_write": 1e6 * min(toki_s) / n,
        "sqlite3_us_per_write": 1e6 * min(raw_s) / n,
        "toki_round_s": toki_s,
        "sqlite3_round_s": raw_s,
        "control": split(mixed),
        "spin": split(spun),
        "statements": statement_counts(per_write),
    }


# where a write's time goes: (label, module path suffix, function) -> cumulative time
PARTS = (
    ("SQL statements (sqlite3 execute / executemany)", "~", "<method 'execute' of 'sqlite3.Connection' objects>"),
    ("", "~", "<method 'executemany' of 'sqlite3.Connection' objects>"),
    ("claim to FactVersion (checks, id hash)", "toki/plan.py", "new_version"),
    ("partition from the live state", "toki/partition.py", "of_snapshot"),
    ("planning: events, hashes, conflict check", "toki/lifecycle.py", "plan_assert"),
    ("projection rows: fold the new events into the partition", "toki/partition.py", "fold"),
    ("store.append (rows, links, JSON; its SQL included)", "toki/store/sqlite.py", "append"),
    ("folding committed events into the Memory", "toki/memory.py", "_fold"),
    ("assert_fact in all", "toki/memory.py", "assert_fact"),
)


def profile(writes: list[Write], tmp: Path, sync: str) -> dict[str, float]:
    """cProfile of one toki run: µs per write (cumulative, so parts overlap where one calls
    another: store.append includes its SQL) for the parts in PARTS. cProfile slows Python
    code more than C code, so read the shares, not the absolute figures."""
    run_toki(tmp / f"warm-{sync}.db", writes, sync)
    prof = cProfile.Profile()
    prof.enable()
    run_toki(tmp / f"profile-{sync}.db", writes, sync)
    prof.disable()
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    out: dict[str, float] = {}
    label = ""
    for name, suffix, func in PARTS:
        label = name or label
        ct = sum(v[3] for (f, _, fn), v in stats.items() if f.endswith(suffix) and fn == func)
        out[label] = out.get(label, 0.0) + 1e6 * ct / len(writes)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--writes", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    n = args.writes or (300 if args.quick else 2_000)
    keys = max(1, n // 4)
    print(f"write cost benchmark: {n} assert_fact calls over {keys} keys, seed {SEED}, "
          f"best of {args.rounds}")
    writes = make_writes(n, keys)
    results: dict[str, Any] = {"machine": machine_info(), "quick": args.quick, "writes": n,
                               "keys": keys, "seed": SEED, "rounds": args.rounds,
                               "target": "assert_fact on SQLite >= 0.7 of sqlite3 (issue #37)"}
    with tempfile.TemporaryDirectory() as tmp:
        for sync in ("FULL", "OFF"):
            m = measure(writes, args.rounds, sync, Path(tmp))
            results[sync.lower()] = m
            c = m["control"]
            sp = m["spin"]
            print(f"  synchronous={sync}: toki {m['toki_writes_per_s']:,.0f} writes/s, sqlite3 "
                  f"{m['sqlite3_writes_per_s']:,.0f} writes/s, ratio {m['ratio']:.2f}, "
                  f"{m['statements']['per_write_mean']:.2f} statements/write\n"
                  f"    µs per write: toki {m['toki_us_per_write']:.0f}, sqlite3 "
                  f"{m['sqlite3_us_per_write']:.0f}; control {c['us_per_write']:.0f} (memory:// "
                  f"{c['between_us_per_write']:.0f} + sqlite3 {c['sqlite3_us_per_write']:.0f}); "
                  f"spin {sp['us_per_write']:.0f} (loop {sp['between_us_per_write']:.0f} + "
                  f"sqlite3 {sp['sqlite3_us_per_write']:.0f})")
        results["memory"] = memory_floor(writes, args.rounds, Path(tmp) / "record-FULL.db")
        print(f"  memory://: {results['memory']['us_per_write']:.0f} µs/write (no SQL)")
        print("  statements:", json.dumps(results["full"]["statements"], indent=2))
        if args.profile:
            results["profile_us_per_write_off"] = prof = profile(writes, Path(tmp), "OFF")
            for name, us in prof.items():
                print(f"  profiled, synchronous=OFF: {us:7.1f} µs/write  {name}")
    if not args.quick and args.writes is None:
        write_results("write_cost", results)
    return results


if __name__ == "__main__":
    main()
