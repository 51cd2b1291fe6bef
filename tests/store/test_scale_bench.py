"""benchmarks/bench_scale.py's GC pass is timed on the state it claims: the store's every key
built, and the objects counted grow with the store."""

from __future__ import annotations

from pathlib import Path

from benchmarks.bench_open import _append, stream_events
from benchmarks.bench_scale import full_collection
from toki.memory import Memory
from toki.replay import Snapshot, is_built
from toki.store.sqlite import SQLiteStore


def _opened(path: Path, n: int) -> Memory:
    store = SQLiteStore(path)
    _append(store, Snapshot(), stream_events(n, keys=40), n)
    store.close()
    mem = Memory.open(f"sqlite:///{path}")  # replays
    mem.checkpoint()
    mem.close()
    mem = Memory.open(f"sqlite:///{path}")
    assert mem.open_report is not None and mem.open_report.opened_from.startswith("checkpoint")
    return mem


def test_the_gc_pass_is_timed_with_every_key_built(tmp_path: Path) -> None:
    small, large = _opened(tmp_path / "small.db", 200), _opened(tmp_path / "large.db", 4_000)
    try:
        assert not all(is_built(s) for s in large._snapshot.keys.values())  # lazy after open
        first = full_collection(small)
        second = full_collection(large)
        assert all(is_built(s) for s in large._snapshot.keys.values())
        assert second["gc_full_pass_s"] > 0
        # both stores are alive in this process: the count holds the larger one's objects too
        assert second["gc_tracked"] > first["gc_tracked"] + 4_000
    finally:
        small.close()
        large.close()


def test_a_store_writes_the_same_through_the_timed_connection(tmp_path: Path) -> None:
    """The SQL timer stands in for the connection without changing what toki does: the same
    writes leave the same state, and the time it counts is part of the writes' time."""
    from datetime import timedelta

    from benchmarks.bench_core import BASE
    from benchmarks.bench_scale import TimedConnection
    from toki.model import FactKey

    hashes, counted = [], 0.0
    for name in ("plain.db", "timed.db"):
        mem = _opened(tmp_path / name, 300)
        store = mem._store
        assert isinstance(store, SQLiteStore)
        timed = TimedConnection(store._conn) if name == "timed.db" else None
        if timed is not None:
            store._conn = timed  # type: ignore[assignment]
        for i in range(30):
            mem.assert_fact(FactKey("bench", f"s{i % 7}", "city"), f"c{i}",
                            valid_from=BASE + timedelta(days=i),
                            recorded_at=BASE + timedelta(days=10**5, seconds=i), source_id="t")
        mem.checkpoint()  # a statement that reads the rows back too
        if timed is not None:
            counted = timed.seconds
            store._conn = timed.conn
        hashes.append(mem.state_hash())
        mem.close()
    assert hashes[0] == hashes[1]
    assert counted > 0
