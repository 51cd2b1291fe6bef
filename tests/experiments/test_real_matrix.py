"""Real rows in the verdict matrix and the model-versus-real agreement table (issue #15).

toki's own Memory is a real system that needs no environment, so the end-to-end test runs
here without `toki real setup`; the other libraries' rows run the same code (their targeted
behaviour is tested in tests/real/)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from toki.experiments import real_matrix as rm
from toki.experiments.matrix import run_matrix

TINY = """
[experiment]
anomalies = ["N1", "RD", "N2", "N3"]
faults = ["none"]
judge_p = 0.5
alpha = 0.05
exclude_below = 0.05
power_rate = 0.05
pct_depth = 3
other_draws = 0

[systems]
include = "all"
exclude = []

[[workloads]]
name = "manager"
scenario = "manager"
strategies = ["dpor", "random", "pct"]

[budgets.small]
draws = 2
dpor = 150
dpor_crash = 150
random = 4
pct = 4

[budgets.real]
draws = 2
dpor = 80
dpor_crash = 80
random = 4
pct = 4
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "matrix.toml"
    path.write_text(TINY)
    return path


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow
def test_real_rows_stand_beside_their_model_and_regenerate_identically(
    config: Path, tmp_path: Path
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        run_matrix(config, budget="small", out=out, systems=["toki"], real=True, workers=1)
    rows = _read(first / "matrix.csv")
    assert [r["system"] for r in rows[::4]] == ["toki", "toki-memory (real)", "toki-sqlite (real)"]
    assert {r["kind"] for r in rows[4:]} == {"real"} and rows[0]["kind"] == "model"
    table = _read(first / "agreement.csv")
    assert [(r["real"], r["anomaly"]) for r in table] == [
        (s, a) for s in ("toki-memory", "toki-sqlite") for a in ("N1", "RD", "N2", "N3")
    ]
    for name in ("matrix.csv", "agreement.csv", "agreement.md"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    # the in-process store's writer lock was a no-op (RD in the first real matrix); with
    # Memory's writer lock real, both deployments agree with the model in every cell
    assert {r["agree"] for r in table} == {"yes"}, table
    assert not list((first / "witnesses").glob("toki-memory-real-*.json"))


def test_agreement_rule() -> None:
    assert rm._agree("admits", "admits") == "yes"
    assert rm._agree("excludes", "not found") == "yes"
    assert rm._agree("admits", "not found") == "no"
    assert rm._agree("excludes", "admits") == "no"
    assert rm._agree("abstains", "abstains") == "not compared"
    assert rm._agree("undecided", "admits") == "not compared"


def test_a_disagreement_without_a_resolution_is_unresolved() -> None:
    rows = [
        {
            "system": "m",
            "faults": "none",
            "anomaly": "N2",
            "verdict": "admits",
            "mode": "x",
            "rate": 0.5,
            "ci_low": 0.1,
            "ci_high": 0.9,
        },
        {
            "system": "nobody (real)",
            "faults": "none",
            "anomaly": "N2",
            "verdict": "excludes",
            "mode": "exhaustive",
            "rate": 0.0,
            "ci_low": 0.0,
            "ci_high": 0.0,
            "version": "v",
        },
    ]
    (row,) = rm.agreement(rows, [("m", "nobody")])
    assert row["agree"] == "no" and row["resolution"] == "unresolved"
    assert row["model_rate"] == "0.5000" and row["real_ci"] == "[0.0000, 0.0000]"
    assert not math.isnan(float(row["real_rate"]))


def test_a_missing_environment_is_named_with_its_setup_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TOKI_REAL_CACHE", str(tmp_path))  # nothing set up there
    ready, missing = rm.missing_real(rm.real_pairs(["graphiti", "toki"]))
    assert ready == [("toki", "toki-memory"), ("toki", "toki-sqlite")]
    assert missing == [
        "graphiti-0.31.2: no environment (create it with `toki real setup graphiti-0.31.2`)"
    ]


def test_the_committed_agreement_table_has_no_unresolved_disagreement() -> None:
    path = Path(__file__).resolve().parents[2] / "verdict_matrix" / "agreement.csv"
    if not path.exists():
        pytest.skip("verdict_matrix/agreement.csv not generated yet (toki matrix --real)")
    for r in _read(path):
        if r["agree"] == "no":
            assert r["resolution"] and r["resolution"] != "unresolved", r
            assert r["resolution"] == rm.resolution(r["real"], r["anomaly"]), r
