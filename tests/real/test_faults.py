"""Faults beyond a crash (`toki.real.faults`): injected store errors, process deaths, torn
writes of a library's own files, and the restart that reopens them (docs/real.md, Faults).

The mem0 tests are the issue's two findings on the installed library: a torn FAISS
docstore, reopened, answers a search for one memory with another at score 1; an LLM
timeout inside mem0 1.0.11's `add()` is swallowed (it returns `[]`, the memory is gone),
and mem0 2.2.1 swallows none of the failures DPOR places anywhere in the same workload."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.errors import InvalidInput
from toki.real import get_real_system
from toki.real.checks import n2
from toki.real.driver import RealRun, SerialCache, finish_run, real_program, run_plan, unwrapped
from toki.real.explore import explore_real
from toki.real.faults import ERROR_KINDS, FaultPlan, error_for, parse_faults
from toki.real.gate import GatePoint
from toki.real.inenv import faults as worker_faults
from toki.real.restart import check_faults, n2_acknowledged
from toki.real.session import Session
from toki.real.witness import RealWitness, explain_real, replay_real
from toki.sim.dpor import DPOR
from toki.sim.explore import replay_schedule
from toki.sim.workload import scenario
from toki.systems.base import SimJudge

from .conftest import require

JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
MANAGER = scenario("manager")  # agent 0: Bob, agent 1: Carol, one user


# ---------------------------------------------------------------------------- the plan


@settings(max_examples=200, derandomize=True)
@given(
    st.integers(0, 3),
    st.integers(0, 3),
    st.sampled_from((*ERROR_KINDS, "auto")),
    st.sampled_from(("", "restart", "torn")),
)
def test_a_plan_parses_back_from_its_spec(crash: int, raises: int, error: str, death: str) -> None:
    plan = FaultPlan(
        crash=crash,
        raises=raises,
        error=error if raises else "auto",
        restart=int(death == "restart"),
        torn=int(death == "torn"),
    )
    assert parse_faults(plan.spec()) == plan
    assert bool(plan) == bool(plan.spec())


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("duplicate:1", "not a fault of real runs"),
        ("raise:x", "not a fault of real runs"),
        ("raise:1:meteor", "unknown error kind"),
        ("torn:2", "at most one process death"),
        ("crash:1:locked", "only raise takes an error kind"),
        ("restart:1,torn:1", "two kinds of one death"),
    ],
)
def test_bad_fault_specs_are_refused_in_one_line(text: str, why: str) -> None:
    with pytest.raises(InvalidInput, match=why) as info:
        parse_faults(text)
    assert "\n" not in str(info.value)


def test_each_point_fails_with_its_stores_error() -> None:
    def point(name: str, kind: str) -> GatePoint:
        return GatePoint(0, kind, name)

    assert error_for(point("history.add", "history"), "auto") == "locked"
    assert error_for(point("vector.insert", "vector"), "auto") == "unique"
    assert error_for(point("llm.decide", "llm"), "auto") == "timeout"
    assert error_for(point("vector.search", "vector"), "auto") == "reset"
    assert error_for(point("vector.search", "vector"), "locked") == "locked"
    made = worker_faults.make_error("locked")
    assert isinstance(made, sqlite3.OperationalError) and "database is locked" in str(made)
    with pytest.raises(ValueError, match="unknown error kind"):
        worker_faults.make_error("meteor")


def test_a_torn_file_keeps_the_first_half_of_its_last_write(tmp_path: Path) -> None:
    a, b = tmp_path / "index", tmp_path / "docstore"
    a.write_bytes(b"0123456789")
    watch = worker_faults.FileWatch()
    watch.reset([str(a), str(b)])
    assert watch.last() == str(a)
    b.write_bytes(b"abcdefgh")
    watch.after_step([str(a), str(b)])
    assert watch.last() == str(b)  # b was written after a
    a.write_bytes(b"9876543210")
    os.utime(a, ns=(os.stat(b).st_mtime_ns + 1, os.stat(b).st_mtime_ns + 1))
    watch.after_step([str(a), str(b)])
    assert watch.last() == str(a)
    assert worker_faults.tear(str(a)) == {"file": "index", "bytes": 10, "kept": 5}
    assert a.read_bytes() == b"98765"


# ---------------------------------------------------------------------------- mem0


@pytest.fixture(scope="module")
def mem0_1() -> Session:  # type: ignore[misc]
    from .conftest import session_for

    yield from session_for("mem0-1.0.11")


def _torn_run(session: Session) -> RealRun:
    """Agent 0 adds Bob (index and docstore saved); the process dies while the docstore
    of that save is being written; the client of Carol (never acknowledged) retries."""
    system = get_real_system("mem0-1.0.11")
    program, live = real_program(system, session, MANAGER, JUDGE, faults=parse_faults("torn:1"))
    with unwrapped():
        run = replay_schedule(program, (0, 0, 0, 0, 0, 0, "torn", 1))
    return finish_run(system, session, live, run, RECOVERY, JUDGE)


@pytest.mark.real
def test_mem0_torn_docstore_then_reopen_answers_bob_with_carol(mem0_1: Session) -> None:
    """The hand-written harness's finding, as a schedule: the FAISS index keeps Bob's
    vector, the docstore pickle is cut in half, mem0 logs the failed load and starts with
    an empty docstore; the retried Carol is filed at position 0, which is Bob's vector."""
    rr = _torn_run(mem0_1)
    death = next(t for t in rr.trace if t.get("fault") == "torn")
    assert death["killed"] == [1] and death["torn"]["file"] == "toki.pkl"
    assert rr.restart is not None and rr.restart["reopened"] == {"memories": []}
    assert rr.restart["integrity_reopened"] == {"vectors": 1, "mapped": 0, "payloads": 0}
    verdicts = check_faults(get_real_system("mem0-1.0.11"), MANAGER, rr)
    wrong = verdicts["wrong-answer"]
    assert wrong.found
    [answer] = wrong.observed
    assert answer["query"] == "alice:manager is Bob"
    assert answer["first"]["text"] == "alice:manager is Carol"
    assert answer["first"]["score"] > 0.999
    assert verdicts["lost-write"].found  # Bob was served before the death, not after
    assert verdicts["index-after-restart"].observed == {"vectors": 2, "mapped": 1, "payloads": 1}
    assert not verdicts["resurrection-after-restart"].found
    again = _torn_run(mem0_1)
    assert again.digest == rr.digest  # same schedule, byte-identical record
    assert mem0_1.call("hello")["network"] == []  # the guard refused nothing, restart included


