"""Opening a store (issue #37): from a checkpoint against a full replay, and against the
read floor of sqlite3, on SQLite stores of 10^3 to 10^6 events; with --postgresql the same
on PostgreSQL stores against psycopg's read floor.

Writes benchmarks/results/open.json. For each size n the store is built by bulk appends (the
core benchmark's workload: a supersession chain on each of 1,000 keys, streamed, not held in
memory), with its projection; then, in one run:

- full replay: `Memory.open` on the store without a checkpoint (that open writes one);
- checkpoint, tail 999: `Memory.open` after 999 more events were appended behind the
  checkpoint (the longest tail a store keeps: one is written at max(1,000, keys) events),
  and with tail 0 (a checkpoint at the head, as `close` or `toki checkpoint` leaves it);
- the read floor: raw sqlite3 reading exactly the rows a checkpointed open reads
  (`toki_meta`, every `toki_current` row, the event row at the checkpoint and the tail's
  rows), and, for the full replay, every row of `toki_event`, `toki_current` and `toki_meta`;
- the floor with the open's checks: the same reads plus only what the open must compute to
  check them (the record's digest and decode, one chain link per tail event, one digest per
  projection row the record vouches for); floor / that is the best ratio an open making
  those checks could reach (`checkpoint_ceiling_ratio`, `checkpoint_tail0_ceiling_ratio`);
- where a checkpointed open's time goes, by phase (record, tail, chain, lazy snapshot,
  reconcile, other): per-key and per-event Python work, which bounds the ratio to the read
  floor;
- what moved to first use: `current()` of one key (its state built from its own events)
  and `state_hash()` (every key built);
- the first write after an open with the tail (one `assert_fact` on a key the tail did not
  touch, at toki's synchronous=FULL): it makes a checkpoint due (999 + 1 events), so it
  times the record written after a checkpointed open as well as that key's first build.

Ratios are floor time / open time (1.0: as fast as sqlite3 reading the same rows). Growth
exponents are least-squares slopes of log time on log n. Best of `--repeat` opens.

    python -m benchmarks.bench_open            # 10^3 … 10^6 events
    python -m benchmarks.bench_open --quick    # 10^3 … 10^5
    python -m benchmarks.bench_open --postgresql --max 100000   # PostgreSQL ($TOKI_PG_DSN)

The PostgreSQL part is merged into open.json under "postgresql", the SQLite part kept as it
is (and the other way round). Its floor is psycopg reading, in one REPEATABLE READ snapshot,
the rows the open reads: for a full replay every row of toki_event, toki_version,
toki_current, toki_adjudicated, toki_pending and toki_meta; for a checkpointed open
toki_meta, the event row at the checkpoint, the tail's event rows, the tail keys' version
rows, and every toki_current and toki_adjudicated row.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import random
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple

from benchmarks.bench_core import BASE
from benchmarks.bench_growth import growth_exponent
from benchmarks.common import machine_info, write_results
from toki.canonical import decode_json
from toki.chain import link
from toki.checkpoint import UNCHECKED, Checkpoint, row_digest, text_digest
from toki.log import Event, EventKind, make_event
from toki.memory import Memory
from toki.model import FactKey, FactVersion
from toki.replay import Snapshot, gc_paused
from toki.store.sqlite import SQLiteStore
from toki.time import BoundSource, Interval

KEYS = 1_000
TAIL = 999
BATCH = 10_000


def stream_events(n: int, keys: int = KEYS, seed: int = 1) -> Iterator[Event]:
    """The core benchmark's workload (`bench_core.make_events`), one event at a time."""
    rng = random.Random(seed)
    key_list = [FactKey("bench", f"s{i}", "city") for i in range(keys)]
    last: dict[FactKey, FactVersion] = {}
    key_seq: dict[FactKey, int] = {}
    seq = t = 0

    def event(
        kind: EventKind,
        key: FactKey,
        at: Any,
        ids: tuple[str, ...],
        body: Any,
        version: FactVersion | None = None,
    ) -> Event:
        nonlocal seq
        seq += 1
        key_seq[key] = key_seq.get(key, 0) + 1
        return make_event(seq, key_seq[key], kind, key, at, ids, body, version)

    while seq < n:
        key = key_list[rng.randrange(keys)]
        t += 1
        at = BASE + timedelta(seconds=t)
        prev = last.get(key)
        version = FactVersion(
            key,
            f"value-{t}",
            Interval(at, None, BoundSource.EVIDENCE, BoundSource.UNKNOWN),
            at,
            f"src-{t}",
            f"h{t}",
            supersedes=None if prev is None else prev.id,
        )
        yield event(
            EventKind.ASSERT,
            key,
            at,
            (version.id,),
            {"version": version.payload(), "proposed": False},
            version,
        )
        if prev is not None and seq < n:
            yield event(
                EventKind.SUPERSEDE,
                key,
                at,
                (prev.id, version.id),
                {
                    "old": prev.id,
                    "new": [version.id],
                    "closes_at": version.payload()["valid"]["start"],
                },
            )
        last[key] = version


