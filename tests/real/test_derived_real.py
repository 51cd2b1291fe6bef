"""Real witnesses for the two derived-state classes no corpus report names: resurrection
(mem0 1.0.11: an update re-inserts a memory a concurrent delete removed) and response
divergence (Graphiti 0.31.2: a call returns the invalidation it saved, another writer's
overwrites it, and the call that returned last reported the lost one). Both are found by
toki's explorer on the real code and replayed from the witness."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from toki.real import ScriptedJudge, get_real_system
from toki.real.checks import check_real
from toki.real.driver import (
    SerialCache,
    _parked_at,
    finish_run,
    real_program,
    real_runs,
    unwrapped,
)
from toki.real.program import OpProgram, OpStep
from toki.real.session import Session
from toki.real.witness import RealWitness, judge_to_json, replay_real
from toki.sim.dpor import DPOR
from toki.sim.engine import Execution
from toki.sim.explore import record
from toki.sim.workload import Workload
from toki.systems.base import SimJudge

pytestmark = pytest.mark.real

RECOVERY = SimJudge(0.5, 1)


def step(**kw: Any) -> OpStep:
    return OpStep.from_json(kw)


def witness(system: str, anomaly: str, prog: OpProgram, rr: Any, judge: Any, v: Any) -> RealWitness:
    return RealWitness(
        system,
        "",
        anomaly,
        cast(Workload, prog),
        rr.schedule,
        judge_to_json(judge),
        judge_to_json(RECOVERY),
        0,
        0,
        "dpor",
        v.keys,
        v.expected,
        v.observed,
        {"digest": rr.digest},
    )


def test_mem0_update_resurrects_a_deleted_memory(mem0_1: Session, tmp_path: Path) -> None:
    """Agent 1 looked the memory up and is between mem0's get and FAISS's update when agent
    0 deletes it (the API answers DELETE, the history writes its row); agent 1's update is
    FAISS delete + insert, so the memory is live again, with the new text."""
    prog = OpProgram.build(
        "resurrection",
        "mem0",
        [
            [
                step(op="add", text="alice:city is Paris", user_id="alice"),
                step(op="get_all", user_id="alice", bind="m"),
                step(op="delete", memory_id="$m"),
            ],
            [
                step(op="search", query="alice:city", user_id="alice", bind="f"),
                step(op="update", memory_id="$f", text="alice:city is Rome"),
            ],
        ],
    )
    system = get_real_system("mem0-1.0.11")
    judge = SimJudge(0.5, 0)
    serial = SerialCache(system, mem0_1, cast(Workload, prog), judge, 0)
    found = None
    for rr in real_runs(system, mem0_1, cast(Workload, prog), DPOR(), judge, RECOVERY, budget=50):
        v = check_real(system, cast(Workload, prog), rr, serial, RECOVERY, ("resurrection",))
        if v["resurrection"].found:
            found = (rr, v["resurrection"])
            break
    assert found is not None
    rr, v = found
    [problem] = v.observed
    assert problem["text"] == "alice:city is Rome" and problem["served_by"] == "final state"
    rows = rr.observation["derived"]["versions"][problem["id"]]
    assert [r["event"] for r in rows] == ["ADD", "DELETE", "UPDATE"]
    path = witness(system.name, "resurrection", prog, rr, judge, v).save(tmp_path / "w.json")
    again, verdict = replay_real(RealWitness.load(path))
    assert verdict.found and again.digest == rr.digest


def test_graphiti_call_returns_an_invalidation_another_writer_overwrote(graphiti: Session) -> None:
    """Bob, then Carol (agent 0) ‖ Dave (agent 1), both parked at resolve_edge after reading
    Bob: agent 0 saves Bob invalid from Carol's day, agent 1 saves him invalid from Dave's
    and finishes, then agent 0 finishes: its add_episode returned last, with Bob invalid
    from Carol's day, and the stored Bob says Dave's."""
    prog = OpProgram.build(
        "invalidation",
        "graphiti",
        [
            [
                step(op="add_episode", text="alice:manager is Bob", day=1),
                step(op="add_episode", text="alice:manager is Carol", day=5),
            ],
            [step(op="add_episode", text="alice:manager is Dave", day=6)],
        ],
    )
    system = get_real_system("graphiti-0.31.2")
    judge = ScriptedJudge(default="yes")
    program, live = real_program(system, graphiti, cast(Workload, prog), judge)
    with unwrapped():
        ex = Execution(program, track=True)
        for pid, claim in ((0, 1), (1, 0)):
            while True:
                ex.step(pid)
                if _parked_at(ex.agents[pid].pending, "llm.dedupe_edges.resolve_edge", claim):
                    break
        for _ in range(6):  # agent 0 resolves and saves Bob's edge, not its episode edges
            ex.step(0)
        while 1 in ex.enabled():
            ex.step(1)
        while en := ex.enabled():
            ex.step(en[0])
        run = record(ex, "targeted")
    rr = finish_run(system, graphiti, live, run, RECOVERY, judge)
    serial = SerialCache(system, graphiti, cast(Workload, prog), judge, 0)
    v = check_real(system, cast(Workload, prog), rr, serial, RECOVERY, ("response-divergence",))
    [problem] = v["response-divergence"].observed
    assert problem["returned"] == {"invalid_at": "2026-01-06T00:00:00+00:00"}  # Carol's day
    assert problem["stored"] == {"invalid_at": "2026-01-07T00:00:00+00:00"}  # Dave's
    assert problem["agent"] == 0
    w = witness(system.name, "response-divergence", prog, rr, judge, v["response-divergence"])
    again, verdict = replay_real(w)
    assert verdict.found and again.digest == rr.digest
