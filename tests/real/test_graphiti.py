"""graphiti-core 0.31.2 on embedded Kuzu, the real code, on targeted schedules.

The behaviours the issue lists: the serial run keeps the old edge with invalid_at /
expired_at (no N3); with Carol and Dave parked at `dedupe_edges.resolve_edge` after both
read Bob, both stay valid and Bob's invalid_at is the last writer's; an agent has several
coroutines parked at once (the (agent, task) unit); the same plan gives a byte-identical
record."""

from __future__ import annotations

import pytest

from toki.real import ScriptedJudge, get_real_system
from toki.real.checks import check_real
from toki.real.cli import make_real_workload
from toki.real.driver import RealRun, SerialCache, finish_run, real_program, run_plan
from toki.real.session import Session
from toki.sim.workload import scenario
from toki.systems.base import SimJudge

pytestmark = [pytest.mark.real, pytest.mark.slow]

NAME = "graphiti-0.31.2"
RECOVERY = SimJudge(0.5, 1)
RACE = make_real_workload("manager-race", 2, 1, 1, 0)  # agent 0: Bob, Carol; agent 1: Dave
RESOLVE = "llm.dedupe_edges.resolve_edge"
YES = ScriptedJudge(default="yes")  # every contradiction the judge is asked about: yes


def targeted(session: Session, workload, judge, plan) -> tuple[RealRun, dict[str, int]]:  # type: ignore[no-untyped-def]
    system = get_real_system(NAME)
    program, live = real_program(system, session, workload, judge)
    rr = finish_run(system, session, live, run_plan(program, plan), RECOVERY, judge)
    return rr, dict(live.notes)


def edges(rr: RealRun) -> dict[str, tuple[str | None, str | None, bool]]:
    """value -> (valid_at day, invalid_at day, expired)."""

    def day(t: str | None) -> str | None:
        return None if t is None else t[:10]

    return {
        e["fact"].split(" is ", 1)[1]: (
            day(e["valid_at"]),
            day(e["invalid_at"]),
            e["expired_at"] is not None,
        )
        for e in rr.observation["edges"]
    }


def verdicts(session: Session, workload, judge, rr: RealRun):  # type: ignore[no-untyped-def]
    system = get_real_system(NAME)
    return check_real(
        system, workload, rr, SerialCache(system, session, workload, judge, 0), RECOVERY
    )


def test_serial_run_keeps_bob_invalidated_at_carols_valid_time(graphiti: Session) -> None:
    workload = scenario("manager")  # Bob (day 1), then Carol (day 5), one agent each
    rr, _ = targeted(graphiti, workload, YES, [(0, None, None), (1, None, None)])
    assert edges(rr) == {
        "Bob": ("2026-01-02", "2026-01-06", True),
        "Carol": ("2026-01-06", None, False),
    }
    asked = [t for t in rr.trace if t.get("point") == RESOLVE]
    assert len(asked) == 1 and asked[0]["detail"]["invalidation_candidates"] == [
        {"fact": "alice:manager is Bob", "idx": 0}
    ]
    found = verdicts(graphiti, workload, YES, rr)
    assert not found["N3"].found and not found["N2"].found


def test_race_both_parked_at_the_llm_after_reading_bob_leaves_both_valid(
    graphiti: Session,
) -> None:
    """Carol ‖ Dave, both parked at resolve_edge with Bob as their only candidate: both new
    edges stay valid, and Bob's invalid_at is overwritten by whichever wrote last."""
    plans = {
        "carol writes first": [(0, RESOLVE, 1), (1, RESOLVE, 0), (0, None, None), (1, None, None)],
        "dave writes first": [(0, RESOLVE, 1), (1, RESOLVE, 0), (1, None, None), (0, None, None)],
    }
    last_writer = {"carol writes first": "2026-01-07", "dave writes first": "2026-01-06"}
    for name, plan in plans.items():
        rr, notes = targeted(graphiti, RACE, YES, plan)
        asked = [t for t in rr.trace if t.get("point") == RESOLVE]
        assert [
            [c["fact"] for c in t["detail"]["invalidation_candidates"]] for t in asked[-2:]
        ] == [["alice:manager is Bob"]] * 2
        got = edges(rr)
        assert got["Carol"][1] is None and got["Dave"][1] is None, name
        assert got["Bob"][1] == last_writer[name], name
        assert verdicts(graphiti, RACE, YES, rr)["N2"].found, name
        # Graphiti's parallel searches: an agent had several coroutines parked at once
        assert notes.get("sibling_order_fixed", 0) > 0
        assert any(t.get("task") for t in rr.trace)


def test_same_plan_gives_a_byte_identical_record(graphiti: Session) -> None:
    plan = [(0, RESOLVE, 1), (1, "kuzu.write", 0), (0, None, None), (1, None, None)]
    first, _ = targeted(graphiti, RACE, SimJudge(0.5, 0), plan)
    second, _ = targeted(graphiti, RACE, SimJudge(0.5, 0), plan)
    assert first.digest == second.digest
    assert first.record["trace"] and first.observation["episodes"]


def test_recovery_reingests_the_stored_episodes_in_graphitis_order(graphiti: Session) -> None:
    rr, _ = targeted(graphiti, RACE, YES, [(1, None, None), (0, None, None)])
    assert [e["content"] for e in rr.observation["episodes"]] == [
        "alice:manager is Bob",
        "alice:manager is Carol",
        "alice:manager is Dave",
    ]
    assert [c["value"] for c in rr.recovered["order"]] == ["Bob", "Carol", "Dave"]
