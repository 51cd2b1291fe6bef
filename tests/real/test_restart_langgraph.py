"""LangGraph's checkpointer restarted (docs/real.md, "Faults, restarts and units inside a
call"; langchain-ai/langgraph#8039): a thread s1 -> s2 -> s3 run with durability="sync" over
PostgresSaver, each node's side effect counted, the process killed at a chosen point and
the thread resumed by a fresh saver on the same tables.

What the real code does (langgraph 1.2.24): the loop's background saves are units of the
agent; a finished task's `aput_writes` and the next checkpoint's `aput` are parked at once,
and nothing orders them. Released put first, a death leaves checkpoint k+1 durable and the
writes it was made from missing on checkpoint k (`checkpoint-before-writes`); the resumed
thread starts from k+1 and re-executes nothing. A death after a node's side effect and
before both saves makes the resumed thread re-execute that node (`reexecuted-after-restart`);
the same death after its writes landed replays them instead."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toki.real import get_real_system
from toki.real.adapters.langgraph_ckpt import LangGraphCheckpointHost
from toki.real.driver import RealRun, finish_run, real_program, real_runs, unwrapped
from toki.real.faults import FaultPlan, parse_faults
from toki.real.program import OpProgram, OpStep
from toki.real.restart import check_faults, checkpoint_before_writes, reexecuted
from toki.real.scenario import get_scenario
from toki.real.session import Session
from toki.sim.dpor import DPOR
from toki.sim.explore import RandomStrategy, Stats, Strategy, replay_schedule
from toki.sim.workload import Workload
from toki.systems.base import SimJudge

SYSTEM = "langgraph-checkpoint-postgres"
JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
THREAD = cast(
    Workload,
    OpProgram.build("t1", "checkpoint", [[OpStep.from_json({"op": "run", "thread": "t1"})]]),
)
# the gate points of one thread: get, get, put -1, put_writes -1, put 0, then per node
# effect, put_writes, put; program.return
POINTS = 15
S2_RETURNED = 9  # effect.s2 released: its put_writes and the step-2 put are both parked


def _checkpoints(*writes: int) -> list[dict[str, Any]]:
    """A chain of checkpoints, the i-th with writes[i] stored writes."""
    return [
        {"id": f"c{i}", "parent": f"c{i - 1}" if i else None, "step": i - 1, "writes": w}
        for i, w in enumerate(writes)
    ]


def test_the_scenario_is_in_the_corpus_with_a_death_and_task_choices() -> None:
    sc = get_scenario("langgraph-8039-put-writes-order")
    assert (sc.report, sc.system, sc.reproduced, sc.fixed) == (
        "langchain-ai/langgraph#8039",
        SYSTEM,
        True,
        None,  # no fix shipped: 1.2.24 is the newest langgraph on the index
    )
    assert sc.faults == FaultPlan(restart=1, tasks=1)
    assert sc.expect == ("checkpoint-before-writes",)
    assert sc.program().family == "checkpoint"


@given(st.lists(st.integers(0, 3), min_size=1, max_size=6))
def test_a_checkpoint_is_bare_when_it_has_a_child_and_no_writes(writes: list[int]) -> None:
    """The law: found iff some checkpoint but the last (each has a child) stores no write."""
    verdict = checkpoint_before_writes(
        {"integrity_reopened": {"checkpoints": _checkpoints(*writes)}}, {}
    )
    assert verdict.ran
    assert verdict.found == any(w == 0 for w in writes[:-1])
    if verdict.found:
        assert [b["step"] for b in verdict.observed] == [
            i - 1 for i, w in enumerate(writes[:-1]) if w == 0
        ]


def test_checkpoint_before_writes_abstains_without_checkpoints() -> None:
    verdict = checkpoint_before_writes({"integrity_reopened": {"vectors": 1}}, {})
    assert not verdict.ran and verdict.details["abstains"] == "the library has no checkpoints"


def _run_with(effects: list[dict[str, Any]] | None) -> RealRun:
    observation: dict[str, Any] = {} if effects is None else {"effects": effects}
    return RealRun((), (), (), observation, ())


def test_reexecuted_counts_a_node_applied_twice_in_one_thread() -> None:
    once = [{"thread": "t1", "node": n, "instance": 0} for n in ("s1", "s2")]
    assert not reexecuted(_run_with(once), {}).found
    twice = [*once, {"thread": "t1", "node": "s2", "instance": 1}]
    verdict = reexecuted(_run_with(twice), {})
    assert verdict.found
    assert verdict.observed == [{"thread": "t1", "node": "s2", "instances": [0, 1]}]
    other = [*once, {"thread": "t2", "node": "s2", "instance": 1}]  # another thread's s2
    assert not reexecuted(_run_with(other), {}).found
    assert not reexecuted(_run_with(None), {}).ran


# -- the real code ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def langgraph() -> Iterator[Session]:
    from .conftest import session_for

    yield from session_for(SYSTEM)


def _run(session: Session, schedule: tuple[object, ...], faults: FaultPlan) -> RealRun:
    system = get_real_system(SYSTEM)
    program, live = real_program(system, session, THREAD, JUDGE, faults=faults)
    with unwrapped():
        run = replay_schedule(program, schedule)
    return finish_run(system, session, live, run, RECOVERY, JUDGE)


def _effects(rr: RealRun) -> list[tuple[str, int]]:
    return [(e["node"], e["instance"]) for e in rr.observation["effects"]]


def _verdicts(rr: RealRun) -> dict[str, bool]:
    names = ("checkpoint-before-writes", "reexecuted-after-restart", "lost-write")
    return {n: v.found for n, v in check_faults(get_real_system(SYSTEM), THREAD, rr, names).items()}


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.postgres
def test_a_thread_run_serially_stores_each_task_writes_on_its_checkpoint(
    langgraph: Session,
) -> None:
    rr = _run(langgraph, (0,) * POINTS, FaultPlan())
    assert [t["point"] for t in rr.trace][-4:] == [
        "effect.s3",
        "checkpoint.put_writes",
        "checkpoint.put",
        "program.return",
    ]
    assert _effects(rr) == [("s1", 0), ("s2", 0), ("s3", 0)]
    saved = rr.observation["checkpoints"]
    assert [c["step"] for c in saved] == [-1, 0, 1, 2, 3]
    assert [c["written"] for c in saved] == [[], ["s1"], ["s2"], ["s3"], []]
    assert all(c["writes"] for c in saved[:-1])
    # the same schedule twice in one worker: the same record
    assert _run(langgraph, (0,) * POINTS, FaultPlan()).digest == rr.digest


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.postgres
def test_put_before_put_writes_then_a_death_leaves_a_bare_checkpoint(langgraph: Session) -> None:
    """The task choice releases the step-2 put before s2's put_writes; the process dies:
    checkpoint 2 (s2 done) is durable, checkpoint 1 has no writes. The resumed thread starts
    from checkpoint 2: s3 runs once, after the restart, and s2 is not re-executed."""
    schedule = (*[0] * S2_RETURNED, "task:0", 0, "restart", 0)
    rr = _run(langgraph, schedule, parse_faults("restart:1,tasks:1"))
    released = [t.get("point") for t in rr.trace if "point" in t]
    assert released[-1] == "checkpoint.put" and rr.trace[-2]["detail"]["step"] == 2
    assert _verdicts(rr) == {
        "checkpoint-before-writes": True,
        "reexecuted-after-restart": False,
        "lost-write": False,
    }
    assert _effects(rr) == [("s1", 0), ("s2", 0), ("s3", 1)]
    bare = check_faults(get_real_system(SYSTEM), THREAD, rr, ("checkpoint-before-writes",))
    assert [b["step"] for b in bare["checkpoint-before-writes"].observed] == [1]


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.postgres
def test_a_death_before_both_saves_reexecutes_the_node_after_them_it_replays(
    langgraph: Session,
) -> None:
    """The same program point, s2 returned and the step-2 checkpoint not put: whether the
    resumed thread runs s2's side effect again depends on whether its writes landed."""
    faults = parse_faults("restart:1")
    before = _run(langgraph, (*[0] * S2_RETURNED, "restart", 0), faults)
    after = _run(langgraph, (*[0] * (S2_RETURNED + 1), "restart", 0), faults)
    assert [t.get("point") for t in after.trace if "point" in t][-1] == "checkpoint.put_writes"
    assert _effects(before) == [("s1", 0), ("s2", 0), ("s2", 1), ("s3", 1)]
    assert _effects(after) == [("s1", 0), ("s2", 0), ("s3", 1)]
    assert _verdicts(before) == {
        "checkpoint-before-writes": False,
        "reexecuted-after-restart": True,
        "lost-write": False,
    }
    assert not any(_verdicts(after).values())


