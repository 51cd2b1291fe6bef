"""The library's own write path under DPOR (`toki-lib-<op>`): its isolation preconditions
exercised at the declared level and one below, and the ablation without the head rows.

Seeds: the live judge is SimJudge(0.5, 0), the recovery judge SimJudge(0.5, 1).
"""

from __future__ import annotations

import json

import pytest

from benchmarks.bench_toki_lib import BEGIN, BELOW, END, cell, render
from benchmarks.common import RESULTS
from toki.algebra import OPERATORS
from toki.check.runner import explore_system
from toki.cli import main
from toki.isolation import Isolation
from toki.sim.dpor import DPOR
from toki.sim.workload import scenario
from toki.systems.base import SimJudge
from toki.systems.registry import LIBRARY, get_system

JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
ANOMALIES = ("N1", "RD", "N2", "N3")
BUDGET = 3000


def _explore(name: str, workload: str, level: Isolation, crash_budget: int = 0) -> dict:  # type: ignore[type-arg]
    report = explore_system(
        get_system(name),
        scenario(workload),
        DPOR(),
        level=level,
        budget=BUDGET,
        judge=JUDGE,
        recovery=RECOVERY,
        crash_budget=crash_budget,
    )
    return report.to_json()


@pytest.mark.parametrize("op", sorted(OPERATORS))
@pytest.mark.parametrize("workload", ["manager", "lisbon-berlin", "duplicate-delivery"])
def test_at_its_declared_level_dpor_finds_no_anomaly(op: str, workload: str) -> None:
    report = _explore(f"toki-lib-{op.lower()}", workload, OPERATORS[op].requires)
    assert report["exhausted"], report  # every class within the budget
    assert report["schedules"] > 1
    assert all(report["anomalies"].get(a, 0) == 0 for a in ANOMALIES), report
    assert not report["undecided"]


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_one_level_below_the_head_rows_still_serialise_each_key(op: str) -> None:
    """The finding (docs/exploration.md): every write moves its key's head row with one
    conditional update and writes the key's projection row, so two writes of one key always
    conflict; the z3 counterexamples one level below need writes of different rows."""
    below = BELOW[OPERATORS[op].requires]
    report = _explore(f"toki-lib-{op.lower()}", "manager", below)
    assert report["exhausted"] and report["isolation"] == below.value
    assert all(report["anomalies"].get(a, 0) == 0 for a in ANOMALIES), report


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_without_the_head_update_read_committed_loses_a_write(op: str) -> None:
    """The proofs' lost update (a read-then-write at READ COMMITTED): both writers read the
    empty key and append the same batch row; the second overwrites the first."""
    report = _explore(f"toki-lib-{op.lower()}-nohead", "manager", Isolation.READ_COMMITTED)
    assert report["exhausted"]
    assert report["anomalies"]["N2"] > 0 and report["anomalies"]["N3"] > 0, report


def test_without_the_head_update_snapshot_isolation_still_protects_the_key() -> None:
    report = _explore("toki-lib-ewm-nohead", "manager", Isolation.SNAPSHOT)
    assert report["exhausted"]
    assert all(report["anomalies"].get(a, 0) == 0 for a in ANOMALIES), report


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_a_crash_inside_a_write_leaves_no_anomaly(op: str) -> None:
    """One crash per agent, between any two steps (the engine rolls the transaction back)."""
    report = _explore(f"toki-lib-{op.lower()}", "manager", OPERATORS[op].requires, crash_budget=1)
    assert report["exhausted"] and report["crash_budget"] == 1
    assert all(report["anomalies"].get(a, 0) == 0 for a in ANOMALIES), report


def test_the_library_rows_run_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explore", "--system", "toki-lib-lww-nohead", "--workload", "manager"]
    # --check exits 1 when it finds an anomaly (docs/cli.md): without head rows it does
    assert main([*argv, "--isolation", "read_committed", "--check", "--json", "--quiet"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["system"] == "toki-lib-lww-nohead" and out["anomalies"]["N2"] > 0


@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_rows_describe_what_they_run(name: str) -> None:
    info = get_system(name).describe()
    assert info["name"] == name or name == "toki-lib"
    assert any("write_steps" in s for s in info["sources"])


# ------------------------------------------------------------- the results file and docs


def _results() -> dict:  # type: ignore[type-arg]
    return json.loads((RESULTS / "toki_lib.json").read_text())


def test_results_file_rows_are_what_the_code_computes() -> None:
    data = _results()
    rows = {(r["system"], r["workload"], r["level"]): r for r in data["rows"]}
    for key in [
        ("toki-lib-ewm", "manager", "snapshot"),
        ("toki-lib-lww-nohead", "lisbon-berlin", "read_committed"),
        ("toki-lib-rule", "duplicate-delivery", "serializable"),
    ]:
        fresh = cell(key[0], key[1], Isolation(key[2]), data["budget"])
        stored = rows[key]
        for field in ("schedules", "exhausted", "anomalies", "undecided"):
            assert fresh[field] == stored[field], (key, field)


def test_docs_block_is_generated_from_the_results_file() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "exploration.md").read_text()
    block = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert block == render(_results()), "stale: python -m benchmarks.bench_toki_lib --docs ..."
