"""Letta 0.16.8's server library, the real code, on its own PostgreSQL 16 with pgvector.

Two Letta agents share one core-memory block and write "alice:manager is Bob" / "... is
Carol" through Letta's core-memory tools. Serially the replace erases Bob (N3: Letta keeps
no block history). When both agents load their state before either writes, each computes
its new value from the empty block: the second update_block_async re-reads the block and
writes over it (Letta's "update the blocks (LRW)"), so Bob vanishes with no error. When both
are inside update_block_async (both read version 1), the ORM's optimistic lock
(`version_id_col`) makes the second fail with ConcurrentUpdateError instead."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toki.real import get_real_system
from toki.real.checks import check_real
from toki.real.driver import RealRun, SerialCache, finish_run, real_program, real_runs, run_plan
from toki.real.session import Session
from toki.sim.dpor import DPOR
from toki.sim.workload import scenario
from toki.systems.base import SimJudge

pytestmark = [pytest.mark.real, pytest.mark.slow]

NAME = "letta-0.16.8"
RECOVERY = SimJudge(0.5, 1)
JUDGE = SimJudge(1.0, 0)  # always "replace" when the block says otherwise
MANAGER = scenario("manager")  # agent 0: Bob; agent 1: Carol (one key)


def targeted(session: Session, plan) -> RealRun:  # type: ignore[no-untyped-def]
    system = get_real_system(NAME)
    program, live = real_program(system, session, MANAGER, JUDGE)
    return finish_run(system, session, live, run_plan(program, plan), RECOVERY, JUDGE)


def block(rr: RealRun) -> tuple[str, int]:
    b = rr.observation["block"]
    return b["value"], b["version"]


def test_serial_replace_erases_bob(letta: Session) -> None:
    rr = targeted(letta, [(0, None, None), (1, None, None)])
    assert rr.outcomes == (("core_memory_append",), ("core_memory_replace",))
    assert block(rr) == ("\nalice:manager is Carol", 3)
    assert rr.observation["agents_see"] == ["\nalice:manager is Carol"] * 2
    system = get_real_system(NAME)
    found = check_real(system, MANAGER, rr, SerialCache(system, letta, MANAGER, JUDGE, 0), RECOVERY)
    assert found["N3"].found and found["N3"].details["erased"] == {"alice:manager": ["Bob"]}
    assert not found["N2"].found and not found["N1"].found and not found["RD"].found


def test_both_load_first_the_second_write_silently_replaces_the_first(letta: Session) -> None:
    rr = targeted(letta, [(0, "llm.tool", 0), (1, "llm.tool", 0), (0, None, None), (1, None, None)])
    seen = [t["detail"]["block"] for t in rr.trace if t.get("point") == "llm.tool"]
    assert seen == ["", ""]  # both loaded the empty block
    assert rr.outcomes == (("core_memory_append",), ("core_memory_append",))  # no error
    assert block(rr) == ("\nalice:manager is Carol", 3)  # Bob's line is gone


def test_both_inside_update_block_the_optimistic_lock_refuses_the_second(
    letta: Session,
) -> None:
    rr = targeted(
        letta,
        [
            (0, "llm.tool", 0),
            (1, "llm.tool", 0),
            (0, "sql.update", 0),
            (1, "sql.update", 0),
            (0, None, None),
            (1, None, None),
        ],
    )
    for agent in (0, 1):  # each was parked at its block update (after reading version 1)
        updates = [
            t for t in rr.trace if t.get("point") == "sql.update" and t.get("agent") == agent
        ]
        assert updates[0]["detail"] == {"table": "block"}
    assert rr.outcomes[0] == ("core_memory_append",)
    assert rr.outcomes[1][0].startswith("error: ConcurrentUpdateError: CONFLICT: Block")
    assert block(rr) == ("\nalice:manager is Bob", 2)


def test_dpor_runs_are_deterministic(letta: Session) -> None:
    system = get_real_system(NAME)
    first, second = (
        [rr.record for rr in real_runs(system, letta, MANAGER, DPOR(), JUDGE, RECOVERY, budget=4)]
        for _ in range(2)
    )
    assert len(first) == 4 and len({json.dumps(r["schedule"]) for r in first}) == 4
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


def test_cli_explores_fifty_schedules_with_no_network(tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toki.cli",
            "real",
            "run",
            "letta",
            "--workload",
            "manager",
            "--check",
            "--json",
            "--quiet",
            "--budget",
            "50",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: an anomaly was found
    out = json.loads(done.stdout)
    assert out["schedules"] == 50 and out["system"] == NAME
    assert out["anomalies"]["N3"] >= 1 and (tmp_path / f"{NAME}-N3.json").is_file()
