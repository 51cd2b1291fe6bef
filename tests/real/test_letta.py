"""Letta 0.16.8's server library, the real code, on its own PostgreSQL 16 with pgvector.

Two Letta agents share one core-memory block and write "alice:manager is Bob" / "... is
Carol" through Letta's core-memory tools; each step persists what LettaAgentV3 persists
(provider trace, input message, tool call and tool return). Serially the replace erases Bob
from the block, but the messages keep him (the replace's old_content): no N3. When both
agents load their state before either writes, each computes its new value from the empty
block: the second update_block_async re-reads the block and writes over it (Letta's "update
the blocks (LRW)"), so Bob vanishes from the block with no error, and re-applying the
recorded tool calls gives both lines (RD). When both are inside update_block_async (both
read version 1), the ORM's optimistic lock (`version_id_col`) makes the second fail with
ConcurrentUpdateError instead; its tool call is recorded with status "error".

The host half (`replay_tools`, `recoverable`) is tested without the environment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.real import get_real_system
from toki.real.adapters.letta import LettaHost, block_lines, replay_tools
from toki.real.checks import check_real
from toki.real.cli import archival_decide
from toki.real.driver import RealRun, SerialCache, finish_run, real_program, real_runs, run_plan
from toki.real.session import Session
from toki.real.witness import RealWitness, judge_to_json
from toki.sim.dpor import DPOR
from toki.sim.workload import scenario
from toki.systems.base import SimJudge

NAME = "letta-0.16.8"
RECOVERY = SimJudge(0.5, 1)
JUDGE = SimJudge(1.0, 0)  # always "replace" when the block says otherwise
MANAGER = scenario("manager")  # agent 0: Bob; agent 1: Carol (one key)


def targeted(session: Session, plan) -> RealRun:  # type: ignore[no-untyped-def]
    system = get_real_system(NAME)
    program, live = real_program(system, session, MANAGER, JUDGE)
    return finish_run(system, session, live, run_plan(program, plan), RECOVERY, JUDGE)


def block(rr: RealRun) -> tuple[str, int]:
    b = rr.observation["block"]
    return b["value"], b["version"]


def calls(rr: RealRun) -> list[tuple[int, str, str]]:
    """(agent, tool, status) of each recorded tool call, in message order."""
    return [(c["agent"], c["name"], c["status"]) for c in rr.observation["tool_calls"]]


def checks(session: Session, rr: RealRun) -> dict[str, bool]:
    system = get_real_system(NAME)
    serial = SerialCache(system, session, MANAGER, JUDGE, 0)
    return {k: v.found for k, v in check_real(system, MANAGER, rr, serial, RECOVERY).items()}


@pytest.mark.real
@pytest.mark.slow
def test_serial_replace_erases_bob_from_the_block_not_from_the_messages(letta: Session) -> None:
    rr = targeted(letta, [(0, None, None), (1, None, None)])
    assert rr.outcomes == (("core_memory_append",), ("core_memory_replace",))
    assert block(rr) == ("\nalice:manager is Carol", 3)
    assert rr.observation["agents_see"] == ["\nalice:manager is Carol"] * 2
    assert calls(rr) == [
        (0, "core_memory_append", "success"),
        (1, "core_memory_replace", "success"),
    ]
    assert rr.observation["tool_calls"][1]["args"]["old_content"] == "alice:manager is Bob"
    host = get_real_system(NAME).host
    assert host.recoverable(rr.observation, "alice:manager") == {"Bob", "Carol"}
    assert checks(letta, rr) == {"N1": False, "RD": False, "N2": False, "N3": False}


@pytest.mark.real
@pytest.mark.slow
def test_both_load_first_the_second_write_silently_replaces_the_first(letta: Session) -> None:
    rr = targeted(letta, [(0, "llm.tool", 0), (1, "llm.tool", 0), (0, None, None), (1, None, None)])
    seen = [t["detail"]["block"] for t in rr.trace if t.get("point") == "llm.tool"]
    assert seen == ["", ""]  # both loaded the empty block
    assert rr.outcomes == (("core_memory_append",), ("core_memory_append",))  # no error
    assert block(rr) == ("\nalice:manager is Carol", 3)  # Bob's line is gone
    # both appends are recorded as successes: re-applying them gives both lines (RD)
    assert calls(rr) == [(0, "core_memory_append", "success"), (1, "core_memory_append", "success")]
    assert checks(letta, rr) == {"N1": False, "RD": True, "N2": False, "N3": False}


@pytest.mark.real
@pytest.mark.slow
def test_both_inside_update_block_the_optimistic_lock_refuses_the_second(
    letta: Session,
) -> None:
    rr = targeted(
        letta,
        [
            (0, "llm.tool", 0),
            (1, "llm.tool", 0),
            (0, "sql.update", 0),
            (1, "sql.update", 0),
            (0, None, None),
            (1, None, None),
        ],
    )
    for agent in (0, 1):  # each was parked at its block update (after reading version 1)
        updates = [
            t for t in rr.trace if t.get("point") == "sql.update" and t.get("agent") == agent
        ]
        assert updates[0]["detail"] == {"table": "block"}
    assert rr.outcomes[0] == ("core_memory_append",)
    assert rr.outcomes[1][0].startswith("error: ") and "ConcurrentUpdateError" in rr.outcomes[1][0]
    assert block(rr) == ("\nalice:manager is Bob", 2)
    # the refused call is recorded with status error, and the recovery skips it
    assert calls(rr) == [(0, "core_memory_append", "success"), (1, "core_memory_append", "error")]
    assert checks(letta, rr) == {"N1": False, "RD": False, "N2": False, "N3": False}


@pytest.mark.real
@pytest.mark.slow
def test_dpor_runs_are_deterministic_within_one_worker(letta: Session) -> None:
    system = get_real_system(NAME)
    first, second = (
        [rr.record for rr in real_runs(system, letta, MANAGER, DPOR(), JUDGE, RECOVERY, budget=4)]
        for _ in range(2)
    )
    assert len(first) == 4 and len({json.dumps(r["schedule"]) for r in first}) == 4
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)


@pytest.mark.heavy
@pytest.mark.real
@pytest.mark.slow
def test_cli_explores_fifty_schedules_with_no_network(tmp_path) -> None:  # type: ignore[no-untyped-def]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toki.cli",
            "real",
            "run",
            "letta",
            "--workload",
            "manager",
            "--check",
            "--json",
            "--quiet",
            "--budget",
            "50",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: an anomaly was found
    # (a network attempt fails the run with exit 4: NetworkRefused)
    out = json.loads(done.stdout)
    assert out["schedules"] == 50 and out["system"] == NAME
    assert out["model"] == "letta" and out["checked"]["N3"] == 50


# -- the host half, without the environment ---------------------------------------------

LINE = st.sampled_from(["a:k is X", "a:k is Y", "b:k is Z"])


def append(content: str, status: str = "success") -> dict[str, object]:
    return {"name": "core_memory_append", "args": {"content": content}, "status": status}


def replace(old: str, new: str, status: str = "success") -> dict[str, object]:
    args = {"old_content": old, "new_content": new}
    return {"name": "core_memory_replace", "args": args, "status": status}


@settings(max_examples=50, derandomize=True)
@given(st.lists(LINE, max_size=6))
def test_replayed_appends_are_the_lines_in_order(lines: list[str]) -> None:
    rebuilt = replay_tools([append(x) for x in lines])
    assert rebuilt == "".join("\n" + x for x in lines)
    assert block_lines(rebuilt) == [tuple(x.split(" is ")) for x in lines]


@settings(max_examples=50, derandomize=True)
@given(st.lists(LINE, max_size=4), LINE, LINE)
def test_a_refused_or_impossible_call_changes_nothing(lines: list[str], old: str, new: str) -> None:
    base = [append(x) for x in lines]
    before = replay_tools(base)
    assert replay_tools([*base, append(new, status="error")]) == before
    assert replay_tools([*base, replace(old, new, status="error")]) == before
    if old not in before:  # the executor raises "Old content ... not found"
        assert replay_tools([*base, replace(old, new)]) == before
    else:  # str.replace: every occurrence
        assert replay_tools([*base, replace(old, new)]) == before.replace(old, new)


def test_recoverable_counts_the_block_the_tool_arguments_and_the_traces() -> None:
    observation = {
        "block": {"value": "\na:k is Carol"},
        "tool_calls": [
            append("a:k is Bob"),
            replace("a:k is Bob", "a:k is Carol"),
            append("a:k is Dave", status="error"),  # its arguments are kept all the same
        ],
        "trace_prompts": ["<value>\na:k is Eve\n</value>"],
    }
    host = LettaHost()
    assert host.recoverable(observation, "a:k") == {"Bob", "Carol", "Dave", "Eve"}
    assert host.recoverable({"block": {"value": "\na:k is Carol"}}, "a:k") == {"Carol"}
    recovered = host.recover(observation, ["a:k"], JUDGE, None)
    assert recovered == host.beliefs({"block": {"value": "\na:k is Carol"}}, ["a:k"])


# -- archival memory: an insert racing a search that feeds a decision ---------------------

ARCHIVAL = archival_decide()  # agent 0: decide; agent 1: insert Bob, insert Carol, remember Carol


def archival(session: Session, plan) -> RealRun:  # type: ignore[no-untyped-def]
    system = get_real_system(NAME)
    program, live = real_program(system, session, ARCHIVAL, JUDGE)
    return finish_run(system, session, live, run_plan(program, plan), RECOVERY, JUDGE)


def archival_checks(session: Session, rr: RealRun) -> dict[str, bool | None]:
    system = get_real_system(NAME)
    serial = SerialCache(system, session, ARCHIVAL, JUDGE, 0)
    verdicts = check_real(system, ARCHIVAL, rr, serial, RECOVERY)
    return {k: (v.found if v.ran else None) for k, v in verdicts.items()}


def decision(rr: RealRun) -> dict[str, object]:
    return next(s for s in rr.observation["steps"] if s["op"] == "decide")


@pytest.mark.real
@pytest.mark.slow
def test_serial_archival_search_sees_the_insert(letta: Session) -> None:
    rr = archival(letta, [(1, None, None), (0, None, None)])
    assert rr.observation["passages"] == ["alice:manager is Bob", "alice:manager is Carol"]
    d = decision(rr)
    assert d["found"] == ["alice:manager is Carol", "alice:manager is Bob"]  # newest first
    assert d["decided"] == "Carol" and d["tool"] == "no tool call"
    assert block(rr)[0] == "\nalice:manager is Carol"
    assert archival_checks(letta, rr) == {"N1": None, "RD": None, "N2": False, "N3": None}


# agent 1 parks before its Carol insert; agent 0 runs its search (Bob only) and parks at the
# state load of its decision; agent 1 inserts Carol and sets the block to Carol; agent 0
# loads the block (Carol) and replaces it with the Bob its search found
STALE = [(1, "sql.insert", 1), *[(0, "sql.select", 0)] * 3, (1, None, None), (0, None, None)]


@pytest.mark.real
@pytest.mark.slow
def test_a_search_that_missed_a_committed_insert_decides_stale_n2(letta: Session) -> None:
    rr = archival(letta, STALE)
    d = decision(rr)
    assert d["found"] == ["alice:manager is Bob"]  # Carol's insert was not committed yet
    assert d["block"] == "\nalice:manager is Carol"  # but it was when the decision loaded
    assert d["decided"] == "Bob" and d["tool"] == "core_memory_replace"
    assert rr.observation["passages"] == ["alice:manager is Bob", "alice:manager is Carol"]
    assert block(rr)[0] == "\nalice:manager is Bob"  # no serial order ends with Bob
    assert archival_checks(letta, rr) == {"N1": None, "RD": None, "N2": True, "N3": None}


@pytest.mark.real
@pytest.mark.slow
def test_the_stale_decision_witness_is_byte_identical_and_replays(
    letta: Session, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    system = get_real_system(NAME)
    paths = []
    for n in range(2):  # the same schedule twice, in one worker: the same witness bytes
        rr = archival(letta, STALE)
        serial = SerialCache(system, letta, ARCHIVAL, JUDGE, 0)
        v = check_real(system, ARCHIVAL, rr, serial, RECOVERY, ("N2",))["N2"]
        assert v.found
        w = RealWitness(
            NAME,
            "0.16.8",
            "N2",
            ARCHIVAL,
            rr.schedule,
            judge_to_json(JUDGE),
            judge_to_json(RECOVERY),
            strategy="targeted",
            keys=v.keys,
            expected=v.expected,
            observed=v.observed,
            details={"digest": rr.digest},
        )
        paths.append(w.save(tmp_path / f"w{n}.json"))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    done = subprocess.run(  # a fresh worker process, through the CLI
        [sys.executable, "-m", "toki.cli", "real", "replay", str(paths[0]), "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["reproduced"] is True and out["digest"] == rr.digest
    assert out["verdict"]["anomaly"] == "N2" and out["verdict"]["found"] is True


@settings(max_examples=30, derandomize=True)
@given(st.lists(LINE, max_size=4), st.lists(st.sampled_from(["a:k", "b:k", "x is y"]), max_size=3))
def test_a_programs_beliefs_are_the_blocks_keys_whatever_keys_are_asked(
    lines: list[str], keys: list[str]
) -> None:
    """A program's keys are its steps' texts: N2 compares the block's every key instead."""
    observation = {"block": {"value": "".join("\n" + x for x in lines)}, "steps": []}
    host = LettaHost()
    assert host.beliefs(observation, keys) == host.beliefs(observation, [])
    assert set(host.beliefs(observation, keys)) == {x.split(" is ")[0] for x in lines}


