"""LangGraph's BaseStore (InMemoryStore, PostgresStore) and LangMem 0.0.30, the real code.

The store: `put` on the same key overwrites with no history, so the value a reader was
served is gone (N3) on the serial run already, and concurrent puts are last-writer-wins
(a serial outcome: no N2). LangMem with the judge saying "patch": two managers parked at
the model after reading Bob both patch Bob's document; the final value is Dave and Carol
vanishes without a trace (a lost update); with "remove" (RemoveDoc + insert) Carol and Dave
coexist (N2)."""

from __future__ import annotations

import pytest

from toki.real import ScriptedJudge, get_real_system
from toki.real.checks import check_real
from toki.real.cli import make_real_workload
from toki.real.driver import RealRun, SerialCache, finish_run, real_program, real_runs, run_plan
from toki.real.session import Session
from toki.sim.dpor import DPOR
from toki.sim.explore import BoundedDFS
from toki.sim.workload import scenario
from toki.systems.base import SimJudge

pytestmark = pytest.mark.real

RECOVERY = SimJudge(0.5, 1)
RACE = make_real_workload("manager-race", 2, 1, 1, 0)  # agent 0: Bob, Carol; agent 1: Dave
BOTH_MANAGE_ON_BOB = [(0, "llm.manage", 1), (1, "llm.manage", 0), (0, None, None), (1, None, None)]


def targeted(session: Session, name: str, workload, judge, plan) -> RealRun:  # type: ignore[no-untyped-def]
    system = get_real_system(name)
    program, live = real_program(system, session, workload, judge)
    return finish_run(system, session, live, run_plan(program, plan), RECOVERY, judge)


def verdicts(session: Session, name: str, workload, judge, rr: RealRun):  # type: ignore[no-untyped-def]
    system = get_real_system(name)
    return check_real(
        system, workload, rr, SerialCache(system, session, workload, judge, 0), RECOVERY
    )


def values(rr: RealRun) -> list[str]:
    items = rr.observation["items"]
    return sorted(str(i.get("value") or i.get("text", "").split(" is ", 1)[-1]) for i in items)


# ---------------------------------------------------------------------------- the store


@pytest.mark.parametrize("backend", ["memory", "postgres"])
def test_store_put_overwrites_with_no_history(
    langchain: Session, backend: str, request: pytest.FixtureRequest
) -> None:
    if backend == "postgres":
        request.getfixturevalue("pg_dsn")  # skip (or fail where required) without a server
    name = f"langgraph-store-{backend}"
    workload = scenario("manager")
    judge = SimJudge(0.5, 0)
    rr = targeted(langchain, name, workload, judge, [(0, None, None), (1, None, None)])
    assert values(rr) == ["Carol"]
    puts = [op for t in rr.trace for op in t["detail"]["ops"]]
    assert puts == [
        ["put", "alice#manager", {"value": "Bob"}],
        ["put", "alice#manager", {"value": "Carol"}],
    ]
    found = verdicts(langchain, name, workload, judge, rr)
    assert found["N3"].found and found["N3"].details["erased"] == {"alice:manager": ["Bob"]}
    assert not found["N2"].found and not found["N1"].found and not found["RD"].found


def test_store_races_are_last_writer_wins_in_every_dpor_class(langchain: Session) -> None:
    system = get_real_system("langgraph-store-memory")
    judge = SimJudge(0.5, 0)
    serial = SerialCache(system, langchain, RACE, judge, 0)
    finals = set()
    runs = list(real_runs(system, langchain, RACE, DPOR(), judge, RECOVERY, budget=50))
    for rr in runs:
        finals.add(tuple(values(rr)))
        assert not check_real(system, RACE, rr, serial, RECOVERY, ("N2",))["N2"].found
    assert finals == {("Carol",), ("Dave",)}  # whoever put last
    assert len(runs) == 3  # agent 1's put against each of agent 0's two: 3 classes


# ---------------------------------------------------------------------------- LangMem


def test_langmem_patch_race_final_dave_and_carol_vanishes(langchain: Session) -> None:
    judge = ScriptedJudge(default="patch")
    rr = targeted(langchain, "langmem-0.0.30", RACE, judge, BOTH_MANAGE_ON_BOB)
    manage = [t for t in rr.trace if t.get("point") == "llm.manage"]
    assert [[d["content"] for d in t["detail"]["existing"]] for t in manage] == [
        ["alice:manager is Bob"]
    ] * 2
    assert values(rr) == ["Dave"]
    assert rr.outcomes[0][1] == ("alice:manager is Carol",)  # Carol was written ...
    found = verdicts(langchain, "langmem-0.0.30", RACE, judge, rr)
    # ... and is gone without a trace, although the final state is a serial one
    assert found["N3"].found and "Carol" in found["N3"].details["erased"]["alice:manager"]
    assert not found["N2"].found


def test_langmem_remove_insert_race_carol_and_dave_coexist(langchain: Session) -> None:
    judge = ScriptedJudge(default="remove")
    rr = targeted(langchain, "langmem-0.0.30", RACE, judge, BOTH_MANAGE_ON_BOB)
    assert values(rr) == ["Carol", "Dave"]
    found = verdicts(langchain, "langmem-0.0.30", RACE, judge, rr)
    assert found["N2"].found


def test_langmem_serial_patch_leaves_no_trace_of_bob(langchain: Session) -> None:
    workload = scenario("manager")
    for action in ("patch", "remove"):
        judge = ScriptedJudge(default=action)
        rr = targeted(
            langchain, "langmem-0.0.30", workload, judge, [(0, None, None), (1, None, None)]
        )
        assert values(rr) == ["Carol"], action
        assert verdicts(langchain, "langmem-0.0.30", workload, judge, rr)["N3"].found, action


@pytest.mark.slow
def test_dpor_reaches_every_state_bounded_search_reaches(langchain: Session) -> None:
    """The footprints are sound enough on LangMem: DPOR's final states include every final
    state a preemption-bounded search reaches (judge: remove)."""
    system = get_real_system("langmem-0.0.30")
    judge = ScriptedJudge(default="remove")
    workload = scenario("manager")

    def states(strategy, budget: int) -> tuple[set[str], bool]:  # type: ignore[no-untyped-def]
        from toki.sim.explore import Stats

        stats = Stats()
        got = {
            rr.state_digest
            for rr in real_runs(
                system, langchain, workload, strategy, judge, RECOVERY, budget=budget, stats=stats
            )
        }
        assert not any(stats.notes.get(k) for k in ("dpor_footprint_drift", "dpor_disabled_wakeup"))
        return got, stats.exhausted

    dpor, exhausted = states(DPOR(), 200)
    bounded, _ = states(BoundedDFS(2), 300)
    assert exhausted and bounded <= dpor