def _explore(
    session: Session, barrier: bool, strategy: Strategy | None = None, budget: int = 500
) -> tuple[int, dict[str, int], int, set[str]]:
    """DPOR (seed 0) over one task choice and one death: schedules, how many showed each
    anomaly, how many showed both, the final states; for DPOR, asserts the space was
    exhausted within the budget and no footprint drifted."""
    system = dataclasses.replace(
        get_real_system(SYSTEM), host=LangGraphCheckpointHost(barrier=barrier)
    )
    found: dict[str, int] = {"checkpoint-before-writes": 0, "reexecuted-after-restart": 0}
    both = runs = 0
    states = set()
    stats = Stats()
    for rr in real_runs(
        system,
        session,
        THREAD,
        strategy or DPOR(),
        JUDGE,
        RECOVERY,
        budget=budget,
        seed=0,
        stats=stats,
        faults=parse_faults("restart:1,tasks:1"),
    ):
        runs += 1
        states.add(rr.state_digest)
        verdicts = _verdicts(rr)
        assert not verdicts["lost-write"]
        for name in found:
            found[name] += verdicts[name]
        both += verdicts["checkpoint-before-writes"] and verdicts["reexecuted-after-restart"]
    print(
        f"{strategy or 'DPOR'} seed 0, barrier={barrier}: {runs} schedules, {found}, both in {both}"
    )
    if strategy is None:
        assert stats.exhausted and runs < budget
        assert not any(stats.notes.get(k) for k in ("dpor_footprint_drift", "dpor_disabled_wakeup"))
    return runs, found, both, states


