"""Parallelism inside one library call: the units (asyncio tasks, executor threads, the
thread-pool threads of a synchronous library) of one agent are interleaved by the explorer
through task choices (`--faults tasks:<n>`), DPOR included, with the union of the parked
units' footprints (docs/real.md, Units inside a call).

The libraries are `toki/real/inenv/async_demo.py` (one `add()` gathers two coroutines that
read-modify-write one document through `asyncio.to_thread`) and `toki/real/inenv/sync_demo.py`
(one `add()` submits the same two read-modify-writes to a `ThreadPoolExecutor` and waits).
Their lost update needs the two units of ONE agent to interleave: DPOR finds it with one task
choice and cannot with the old execution (an agent's oldest parked unit always released
first; for the pool, its submissions run inline in the agent's thread)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from toki.real.adapter import Beliefs, Picker, RealSystem
from toki.real.cli import make_real_workload
from toki.real.driver import (
    finish_run,
    open_session,
    real_program,
    real_runs,
    run_plan,
    unwrapped,
)
from toki.real.explore import explore_real
from toki.real.faults import parse_faults
from toki.real.gate import GatePoint
from toki.real.session import Session
from toki.sim.dpor import DPOR
from toki.sim.explore import replay_schedule
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry
from toki.systems.base import SimJudge

JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
ONE = make_real_workload(None, 1, 1, 1, 0)  # one agent, one claim


@dataclass(frozen=True, slots=True)
class DemoHost:
    def config(self, workload: Workload) -> dict[str, Any]:
        return {}

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        return None

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        memories = observation.get("memories") or {}
        return {k: belief_entry([memories[k]] if k in memories else []) for k in keys}

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        return self.beliefs(observation, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        memories = observation.get("memories") or {}
        return {memories[key]} if key in memories else set()

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        return claim.value in self.recoverable(observation, claim.key)


DEMO = RealSystem(
    name="async-demo",
    title="an asyncio library whose add() gathers two writers of one document",
    library="toki-async-demo",
    version="1",
    module="json",
    adapter="async_demo",
    host=DemoHost(),
)


SYNC = RealSystem(
    name="sync-demo",
    title="a synchronous library whose add() runs two writers of one document in a pool",
    library="toki-sync-demo",
    version="1",
    module="json",
    adapter="sync_demo",
    host=DemoHost(),
)
SYNC_INLINE = RealSystem(
    name="sync-demo-inline",
    title="the same library with its pool run inline in the agent's thread (the old way)",
    library="toki-sync-demo",
    version="1",
    module="json",
    adapter="sync_demo",
    host=DemoHost(),
    env={"TOKI_REAL_POOLS": "inline"},
)


@pytest.fixture(scope="module")
def demo() -> Iterator[Session]:
    with open_session(DEMO) as session:
        yield session


def _explore(session: Session, faults: str) -> Any:
    return explore_real(
        DEMO, ONE, DPOR(), JUDGE, RECOVERY, budget=200, faults=parse_faults(faults),
        session=session,
    )  # fmt: skip


def test_the_old_execution_never_interleaves_the_units_of_one_agent(demo: Session) -> None:
    report = _explore(demo, "")
    assert report.schedules == 1  # one agent: one class, oldest unit first
    assert report.anomalies["N2"] == 0 and report.anomalies["N3"] == 0
    assert report.notes["sibling_order_fixed"] > 0 and not report.exhausted


def test_dpor_with_one_task_choice_finds_the_lost_update(demo: Session) -> None:
    report = _explore(demo, "tasks:1")
    assert report.anomalies["N2"] > 0  # no serial run loses the memory
    witness = report.witnesses["N2"]
    assert "task:0" in witness.schedule
    assert witness.observed == {ONE.keys[0]: belief_entry([])}
    story = "\n".join(witness.steps)
    assert "doc.read" in story and "doc.write" in story


def test_two_task_choices_reach_every_order_and_exhaust(demo: Session) -> None:
    """Two units of two points each: every one of their 6 orders needs at most two task
    choices, so DPOR with tasks:2 reaches them all (the space of schedules with at most two
    task choices is exhausted)."""
    report = _explore(demo, "tasks:2")
    assert report.exhausted and report.anomalies["N2"] > 0
    assert report.distinct_states == 3  # both writes kept, the memory lost, the count lost
    orders = set()
    for rr in real_runs(DEMO, demo, ONE, DPOR(), JUDGE, RECOVERY, budget=500,
                        faults=parse_faults("tasks:2")):  # fmt: skip
        orders.add(tuple((t["point"], t.get("task", 0)) for t in rr.trace))
    assert len(orders) == 6


def test_same_schedule_same_units_same_record(demo: Session) -> None:
    program, live = real_program(DEMO, demo, ONE, JUDGE, faults=parse_faults("tasks:1"))
    schedule = (0, "task:0", 0, 0, 0)
    records = []
    for _ in range(3):
        with unwrapped():
            run = replay_schedule(program, schedule)
        rr = finish_run(DEMO, demo, live, run, RECOVERY, JUDGE)
        records.append(rr.digest)
        units = [(t["point"], t.get("task", 0)) for t in rr.trace]
        assert units == [("doc.read", 1), ("doc.read", 2), ("doc.write", 1), ("doc.write", 2)]
        assert rr.observation["memories"] == {} and rr.observation["count"] == 1
    assert len(set(records)) == 1


# ---------------------------------------------------------------------------- mem0 AsyncMemory


@pytest.mark.real
def test_mem0_async_add_runs_its_to_thread_calls_and_tasks_as_units() -> None:
    """AsyncMemory.add under the controller: its LLM, vector-store and history calls park in
    executor threads and its memory actions in tasks, each a unit of the agent; the run is
    a function of the schedule (same choices, same record)."""
    from .conftest import require

    require("mem0-1.0.11")
    from toki.real import get_real_system
    from toki.sim.workload import scenario

    system = get_real_system("mem0-1.0.11-async")
    manager = scenario("manager")
    with open_session(system) as session:
        assert session.info.get("api") == "AsyncMemory"
        program, live = real_program(system, session, manager, JUDGE)
        digests = []
        for _ in range(2):
            run = run_plan(program, [(0, None, None), (1, None, None)])
            rr = finish_run(system, session, live, run, RECOVERY, JUDGE)
            digests.append(rr.digest)
        units = {(t["point"], t.get("task", 0)) for t in rr.trace}
        assert all(task > 0 for _, task in units)  # nothing runs on the agent's main task
        assert {p for p, _ in units} >= {"llm.extract", "llm.decide", "vector.insert"}
        insert = next(t for t in rr.trace if t["point"] == "vector.insert")
        decide = next(t for t in rr.trace if t["point"] == "llm.decide")
        assert insert["task"] != decide["task"]  # the ADD runs in a task of its own
        assert digests[0] == digests[1]
        # serially, the judge lets Carol replace Bob, as in the synchronous mem0 1.0.11
        assert [m["text"] for m in rr.observation["memories"]] == ["alice:manager is Carol"]


@pytest.mark.real
@pytest.mark.slow
def test_mem0_async_with_task_choices_is_explored_to_exhaustion() -> None:
    from .conftest import require

    require("mem0-1.0.11")
    from toki.real import get_real_system
    from toki.sim.workload import scenario

    report = explore_real(
        get_real_system("mem0-1.0.11-async"), scenario("manager"), DPOR(), JUDGE, RECOVERY,
        budget=1000, faults=parse_faults("tasks:1"),
    )  # fmt: skip
    assert report.exhausted and report.schedules > 1
    assert "task:0" in report.witnesses["N2"].schedule or report.anomalies["N2"] > 0


def test_dpor_reaches_every_state_random_search_reaches(demo: Session) -> None:
    """The union footprint keeps DPOR's reduction sound: 60 random schedules with the same
    task choices reach no final state DPOR's classes miss."""
    from toki.sim.explore import RandomStrategy

    def states(strategy: Any, budget: int) -> set[str]:
        runs = real_runs(DEMO, demo, ONE, strategy, JUDGE, RECOVERY, budget=budget,
                         faults=parse_faults("tasks:2"))  # fmt: skip
        return {rr.state_digest for rr in runs}

    assert states(RandomStrategy(7), 60) <= states(DPOR(), 500)


