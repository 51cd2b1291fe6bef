"""Scenarios with faults beyond a crash (`[run] faults`, issue #32): the file format, with no
library run (fast), and the two reproduced reports of the corpus that need one, run through
`run_scenario` like every other (real, slow): mem0ai/mem0#4831 (an injected failure inside
`add()` swallowed: silent-failure on mem0 1.0.11, none in 2.2.1's whole space),
mem0ai/mem0#7117 (a torn docstore: after the restart a search for Bob answers Carol) and
langchain-ai/langgraph#8039 (a checkpoint durable before the writes it was made from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from toki.errors import InvalidInput
from toki.real.faults import FaultPlan
from toki.real.restart import FAULT_ANOMALIES
from toki.real.scenario import get_scenario, load_scenario, load_scenarios, run_scenario
from toki.real.witness import RealWitness, replay_real

from .conftest import require

FILE = """[scenario]
name = "{name}"
report = "mem0ai/mem0#1"
title = "t"
system = "mem0-1.0.11"
reproduced = true

[run]
faults = "raise:2:locked,torn:1"

[[agents]]
steps = [{{ op = "add", text = "alice:city is Paris", user_id = "alice" }}]

[expect]
anomalies = ["silent-failure", "wrong-answer"]
"""
FAULTED = (
    "mem0-4831-llm-error-swallowed",
    "mem0-7117-torn-docstore-wrong-answer",
    "langgraph-8039-put-writes-order",
)


def write(tmp_path: Path, text: str, name: str = "s") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(name=name))
    return path


def test_faults_is_the_spec_the_cli_takes(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, FILE))
    assert sc.faults == FaultPlan(raises=2, error="locked", torn=1)
    assert sc.describe()["run"]["faults"] == "raise:2:locked,torn:1"
    assert sc.expect == ("silent-failure", "wrong-answer")


def test_no_faults_is_the_empty_plan(tmp_path: Path) -> None:
    text = FILE.replace('faults = "raise:2:locked,torn:1"', "").replace(
        '"silent-failure", "wrong-answer"', '"duplicate"'
    )
    assert load_scenario(write(tmp_path, text)).faults == FaultPlan()


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ('"fire:1"', r"s\.toml: \[run\] faults: 'fire:1' is not a fault of real runs \(use crash"),
        ('"torn:2"', "at most one process death"),
        ('"restart:1,torn:1"', "two kinds of one death"),
        ('"raise:1:boom"', "unknown error kind 'boom'"),
        ('["raise:1"]', r"faults = \['raise:1'\] is not a string"),
    ],
)
def test_a_bad_faults_spec_names_the_file_and_field(
    tmp_path: Path, faults: str, message: str
) -> None:
    text = FILE.replace('"raise:2:locked,torn:1"', faults)
    with pytest.raises(InvalidInput, match=message) as err:
        load_scenario(write(tmp_path, text))
    assert str(err.value).startswith("scenario: s.toml: ")


def test_an_unknown_expected_check_lists_the_known_ones(tmp_path: Path) -> None:
    text = FILE.replace('"wrong-answer"', '"wrong-anwser"')
    with pytest.raises(InvalidInput, match=r"unknown anomalies \['wrong-anwser'\]") as err:
        load_scenario(write(tmp_path, text))
    for known in ("duplicate", "scope-leak", *FAULT_ANOMALIES):
        assert known in str(err.value)


@pytest.mark.parametrize(
    ("faults", "message"),
    [
        ('"torn:1"', "silent-failure needs an injected failure"),
        ('"raise:1"', r"\['wrong-answer'\] need a process death"),
        ('""', "silent-failure needs an injected failure"),
    ],
)
def test_a_fault_check_needs_its_fault(tmp_path: Path, faults: str, message: str) -> None:
    text = FILE.replace('"raise:2:locked,torn:1"', faults)
    with pytest.raises(InvalidInput, match=message):
        load_scenario(write(tmp_path, text))


def test_the_fault_reports_are_in_the_corpus_with_their_faults() -> None:
    corpus = {s.name: s for s in load_scenarios()}
    swallowed, torn, _ = (corpus[n] for n in FAULTED)
    assert (swallowed.report, swallowed.fixed, swallowed.faults) == (
        "mem0ai/mem0#4831",
        "mem0-2.2.1",
        FaultPlan(raises=1),
    )
    assert (torn.report, torn.fixed, torn.faults) == ("mem0ai/mem0#7117", None, FaultPlan(torn=1))
    assert not (Path(swallowed.path).parent / "faults").exists()


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.parametrize("name", FAULTED)
def test_each_fault_report_reproduces_replays_and_its_fix_is_clean(
    name: str, tmp_path: Path
) -> None:
    sc = get_scenario(name)
    require(sc.system)
    result = run_scenario(sc, out=tmp_path)
    assert result["reproduced"] and not result["timed_out"], result
    assert set(result["witnesses"]) == set(sc.expect)
    for anomaly, path in result["witnesses"].items():
        w = RealWitness.load(path)
        assert w.faults == sc.faults.spec()
        faults = ("raise:", "torn", "restart")
        assert any(str(c).startswith(faults) for c in w.schedule)  # the fault's choice
        rr, verdict = replay_real(w)
        assert verdict.found and rr.digest == w.details["digest"] == result["digest"], anomaly
    if sc.fixed is not None:
        require(sc.fixed)
        fixed = run_scenario(sc, fixed=True, out=tmp_path / "fixed")
        assert fixed["clean"] and fixed["exhausted"] and fixed["witnesses"] == {}, fixed
