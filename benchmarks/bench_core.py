"""Core benchmark: append, replay and resolve_at, in memory and on SQLite.

Writes benchmarks/results/core.json. Each measurement runs in a fresh subprocess so that its
peak RSS is its own. Targets (issue "Bitemporal core"): in-memory replay ≥ 500k events/s
(hashes not re-verified; the verified rate is reported too), resolve_at on one key with
10^5 versions < 50 µs, SQLite batched append ≥ 50k events/s.

    python -m benchmarks.bench_core            # full: 10^6 events, 10^5 versions
    python -m benchmarks.bench_core --quick    # 10^5 events, 10^4 versions
    python -m benchmarks.bench_core --only sqlite   # rerun one section, keep the others
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.common import RESULTS, machine_info, write_results
from toki.log import Event, EventKind, EventLog
from toki.model import FactKey, FactVersion
from toki.replay import Snapshot, gc_paused, replay
from toki.time import BoundSource, Interval

BASE = datetime(2020, 1, 1, tzinfo=UTC)


def make_events(n: int, keys: int, seed: int = 1) -> list[Event]:
    """A supersession chain per key: ASSERT then (SUPERSEDE + ASSERT) pairs, sequenced."""
    rng = random.Random(seed)
    log = EventLog()
    last: dict[FactKey, FactVersion] = {}
    key_list = [FactKey("bench", f"s{i}", "city") for i in range(keys)]
    t = 0
    while len(log) < n:
        key = key_list[rng.randrange(keys)]
        t += 1
        at = BASE + timedelta(seconds=t)
        prev = last.get(key)
        version = FactVersion(
            key, f"value-{t}", Interval(at, None, BoundSource.EVIDENCE, BoundSource.UNKNOWN),
            at, f"src-{t}", f"h{t}", supersedes=None if prev is None else prev.id,
        )
        log.add(log.new(EventKind.ASSERT, key, at, (version.id,),
                        {"version": version.payload(), "proposed": False}, version))
        if prev is not None and len(log) < n:
            log.add(log.new(EventKind.SUPERSEDE, key, at, (prev.id, version.id),
                            {"old": prev.id, "new": [version.id],
                             "closes_at": version.payload()["valid"]["start"]}))
        last[key] = version
    return list(log)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def read_fields(events: list[Event]) -> int:
    """Read, per event, what any fold of it must read (its id's and key's hashes, kind, seq
    numbers, recorded time, and the body entries of its kind: the version id and proposed flag
    of an ASSERT; old, new and closes_at of a SUPERSEDE) and do nothing with it: a floor
    under replay's time set by memory reads alone, in the list's order."""
    touched = 0  # a sum of what was read, so that every read is used
    for e in events:
        touched += (hash(e.event_id) & 1) + (hash(e.key) & 1) + e.seq + e.key_seq
        touched += e.recorded_at.microsecond
        body = e.body
        if e.kind is EventKind.ASSERT:
            touched += (hash(e.version_ids[0]) & 1) + (body.get("proposed") is True)
        elif e.kind is EventKind.SUPERSEDE:
            closes = body.get("closes_at")
            touched += (hash(body["old"]) & 1) + len(body["new"]) + len(closes or "")
    return touched


def bare_fold(events: list[Event]) -> int:
    """Only the inserts any fold of these events makes, in the list's order: per key a map of
    versions, a map of supersessions (replacements, parsed closing time, recorded time) and
    its events' times, plus the version → key index. No dedupe, seq ordering, proposed flags
    or seq numbers: a floor under replay's time set by the least work its state needs."""
    states: dict[FactKey, tuple[dict[str, Any], dict[str, Any], list[datetime]]] = {}
    version_key: dict[str, FactKey] = {}
    for e in events:
        state = states.get(e.key)
        if state is None:
            state = states[e.key] = ({}, {}, [])
        if e.kind is EventKind.ASSERT:
            vid = e.version_ids[0]
            state[0][vid] = e.version
            version_key[vid] = e.key
        elif e.kind is EventKind.SUPERSEDE:
            body = e.body
            closes = body.get("closes_at")
            state[1][body["old"]] = (tuple(body["new"]),
                                     None if closes is None else datetime.fromisoformat(closes),
                                     e.recorded_at)
        state[2].append(e.recorded_at)
    return len(version_key)