# ------------------------------------------------------------------ a synchronous thread pool


@pytest.fixture(scope="module")
def sync_demo() -> Iterator[Session]:
    with open_session(SYNC) as session:
        yield session


def _explore_sync(system: RealSystem, session: Session, faults: str) -> Any:
    return explore_real(
        system, ONE, DPOR(), JUDGE, RECOVERY, budget=200, faults=parse_faults(faults),
        session=session,
    )  # fmt: skip


def test_pool_threads_inline_never_interleave() -> None:
    """The old execution: the pool's submissions run at once in the agent's thread, so
    whatever the task choices, one agent is one unit and nothing is lost."""
    with open_session(SYNC_INLINE) as session:
        report = _explore_sync(SYNC_INLINE, session, "tasks:2")
        assert report.exhausted  # every placement of two task choices: none changes a thing
        assert report.anomalies["N2"] == 0 and report.distinct_states == 1
        program, live = real_program(SYNC_INLINE, session, ONE, JUDGE)
        rr = finish_run(SYNC_INLINE, session, live, run_plan(program, [(0, None, None)]),
                        RECOVERY, JUDGE)  # fmt: skip
        assert all("task" not in t for t in rr.trace)  # one unit: the agent's own thread


def test_pool_threads_as_units_released_oldest_first_lose_nothing(sync_demo: Session) -> None:
    report = _explore_sync(SYNC, sync_demo, "")
    assert report.schedules == 1 and report.anomalies["N2"] == 0
    assert report.notes["sibling_order_fixed"] > 0 and not report.exhausted


