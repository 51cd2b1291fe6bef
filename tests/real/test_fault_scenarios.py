"""The reproduced reports that need faults beyond a crash (toki/real/scenarios/faults/):
each explored on its affected system must show every expected anomaly, and on its fixed
system (if any) none. The steps are `add`s, run as a workload's claims (valid and recorded
four days apart in file order, as in the named `manager` scenario)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from toki.real import get_real_system
from toki.real.explore import explore_real
from toki.real.faults import parse_faults
from toki.real.restart import FAULT_ANOMALIES
from toki.sim.dpor import DPOR
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import SimJudge

from .conftest import require

FOLDER = Path(__file__).resolve().parents[2] / "toki" / "real" / "scenarios" / "faults"
FILES = sorted(FOLDER.glob("*.toml"))


def load(path: Path) -> dict[str, Any]:
    data = tomllib.loads(path.read_text())
    head, run, expect = data["scenario"], data["run"], data["expect"]
    assert head["name"] == path.stem and "/" in head["report"] and "#" in head["report"]
    assert head["reproduced"] is True and run["strategy"] == "dpor"
    assert set(expect["anomalies"]) <= set(FAULT_ANOMALIES)
    return data


def workload(data: dict[str, Any]) -> Workload:
    inboxes, n = [], 0
    for agent in data["agents"]:
        claims = []
        for step in agent["steps"]:
            assert step["op"] == "add"
            key, _, value = str(step["text"]).partition(" is ")
            assert key.split(":", 1)[0] == step["user_id"]
            claims.append(SimClaim(key, value, 1 + 4 * n, 1 + 4 * n, source=f"msg-{n + 1}"))
            n += 1
        inboxes.append(tuple(claims))
    return Workload(str(data["scenario"]["name"]), tuple(inboxes))


def test_the_fault_scenarios_are_well_formed() -> None:
    assert [p.stem for p in FILES] == [
        "mem0-4831-llm-error-swallowed",
        "mem0-7117-torn-docstore-wrong-answer",
    ]
    for path in FILES:
        data = load(path)
        parse_faults(",".join(data["run"]["faults"]))  # a valid --faults spec
        assert workload(data).claims


def explore(system: str, data: dict[str, Any]) -> Any:
    require(system)
    run = data["run"]
    return explore_real(
        get_real_system(system),
        workload(data),
        DPOR(),
        SimJudge(0.5, run["seed"]),
        SimJudge(0.5, run["seed"] + 1),
        budget=run["budget"],
        seed=run["seed"],
        faults=parse_faults(",".join(run["faults"])),
    )


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_fault_scenario_reproduces_and_its_fix_does_not(path: Path) -> None:
    data = load(path)
    report = explore(data["scenario"]["system"], data)
    for anomaly in data["expect"]["anomalies"]:
        assert report.anomalies[anomaly] > 0, (anomaly, report.to_json())
    fixed = data["scenario"].get("fixed")
    if fixed is not None:
        again = explore(fixed, data)
        assert again.exhausted
        assert all(again.anomalies[a] == 0 for a in data["expect"]["anomalies"])
