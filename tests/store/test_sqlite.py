"""SQLite: append-only by trigger, durable across a real kill, reconciled on reopen."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki import FactKey, Memory
from toki.errors import IntegrityError
from toki.store.sqlite import SQLiteStore

K = FactKey(tenant="t1", subject="u1", fact_key="city")


def _fill(mem: Memory) -> None:
    a = mem.assert_fact(
        K,
        "Lisbon",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-02-01T00:00:00Z",
        source_id="m1",
    )
    mem.supersede(
        a,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="m2",
    )
    mem.assert_fact(
        K,
        "Rome",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-13T00:00:00Z",
        source_id="m3",
    )


def test_event_table_rejects_update_and_delete(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with Memory.open(url) as mem:
        _fill(mem)
    conn = sqlite3.connect(tmp_path / "a.db")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("UPDATE toki_event SET payload='{}' WHERE seq=1")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        conn.execute("DELETE FROM toki_event WHERE seq=1")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_reopen_gives_the_same_state_and_a_clean_reconcile(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    with Memory.open(url) as mem:
        _fill(mem)
        expected = (mem.state_hash(), mem.events(), mem.current(K))
    with Memory.open(url) as again:
        assert again.open_report is not None and again.open_report.ok
        assert (again.state_hash(), again.events(), again.current(K)) == expected


def test_reopen_refuses_a_corrupted_projection_and_repairs_it_on_request(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with Memory.open(f"sqlite:///{path}") as mem:
        _fill(mem)
        other = FactKey(tenant="t1", subject="u2", fact_key="city")
        mem.assert_fact(other, "Oslo", recorded_at="2026-02-01T00:00:00Z", source_id="m9")
    # one user's preference goes wrong; the total row count stays the same
    store = SQLiteStore(path)
    store.execute("UPDATE toki_current SET version_ids='[]' WHERE fact_key LIKE '%u2%'")
    store.close()
    before = path.read_bytes()
    with pytest.raises(IntegrityError, match=f"{path}: the stored projection differs.*u2.*"
                       "repair_projection=True"):
        Memory.open(f"sqlite:///{path}")
    assert path.read_bytes() == before  # never rebuilt behind the user's back
    with Memory.open(f"sqlite:///{path}", repair_projection=True) as mem:
        report = mem.open_report
        assert report is not None and not report.ok
        assert [d.key.subject for d in report.differences] == ["u2"]
        assert "version_ids" in report.differences[0].fields
        assert mem.reconcile().ok  # rebuilt from the log, as asked
    Memory.open(f"sqlite:///{path}").close()


def test_a_second_process_makes_the_first_stale_until_it_catches_up(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    reader = Memory.open(url)
    writer = Memory.open(url)
    writer.assert_fact(K, "Lisbon", recorded_at="2026-02-01T00:00:00Z", source_id="m1")
    assert reader.current(K, catch_up=False).kind == "stale"  # never a wrong value
    assert reader.current(K).value == "Lisbon"
    # the writer sees the reader's writes before validating its own
    v = reader.assert_fact(K, "Lisbon", recorded_at="2026-02-01T00:00:00Z", source_id="m1")
    assert len(reader.events()) == 1  # duplicate recognised across processes
    writer.revoke(v, recorded_at="2026-03-01T00:00:00Z", reason="x")
    assert reader.current(K).kind == "unknown"
    reader.close()
    writer.close()


WRITER = textwrap.dedent(
    """
    import sys
    from toki import FactKey, Memory
    mem = Memory.open(sys.argv[1])
    i = 0
    print("ready", flush=True)
    while True:
        key = FactKey(tenant="t", subject=f"u{i % 7}", fact_key="city")
        mem.assert_fact(key, f"city-{i}", valid_from="2026-01-01T00:00:00Z",
                        recorded_at="2026-02-01T00:00:00Z", source_id=f"m{i}")
        i += 1
    """
)


@pytest.mark.slow
def test_killed_writer_loses_nothing_committed_and_leaves_no_half_event(tmp_path: Path) -> None:
    path = tmp_path / "kill.db"
    url = f"sqlite:///{path}"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, url],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    deadline = time.monotonic() + 30
    store = SQLiteStore(path)
    while store.last_seq() < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    committed_before_kill = store.last_seq()
    store.close()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert committed_before_kill >= 300
    with Memory.open(url) as mem:
        events = mem.events()
        assert len(events) >= committed_before_kill
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        for e in events:
            e.verify()
        # every conflict event has its ASSERT: no change was half written
        asserted = {e.version_ids[0] for e in events if e.kind.value == "ASSERT"}
        for e in events:
            if e.kind.value == "CONFLICT_OPEN":
                assert set(e.version_ids) <= asserted
        assert mem.reconcile().ok
        assert json.loads(events[-1].payload)["_key"]["tenant"] == "t"


def test_an_unreadable_event_row_is_an_integrity_error_naming_its_seq(tmp_path: Path) -> None:
    """Someone bypassed the triggers and broke a payload: reading says which event, not a
    bare JSON error, and opening the memory refuses rather than replaying around it."""
    path = tmp_path / "a.db"
    with Memory.open(f"sqlite:///{path}") as mem:
        _fill(mem)
    conn = sqlite3.connect(path)
    conn.execute("DROP TRIGGER toki_event_no_update")
    conn.execute("UPDATE toki_event SET payload='{not json' WHERE seq=2")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        with pytest.raises(IntegrityError, match=r"a\.db: event seq 2 is unreadable"):
            list(store.load())
        assert [e.seq for e in store.load(after_seq=2)] == list(range(3, store.last_seq() + 1))
    finally:
        store.close()
    with pytest.raises(IntegrityError, match="event seq 2"):
        Memory.open(f"sqlite:///{path}")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(st.text()),
    st.lists(st.tuples(st.text(), st.text(), st.none() | st.text(), st.none() | st.text())),
)
def test_projection_row_lists_are_json_dumps_byte_for_byte(
    ids: list[str], segments: list[tuple[str, str, str | None, str | None]]
) -> None:
    """A checkpoint digests the stored projection text, so the fast list encoding must spell
    exactly what json.dumps spelled (stores written before it keep verifying)."""
    from toki.replay import KeySummary
    from toki.store.sqlite import _projection_row

    row = _projection_row(FactKey("t", "s", "k"), KeySummary("h", tuple(ids), 0, 0, tuple(segments)))
    assert row[2] == json.dumps(ids)
    assert row[5] == json.dumps([list(seg) for seg in segments])


def _gc_passes(run: Callable[[], Any]) -> tuple[Any, list[int]]:
    """What `run()` returned, and the generation of each cyclic GC pass made meanwhile."""
    import gc

    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        return run(), passes
    finally:
        gc.callbacks.remove(count)


def test_an_open_by_full_replay_and_verify_run_no_cyclic_gc_pass_while_they_fold(
    tmp_path: Path,
) -> None:
    """Replay, reconcile and the checkpoint build acyclic objects by the million; the cyclic
    GC's passes over them were a third of a full open (1.1 of 3.4 s at 10^5 events) and 42%
    of `toki verify` (4.0 of 9.6 s), so both pause it throughout (at most one pass, once it
    is back on)."""
    from toki.store.audit import verify_store

    path = tmp_path / "a.db"
    with Memory.open(f"sqlite:///{path}") as mem:
        for i in range(600):
            mem.assert_fact(FactKey("t", f"u{i % 50}", "city"), f"c{i % 7}",
                            valid_from=f"2026-01-{1 + i % 28:02d}T00:00:00Z", source_id=f"s{i}")  # fmt: skip
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM toki_meta WHERE name IN ('checkpoint', 'checkpoint_digest')")
    conn.commit()
    conn.close()
    mem, passes = _gc_passes(lambda: Memory.open(f"sqlite:///{path}"))
    assert mem.open_report is not None and mem.open_report.opened_from == "full replay"
    mem.close()
    assert len(passes) <= 1, passes
    store = SQLiteStore(path, existing=True)
    report, passes = _gc_passes(lambda: verify_store(store))
    store.close()
    assert report.ok and report.events >= 600  # the 600 ASSERTs and the conflicts they opened
    assert len(passes) <= 1, passes