def test_dpor_with_one_task_choice_finds_the_pool_lost_update(sync_demo: Session) -> None:
    report = _explore_sync(SYNC, sync_demo, "tasks:1")
    assert report.anomalies["N2"] > 0
    witness = report.witnesses["N2"]
    assert "task:0" in witness.schedule
    assert witness.observed == {ONE.keys[0]: belief_entry([])}


def test_pool_units_two_choices_reach_every_order(sync_demo: Session) -> None:
    report = _explore_sync(SYNC, sync_demo, "tasks:2")
    assert report.exhausted and report.distinct_states == 3
    orders = set()
    for rr in real_runs(SYNC, sync_demo, ONE, DPOR(), JUDGE, RECOVERY, budget=500,
                        faults=parse_faults("tasks:2")):  # fmt: skip
        orders.add(tuple((t["point"], t.get("task", 0)) for t in rr.trace))
    assert len(orders) == 6


def test_pool_units_same_schedule_same_record(sync_demo: Session) -> None:
    program, live = real_program(SYNC, sync_demo, ONE, JUDGE, faults=parse_faults("tasks:1"))
    schedule = (0, "task:0", 0, 0, 0)
    records = []
    for _ in range(3):
        with unwrapped():
            run = replay_schedule(program, schedule)
        rr = finish_run(SYNC, sync_demo, live, run, RECOVERY, JUDGE)
        records.append(rr.digest)
        units = [(t["point"], t.get("task", 0)) for t in rr.trace]
        assert units == [("doc.read", 1), ("doc.read", 2), ("doc.write", 1), ("doc.write", 2)]
        assert rr.observation["memories"] == {} and rr.observation["count"] == 1
    assert len(set(records)) == 1
