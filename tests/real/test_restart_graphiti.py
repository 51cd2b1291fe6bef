"""Graphiti 0.31.2 on Kuzu 0.11.3 restarted from its own files (docs/real.md, "Faults,
restarts and units inside a call"): the program of getzep/graphiti#1837 — two episodes
about alice, then `remove_episode` of the first — with the process killed at a chosen
gate point and reopened from a copy of the database file and its write-ahead log.

What the real code does: Graphiti appends each edge's fact to its entities' summaries, and
0.31.2's `remove_episode` rebuilds the summaries of the entities that survive from their
remaining episodes, so the removed fact goes, unless that rebuild's LLM call fails: then
the old summary, removed fact included, is restored and `remove_episode` returns normally.
The restart half cannot be observed on Kuzu: a process killed after `remove_episode`
deleted the edge leaves a log Kuzu cannot replay (the engine dies of SIGSEGV opening it),
while a death just before that statement reopens."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest

from toki.real import get_real_system
from toki.real.driver import RealRun, finish_run, real_program, unwrapped
from toki.real.faults import FaultPlan, parse_faults
from toki.real.restart import check_faults, removed_kept
from toki.real.scenario import get_scenario
from toki.real.session import Session
from toki.sim.explore import replay_schedule
from toki.sim.workload import Workload
from toki.systems.base import SimJudge

JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
SCENARIO = get_scenario("graphiti-1837-summary-keeps-removed-fact")
PROGRAM = cast(Workload, SCENARIO.program())
STEPS = 57  # the program's gate points, program.return included
DELETE = 42  # remove_episode's `DETACH DELETE` of the edge node is the 42nd
SUMMARY = 52  # its rebuild of alice's summary asks the LLM at the 52nd


@pytest.fixture(scope="module")
def graphiti() -> Iterator[Session]:
    from .conftest import session_for

    yield from session_for("graphiti-0.31.2")


def _run(session: Session, schedule: tuple[object, ...], faults: FaultPlan) -> RealRun:
    system = get_real_system("graphiti-0.31.2")
    program, live = real_program(system, session, PROGRAM, JUDGE, faults=faults)
    with unwrapped():
        run = replay_schedule(program, schedule)
    return finish_run(system, session, live, run, RECOVERY, JUDGE)


@pytest.mark.real
@pytest.mark.slow
def test_remove_episode_rebuilds_the_surviving_summary(graphiti: Session) -> None:
    """0.31.2's `remove_episode` rebuilds alice's summary from her remaining episodes
    (prompt `extract_nodes.extract_entity_summaries_from_episodes`): the stub states their
    facts, and the removed one is gone."""
    rr = _run(graphiti, (0,) * STEPS, FaultPlan())
    assert [e["fact"] for e in rr.observation["edges"]] == ["alice:city is Paris"]
    alice = next(s for s in rr.observation["summaries"] if s["name"] == "alice")
    assert alice["text"] == "alice:city is Paris"
    assert not removed_kept(rr, {}).found


@pytest.mark.real
@pytest.mark.slow
def test_a_failed_rebuild_keeps_the_removed_fact_and_remove_returns(graphiti: Session) -> None:
    """An LLM timeout injected at the rebuild's summary prompt: Graphiti logs it, restores
    the old summary (which states the removed fact) and `remove_episode` returns normally."""
    rr = _run(graphiti, (0,) * (SUMMARY - 1) + ("raise:0",) + (0,) * 4, parse_faults("raise:1"))
    [failed] = [t for t in rr.trace if t.get("fault") == "raise"]
    assert failed["point"] == "llm.extract_nodes.extract_entity_summaries_from_episodes"
    remove = next(s for s in rr.observation["derived"]["steps"] if s["op"] == "remove_episode")
    assert "error" not in remove
    verdict = removed_kept(rr, {})
    assert verdict.found
    assert [(k["summary_of"], k["fact"]) for k in verdict.observed] == [
        ("alice", "alice:manager is Bob")
    ]


@pytest.mark.real
@pytest.mark.slow
def test_a_death_before_the_delete_reopens_and_serves_both_edges(graphiti: Session) -> None:
    """Killed while parked at the 42nd point (the delete not made): Kuzu replays the log,
    the reopened Graphiti serves what was written; only the retried remove is left."""
    plan = parse_faults("restart:1")
    system = get_real_system("graphiti-0.31.2")
    program, live = real_program(system, graphiti, PROGRAM, JUDGE, faults=plan)
    with unwrapped():
        run = replay_schedule(program, (0,) * (DELETE - 1) + ("restart", 0))
    graphiti.call("reopen")  # the restart, without the retry (it would run the remove)
    reopened = graphiti.call("observe")["observation"]
    assert sorted(e["fact"] for e in reopened["edges"]) == [
        "alice:city is Paris",
        "alice:manager is Bob",
    ]
    assert run.schedule[-2] == "restart" and live.dead


@pytest.mark.real
@pytest.mark.slow
def test_a_death_after_the_delete_leaves_files_kuzu_cannot_open(graphiti: Session) -> None:
    rr = _run(graphiti, (0,) * DELETE + ("restart", 0), parse_faults("restart:1"))
    assert rr.restart is not None
    assert "SIGSEGV" in str(rr.restart["failed"])
    verdicts = check_faults(get_real_system("graphiti-0.31.2"), PROGRAM, rr)
    assert verdicts["reopen-failed"].found
    assert verdicts["lost-write"].found  # alice:city is Paris was served, then nothing
    assert rr.observation["edges"] == []
