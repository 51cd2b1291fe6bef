"""The PostgreSQL store adapter (toki.sim.pgstore) driven by the engine, and the grid.

Hermitage outcomes through the engine: the same schedule on the server and on SimStore at the
matching level gives the same outcomes and final state (a lost update at read committed,
first-updater-wins at repeatable read, a write-skew abort at serializable). `replay_schedule`
refuses a choice that is not enabled, so a schedule that names a blocked agent would fail:
the waits are asserted by the schedules themselves. Skips without a server (the reason is
printed), fails with TOKI_REQUIRE_PG=1 (fixture `pg_dsn`, tests/conftest.py).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toki.errors import SerializationFailure
from toki.isolation import Isolation
from toki.sim.explore import Run, replay_schedule
from toki.sim.program import Agent, Begin, Commit, Program, Read, World, Write
from toki.sim.store import OpKind, SimStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server(pg_dsn: str) -> Iterator[Any]:
    from toki.sim.pgstore import PgServer

    with PgServer(pg_dsn) as srv:
        yield srv


def _program(
    factory: Callable[..., Any], level: Isolation, initial: dict[Any, Any], agents: list[Any]
) -> Program:
    def build() -> World:
        return World(factory(level, initial=initial), tuple(fn() for fn in agents))

    return Program("hermitage", build)


def _increment(key: Any) -> Callable[[], Agent]:
    """A blind read-modify-write: read x, write x + 1, commit; reports how it ended."""

    def agent() -> Agent:
        yield Begin()
        x = yield Read(key)
        if isinstance(x, SerializationFailure):
            yield Commit()
            return "failed"
        r = yield Write(key, x + 1)
        r2 = yield Commit()
        return "failed" if isinstance(r, SerializationFailure) or r2 is not None else "ok"

    return agent


def _on_call(mine: Any, other: Any) -> Callable[[], Agent]:
    """Write skew: go off call if both doctors are on call (reads both, writes its own)."""

    def agent() -> Agent:
        yield Begin()
        a = yield Read(mine)
        b = yield Read(other)
        if isinstance(b, SerializationFailure) or isinstance(a, SerializationFailure):
            yield Commit()
            return "failed"
        r = yield Write(mine, 0) if a + b >= 2 else Write(mine, a)
        r2 = yield Commit()
        return "failed" if isinstance(r, SerializationFailure) or r2 is not None else "ok"

    return agent


def _both(
    server: Any, level: Isolation, initial: dict[Any, Any], agents: list[Any], schedule: list[int]
) -> tuple[Run, Run]:
    pg = replay_schedule(_program(server, level, initial, agents), schedule, track=False)
    sim = replay_schedule(_program(SimStore, level, initial, agents), schedule, track=False)
    return pg, sim


KEY = ("cur", "user0:city")


def test_lost_update_at_read_committed(server: Any) -> None:
    # T0 reads, T1 reads, T0 writes and commits, T1 writes (no wait) and commits: x = 1.
    pg, sim = _both(
        server,
        Isolation.READ_COMMITTED,
        {KEY: 0},
        [_increment(KEY), _increment(KEY)],
        [0, 0, 1, 1, 0, 0, 1, 1],
    )
    assert pg.state == ((KEY, 1),), "server: one increment lost"
    assert pg.outcomes == ("ok", "ok")
    assert (sim.state, sim.outcomes) == (pg.state, pg.outcomes)


def test_first_updater_wins_at_repeatable_read(server: Any) -> None:
    # T1's write waits for T0 (agent 1 is disabled: the schedule skips it), T0 commits, the
    # retried write fails with 40001; the agent sees the failure and its commit gets it too.
    schedule = [0, 0, 1, 1, 0, 1, 0, 1, 1]
    pg, sim = _both(
        server, Isolation.SNAPSHOT, {KEY: 0}, [_increment(KEY), _increment(KEY)], schedule
    )
    assert pg.state == ((KEY, 1),)
    assert pg.outcomes == ("ok", "failed")
    aborts = [op for op in pg.history if op.kind is OpKind.ABORT]
    assert len(aborts) == 1 and "concurrent update" in aborts[0].note
    assert (sim.state, sim.outcomes) == (pg.state, pg.outcomes)


def test_blocked_agent_is_not_enabled(server: Any) -> None:
    from toki.errors import ScheduleError

    with pytest.raises(ScheduleError, match="not enabled"):
        replay_schedule(
            _program(server, Isolation.SNAPSHOT, {KEY: 0}, [_increment(KEY), _increment(KEY)]),
            [0, 0, 1, 1, 0, 1, 1],  # agent 1 again while its write waits for T0
            track=False,
        )


@pytest.mark.parametrize(
    ("level", "outcomes", "final"),
    [
        (Isolation.SNAPSHOT, ("ok", "ok"), ((("doc", "a"), 0), (("doc", "b"), 0))),
        (Isolation.SERIALIZABLE, ("ok", "failed"), ((("doc", "a"), 0), (("doc", "b"), 1))),
    ],
)
def test_write_skew_is_refused_only_at_serializable(
    server: Any, level: Isolation, outcomes: tuple[str, str], final: Any
) -> None:
    a, b = ("doc", "a"), ("doc", "b")
    schedule = [0, 0, 0, 1, 1, 1, 0, 1, 0, 1]  # both read both, both write, both commit
    pg, sim = _both(server, level, {a: 1, b: 1}, [_on_call(a, b), _on_call(b, a)], schedule)
    assert (pg.outcomes, pg.state) == (outcomes, final)
    assert (sim.outcomes, sim.state) == (pg.outcomes, pg.state)


def test_keys_round_trip_and_history_names_versions(server: Any) -> None:
    from toki.sim.pgstore import decode_key, encode_key

    for key in [("cur", "k"), ("dec", "k", 3), ("ev", "k", "Berlin"), 7, "plain"]:
        assert decode_key(encode_key(key)) == key
    pg, _ = _both(server, Isolation.READ_COMMITTED, {KEY: 0}, [_increment(KEY)], [0, 0, 0, 0])
    read = next(op for op in pg.history if op.kind is OpKind.READ)
    write = next(op for op in pg.history if op.kind is OpKind.WRITE)
    assert (read.value, read.writer, read.version) == (0, 0, 0)
    assert (write.txn, write.version) == (read.txn, write.step)


# ------------------------------------------------------------------ the grid


def test_a_grid_cell_runs_and_its_rows_have_the_csv_columns(pg_dsn: str) -> None:
    from toki.experiments.pg_grid import COLUMNS, run_grid

    rows = run_grid(pg_dsn, operators=["EWM"], levels=["RC"], writers=[2], reps=3, seed=0)
    assert {r["anomaly"] for r in rows} >= {"N1", "N2", "N3"}
    for r in rows:
        assert list(r) == list(COLUMNS)
        assert (r["operator"], r["level"], r["writers"], r["reps"]) == ("EWM", "RC", 2, 3)
        assert 0.0 <= float(r["server_rate"]) <= 1.0 and 0.0 <= float(r["sim_rate"]) <= 1.0
        assert float(r["server_ci_low"]) <= float(r["server_rate"]) <= float(r["server_ci_high"])
        assert r["disagree"] in ("yes", "no")


def test_committed_csv_has_the_columns_and_the_docs_table_is_current() -> None:
    from toki.experiments.pg_grid import COLUMNS, doc_section, read_csv

    path = ROOT / "verdict_matrix" / "pg_grid.csv"
    with path.open(newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header == list(COLUMNS)
    rows = read_csv(path)
    assert rows, "verdict_matrix/pg_grid.csv is empty"
    doc = (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
    assert doc_section(rows) in doc, (
        "docs/postgres.md's real-database grid table is stale; run "
        "`python scripts/reproduce.py --only pg-grid` (it rewrites the CSV and the table)"
    )
