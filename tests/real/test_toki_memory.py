"""toki's own Memory as a real system: in process (one shared facade) and SQLite (a facade
per agent over one file, BEGIN IMMEDIATE as a lock the scheduler models)."""

from __future__ import annotations

import pytest

from toki.real import (
    ScriptedJudge,
    explore_real,
    get_real_system,
)
from toki.real.checks import check_real, committed_claims
from toki.real.cli import make_real_workload
from toki.real.driver import SerialCache, finish_run, real_program, real_runs, run_plan
from toki.real.session import Session
from toki.sim.dpor import DPOR
from toki.sim.explore import BoundedDFS, replay_schedule
from toki.sim.workload import scenario
from toki.systems.base import SimJudge

pytestmark = pytest.mark.real

JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)


def get_workload(name: str):  # type: ignore[no-untyped-def]
    return make_real_workload(name, 2, 1, 1, 0)


def states(session: Session, name: str, strategy, crash_budget: int = 0) -> set[str]:  # type: ignore[no-untyped-def]
    system = get_real_system(name)
    return {
        rr.state_digest
        for rr in real_runs(
            system,
            session,
            scenario("manager"),
            strategy,
            JUDGE,
            RECOVERY,
            budget=2000,
            crash_budget=crash_budget,
        )
    }


def test_dpor_reaches_every_state_bounded_search_reaches(toki_sqlite: Session) -> None:
    """Empirical soundness of the declared footprints: DPOR explores one schedule per class,
    so every final state of any schedule (here: all with at most one preemption) must be
    among its states. Fails when a footprint omits something a step touches."""
    dpor = states(toki_sqlite, "toki-sqlite", DPOR())
    bounded = states(toki_sqlite, "toki-sqlite", BoundedDFS(1))
    assert bounded <= dpor
    assert len(dpor) >= 2  # Bob-then-Carol and Carol-then-Bob differ


def test_dpor_on_real_code_keeps_its_assumptions() -> None:
    """DPOR's counters of broken assumptions (a step whose footprint changed on replay, a
    wake-up step that was not enabled, executions abandoned asleep) stay zero on real code:
    the footprints are functions of the prefix, as DPOR requires."""
    report = explore_real(
        get_real_system("toki-sqlite"), scenario("manager"), DPOR(), JUDGE, RECOVERY, budget=500
    )
    assert report.exhausted and report.schedules >= 4
    assert not {k: v for k, v in report.notes.items() if v}, report.notes


def test_same_seed_and_schedule_give_a_byte_identical_record(toki_sqlite: Session) -> None:
    system = get_real_system("toki-sqlite")
    workload = scenario("manager")
    program, live = real_program(system, toki_sqlite, workload, JUDGE, seed=3)
    first = next(
        real_runs(system, toki_sqlite, workload, DPOR(), JUDGE, RECOVERY, budget=1, seed=3)
    )
    records = []
    for _ in range(3):
        run = replay_schedule(program, first.schedule)
        records.append(finish_run(system, toki_sqlite, live, run, RECOVERY, JUDGE).record)
    assert records[0] == records[1] == records[2] == first.record


def test_a_crash_inside_the_write_lock_rolls_back_and_frees_the_lock(toki_sqlite: Session) -> None:
    """Agent 0 crashes parked at its append, inside BEGIN IMMEDIATE: as for a dead process
    the transaction is rolled back, so agent 1 (waiting for the lock) proceeds and only its
    claim is stored; no anomaly, since the crashed claim left no trace."""
    system = get_real_system("toki-sqlite")
    workload = scenario("manager")
    program, live = real_program(system, toki_sqlite, workload, JUDGE, crash_budget=1)
    run = run_plan(program, [(0, "store.append", 0), (1, "store.lock", 0), ("crash:0", None, None)])
    rr = finish_run(system, toki_sqlite, live, run, RECOVERY, JUDGE)
    assert rr.observation["keys"]["alice:manager"]["history"] == ["Carol"]
    assert [t for t in rr.trace if "crash" in t] == [
        {"crash": 0, "before": "store.append", "claim": 0}
    ]
    serial = SerialCache(system, toki_sqlite, workload, JUDGE, 0)
    verdicts = check_real(system, workload, rr, serial, RECOVERY)
    assert not any(v.found for v in verdicts.values()), verdicts


def test_a_crashed_thread_unwinds_and_frees_memorys_writer_lock(toki_memory: Session) -> None:
    """In-process agents are threads of one live process: agent 0, crashed parked at its
    append inside Memory's writer lock, dies of an exception there (its `with` blocks run),
    so agent 1, waiting for that lock, proceeds and only its claim is stored. Before crashes
    unwound, the parked thread kept the real lock and agent 1 blocked where the scheduler
    could not see it (a GateTimeout)."""
    system = get_real_system("toki-memory")
    workload = scenario("manager")
    program, live = real_program(system, toki_memory, workload, JUDGE, crash_budget=1)
    plan = [(0, "store.append", 0), (1, "memory-writer", 0), ("crash:0", None, None)]
    rr = finish_run(system, toki_memory, live, run_plan(program, plan), RECOVERY, JUDGE)
    assert rr.observation["keys"]["alice:manager"]["history"] == ["Carol"]
    assert [t for t in rr.trace if "crash" in t] == [
        {"crash": 0, "before": "store.append", "claim": 0}
    ]
    serial = SerialCache(system, toki_memory, workload, JUDGE, 0)
    verdicts = check_real(system, workload, rr, serial, RECOVERY)
    assert not any(v.found for v in verdicts.values()), verdicts