@pytest.mark.heavy
@pytest.mark.real
@pytest.mark.slow
@pytest.mark.postgres
def test_dpor_exhausts_one_task_choice_and_one_death(langgraph: Session) -> None:
    """Both anomalies occur in 1.2.24, and never together: a bare checkpoint's child holds
    the node's result, so the resumed thread re-runs nothing. The footprints are sound
    enough: every final state 40 random schedules (seed 0) reach is one DPOR reached."""
    _, found, both, dpor = _explore(langgraph, barrier=False)
    assert found["checkpoint-before-writes"] > 0 and found["reexecuted-after-restart"] > 0
    assert both == 0
    _, _, _, sampled = _explore(langgraph, False, RandomStrategy(0), budget=40)
    assert sampled <= dpor


@pytest.mark.heavy
@pytest.mark.real
@pytest.mark.slow
@pytest.mark.postgres
def test_with_the_barrier_no_checkpoint_precedes_its_writes_but_nodes_still_rerun(
    langgraph: Session,
) -> None:
    """The control: the saver's put waits for the writes in flight (the order
    langchain-ai/langgraph#8055 proposed; no release has it). No bare checkpoint in the
    whole space; a death after a node's side effect and before its writes landed still
    re-executes it when the thread resumes (at least once, whatever the order)."""
    _, found, _, _ = _explore(langgraph, barrier=True)
    assert found["checkpoint-before-writes"] == 0
    assert found["reexecuted-after-restart"] > 0


@pytest.mark.real
def test_torn_is_refused_the_saver_has_no_files(langgraph: Session) -> None:
    from toki.real.errors import WorkerError

    with pytest.raises(WorkerError, match="not in files toki can tear"):
        real_program(get_real_system(SYSTEM), langgraph, THREAD, JUDGE, faults=FaultPlan(torn=1))
