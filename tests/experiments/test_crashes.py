"""The crash-point sampler: replayable runs whose crash points spread over each agent's steps
(a plain random walk crashes both agents within the first steps of nearly every run)."""

from __future__ import annotations

import statistics

import pytest

from toki.errors import InvalidInput
from toki.experiments.crashes import CrashPoints
from toki.sim.explore import RandomStrategy, iter_runs, replay_schedule
from toki.sim.workload import scenario
from toki.systems.base import SimJudge, build_program
from toki.systems.registry import get_system

SEED = 5


def _crash_points(strategy: object, runs: int = 150) -> tuple[list[int], int]:
    """(agent 0's steps before its crash, in runs where it crashed while running; runs)."""
    model, wl = get_system("mem0-1.0.11"), scenario("manager")
    program = build_program(model, wl, judge=SimJudge(0.5, 0), crash_budget=1)
    points = []
    for run in iter_runs(program, strategy, budget=runs):  # type: ignore[arg-type]
        before = 0
        for choice in run.schedule:
            if choice == "crash:0":
                if isinstance(run.outcomes[0], tuple) and run.outcomes[0][0] == "crashed":
                    points.append(before)
                break
            before += choice == 0
        assert replay_schedule(program, run.schedule).state_hash == run.state_hash
    return points, runs


@pytest.mark.parametrize("depth", [None, 3])
def test_crash_points_spread_over_the_agents_steps(depth: int | None) -> None:
    print(f"seed {SEED}")
    spread, runs = _crash_points(CrashPoints(SEED, depth))
    eager, _ = _crash_points(RandomStrategy(SEED))
    assert len(spread) < runs  # some runs let agent 0 finish (no crash, or one too late)
    assert statistics.median(eager) == 0  # the random walk crashes it before its first step
    assert statistics.median(spread) >= 5  # here, half way through its ~16 steps
    assert max(spread) >= 14  # and late in its work too


def test_crash_points_are_deterministic_and_named() -> None:
    a, _ = _crash_points(CrashPoints(1), 40)
    b, _ = _crash_points(CrashPoints(1), 40)
    c, _ = _crash_points(CrashPoints(2), 40)
    assert a == b and a != c
    assert CrashPoints(1).name == "crash-points(random,seed=1)"
    assert CrashPoints(1, 3).name == "crash-points(pct,d=3,seed=1)"
    with pytest.raises(InvalidInput):
        CrashPoints(0, 0)