def _append(store: Any, snapshot: Snapshot, events: Iterator[Event], count: int) -> None:
    """Bulk-append `count` events with the projection rows of the keys they touch."""
    batch: list[Event] = []
    for _ in range(count):
        batch.append(next(events))
        if len(batch) == BATCH:
            _commit(store, snapshot, batch)
            batch = []
    if batch:
        _commit(store, snapshot, batch)


def _commit(store: Any, snapshot: Snapshot, batch: list[Event]) -> None:
    with gc_paused():
        snapshot.fold(batch)
        rows = {k: snapshot.keys[k].summary() for k in {e.key for e in batch}}
    with store.write_lock():
        store.append(batch, rows, batch[-1].seq)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _best(repeat: int, fn: Callable[[], Any]) -> float:
    return min(_timed(fn)[0] for _ in range(repeat))


def _rounds(repeat: int, runs: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """The fastest of `repeat` rounds of each run, the runs taking turns within a round
    (an open and the floors it is compared with then meet the same machine), after the
    build's writes are on disk and with what the benchmark holds (its own fold of every
    event) out of the garbage collector's way. A run returning a float reports its own
    seconds (the floors time their reads, not their connection)."""
    os.sync()
    gc.collect()
    gc.freeze()
    best: dict[str, float] = {}
    try:
        for _ in range(repeat):
            for name, run in runs.items():
                seconds, out = _timed(run)
                seconds = out if isinstance(out, float) else seconds
                best[name] = min(best.get(name, seconds), seconds)
    finally:
        gc.unfreeze()
    return best


def first_write(url: str, n: int, tail_keys: set[FactKey]) -> float:
    """Seconds of one assert_fact on a key the tail did not touch, right after an open (the
    store is written: run last)."""
    mem = Memory.open(url)
    key = next(k for i in range(KEYS) if (k := FactKey("bench", f"s{i}", "city")) not in tail_keys)
    at = BASE + timedelta(seconds=n + TAIL + 1)
    seconds, _ = _timed(
        lambda: mem.assert_fact(key, "after-open", valid_from=at, recorded_at=at, source_id="w")
    )
    assert mem._checkpoint is not None and mem._checkpoint.seq > n, "the write must checkpoint"
    mem.close()
    return seconds


def _open(url: str) -> Memory:
    mem = Memory.open(url)
    mem._store.close()  # not mem.close(): that may write a checkpoint, which is not opening
    return mem


Rows = list[tuple[Any, ...]]


def _read(conn: sqlite3.Connection, checkpoint_seq: int | None) -> tuple[Rows, Rows, Rows, Rows]:
    """The rows an open reads (checkpoint_seq None: a full replay's): toki_meta, toki_current,
    the chain link at the checkpoint and the events after it (a full replay: every event)."""
    meta = conn.execute("SELECT * FROM toki_meta").fetchall()
    current = conn.execute("SELECT * FROM toki_current").fetchall()
    if checkpoint_seq is None:
        return meta, current, [], conn.execute("SELECT * FROM toki_event ORDER BY seq").fetchall()
    head = conn.execute("SELECT chain FROM toki_event WHERE seq = ?", (checkpoint_seq,)).fetchall()
    tail = conn.execute(
        "SELECT * FROM toki_event WHERE seq > ? ORDER BY seq", (checkpoint_seq,)
    ).fetchall()
    return meta, current, head, tail


def _floor(path: Path, checkpoint_seq: int | None) -> float:
    """sqlite3 reading the rows an open reads (checkpoint_seq None: a full replay's)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t0 = time.perf_counter()
    _read(conn, checkpoint_seq)
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


@contextmanager
def _phases(into: dict[str, float]) -> Iterator[None]:
    """Time the phases of a checkpointed open (benchmark only: wraps the functions the open
    calls, adding each call's seconds into `into`); what is left of the open is "other"."""
    import toki.memory as memory_module

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                into[name] = into.get(name, 0.0) + time.perf_counter() - t0
        return run

    wrapped: list[tuple[Any, str, int]] = [
        (Checkpoint, "from_text", 0),
        (SQLiteStore, "load_checkpoint", 0),
        (SQLiteStore, "load_tail", 1),
        (memory_module, "lazy_snapshot", 2),
        (Memory, "_reconcile_tail", 3),
        (Memory, "_admit", 4),
    ]
    saved = [(owner, name, vars(owner)[name]) for owner, name, _ in wrapped]
    for owner, name, phase in wrapped:
        fn = vars(owner)[name]
        if isinstance(fn, classmethod):
            setattr(owner, name, classmethod(timed(PHASES[phase], fn.__func__)))
        else:
            setattr(owner, name, timed(PHASES[phase], fn))
    try:
        yield
    finally:
        for owner, name, fn in saved:
            setattr(owner, name, fn)


PHASES = (
    "checkpoint record: read, digest check, parse (one FactKey per key)",
    "tail: read, decode and verify each event (hashes, id), link check",
    "lazy snapshot: one unbuilt state per key, the tail's ids and versions",
    "reconcile: digest each stored projection row against the record",
    "chain: link each tail event to the one before it, and log it",
    "other (connection, chain seal, Memory set-up)",
)


def open_phases(url: str, repeat: int) -> dict[str, float]:
    """Seconds per phase of the fastest of `repeat` checkpointed opens: what bounds the ratio
    to the read floor is per-key and per-event Python work, which this shows by phase."""
    best: dict[str, float] = {}
    for _ in range(repeat):
        parts: dict[str, float] = {}
        with _phases(parts):
            total, _ = _timed(lambda: _open(url))
        parts[PHASES[5]] = total - sum(parts.values())
        if not best or total < sum(best.values()):
            best = parts
    return best


def _checks_floor(path: Path, checkpoint_seq: int) -> float:
    """The floor of a checkpointed open that checks what toki's open checks, and builds
    nothing: sqlite3 reading the same rows (and the tail keys' texts, which the open reads
    by a join), the record's digest and JSON decode, one chain link per tail event, and one
    row digest per projection row the record vouches for (a key the tail did not touch and
    the record does not leave UNCHECKED). floor / this is the best ratio an open doing those
    checks in Python could reach: what is left of the target is toki's own per-row work."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t0 = time.perf_counter()
    rows, current, head, tail = _read(conn, checkpoint_seq)
    meta = dict(rows)
    texts = dict(conn.execute(
        "SELECT id, fact_key FROM toki_key WHERE id IN "
        "(SELECT key_id FROM toki_event WHERE seq > ?)", (checkpoint_seq,)
    ).fetchall())
    record = meta["checkpoint"]
    assert text_digest(record) == meta["checkpoint_digest"]
    recorded = {t: d for t, _, d in decode_json(record)["keys"]}
    prev = head[0][0]
    for seq, _, key_seq, _, _, _, payload_hash, event_id, _, chain in tail:
        prev = link(prev, _Linked(seq, key_seq, event_id, payload_hash))  # type: ignore[arg-type]
        assert prev == chain
    touched = {texts[row[1]] for row in tail}
    for row in current:
        digest = recorded.get(row[0])
        if row[0] not in touched and digest != UNCHECKED:
            assert row_digest(row) == digest
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed


class _Linked(NamedTuple):
    """The fields of an event row its chain link covers."""

    seq: int
    key_seq: int
    event_id: str
    payload_hash: str


def _everything_floor(path: Path) -> float:
    """sqlite3 reading every row of every table a checkpointed open touches (toki_event
    whole, though the open reads only its tail)."""
    return _floor(path, None)


def bench_size(n: int, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {"events": n, "keys": min(KEYS, n), "tail": TAIL}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "open.db"
        url = f"sqlite:///{path}"
        store = SQLiteStore(path)
        snapshot = Snapshot()
        events = stream_events(n + TAIL)
        t_build, _ = _timed(lambda: _append(store, snapshot, events, n))
        out["build_s"] = t_build
        store.close()
        # a full replay: the store has no checkpoint (the first open writes one)
        t_full, mem = _timed(lambda: Memory.open(url))
        assert mem.open_report is not None and mem.open_report.opened_from == "full replay"
        hash_full = mem.state_hash()
        mem.close()
        out["open_full_replay_s"] = t_full
        out["floor_full_replay_s"] = min(_floor(path, None) for _ in range(repeat))
        # a checkpoint at the head (written by that open when due, else by checkpoint())
        mem = Memory.open(url)
        mem.checkpoint()
        mem.close()
        out.update(_rounds(repeat, {
            "open_checkpoint_tail0_s": lambda: _open(url),
            "floor_checkpoint_tail0_s": lambda: _floor(path, n),
            "floor_with_checks_tail0_s": lambda: _checks_floor(path, n),
        }))
        # 999 events behind it (appended, the checkpoint left where it was)
        store = SQLiteStore(path)
        tail = [next(events) for _ in range(TAIL)]
        _append(store, snapshot, iter(tail), TAIL)
        store.close()
        mem = _open(url)
        report = mem.open_report
        assert report is not None and report.opened_from.startswith(f"checkpoint at seq {n} ")
        out.update(_rounds(repeat, {
            "open_checkpoint_s": lambda: _open(url),
            "floor_checkpoint_s": lambda: _floor(path, n),
            "floor_with_checks_s": lambda: _checks_floor(path, n),
        }))
        out["floor_every_row_s"] = min(_everything_floor(path) for _ in range(repeat))
        out["checkpoint_phases_s"] = open_phases(url, repeat)
        # what moved to first use
        mem = Memory.open(url)
        key = FactKey("bench", "s0", "city")
        out["first_current_one_key_s"], _ = _timed(lambda: mem.current(key))
        out["first_state_hash_all_keys_s"], hashed = _timed(mem.state_hash)
        mem._store.close()
        # the bench folded every event it appended: the checkpointed open must equal it
        assert hashed == snapshot.state_hash(), "checkpoint open must equal full replay"
        assert hash_full  # (the state before the tail)
        out["first_write_after_open_s"] = first_write(url, n, {e.key for e in tail})
    for kind in ("checkpoint", "checkpoint_tail0", "full_replay"):
        open_s, floor_s = out[f"open_{kind}_s"], out[f"floor_{kind}_s"]
        total = n + (TAIL if kind == "checkpoint" else 0)
        out[f"{kind}_events_per_s"] = total / open_s
        out[f"{kind}_ratio_to_floor"] = floor_s / open_s
    for kind in ("", "_tail0"):
        out[f"checkpoint{kind}_ceiling_ratio"] = (
            out[f"floor_checkpoint{kind}_s"] / out[f"floor_with_checks{kind}_s"]
        )
    out["checkpoint_ratio_to_every_row"] = out["floor_every_row_s"] / out["open_checkpoint_s"]
    out["speedup_checkpoint_over_full"] = out["open_full_replay_s"] / out["open_checkpoint_s"]
    if n == 10**5:
        out["serialised_snapshot"] = serialised_snapshot(n)
    return out


def _pg_floor(dsn: str, schema: str, checkpoint_seq: int | None) -> float:
    """psycopg reading the rows a PostgreSQL open reads (checkpoint_seq None: a full
    replay's), in one snapshot, as the store does."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"'.encode())
        t0 = time.perf_counter()
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            conn.execute("SELECT * FROM toki_meta").fetchall()
            conn.execute("SELECT * FROM toki_pending").fetchall()
            conn.execute("SELECT * FROM toki_current").fetchall()
            conn.execute("SELECT * FROM toki_adjudicated").fetchall()
            if checkpoint_seq is None:
                conn.execute("SELECT * FROM toki_event ORDER BY seq").fetchall()
                conn.execute("SELECT * FROM toki_version").fetchall()
            else:
                conn.execute("SELECT chain FROM toki_event WHERE seq = %s", (checkpoint_seq,))
                tail = conn.execute(  # bounded as toki reads it: an index walk unanalyzed
                    "SELECT * FROM toki_event WHERE seq > %s AND seq <= "
                    "(SELECT max(seq) FROM toki_event) ORDER BY seq",
                    (checkpoint_seq,),
                ).fetchall()
                ids = [v for row in tail for v in row[9][:1]]
                conn.execute("SELECT * FROM toki_version WHERE id = ANY(%s)", (ids,)).fetchall()
        return time.perf_counter() - t0


def bench_size_pg(n: int, repeat: int, dsn: str) -> dict[str, Any]:
    """bench_size on a PostgreSQL store in a fresh schema (dropped afterwards)."""
    import uuid

    import psycopg

    from toki.store.pg_rows import with_schema
    from toki.store.postgres import PostgresStore

    out: dict[str, Any] = {"events": n, "keys": min(KEYS, n), "tail": TAIL}
    schema = f"toki_bench_{uuid.uuid4().hex[:12]}"
    url = with_schema(dsn, schema)
    try:
        store = PostgresStore(dsn, schema=schema)
        snapshot = Snapshot()
        events = stream_events(n + TAIL)
        out["build_s"], _ = _timed(lambda: _append(store, snapshot, events, n))
        store.close()
        t_full, mem = _timed(lambda: Memory.open(url))
        assert mem.open_report is not None and mem.open_report.opened_from == "full replay"
        mem.close()
        out["open_full_replay_s"] = t_full
        out["floor_full_replay_s"] = min(_pg_floor(dsn, schema, None) for _ in range(repeat))
        mem = Memory.open(url)
        mem.checkpoint()
        mem.close()
        out["open_checkpoint_tail0_s"] = _best(repeat, lambda: _open(url))
        out["floor_checkpoint_tail0_s"] = min(_pg_floor(dsn, schema, n) for _ in range(repeat))
        store = PostgresStore(dsn, schema=schema)
        tail = [next(events) for _ in range(TAIL)]
        _append(store, snapshot, iter(tail), TAIL)
        store.close()
        out["open_checkpoint_s"] = _best(repeat, lambda: _open(url))
        mem = _open(url)
        report = mem.open_report
        assert report is not None and report.opened_from.startswith(f"checkpoint at seq {n} ")
        out["floor_checkpoint_s"] = min(_pg_floor(dsn, schema, n) for _ in range(repeat))
        mem = Memory.open(url)
        key = FactKey("bench", "s0", "city")
        out["first_current_one_key_s"], _ = _timed(lambda: mem.current(key))
        out["first_state_hash_all_keys_s"], hashed = _timed(mem.state_hash)
        mem._store.close()
        assert hashed == snapshot.state_hash(), "checkpoint open must equal full replay"
        out["first_write_after_open_s"] = first_write(url, n, {e.key for e in tail})
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
    for kind in ("checkpoint", "checkpoint_tail0", "full_replay"):
        open_s, floor_s = out[f"open_{kind}_s"], out[f"floor_{kind}_s"]
        total = n + (TAIL if kind == "checkpoint" else 0)
        out[f"{kind}_events_per_s"] = total / open_s
        out[f"{kind}_ratio_to_floor"] = floor_s / open_s
    out["speedup_checkpoint_over_full"] = out["open_full_replay_s"] / out["open_checkpoint_s"]
    return out


def serialised_snapshot(n: int) -> dict[str, float]:
    """The design not taken: a pickled Snapshot of n events, loaded back, against replaying
    the same events from memory (docs/integrity.md, "Checkpoints")."""
    import pickle

    from toki.replay import replay

    events = list(stream_events(n))
    replay_s, snapshot = _timed(lambda: replay(events))
    blob = pickle.dumps(snapshot, 5)
    with gc_paused():
        load_s, _ = _timed(lambda: pickle.loads(blob))
    return {"replay_from_memory_s": replay_s, "pickle_load_s": load_s, "pickle_mb": len(blob) / 1e6}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max", type=int, default=0, help="largest n (default 10^6, quick 10^5)")
    parser.add_argument("--postgresql", action="store_true", help="PostgreSQL ($TOKI_PG_DSN)")
    args = parser.parse_args(argv)
    top = args.max or (10**5 if args.quick else 10**6)
    sizes = [n for n in (10**3, 10**4, 10**5, 10**6) if n <= top]
    backend = "PostgreSQL" if args.postgresql else "SQLite"
    print(f"open benchmark: {backend} stores of {sizes} events over {KEYS} keys, tail {TAIL}")
    results: dict[str, Any] = {"machine": machine_info(), "quick": args.quick, "sizes": []}
    if args.postgresql:
        from toki.store.postgres import default_dsn, mask_dsn

        results["server"] = mask_dsn(default_dsn())
    for n in sizes:
        row = (
            bench_size_pg(n, args.repeat, default_dsn())
            if args.postgresql
            else (bench_size(n, args.repeat))
        )
        results["sizes"].append(row)
        print(f"  {n}:", json.dumps(row, default=str))
    ns = [r["events"] for r in results["sizes"]]
    for kind in ("checkpoint", "checkpoint_tail0", "full_replay"):
        results[f"{kind}_growth_exponent"] = growth_exponent(
            ns, [r[f"open_{kind}_s"] for r in results["sizes"]]
        )
    top_row = results["sizes"][-1]
    results["largest"] = {
        "events": top_row["events"],
        "open_checkpoint_s": top_row["open_checkpoint_s"],
        "ratio_to_floor": top_row["checkpoint_ratio_to_floor"],
        "target_s": 3.0,
        "target_ratio": 0.5,
    }
    print(
        "  growth exponents:",
        {k: round(v, 3) for k, v in results.items() if k.endswith("_growth_exponent")},
    )
    if not args.quick and math.isfinite(top_row["open_checkpoint_s"]):
        _merge(results, args.postgresql)
    return results


def _merge(results: dict[str, Any], postgresql: bool) -> None:
    """Write one backend's part into open.json, keeping the other's as it is."""
    from benchmarks.common import RESULTS

    path = RESULTS / "open.json"
    old: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if postgresql:
        write_results("open", {**old, "postgresql": results})
    else:
        write_results(
            "open",
            {**results, **({"postgresql": old["postgresql"]} if "postgresql" in old else {})},
        )


if __name__ == "__main__":
    main()
