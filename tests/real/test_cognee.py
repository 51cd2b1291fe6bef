"""Cognee 1.6.5, the real code, on its local stores (SQLite, Ladybug, LanceDB).

Two agents each `add` a text "alice:manager is <value>" to one dataset and `cognify` it; the
stub LLM extracts the edge alice -manager-> <value>. Cognify in 1.6.5 resolves nothing: both
edges stay, whatever the order, so a reader is served a conflict and nothing is erased.

The fast tests check the host half (no environment needed); the `real` ones need `toki real
setup cognee`; the exploration is `slow`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from toki.experiments.real_matrix import real_pairs
from toki.real import get_real_system
from toki.real.adapters.cognee import CogneeHost, extraction
from toki.real.checks import check_real
from toki.real.driver import SerialCache, finish_run, real_program, real_runs, run_plan
from toki.real.gate import GatePoint
from toki.real.session import Session
from toki.real.systems import ENVIRONMENTS, SYSTEMS
from toki.sim.dpor import DPOR
from toki.sim.explore import Stats
from toki.sim.workload import scenario
from toki.systems.base import SimJudge
from toki.systems.registry import get_system

NAME = "cognee-1.6.5"
JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
MANAGER = scenario("manager")  # agent 0: Bob; agent 1: Carol (one key)


def test_cognee_stands_beside_its_model_row() -> None:
    """An adapter drives it (so `setup all` makes it) and its row stands beside the model
    row `cognee` in `toki matrix --real` (docs/real.md, Cognee)."""
    system = get_real_system("cognee")
    assert system.name == NAME and system.model == "cognee"
    assert NAME in SYSTEMS and NAME not in ENVIRONMENTS
    assert get_system("cognee").name == "cognee"
    assert real_pairs(["cognee"]) == [("cognee", NAME)]


def test_the_stub_extracts_one_edge_per_claim() -> None:
    point = GatePoint.from_json(
        {
            "agent": 0,
            "claim": 0,
            "kind": "llm",
            "name": "llm.KnowledgeGraph",
            "detail": {"model": "KnowledgeGraph", "claim": {"key": "alice:city", "value": "Rome"}},
            "reads": [],
            "writes": [],
        }
    )
    got = CogneeHost().answer(point, JUDGE)
    assert got == extraction("alice:city", "Rome")
    assert [n["name"] for n in got["nodes"]] == ["alice", "Rome"]
    assert got["edges"][0]["relationship_name"] == "city"
    summary = GatePoint.from_json({**point.to_json(), "name": "llm.SummarizedContent"})
    assert CogneeHost().answer(summary, JUDGE) is None  # the worker answers with the text


def test_readers_see_every_edge_of_a_key() -> None:
    host = CogneeHost()
    obs = {
        "edges": [
            {"key": "alice:manager", "value": "Bob"},
            {"key": "alice:manager", "value": "Carol"},
        ],
        "data": [{"text": "alice:manager is Carol"}, {"text": "alice:manager is Bob"}],
    }
    beliefs = host.beliefs(obs, ["alice:manager", "bob:city"])
    assert sorted(beliefs["alice:manager"]["live"]) == ["Bob", "Carol"]
    assert beliefs["bob:city"]["live"] == []
    assert host.recoverable(obs, "alice:manager") == {"Bob", "Carol"}
    order = host.replay_inputs(obs, MANAGER)
    assert order is not None and [c.value for c in order] == ["Carol", "Bob"]  # cognee's order
    assert host.config(MANAGER) == {"values": ["Bob", "Carol"]}


@pytest.mark.real
@pytest.mark.slow
def test_serially_both_edges_stay_and_nothing_is_anomalous(cognee: Session) -> None:
    system = get_real_system(NAME)
    program, live = real_program(system, cognee, MANAGER, JUDGE)
    rr = finish_run(
        system,
        cognee,
        live,
        run_plan(program, [(0, None, None), (1, None, None)]),
        RECOVERY,
        JUDGE,
    )
    assert rr.outcomes == (("cognified",), ("cognified",))
    assert rr.observation["edges"] == [
        {"key": "alice:manager", "value": "Bob"},
        {"key": "alice:manager", "value": "Carol"},
    ]
    points = {t.get("point") for t in rr.trace}
    assert {"llm.KnowledgeGraph", "graph.add_edges", "lock.acquire", "sql.select"} <= points
    found = check_real(
        system, MANAGER, rr, SerialCache(system, cognee, MANAGER, JUDGE, 0), RECOVERY
    )
    assert not any(v.found for v in found.values()), {k: v.details for k, v in found.items()}


@pytest.mark.real
@pytest.mark.slow
def test_agent_1_waits_for_the_dataset_lock_agent_0_holds_in_its_cognify(cognee: Session) -> None:
    """Every add/cognify pipeline run holds its dataset's lock across its gate points. Agent
    0 parked at its LLM call inside cognify, agent 1's add waits for that lock at a modelled
    lock point (disabled by the scheduler), instead of awaiting an asyncio.Lock of another
    event loop, which hung the worker (GateTimeout)."""
    system = get_real_system(NAME)
    program, live = real_program(system, cognee, MANAGER, JUDGE)
    plan = [(0, "llm.KnowledgeGraph", 0), (1, None, None), (0, None, None)]
    rr = finish_run(system, cognee, live, run_plan(program, plan), RECOVERY, JUDGE)
    assert rr.outcomes == (("cognified",), ("cognified",))
    points = [(t.get("agent"), t.get("point")) for t in rr.trace]
    parked = points.index((0, "llm.KnowledgeGraph"))
    released = points.index((0, "lock.release"), parked)  # agent 0's cognify let go
    # agent 1 ran (the plan switched to it) but took no lock until agent 0 let go
    assert (1, "lock.acquire") not in points[parked:released]
    assert (1, "lock.acquire") in points[released:]
    assert rr.observation["edges"] == [
        {"key": "alice:manager", "value": "Bob"},
        {"key": "alice:manager", "value": "Carol"},
    ]


@pytest.mark.real
@pytest.mark.slow
def test_dpor_runs_are_deterministic(cognee: Session) -> None:
    """Two explorations in one worker give the same records, and DPOR sees no step whose
    footprint drifted from the one it planned with (one schedule runs one way)."""
    system = get_real_system(NAME)
    stats = [Stats(), Stats()]
    first, second = (
        [
            rr.record
            for rr in real_runs(
                system, cognee, MANAGER, DPOR(), JUDGE, RECOVERY, budget=4, stats=stats[k]
            )
        ]
        for k in range(2)
    )
    assert len({json.dumps(r["schedule"]) for r in first}) == 4
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    assert not any("drift" in note or "disabled" in note for s in stats for note in s.notes)


@pytest.mark.heavy
@pytest.mark.real
@pytest.mark.slow
def test_cli_explores_fifty_schedules_with_no_network_twice_alike(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue #33's target: 50 schedules of the default workload (seed 0), finished (a
    network attempt would fail the run), and a second run gives the same summary."""
    outs = []
    for k in range(2):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "toki.cli",
                "real",
                "run",
                "cognee",
                "--check",
                "--json",
                "--quiet",
                "--budget",
                "50",
                "--seed",
                "0",
                "--out",
                str(tmp_path / str(k)),
            ],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: an anomaly was found
        out = json.loads(done.stdout)
        assert out["schedules"] == 50 and out["system"] == NAME
        assert not out["strategy_notes"], out["strategy_notes"]  # no footprint drift
        outs.append({k: v for k, v in out.items() if k not in ("seconds", "schedules_per_s", "out")})
    assert outs[0] == outs[1]
    for name in sorted(p.name for p in (tmp_path / "0").iterdir()):
        assert (tmp_path / "0" / name).read_bytes() == (tmp_path / "1" / name).read_bytes()
