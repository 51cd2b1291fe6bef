"""Programs of a library's own operations and the scenario files: what they accept, what
they refuse (one clear InvalidInput each), and the corpus in the repository. No library
runs here (tests/real/test_scenarios.py runs them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toki.errors import InvalidInput
from toki.real.cli import main
from toki.real.faults import FaultPlan
from toki.real.program import OpProgram, OpStep, program_from_json
from toki.real.scenario import SCENARIOS_DIR, load_scenario, load_scenarios


def step(**kw: object) -> OpStep:
    return OpStep.from_json(kw)


def test_bindings_are_qualified_by_agent_and_survive_json() -> None:
    prog = OpProgram.build(
        "p",
        "mem0",
        [
            [
                step(op="search", query="q", user_id="u", bind="found"),
                step(op="update", memory_id="$found.1", text="k is v"),
            ],
            [
                step(op="search", query="q", user_id="u", bind="found"),
                step(op="delete", memory_id="$found"),
            ],
        ],
    )
    assert prog.inboxes[0][0].bind == "a0.found"
    assert prog.inboxes[0][1].arg("memory_id") == "$a0.found.1"
    assert prog.inboxes[1][1].arg("memory_id") == "$a1.found"
    again = program_from_json(json.loads(json.dumps(prog.to_json())))
    assert again == prog
    assert prog.scopes == ("u",)


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([{"op": "upsert", "text": "x"}], "has no operation 'upsert'"),
        ([{"op": "add", "user_id": "u"}], "missing ['text']"),
        ([{"op": "add", "text": "k is v", "colour": "red"}], "unknown arguments ['colour']"),
        ([{"op": "delete", "memory_id": "$nothing"}], "names no earlier `bind`"),
        ([], "no steps"),
    ],
)
def test_a_bad_program_is_refused_with_the_step_named(steps: list, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[").replace("]", r"\]")):
        OpProgram.build("p", "mem0", [[OpStep.from_json(s) for s in steps]])


def test_a_reference_to_another_agents_binding_is_refused() -> None:
    with pytest.raises(InvalidInput, match="names no earlier"):
        OpProgram.build(
            "p",
            "mem0",
            [[step(op="get_all", user_id="u", bind="x")], [step(op="delete", memory_id="$x")]],
        )


def test_each_family_takes_its_own_operations() -> None:
    """LangMem's manager and LangGraph's store are separate families of one worker."""
    OpProgram.build("p", "langmem", [[step(op="manage", text="k is v", user_id="u")]])
    OpProgram.build("p", "store", [[step(op="put", namespace=["a"], key="k", value="v")]])
    with pytest.raises(InvalidInput, match="store has no operation 'manage'"):
        OpProgram.build("p", "store", [[step(op="manage", text="k is v")]])
    with pytest.raises(InvalidInput, match="no operations for 'cognee'"):
        OpProgram.build("p", "cognee", [[step(op="add", text="x")]])
    with pytest.raises(InvalidInput, match="letta has no operation 'add'"):
        OpProgram.build("p", "letta", [[step(op="add", text="x")]])
    OpProgram.build("p", "letta", [[step(op="insert", text="k is v"), step(op="decide", query="k")]])


def test_a_batch_step_runs_item_by_item_in_the_serial_baseline() -> None:
    prog = OpProgram.build(
        "p", "graphiti", [[step(op="add_episode_bulk", texts=["a is 1", "b is 2"], group_id="g")]]
    )
    assert prog.inboxes[0][0].arg("texts") == ("a is 1", "b is 2")  # hashable
    assert [s.to_json() for s in prog.serial_inboxes()[0]] == [
        {"op": "add_episode", "group_id": "g", "text": "a is 1"},
        {"op": "add_episode", "group_id": "g", "text": "b is 2"},
    ]


# ---------------------------------------------------------------------------- scenario files


GOOD = """
[scenario]
name = "{name}"
report = "mem0ai/mem0#1"
title = "t"
system = "mem0-1.0.11"
reproduced = true

[run]
strategy = "dpor"
budget = 5

[[agents]]
steps = [{{ op = "add", text = "alice:city is Paris", user_id = "alice" }}]

[expect]
anomalies = ["duplicate"]
"""


def write(tmp_path: Path, text: str, name: str = "s") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(name=name))
    return path


def test_a_scenario_file_loads_with_its_defaults(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, GOOD))
    assert (sc.report, sc.system, sc.budget, sc.seed, sc.faults) == (
        "mem0ai/mem0#1",
        "mem0-1.0.11",
        5,
        0,
        FaultPlan(),
    )
    assert sc.expect == ("duplicate",) and sc.program().inboxes[0][0].op == "add"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("mem0ai/mem0#1", "mem0 issue 1"), "is not 'owner/repo#number'"),
        (('"duplicate"', '"phantom"'), "unknown anomalies"),
        (('"duplicate"', '"N2"'), "defined over claims"),
        (("reproduced = true", "reproduced = false"), "needs its `reason`"),
        (('op = "add"', 'op = "upsert"'), "has no operation"),
        (("mem0-1.0.11", "mem0-9"), "unknown real system"),
        (("[expect]", "[expect"), "cannot read"),
    ],
)
def test_a_bad_scenario_file_is_one_clear_error(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        load_scenario(write(tmp_path, GOOD.replace(*change)))


def test_the_name_must_be_the_files(tmp_path: Path) -> None:
    path = tmp_path / "other.toml"
    path.write_text(GOOD.format(name="s"))
    with pytest.raises(InvalidInput, match="not the file's stem"):
        load_scenario(path)


def test_the_corpus_lists_every_report_with_its_reference() -> None:
    corpus = load_scenarios()
    assert len(corpus) >= 12
    assert sum(s.reproduced for s in corpus) >= 8
    for s in corpus:
        assert "/" in s.report and "#" in s.report
        assert s.reproduced or s.reason
        if s.reproduced:
            assert s.expect and s.agents and s.timeout_s <= 300


def test_scenarios_json_from_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {r["name"] for r in data["scenarios"]}
    assert names == {p.stem for p in SCENARIOS_DIR.glob("*.toml")}
    assert data["reproduced"] == sum(r["reproduced"] for r in data["scenarios"])


def test_an_unknown_scenario_is_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "no-such-report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown scenario 'no-such-report'" in err[0]


def test_a_listed_report_cannot_be_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenario", "mem0-3695-platform-delete-all"]) == 2
    assert "is listed, not runnable" in capsys.readouterr().err
