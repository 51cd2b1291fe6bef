"""Per-write cost on PostgreSQL: `Memory.assert_fact` against psycopg running the same
statements (issue #37: "measure against sqlite3 (and psycopg) executing the same statements
and rows in the same run"; the SQLite half is `bench_write_cost`).

A PostgreSQL write is more than one transaction: the key's head row made up front
(autocommit), the write itself (BEGIN ISOLATION LEVEL … COMMIT, a COPY of its pending rows
included), the sequencing after the commit (its own transaction) and the catch-up read. One
run records every command psycopg sends for each write — cursor statements with their
parameters, the rows of each COPY, and the BEGIN/COMMIT/ROLLBACK psycopg's own transaction
blocks issue — then times, in alternating rounds, toki making the same writes into a fresh
schema and a raw psycopg connection (autocommit, toki's session settings) sending exactly the
recorded commands, in order, into a fresh schema of the same migrations. Both schemas must
end with the same rows in every table.

Writes benchmarks/results/write_cost_pg.json ($TOKI_PG_DSN, default the local test database).

Beside it, the hot key on PostgreSQL (`hot_key`): ms per write on one supersede chain of
2,000 writes, per window of 250, as the key grows; and the same key with two writers taking
turns (`contended_key`), each write coming after the other's.

    python -m benchmarks.bench_write_cost_pg            # 1,000 writes over 250 keys, best of 3
    python -m benchmarks.bench_write_cost_pg --quick    # 100 writes (hot key 400), writes nothing
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from itertools import pairwise
from typing import Any

import psycopg

from benchmarks.bench_core import supersede_chain
from benchmarks.bench_write_cost import BASE, SEED, Write, _assert, make_writes
from benchmarks.common import machine_info, write_results
from toki.algebra import LWW
from toki.memory import Memory
from toki.model import Claim, FactKey
from toki.store.pg_rows import with_schema
from toki.store.postgres import PostgresStore, default_dsn, mask_dsn

Command = tuple[str, Any, Any]  # (execute | executemany | copy | command, query, params/rows)


@contextmanager
def recording(log: list[Command]) -> Iterator[None]:
    """Record every command any psycopg connection of this process sends while inside."""
    cursor, base = psycopg.Cursor, psycopg.BaseConnection
    saved = (cursor.execute, cursor.executemany, cursor.copy, base._exec_command)
    execute, executemany, copy, exec_command = saved

    def rec_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        log.append(("execute", query, params))
        return execute(self, query, params, **kw)

    def rec_executemany(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
        rows = list(params_seq)
        log.append(("executemany", query, rows))
        return executemany(self, query, rows, **kw)

    @contextmanager
    def rec_copy(self: Any, statement: Any, params: Any = None, **kw: Any) -> Iterator[Any]:
        rows: list[Any] = []
        log.append(("copy", statement, rows))
        with copy(self, statement, params, **kw) as cp:
            write_row = cp.write_row
            cp.write_row = lambda row: (rows.append(tuple(row)), write_row(row))[1]
            yield cp

    def rec_command(self: Any, command: Any, *args: Any, **kw: Any) -> Any:
        log.append(("command", command, None))
        return exec_command(self, command, *args, **kw)

    cursor.execute, cursor.executemany = rec_execute, rec_executemany  # type: ignore[method-assign]
    cursor.copy = rec_copy  # type: ignore[assignment]
    base._exec_command = rec_command  # type: ignore[method-assign]
    try:
        yield
    finally:
        cursor.execute, cursor.executemany, cursor.copy, base._exec_command = saved  # type: ignore[method-assign]


def _schema() -> str:
    return f"toki_wcost_{uuid.uuid4().hex[:12]}"


def _drop(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def record(dsn: str, writes: list[Write]) -> tuple[list[list[Command]], str]:
    """The commands toki sends for each write (one list per write), and the schema it wrote."""
    schema = _schema()
    mem = Memory.open(with_schema(dsn, schema))
    per_write: list[list[Command]] = []
    for w in writes:
        log: list[Command] = []
        with recording(log):
            _assert(mem, w)
        per_write.append(log)
    mem.close()
    return per_write, schema


def run_toki(dsn: str, writes: list[Write]) -> tuple[float, str]:
    """Seconds for toki to make the writes into a fresh schema (opening it is not timed)."""
    schema = _schema()
    mem = Memory.open(with_schema(dsn, schema))
    t0 = time.perf_counter()
    for w in writes:
        _assert(mem, w)
    seconds = time.perf_counter() - t0
    mem.close()
    return seconds, schema


def replay(dsn: str, per_write: list[list[Command]]) -> tuple[float, str]:
    """Seconds for a raw psycopg connection to send the recorded commands, write by write,
    into a fresh schema of toki's migrations, with toki's session settings."""
    schema = _schema()
    PostgresStore(dsn, schema=schema).close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'UTC'")
        conn.execute("SET default_transaction_isolation TO 'read committed'")
        conn.execute(f'SET search_path TO "{schema}", public'.encode())
        cur = conn.cursor()
        t0 = time.perf_counter()
        for commands in per_write:
            for how, query, params in commands:
                if how == "execute":
                    cur.execute(query, params)
                elif how == "executemany":
                    cur.executemany(query, params)
                elif how == "copy":
                    with cur.copy(query) as cp:
                        for row in params:
                            cp.write_row(row)
                else:
                    conn.execute(query)
        seconds = time.perf_counter() - t0
    return seconds, schema


def contents(dsn: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table in `schema`, sorted: what both sides must have."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "ORDER BY table_name", (schema,)).fetchall()]
        return {t: sorted(conn.execute(f'SELECT * FROM "{schema}"."{t}"'.encode()).fetchall(),
                          key=repr)
                for t in tables}


def without_op_ids(rows: dict[str, list[tuple[Any, ...]]]) -> dict[str, list[tuple[Any, ...]]]:
    """The rows with toki_op's ids left out, each operation's outcome kept: toki draws a fresh
    random id per write on PostgreSQL, so two toki runs differ there and only there (the
    replay sends the recorded ids, so it is compared with them)."""
    return {t: sorted((row[1:] for row in table), key=repr) if t == "toki_op" else table
            for t, table in rows.items()}


def command_counts(per_write: list[list[Command]]) -> dict[str, Any]:
    """Commands per write, and how often each command text ran."""
    def text(query: Any) -> str:
        raw = query.decode() if isinstance(query, bytes) else str(query)
        return " ".join(raw.split())[:90]

    counts = Counter(text(q) for cmds in per_write for _, q, _ in cmds)
    return {"per_write_mean": sum(map(len, per_write)) / len(per_write),
            "by_command": dict(counts.most_common())}


def measure(dsn: str, writes: list[Write], rounds: int) -> dict[str, Any]:
    """Best of `rounds` alternating toki / psycopg runs, each into a fresh schema; every run
    must leave the rows the recorded one left."""
    per_write, recorded = record(dsn, writes)
    schemas = [recorded]
    try:
        with_ids = contents(dsn, recorded)
        expected = {True: with_ids, False: without_op_ids(with_ids)}
        toki_s, raw_s = [], []
        for r in range(rounds):
            for side, run, out, ids in (
                ("toki", lambda: run_toki(dsn, writes), toki_s, False),
                ("psycopg", lambda: replay(dsn, per_write), raw_s, True),
            ):
                seconds, schema = run()
                schemas.append(schema)
                rows = contents(dsn, schema)
                if (rows if ids else without_op_ids(rows)) != expected[ids]:
                    raise AssertionError(f"{side} round {r} wrote other rows than recorded")
                out.append(seconds)
    finally:
        for schema in schemas:
            _drop(dsn, schema)
    n = len(writes)
    return {"toki_writes_per_s": n / min(toki_s), "psycopg_writes_per_s": n / min(raw_s),
            "ratio": min(raw_s) / min(toki_s), "toki_us_per_write": 1e6 * min(toki_s) / n,
            "psycopg_us_per_write": 1e6 * min(raw_s) / n, "toki_round_s": toki_s,
            "psycopg_round_s": raw_s, "commands": command_counts(per_write)}


def hot_key(dsn: str, n: int, window: int, repeat: int = 2) -> dict[str, Any]:
    """ms per write through Memory.supersede on one supersede chain of n writes on PostgreSQL,
    per window of `window` writes as the key grows (bench_core's hot-key job, which runs on
    the in-memory store; issue #37 asks the last window's rate >= 0.7 of the first's). The
    chain is written `repeat` times into fresh schemas, each window's time its best."""
    runs = []
    for _ in range(repeat):
        schema = _schema()
        mem = Memory.open(with_schema(dsn, schema), clock=lambda: BASE)
        try:
            runs.append(supersede_chain(mem, n + 1, window))  # a claim, then n supersedes
            events = len(mem.events())
        finally:
            mem.close()
            _drop(dsn, schema)
    return _windows(runs, window, {"writes": n, "events": events})


def contended_key(dsn: str, n: int, window: int, repeat: int = 2) -> dict[str, Any]:
    """The hot key with two writers: two Memories of one store take turns writing claims
    through LWW on one key (each claim holds from its recording time and closes the one
    before), so every write comes after the other writer's, unseen; ms per write per window
    of `window` writes as the key grows, each window's best of `repeat` runs."""
    runs = []
    key = FactKey("bench", "contended", "city")
    for _ in range(repeat):
        schema = _schema()
        mems = [Memory.open(with_schema(dsn, schema), clock=lambda: BASE) for _ in range(2)]
        try:
            marks = [time.perf_counter()]
            for i in range(1, n + 1):
                at = BASE + timedelta(seconds=i)
                claim = Claim(key, f"v{i}", f"s{i % 2}", valid_from=at, recorded_at=at)
                mems[i % 2].write(claim, LWW)
                if i % window == 0:
                    marks.append(time.perf_counter())
            runs.append(marks)
            mems[0].refresh()
            events = len(mems[0].events())
        finally:
            for mem in mems:
                mem.close()
            _drop(dsn, schema)
    return _windows(runs, window, {"writes": n, "writers": 2, "events": events})


def _windows(runs: list[list[float]], window: int, out: dict[str, Any]) -> dict[str, Any]:
    """ms per write in each window, its best over the runs (a window is 1.5 s, within which
    a one-off stall of the server or the machine would otherwise decide the ratio)."""
    ms = [1e3 * min(times) / window
          for times in zip(*([b - a for a, b in pairwise(marks)] for marks in runs),
                           strict=True)]
    return {**out, "window": window, "repeat": len(runs), "ms_per_write_by_window": ms,
            "last_to_first": ms[0] / ms[-1]}


def server_version(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT version()").fetchone()
    return str(row[0]).split(" on ")[0] if row else "?"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    dsn = default_dsn()
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.Error as exc:
        print(f"PostgreSQL write cost: skipped, {mask_dsn(dsn)} is unreachable ({exc})")
        return {}
    n = 100 if args.quick else 1_000
    keys = max(1, n // 4)
    print(f"PostgreSQL write cost: {n} assert_fact calls over {keys} keys, seed {SEED}, "
          f"best of {args.rounds}")
    m = measure(dsn, make_writes(n, keys), args.rounds)
    n, window = (400, 100) if args.quick else (2_000, 250)
    m["hot_key"] = hot_key(dsn, n, window)
    m["contended_key"] = contended_key(dsn, n, window)
    for name, hot in (("one hot key", m["hot_key"]), ("two writers", m["contended_key"])):
        print(f"  {name}: {hot['ms_per_write_by_window'][0]:.1f} ms per write in the first "
              f"{hot['window']} writes, {hot['ms_per_write_by_window'][-1]:.1f} ms in the "
              f"last; rate last / first {hot['last_to_first']:.2f}")
    print(f"  toki {m['toki_writes_per_s']:,.0f} writes/s, psycopg {m['psycopg_writes_per_s']:,.0f}"
          f" writes/s, ratio {m['ratio']:.2f}, {m['commands']['per_write_mean']:.2f} commands/write")
    results = {"machine": machine_info(), "server": server_version(dsn), "writes": n,
               "keys": keys, "seed": SEED, "rounds": args.rounds, **m}
    if not args.quick:
        write_results("write_cost_pg", results)
    return results



if __name__ == "__main__":
    main()
