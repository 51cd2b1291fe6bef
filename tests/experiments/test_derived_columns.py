"""The derived-state classes as columns of the verdict matrix (issue #31): real rows are
decided by the same rules, a check that cannot read its structure makes the cell abstain
with the check's reason, model rows abstain by one rule, and the agreement ignores them."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from toki.experiments import agreement as ag
from toki.experiments import matrix
from toki.experiments import real_matrix as rm
from toki.experiments.matrix_output import MatrixResult, render_markdown
from toki.experiments.verdicts import MODEL_DERIVED, decide_cells
from toki.real.explore import RealReport

MODEL, REAL = "mem0-1.0.11", "mem0-1.0.11"  # a registered model with a real system beside it
ROW = f"{REAL} (real)"
EXP = {
    "anomalies": ["N2"],
    "derived": ["lost-update", "scope-leak"],
    "faults": ["none"],
    "alpha": 0.05,
    "power_rate": 0.05,
}


def _counts(found: int, checked: int, undecided: int = 0) -> dict[str, int]:
    return {"found": found, "checked": checked, "undecided": undecided}


def _record(system: str, counts: dict[str, dict[str, int]], **extra: Any) -> dict[str, Any]:
    return {
        "index": 0,
        "system": system,
        "fault": "none",
        "workload": "manager",
        "dpor": False,
        "outside_found": dict.fromkeys(counts, 0),
        "draws": [
            {
                "seed": 0,
                "mode": "sampled",
                "recovery_judge_calls": 0,
                "judged_runs": 0,
                "counts": counts,
            }
        ],
        "witnesses": {},
        **extra,
    }


def _real_record() -> dict[str, Any]:
    counts = {
        "N2": _counts(0, 8),
        "lost-update": _counts(3, 8),
        "scope-leak": _counts(0, 0, undecided=8),
    }
    witness = {"schedule": [0, 1, 0], "anomaly": "lost-update"}
    return _record(
        ROW,
        counts,
        real_system=REAL,
        model=MODEL,
        witnesses={"lost-update": witness},
        abstains={"scope-leak": "the adapter cannot read steps"},
    )


def test_a_real_derived_admits_has_its_witness_and_an_abstaining_check_abstains(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    replayed: list[Path] = []

    def verify(data: Any, path: Path) -> bool:
        replayed.append(path)
        return True

    monkeypatch.setattr(rm, "_verify_real", verify)
    cells = rm.real_cells({"experiment": EXP}, [_real_record()], tmp_path)
    rows = {r["anomaly"]: r for r in decide_cells(cells, EXP)}
    assert list(rows) == ["N2", "lost-update", "scope-leak"]  # matrix.toml's order
    lost = rows["lost-update"]
    assert lost["verdict"] == "admits", lost
    assert lost["witness"] == "witnesses/mem0-1.0.11-real-lost-update.json"
    assert replayed == [tmp_path / lost["witness"]]
    assert lost["rate"] == pytest.approx(3 / 8)
    leak = rows["scope-leak"]
    assert leak["verdict"] == "abstains" and leak["witness"] == ""
    assert "the adapter cannot read steps" in leak["reason"]
    assert rows["N2"]["verdict"] == "not found"


def test_a_witness_that_does_not_replay_leaves_the_derived_cell_undecided(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(rm, "_verify_real", lambda data, path: False)
    cells = rm.real_cells({"experiment": EXP}, [_real_record()], tmp_path)
    rows = {r["anomaly"]: r for r in decide_cells(cells, EXP)}
    assert rows["lost-update"]["verdict"] == "undecided"


def _report(**counters: dict[str, int]) -> RealReport:
    r = RealReport("s", "v", "lib", "w", "random", 1, 0, 0)
    for name, c in counters.items():
        getattr(r, name).update(Counter(c))
    r.abstain_reasons.update({a: f"cannot read {a}" for a in counters.get("abstained", {})})
    return r


def test_a_task_abstains_only_when_every_run_of_every_exploration_abstained() -> None:
    every = _report(undecided={"a": 4, "b": 4, "c": 4}, abstained={"a": 4, "b": 2, "c": 4})
    other = _report(checked={"c": 1}, undecided={"a": 2}, abstained={"a": 2})
    got = rm._abstains([every, other], ["a", "b", "c", "d"])
    # b: two runs undecided for another cause; c: one run decided; d: never abstained
    assert got == {"a": "cannot read a"}


def test_a_real_cell_abstains_only_when_every_workload_abstained() -> None:
    one, two = _real_record(), {**_real_record(), "abstains": {}}
    assert rm.check_abstains([one], "scope-leak").endswith("the adapter cannot read steps")
    assert rm.check_abstains([one, two], "scope-leak") == ""
    assert rm.check_abstains([one], "lost-update") == ""


def test_model_rows_abstain_on_every_derived_class_by_one_rule() -> None:
    counts = {"N2": _counts(0, 8)}
    cells = matrix.cells({"experiment": EXP}, [_record(MODEL, counts)], None)
    rows = decide_cells(cells, EXP)
    assert [(r["anomaly"], r["verdict"]) for r in rows] == [
        ("N2", "not found"),
        ("lost-update", "abstains"),
        ("scope-leak", "abstains"),
    ]
    assert all(r["reason"].endswith(MODEL_DERIVED) for r in rows[1:])
    assert all(math.isnan(r["rate"]) and r["runs"] == 0 for r in rows[1:])


def test_the_agreement_compares_no_derived_class() -> None:
    """The model cells abstain there: a derived real cell enters no comparison and no count."""
    model_rec = _record(MODEL, {"N2": _counts(0, 8)})
    real_rec = _real_record()
    rows = [
        {"system": MODEL, "faults": "none", "anomaly": "N2", "verdict": "not found"},
        {"system": MODEL, "faults": "none", "anomaly": "lost-update", "verdict": "abstains"},
        {"system": ROW, "faults": "none", "anomaly": "N2", "verdict": "not found"},
        {"system": ROW, "faults": "none", "anomaly": "lost-update", "verdict": "admits"},
    ]
    rows = [{"mode": "sampled", "rate": math.nan, "witness": "", "version": "v", **r} for r in rows]
    config = {"experiment": EXP, "agreement": {"held_out": []}}
    table = ag.agreement(rows, [model_rec, real_rec], [(MODEL, REAL)], config)
    assert [r["anomaly"] for r in table] == ["N2"]
    third = ag.counts(table)["third-party"]
    assert (third["distinct"], third["not_compared"], third["agree_absent"]) == (1, 0, 1)


def test_matrix_md_has_the_real_rows_derived_cells_in_a_section_of_their_own() -> None:
    def row(system: str, anomaly: str, verdict: str, kind: str) -> dict[str, Any]:
        return {
            "system": system,
            "faults": "none",
            "anomaly": anomaly,
            "verdict": verdict,
            "mode": "",
            "rate": math.nan,
            "ci_low": math.nan,
            "ci_high": math.nan,
            "draw_min": math.nan,
            "draw_max": math.nan,
            "draws": 0,
            "runs": 0,
            "undecided": 0,
            "power": math.nan,
            "witness": "",
            "reason": "r",
            "serial_other_draws": None,
            "workloads": 0,
            "exhaustive_workloads": 0,
            "kind": kind,
        }

    rows = [
        row(MODEL, "N2", "abstains", "model"),
        row(MODEL, "lost-update", "abstains", "model"),
        row(ROW, "N2", "abstains", "real"),
        row(ROW, "lost-update", "undecided", "real"),
    ]
    text = render_markdown(MatrixResult(rows, [], config={"experiment": EXP}))
    grid, derived = text.split("## Derived state (real rows)")
    assert "lost-update" not in grid.split("## Cells")[0]  # the N1-N3 grids keep their columns
    assert f"| {ROW} | undecided |" in derived
    assert f"| {MODEL} | none | lost-update |" not in text  # by rule, stated once
    assert MODEL_DERIVED in derived


def test_a_real_exploration_records_the_checks_abstention() -> None:
    """toki's own Memory reports no derived state: each class's check abstains on every
    run (undecided, with the check's reason), while N1-N3 are decided."""
    from toki.check.runner import make_strategy
    from toki.real.checks import ALL_CHECKS
    from toki.real.explore import explore_real
    from toki.real.systems import get_real_system
    from toki.sim.workload import scenario
    from toki.systems.base import SimJudge

    seed = 0
    print(f"seed {seed}")
    report = explore_real(
        get_real_system("toki-memory"),
        scenario("manager"),
        make_strategy("random", seed, 3),
        SimJudge(0.5, seed),
        SimJudge(0.5, seed + 1),
        budget=3,
        anomalies=ALL_CHECKS,
    )
    assert report.to_json()["checked"] == {
        **dict.fromkeys(("N1", "RD", "N2", "N3"), 3),
        **dict.fromkeys(ALL_CHECKS[4:], 0),
    }
    reasons = rm._abstains([report], ALL_CHECKS)
    assert set(reasons) == set(ALL_CHECKS[4:])
    assert reasons["lost-update"] == "the adapter reports no derived state"