def job_replay(n: int, keys: int) -> dict[str, Any]:
    events = make_events(n, keys)
    rss_before = _rss_mib()
    reads_secs, _ = _timed(lambda: read_fields(events))
    by_key: dict[FactKey, list[Event]] = {}
    for e in events:
        by_key.setdefault(e.key, []).append(e)
    key_order = [e for bucket in by_key.values() for e in bucket]  # the order replay folds in
    key_order_secs, _ = _timed(lambda: read_fields(key_order))
    with gc_paused():  # as replay runs
        bare_secs, _ = _timed(lambda: bare_fold(events))
    secs, snap = _timed(lambda: replay(events))
    verified_secs, _ = _timed(lambda: [e.verify() for e in events] and replay(events))
    append_secs, _ = _timed(lambda: EventLog(events))
    return {
        "events": n,
        "keys": keys,
        "replay_seconds": secs,
        "replay_events_per_s": n / secs,
        "replay_verified_events_per_s": n / verified_secs,
        # the same events' fields read once and nothing done with them (`read_fields`)
        "field_reads_events_per_s": n / reads_secs,
        "field_reads_key_order_events_per_s": n / key_order_secs,
        "bare_fold_events_per_s": n / bare_secs,  # `bare_fold`: only the state's inserts
        "log_append_events_per_s": n / append_secs,
        "peak_rss_mib": _rss_mib(),
        "rss_before_replay_mib": rss_before,
        "state_hash": snap.state_hash()[:16],
    }


def supersede_chain(mem: Any, n: int, every: int) -> list[float]:
    """Write one supersede chain of n writes on one key of `mem` (the hot key): a claim, then
    n - 1 supersedes of the version before. The perf_counter after the claim and after every
    `every` writes, and after the last."""
    key = FactKey("bench", "hot", "city")
    prev = mem.assert_fact(key, "v0", valid_from=BASE, recorded_at=BASE, source_id="s0")
    marks = [time.perf_counter()]
    for i in range(1, n):
        at = BASE + timedelta(seconds=i)
        prev = mem.supersede(prev, f"v{i}", valid_from=at, recorded_at=at, source_id=f"s{i}")
        if i % every == 0 or i == n - 1:
            marks.append(time.perf_counter())
    return marks


def job_write_path(n: int, repeat: int = 3) -> dict[str, Any]:
    """Claims/s through Memory.supersede (validation, conflict check, events, projection) on
    one supersede chain of n writes, per window of 1,000 writes as the key grows. Issue #37:
    the last window's rate >= 0.7 of the first's. A window is 0.2-0.5 s, within which this
    machine's speed drifts by a third, so the chain is written `repeat` times into fresh
    Memories and each window's rate is its best over the repeats."""
    from toki.memory import Memory

    windows: list[float] = []
    total = float("inf")
    for _ in range(repeat):
        mem = Memory(clock=lambda: BASE)
        marks = supersede_chain(mem, n, 1000)
        total = min(total, marks[-1] - marks[0])
        sizes = [1000] * (len(marks) - 2) + [n - 1 - 1000 * (len(marks) - 2)]
        rates = [w / (b - a) for w, (a, b) in zip(sizes, pairwise(marks), strict=True)]
        windows = rates if not windows else [max(a, b) for a, b in zip(windows, rates, strict=True)]
    full = windows[:-1] if len(windows) > 1 else windows  # the last window may be short
    return {"writes": n, "repeat": repeat, "writes_per_s": (n - 1) / total,
            "events": len(mem.events()),
            "writes_per_s_first_1000": full[0], "writes_per_s_last_1000": full[-1],
            "last_to_first": full[-1] / full[0],
            "writes_per_s_by_1000": windows, "peak_rss_mib": _rss_mib()}


def job_live_versions(n: int, window: int) -> dict[str, Any]:
    """ms per write through Memory.assert_fact on one key whose claims hold over disjoint
    valid intervals (a time series on one key: each stays live beside the others), per
    window of `window` writes as the key grows. Each write rebuilds the key's projection row,
    which lists every live version (KeySummary: their ids, value hash and segments), so this
    is O(live versions) per write, unlike the supersede chain of `job_write_path`."""
    from toki.memory import Memory

    mem = Memory(clock=lambda: BASE)
    key = FactKey("bench", "series", "reading")
    marks = [time.perf_counter()]
    for i in range(1, n + 1):
        at = BASE + timedelta(seconds=i)
        mem.assert_fact(key, f"r{i}", valid_from=at, valid_to=at + timedelta(seconds=1),
                        recorded_at=at, source_id="s")
        if i % window == 0:
            marks.append(time.perf_counter())
    live = len(mem.history(key))
    ms = [1e3 * (b - a) / window for a, b in pairwise(marks)]
    return {"writes": n, "window": window, "live_versions": live,
            "ms_per_write_by_window": ms, "last_to_first": ms[0] / ms[-1]}


