"""benchmarks/bench_write_cost.py compares like with like: the statements it records from toki,
replayed by raw sqlite3 one transaction per write, leave exactly the rows toki wrote."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from benchmarks.bench_write_cost import (
    Recorder,
    contents,
    control,
    make_writes,
    measure,
    memory_floor,
    record,
    replay,
    spin,
    statement_counts,
)
from toki.memory import Memory


def test_replayed_statements_write_the_same_rows(tmp_path: Path) -> None:
    writes = make_writes(40, 10, seed=37)
    per_write, pragmas = record(tmp_path / "toki.db", writes)
    assert pragmas["journal_mode"] == "wal" and pragmas["synchronous"] == 2  # FULL
    assert len(per_write) == len(writes)
    for statements in per_write:  # one transaction per write, as toki ran it
        assert statements[0][1] == "BEGIN IMMEDIATE" and statements[-1][1] == "COMMIT"
    replay(tmp_path / "raw.db", per_write, pragmas, "FULL")
    toki, raw = contents(tmp_path / "toki.db"), contents(tmp_path / "raw.db")
    assert len(toki["toki_event"]) >= len(writes)
    assert len(toki["toki_key"]) == len({w.key for w in writes})
    assert raw == toki


def test_a_missing_write_is_seen(tmp_path: Path) -> None:
    """The content check has teeth: leave one write out of the replay and it differs."""
    writes = make_writes(12, 4, seed=37)
    per_write, pragmas = record(tmp_path / "toki.db", writes)
    replay(tmp_path / "raw.db", per_write[:-1], pragmas, "OFF")
    assert contents(tmp_path / "raw.db") != contents(tmp_path / "toki.db")


def test_the_control_makes_toki_s_writes_in_memory_between_the_statements(
    tmp_path: Path,
) -> None:
    """The control replays the statements with each write first made on memory://: the file
    gets toki's rows, the in-memory store toki's state; other writes leave another state."""
    writes = make_writes(24, 6, seed=37)
    per_write, pragmas = record(tmp_path / "toki.db", writes)
    done, state = control(tmp_path / "control.db", per_write, pragmas, "OFF", writes)
    assert contents(tmp_path / "control.db") == contents(tmp_path / "toki.db")
    toki = Memory.open(f"sqlite:///{tmp_path / 'toki.db'}")
    assert state == toki.state_hash()
    toki.close()
    assert 0 < done.between_seconds < done.seconds
    _, other = control(tmp_path / "other.db", per_write, pragmas, "OFF",
                       make_writes(24, 6, seed=38))
    assert other != state
    spun = replay(tmp_path / "spin.db", per_write, pragmas, "OFF", spin(1e-4))
    assert spun.between_seconds >= len(writes) * 1e-4
    assert contents(tmp_path / "spin.db") == contents(tmp_path / "toki.db")


def test_measure_reports_the_ratio_and_statements(tmp_path: Path) -> None:
    writes = make_writes(20, 5, seed=37)
    m = measure(writes, 1, "OFF", tmp_path)  # raises if any side wrote other rows
    assert m["ratio"] == m["toki_writes_per_s"] / m["sqlite3_writes_per_s"]
    for side in ("control", "spin"):
        c = m[side]
        assert c["us_per_write"] == pytest.approx(
            c["between_us_per_write"] + c["sqlite3_us_per_write"])
        assert 1e6 * min(c["round_s"]) / len(writes) == pytest.approx(c["us_per_write"])
    counts = statement_counts(record(tmp_path / "again.db", writes)[0])
    assert m["statements"] == counts
    assert counts["by_statement"]["COMMIT"] == len(writes)


def test_the_recorder_lets_no_statement_past_unrecorded() -> None:
    conn = sqlite3.connect(":memory:")
    rec = Recorder(conn)
    rec.execute("SELECT ?", (1,))
    assert rec.log == [("execute", "SELECT ?", (1,))] and not rec.in_transaction
    for name in ("cursor", "executescript"):
        with pytest.raises(AttributeError, match="does not record"):
            getattr(rec, name)
    conn.close()


def test_the_memory_floor_runs_the_same_writes_to_the_same_state(tmp_path: Path) -> None:
    """The floor under toki's own time is the same write path without SQL: it must end in the
    state the SQLite run ended in, and a run of other writes must be caught."""
    writes = make_writes(30, 6, seed=37)
    record(tmp_path / "toki.db", writes)
    floor = memory_floor(writes, 2, tmp_path / "toki.db")
    assert len(floor["round_s"]) == 2 and floor["us_per_write"] > 0
    record(tmp_path / "fewer.db", writes[:-1])
    with pytest.raises(AssertionError, match="another state"):
        memory_floor(writes, 1, tmp_path / "fewer.db")


def test_postgresql_replayed_commands_write_the_same_rows(pg_dsn: str) -> None:
    """bench_write_cost_pg compares like with like: psycopg sending the commands recorded from
    toki (the head rows, the write, its COPY, the sequencing, the catch-up) leaves exactly
    the rows toki left; toki again leaves them too but for its random operation ids; and a
    replay that leaves one write out is caught."""
    from benchmarks.bench_write_cost_pg import (
        _drop,
        contents,
        record,
        replay,
        run_toki,
        without_op_ids,
    )

    writes = make_writes(12, 4, seed=37)
    per_write, recorded = record(pg_dsn, writes)
    schemas = [recorded]
    try:
        assert all(any(how == "copy" for how, _, _ in cmds) for cmds in per_write)
        _, again = replay(pg_dsn, per_write)
        _, toki = run_toki(pg_dsn, writes)
        _, fewer = replay(pg_dsn, per_write[:-1])
        schemas += [again, toki, fewer]
        want = contents(pg_dsn, recorded)
        assert contents(pg_dsn, again) == want
        assert contents(pg_dsn, toki) != want  # the op ids differ
        assert without_op_ids(contents(pg_dsn, toki)) == without_op_ids(want)
        assert contents(pg_dsn, fewer) != want
    finally:
        for schema in schemas:
            _drop(pg_dsn, schema)


def test_a_hot_key_window_is_its_best_over_the_runs() -> None:
    """bench_write_cost_pg's hot keys: each window's ms per write is its fastest run, so a
    stall in one run does not decide the last / first ratio."""
    from benchmarks.bench_write_cost_pg import _windows

    out = _windows([[0.0, 1.0, 3.0, 3.5], [10.0, 12.0, 13.0, 13.25]], 1000, {"writes": 3000})
    assert out["ms_per_write_by_window"] == [1.0, 1.0, 0.25]
    assert out["last_to_first"] == 4.0 and out["repeat"] == 2 and out["writes"] == 3000
