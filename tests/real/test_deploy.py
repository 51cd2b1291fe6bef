"""Deployments (toki/real/deploy.py): mem0 1.0.11 with one instance per agent over the same
FAISS files and history database, as separate processes of one service. Each process keeps
its index in memory and saves the files whole on every write, so the last save wins: a
memory of another user, written by another process, is lost. With the agents as threads of
one instance nothing is lost (the same workload, the same schedules)."""

from __future__ import annotations

import pytest

from toki.real import get_real_system
from toki.real.driver import finish_run, open_session, real_program, run_plan
from toki.real.explore import explore_real
from toki.sim.dpor import DPOR
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import SimJudge

from .conftest import require

pytestmark = pytest.mark.real

JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
TWO_USERS = Workload(
    "two-users",
    (
        (SimClaim("alice:city", "Lisbon", 1, 1, source="msg-1"),),
        (SimClaim("bob:city", "Prague", 5, 5, source="msg-2"),),
    ),
)


def _live(name: str) -> list[str]:
    require("mem0-1.0.11")
    system = get_real_system(name)
    with open_session(system) as session:
        program, live = real_program(system, session, TWO_USERS, JUDGE)
        # alice's process is parked at its insert; bob's adds Prague; then alice's saves
        plan = [(0, "vector.insert", 0), (1, None, None), (0, None, None)]
        rr = finish_run(system, session, live, run_plan(program, plan), RECOVERY, JUDGE)
    return sorted(m["text"] for m in rr.observation["memories"])


def test_processes_on_one_faiss_path_lose_another_users_memory() -> None:
    assert _live("mem0-1.0.11") == ["alice:city is Lisbon", "bob:city is Prague"]
    assert _live("mem0-1.0.11-procs") == ["alice:city is Lisbon"]


def test_dpor_finds_the_lost_memory_only_in_the_processes_deployment() -> None:
    require("mem0-1.0.11")
    found = {}
    for name in ("mem0-1.0.11", "mem0-1.0.11-procs"):
        report = explore_real(get_real_system(name), TWO_USERS, DPOR(), JUDGE, RECOVERY, budget=50)
        assert report.exhausted
        found[name] = report.anomalies["N2"]
    assert found["mem0-1.0.11"] == 0 and found["mem0-1.0.11-procs"] > 0