@pytest.mark.real
def test_mem0_a_death_between_gate_points_loses_nothing(mem0_1: Session) -> None:
    """restart:1 at the same point: the files are whole, the reopened mem0 serves Bob, the
    retried Carol is decided against it: none of the restart checks fires."""
    system = get_real_system("mem0-1.0.11")
    program, live = real_program(system, mem0_1, MANAGER, JUDGE, faults=parse_faults("restart:1"))
    with unwrapped():
        run = replay_schedule(program, (0, 0, 0, 0, 0, 0, "restart", 1))
    rr = finish_run(system, mem0_1, live, run, RECOVERY, JUDGE)
    assert rr.restart is not None
    assert [m["text"] for m in rr.restart["reopened"]["memories"]] == ["alice:manager is Bob"]
    verdicts = check_faults(system, MANAGER, rr)
    assert [name for name, v in verdicts.items() if v.found] == []
    assert verdicts["wrong-answer"].ran and verdicts["lost-write"].ran


@pytest.mark.real
def test_mem0_1_swallows_an_llm_timeout_and_drops_the_memory(mem0_1: Session) -> None:
    system = get_real_system("mem0-1.0.11")
    program, live = real_program(system, mem0_1, MANAGER, JUDGE, faults=parse_faults("raise:1"))
    plan = [(0, "llm.decide", 0), ("raise:0", None, None), (0, None, None), (1, None, None)]
    rr = finish_run(system, mem0_1, live, run_plan(program, plan), RECOVERY, JUDGE)
    [failed] = [t for t in rr.trace if t.get("fault") == "raise"]
    assert (failed["agent"], failed["point"], failed["error"]) == (0, "llm.decide", "timeout")
    assert rr.outcomes[0] == ((),)  # add() returned no results and no error
    verdict = check_faults(system, MANAGER, rr)["silent-failure"]
    assert verdict.found and verdict.keys == ("alice:manager",)


@pytest.mark.real
def test_mem0_1_a_failed_delete_is_left_out_of_the_result(mem0_1: Session) -> None:
    """Carol's decision deletes Bob; the store call of the delete fails (connection reset):
    mem0 logs it, adds Carol and reports only the ADD. Carol is recorded, so it is no
    silent failure by the check's definition; Bob and Carol both stay live."""
    system = get_real_system("mem0-1.0.11")
    program, live = real_program(system, mem0_1, MANAGER, JUDGE, faults=parse_faults("raise:1"))
    plan = [(0, None, None), (1, "vector.get", 0), ("raise:1", None, None), (1, None, None)]
    rr = finish_run(system, mem0_1, live, run_plan(program, plan), RECOVERY, JUDGE)
    decide = next(t for t in rr.trace if t.get("point") == "llm.decide" and t["agent"] == 1)
    assert [m["event"] for m in json.loads(decide["reply"])["memory"]] == ["DELETE", "ADD"]
    assert rr.outcomes[1] == (("ADD",),)
    assert sorted(m["text"] for m in rr.observation["memories"]) == [
        "alice:manager is Bob",
        "alice:manager is Carol",
    ]
    assert not check_faults(system, MANAGER, rr)["silent-failure"].found