def test_a_crashed_programs_step_counts_as_recorded_by_what_it_wrote() -> None:
    from toki.real.program import OpStep

    host = LettaHost()
    observation = {"block": {"value": "\na:k is X"}, "passages": ["a:k is Y"], "steps": []}
    insert = OpStep("insert", (("text", "a:k is Y"),))
    assert host.recorded(observation, insert)  # type: ignore[arg-type]
    assert not host.recorded({**observation, "passages": []}, insert)  # type: ignore[arg-type]
    remember = OpStep("remember", (("text", "a:k is X"),))
    assert host.recorded(observation, remember)  # type: ignore[arg-type]
    assert not host.recorded(observation, OpStep("decide", (("query", "a:k"),)))  # type: ignore[arg-type]
    assert archival_decide().family == "letta" and LettaHost.program_checks == ("N2",)


@pytest.mark.real
@pytest.mark.slow
def test_pct_finds_the_stale_decision_and_its_witness_replays(letta: Session, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """PCT (seed 0, depth 3) reaches N2 at its 25th schedule: agent 0's search (Bob only)
    and its decision's state load (the empty block) ran before agent 1's Carol insert and
    block line; its append, computed from the empty block, ends the block with Bob."""
    from toki.check.runner import make_strategy
    from toki.real.explore import explore_real
    from toki.real.witness import replay_real

    system = get_real_system(NAME)
    judge, recovery = SimJudge(0.5, 0), SimJudge(0.5, 1)
    report = explore_real(
        system,
        ARCHIVAL,
        make_strategy("pct", 0, 3),
        judge,
        recovery,
        budget=25,
        out=tmp_path,
        session=letta,
    )
    assert report.anomalies["N2"] == 1 and report.checked["N2"] == 25
    w = RealWitness.load(report.witnesses["N2"].save(tmp_path / "n2.json"))
    assert w.observed == {"alice:manager": {"live": ["Bob"], "value": "Bob"}}
    rr, verdict = replay_real(w)
    assert verdict.found
    d = decision(rr)
    assert d["found"] == ["alice:manager is Bob"] and d["block"] == ""
    assert rr.observation["passages"] == ["alice:manager is Bob", "alice:manager is Carol"]


@pytest.mark.heavy
@pytest.mark.real
@pytest.mark.slow
def test_cli_pct_witness_is_byte_identical_twice_and_replays(tmp_path) -> None:  # type: ignore[no-untyped-def]
    paths = []
    for n in range(2):
        out = tmp_path / f"run{n}"
        done = subprocess.run(
            [
                sys.executable, "-m", "toki.cli", "real", "run", "letta",
                "--workload", "archival-decide", "--strategy", "pct", "--depth", "3",
                "--budget", "40", "--seed", "0", "--check", "--json", "--quiet",
                "--out", str(out),
            ],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr[-2000:]  # 1: an anomaly was found
        data = json.loads(done.stdout)
        assert data["anomalies"]["N2"] == 1 and data["schedules"] == 40
        paths.append(out / "letta-0.16.8-N2.json")
    assert paths[0].read_bytes() == paths[1].read_bytes()
    replay = subprocess.run(
        [sys.executable, "-m", "toki.cli", "real", "replay", str(paths[0]), "--json"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert replay.returncode == 0 and json.loads(replay.stdout)["reproduced"] is True