def job_resolve(versions: int, queries: int = 2000) -> dict[str, Any]:
    events = make_events(2 * versions - 1, keys=1)
    snap: Snapshot = replay(events)
    (state,) = snap.keys.values()
    assert len(state.versions) == versions
    rng = random.Random(7)
    span = versions
    out: dict[str, Any] = {"versions": versions, "queries": queries}
    cases = {
        "current": lambda: (BASE + timedelta(seconds=span + 10), None),
        "past_valid_time": lambda: (BASE + timedelta(seconds=rng.randint(1, span)), None),
        "past_valid_and_system_time_warm": lambda: (
            BASE + timedelta(seconds=rng.randint(1, span // 2)),
            BASE + timedelta(seconds=span // 2),
        ),
    }
    for name, draw in cases.items():
        args = [draw() for _ in range(queries)]
        state.resolve(*args[0])  # builds the index for the epoch (reported separately)
        lat = []
        for valid_at, as_of in args:
            t0 = time.perf_counter_ns()
            r = state.resolve(valid_at, as_of)
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
            assert r.kind == "value"
        lat.sort()
        out[name] = {"median_us": statistics.median(lat), "p99_us": lat[int(0.99 * len(lat))]}
    # a cold as-of query: a new system-time epoch builds its index from the key's versions
    cold = []
    for i in range(20):
        state._indexes.clear()
        as_of = BASE + timedelta(seconds=span // 3 + i)
        t0 = time.perf_counter_ns()
        state.resolve(BASE + timedelta(seconds=span // 4), as_of)
        cold.append((time.perf_counter_ns() - t0) / 1000.0)
    out["past_system_time_cold"] = {"median_us": statistics.median(cold), "max_us": max(cold)}
    return out


def job_sqlite(n: int, keys: int, versions: int, repeat: int = 3) -> dict[str, Any]:
    """toki's batched append against sqlite3 alone on the same schema, interleaved: each of
    `repeat` rounds times toki, then sqlite3 at FULL, then at OFF, each into a fresh file;
    the best of the rounds is reported and the ratio is taken between the two bests."""
    from toki.memory import Memory
    from toki.store.sqlite import SQLiteStore

    events = make_events(n, keys)
    batch = 10_000
    floor_rows = _floor_rows(events)
    toki_s: list[float] = []
    floor_s: dict[str, list[float]] = {"FULL": [], "OFF": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        for round_ in range(repeat):
            _remove_db(path)
            store = SQLiteStore(path)
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                chunk = events[i : i + batch]
                store.append(chunk, {}, chunk[-1].seq)
            toki_s.append(time.perf_counter() - t0)
            store.close()
            for mode in ("FULL", "OFF"):
                floor_s[mode].append(_sqlite_floor(Path(tmp), floor_rows, batch, mode))
            print(f"    round {round_ + 1}: toki {n / toki_s[-1]:,.0f} events/s, sqlite3 FULL "
                  f"{n / floor_s['FULL'][-1]:,.0f} / OFF {n / floor_s['OFF'][-1]:,.0f} rows/s",
                  flush=True)
        # the appends above carried no projection rows; store the replayed ones (untimed) so
        # that the open below finds the projection it reconciles against
        store = SQLiteStore(path)
        store.append([], replay(events).summaries(), events[-1].seq)
        store.close()
        load_secs, mem = _timed(lambda: Memory.open(f"sqlite:///{path}"))
        n_loaded = len(mem.events())
        mem.close()
        # resolve_at through the public API on a SQLite-backed memory (one hot key)
        hot = make_events(2 * versions - 1, keys=1, seed=3)
        path2 = Path(tmp) / "hot.db"
        store = SQLiteStore(path2)
        store.append(hot, replay(hot).summaries(), hot[-1].seq)
        store.close()
        mem = Memory.open(f"sqlite:///{path2}")
        key = hot[0].key
        rng = random.Random(5)
        lat = []
        for _ in range(2000):
            at = BASE + timedelta(seconds=rng.randint(1, versions))
            t0 = time.perf_counter_ns()
            mem.resolve_at(key, at)
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
        lat.sort()
        mem.close()
    toki_rate = n / min(toki_s)
    full_rate = n / min(floor_s["FULL"])
    return {
        "events": n,
        "batched_append_events_per_s": toki_rate,
        "batch_size": batch,
        "rounds": repeat,
        "batched_append_events_per_s_each_round": [n / s for s in toki_s],
        # the same rows (key ids, id prefixes, chain links prebuilt), inserted by sqlite3 alone
        # into toki's schema, new keys into toki_key included: the database's share of the
        # append cost (what no change to toki's Python code can beat)
        "raw_sqlite_same_rows_per_s": full_rate,
        "raw_sqlite_same_rows_unsynced_per_s": n / min(floor_s["OFF"]),
        "raw_sqlite_same_rows_per_s_each_round": [n / s for s in floor_s["FULL"]],
        "toki_to_raw_sqlite_ratio": toki_rate / full_rate,
        "open_and_replay_events_per_s": n_loaded / load_secs,
        "resolve_at_api_versions": versions,
        "resolve_at_api_median_us": statistics.median(lat),
        "resolve_at_api_p99_us": lat[int(0.99 * len(lat))],
        "peak_rss_mib": _rss_mib(),
    }


def _floor_rows(events: list[Event]) -> list[tuple[tuple[object, ...] | None, tuple[object, ...]]]:
    """toki's rows for `events`, built once outside any timing: (the toki_key row a new key
    needs or None, the toki_event row with that key's id, id prefix and chain link). Key ids
    are given in first-seen order, which is the order toki's append inserts them in."""
    from toki.chain import GENESIS, link
    from toki.store.sqlite import _key_text, event_row

    ids: dict[str, int] = {}
    prev = GENESIS
    out: list[tuple[tuple[object, ...] | None, tuple[object, ...]]] = []
    for e in events:
        text = _key_text(e.key)
        new = text not in ids
        if new:
            ids[text] = len(ids) + 1
        prev = link(prev, e)
        out.append(((ids[text], text) if new else None, event_row(e, ids[text], prev)))
    return out


def _sqlite_floor(
    tmp: Path,
    rows: list[tuple[tuple[object, ...] | None, tuple[object, ...]]],
    batch: int,
    mode: str,
) -> float:
    """Seconds sqlite3 alone takes to insert toki's prebuilt rows into toki's schema (opened
    by SQLiteStore, so with its PRAGMAs, triggers and foreign key), in toki's batches: per
    batch one transaction with the batch's new toki_key rows, then its toki_event rows."""
    from toki.store.sqlite import INSERT_EVENT, SQLiteStore

    path = tmp / f"floor-{mode}.db"
    _remove_db(path)
    store = SQLiteStore(path)
    conn = store._conn
    conn.execute(f"PRAGMA synchronous={mode}")
    chunks = [rows[i : i + batch] for i in range(0, len(rows), batch)]
    work = [([k for k, _ in c if k is not None], [r for _, r in c]) for c in chunks]
    t0 = time.perf_counter()
    for new_keys, event_rows in work:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO toki_key (id, fact_key) VALUES (?,?)", new_keys)
        conn.executemany(INSERT_EVENT, event_rows)
        conn.execute("COMMIT")
    secs = time.perf_counter() - t0
    store.close()
    _remove_db(path)
    return secs


def _remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _run_isolated(fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


SECTIONS = ("replay_in_memory", "resolve_at_in_memory", "write_path_hot_key",
            "write_path_live_versions", "sqlite")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only", help=f"comma-separated sections to rerun ({', '.join(SECTIONS)}); the others "
        "are kept from benchmarks/results/core.json; section_machines says where and when each "
        "rerun section was measured")
    args = parser.parse_args(argv)
    only = SECTIONS if args.only is None else tuple(args.only.split(","))
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        parser.error(f"--only: unknown section {unknown[0]!r} (use {', '.join(SECTIONS)})")
    n, versions = (10**5, 10**4) if args.quick else (10**6, 10**5)
    print(f"core benchmark: {n} events, {versions} versions on one key")
    results: dict[str, Any] = {"machine": machine_info(), "quick": args.quick}
    if args.only is not None:  # "machine" stays the kept sections'; each rerun names its own
        results = json.loads((RESULTS / "core.json").read_text())
        results["section_machines"] = dict(results.get("section_machines", {}))
    jobs: dict[str, tuple[Callable[..., dict[str, Any]], tuple[Any, ...]]] = {
        "replay_in_memory": (job_replay, (n, 10_000)),
        "resolve_at_in_memory": (job_resolve, (versions,)),
        "write_path_hot_key": (job_write_path, (min(n // 10, 20_000),)),
        "write_path_live_versions": (job_live_versions, (n // 1000 * 3, n // 1000 // 2)),
        "sqlite": (job_sqlite, (n, 10_000, versions)),
    }
    for name in SECTIONS:
        if name in only:
            fn, job_args = jobs[name]
            results[name] = _run_isolated(fn, *job_args)
            if "section_machines" in results:
                results["section_machines"][name] = machine_info()
            print(f"  {name}:", json.dumps(results[name]))
    results["targets"] = {
        "replay_events_per_s": {"target": 500_000,
                                "measured": results["replay_in_memory"]["replay_events_per_s"]},
        "resolve_at_us_1e5_versions": {
            "target": 50, "measured": results["resolve_at_in_memory"]["past_valid_time"]["median_us"]},
        "sqlite_batched_append_events_per_s": {
            "target": 50_000, "measured": results["sqlite"]["batched_append_events_per_s"]},
        "sqlite_toki_to_raw_sqlite_ratio": {
            "target": 0.9, "measured": results["sqlite"]["toki_to_raw_sqlite_ratio"]},
    }
    if not args.quick:
        write_results("core", results)
    return results


if __name__ == "__main__":
    main()