@pytest.mark.heavy  # 2 x 102 schedules, each with a worker's death and restart: 230 s; CI
@pytest.mark.real  # reproduces and replays the same report as scenario mem0-7117 instead
@pytest.mark.slow
def test_dpor_finds_the_torn_wrong_answer_and_its_witness_replays(tmp_path: Path) -> None:
    require("mem0-1.0.11")
    system = get_real_system("mem0-1.0.11")
    reports = [
        explore_real(
            system,
            MANAGER,
            DPOR(),
            JUDGE,
            RECOVERY,
            budget=300,
            faults=parse_faults("torn:1"),
            out=tmp_path / str(n),
        )
        for n in range(2)
    ]
    report = reports[0]
    assert report.exhausted and report.anomalies["wrong-answer"] > 0
    files = [Path(r.witness_files["wrong-answer"]).read_bytes() for r in reports]
    assert files[0] == files[1]  # same seed, byte-identical witness
    witness = RealWitness.load(report.witness_files["wrong-answer"])
    assert witness.faults == "torn:1" and "torn" in witness.schedule
    rr, verdict = replay_real(witness)
    assert verdict.found and rr.restart is not None
    story = "\n".join(explain_real(witness, rr, verdict))  # what `toki real replay` prints
    assert "PROCESS DIES during its last write of toki.pkl" in story
    assert "search 'alice:manager is Bob' -> first 'alice:manager is Carol'" in story


@pytest.mark.real
@pytest.mark.slow
def test_mem0_2_swallows_no_injected_failure_anywhere() -> None:
    """Every failure DPOR places on the manager workload (one per agent, anywhere) is
    reported by mem0 2.2.1's add() or made good (batch history falls back to rows)."""
    require("mem0-2.2.1")
    report = explore_real(
        get_real_system("mem0-2.2.1"),
        MANAGER,
        DPOR(),
        JUDGE,
        RECOVERY,
        budget=1000,
        faults=parse_faults("raise:1"),
    )
    assert report.exhausted
    assert report.checked["silent-failure"] > 0 and report.anomalies["silent-failure"] == 0


# ---------------------------------------------------------------------------- toki's own store


@pytest.mark.real
def test_toki_sqlite_reports_a_failed_append_and_its_lock_unwinds() -> None:
    """A failed append inside `BEGIN IMMEDIATE`: Memory raises (the agent's claim ends in an
    error), SQLite rolls back and the `with` block lets go of the lock without its release
    gate point; the model's lock is released with it, so agent 1 takes the lock and runs."""
    require("toki-sqlite")
    system = get_real_system("toki-sqlite")
    from toki.real.driver import open_session

    with open_session(system) as session:
        program, live = real_program(session=session, system=system, workload=MANAGER,
                                     judge=JUDGE, faults=parse_faults("raise:1:locked"))  # fmt: skip
        plan = [(0, "store.append", 0), ("raise:0", None, None), (0, None, None), (1, None, None)]
        rr = finish_run(system, session, live, run_plan(program, plan), RECOVERY, JUDGE)
        serial = SerialCache(system, session, MANAGER, JUDGE, 0)
        # N2 proper counts Bob (whose call failed) as committed; acknowledged claims do not
        assert n2(system, MANAGER, rr, serial).found
        assert not n2_acknowledged(system, MANAGER, rr, serial).found
    [failed] = [t for t in rr.trace if t.get("fault") == "raise"]
    assert (failed["point"], failed["error"]) == ("store.append", "locked")
    assert "database is locked" in str(rr.outcomes[0])
    assert rr.outcomes[1] == ("INSERT",)  # agent 1 then wrote Carol alone
    assert [t["point"] for t in rr.trace if t.get("agent") == 1][-1] == "store.unlock"
    assert not check_faults(system, MANAGER, rr)["silent-failure"].found


def test_the_cli_refuses_faults_a_run_or_system_cannot_have(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from toki.real.cli import main

    assert main(["run", "toki-sqlite", "--faults", "torn:2", "--budget", "1"]) == 2
    assert "at most one process death" in capsys.readouterr().err
    for faults, why in (("torn:1", "cannot reopen the library"), ("tasks:1", "not asynchronous")):
        code = main(["run", "toki-sqlite", "--workload", "manager", "--faults", faults,
                     "--budget", "1", "--out", str(tmp_path)])  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and why in err[-1], err