def test_a_crash_before_a_second_claim_of_the_same_value_commits_only_the_first(
    toki_memory: Session,
) -> None:
    """Found by the real matrix (contention, one crash per agent): agent 0's two claims both
    say Berlin; it crashes parked before its second claim's writer lock. The checker took
    the second claim as committed because its value was stored (by the first), so the
    serial baselines applied a claim that never ran: a false N2. A claim now counts as
    recorded only when a version of that claim (value, source, valid-from day) is stored."""
    from toki.experiments.matrix import _workload

    system = get_real_system("toki-memory")
    workload = _workload({"name": "contention", "synthetic": {
        "agents": 2, "claims_per_agent": 2, "keys": 1, "contradiction_rate": 1.0, "seed": 7}})  # fmt: skip
    a0, a1 = workload.inboxes
    assert a0[0].value == a0[1].value and a0[0].start != a0[1].start
    program, live = real_program(system, toki_memory, workload, JUDGE, crash_budget=1)
    schedule = [0, *[1] * 12, *[0] * 7, "crash:0", "crash:1"]
    rr = finish_run(system, toki_memory, live, replay_schedule(program, schedule), RECOVERY, JUDGE)
    assert next(t for t in rr.trace if "crash" in t) == {
        "crash": 0,
        "before": "store.lock",
        "claim": 1,
    }
    assert committed_claims(system, workload, rr) == [[a0[0]], list(a1)]
    serial = SerialCache(system, toki_memory, workload, JUDGE, 0)
    assert not check_real(system, workload, rr, serial, RECOVERY, ("N2",))["N2"].found


@pytest.mark.slow
def test_the_sqlite_deployment_admits_no_anomaly_with_crashes() -> None:
    """Exhaustive within DPOR's classes (one crash per agent): the write lock serialises
    each claim's read-judge-append, the log is the only record and is replayed on open."""
    report = explore_real(
        get_real_system("toki-sqlite"),
        scenario("manager"),
        DPOR(),
        JUDGE,
        RECOVERY,
        budget=2000,
        crash_budget=1,
    )
    assert report.exhausted and report.schedules > 50
    assert sum(report.anomalies.values()) == 0, report.to_json()
    assert not {k: v for k, v in report.notes.items() if v}, report.notes


@pytest.mark.parametrize("workload", ["manager", "manager-race"])
def test_one_in_process_facade_shared_by_two_threads_writes_one_at_a_time(workload: str) -> None:
    """The finding of the first real matrix, fixed: the in-process store's write lock was a
    no-op, so two threads sharing one Memory interleaved inside `_write` (agent 1 folded agent
    0's uncommitted Bob; reopening refused the log: RD, then N1 and N2). Memory's writer lock
    is now real (a gate point here), and every class DPOR explores is clean."""
    w = scenario(workload) if workload == "manager" else get_workload(workload)
    for crash_budget in (0, 1):
        report = explore_real(
            get_real_system("toki-memory"),
            w,
            DPOR(),
            JUDGE,
            RECOVERY,
            budget=2000,
            crash_budget=crash_budget,
        )
        assert report.exhausted, report.to_json()
        assert sum(report.anomalies.values()) == 0, report.to_json()


def test_opening_reads_log_and_projection_at_one_point(toki_sqlite: Session) -> None:
    """The finding of the first real matrix, fixed: `Memory.__init__` loaded the log and then
    the projection in two statements, so a commit in between made open rewrite a good
    projection from a stale replay. Opening now reads both in one read transaction (one gate
    point) and never writes."""
    system = get_real_system("toki-sqlite")
    workload = get_workload("manager-race")
    program, live = real_program(system, toki_sqlite, workload, JUDGE)
    rr = finish_run(
        system, toki_sqlite, live, run_plan(program, [(0, None, None), (1, None, None)]), RECOVERY
    )
    points = [t.get("point") for t in rr.trace if t.get("agent") == 1]
    assert "store.load_state" in points and "store.load_projection" not in points
    opening = [t for t in rr.trace if t.get("point") == "store.append" and t.get("claim") is None]
    assert opening == []
    serial = SerialCache(system, toki_sqlite, workload, JUDGE, 0)
    assert not any(v.found for v in check_real(system, workload, rr, serial, RECOVERY).values())


def test_a_scripted_judge_decides_the_contradiction(toki_memory: Session) -> None:
    """The judge gate point is answered by the host: scripted 'Bob' keeps Bob under EWM."""
    system = get_real_system("toki-memory")
    workload = scenario("manager")
    for pick, value in (("Bob", "Bob"), ("Carol", "Carol")):
        judge = ScriptedJudge(default=pick)
        program, live = real_program(system, toki_memory, workload, judge)
        rr = finish_run(system, toki_memory, live, run_plan(program, [(0, None, None)]), RECOVERY)
        assert rr.observation["keys"]["alice:manager"]["values"] == [value]
