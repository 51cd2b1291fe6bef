"""Real rows in the verdict matrix and the model-versus-real agreement table (issue #15).

toki's own Memory is a real system that needs no environment, so the end-to-end test runs
here without `toki real setup`; the other libraries' rows run the same code (their targeted
behaviour is tested in tests/real/)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from toki.experiments import agreement as ag
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
    assert ag.agree("admits", "admits") == "yes"
    assert ag.agree("excludes", "not found") == "yes"
    assert ag.agree("admits", "not found") == "no"
    assert ag.agree("excludes", "admits") == "no"
    assert ag.agree("abstains", "abstains") == "not compared"
    assert ag.agree("undecided", "admits") == "not compared"


def _record(system: str, workload: str, found: list[int], checked: list[int]) -> dict:  # type: ignore[type-arg]
    return {
        "system": system,
        "fault": "none",
        "workload": workload,
        "dpor": False,
        "outside_found": {"N2": 0},
        "draws": [
            {
                "seed": i,
                "mode": "sampled",
                "recovery_judge_calls": 0,
                "judged_runs": c,
                "counts": {"N2": {"found": f, "checked": c, "undecided": 0}},
            }
            for i, (f, c) in enumerate(zip(found, checked, strict=True))
        ],
    }


def _row(system: str, verdict: str, **kw: object) -> dict:  # type: ignore[type-arg]
    return {
        "system": system,
        "faults": "none",
        "anomaly": "N2",
        "verdict": verdict,
        "mode": "sampled",
        "rate": math.nan,
        "witness": "w.json" if verdict == "admits" else "",
        "version": "v",
        **kw,
    }


CONFIG = {
    "experiment": {"anomalies": ["N2"], "faults": ["none"], "alpha": 0.05, "power_rate": 0.05},
    "agreement": {"held_out": ["held"]},
}


def test_agreement_is_on_the_real_rows_seeds_and_again_on_held_out_workloads() -> None:
    """The model ran draws 0-3, the real row 0-1: the model cell is re-decided on 0-1 (where
    it found nothing, though draw 3 did), and on the held-out workload alone."""
    model = "mem0-1.0.11"  # a registered model with a real system beside it
    records = [
        _record(model, "tuned", [0, 0, 0, 5], [10, 10, 10, 10]),
        _record(model, "held", [0, 0, 0, 0], [10, 10, 10, 10]),
        _record("mem0-1.0.11 (real)", "tuned", [2, 1], [8, 8]),
        _record("mem0-1.0.11 (real)", "held", [0, 0], [8, 8]),
    ]
    rows = [_row(model, "admits", rate=0.03), _row("mem0-1.0.11 (real)", "admits", rate=0.1)]
    (row,) = ag.agreement(rows, records, [(model, "mem0-1.0.11")], CONFIG)
    assert (row["seeds"], row["model_verdict"], row["real_verdict"]) == (
        "0-1",
        "not found",
        "admits",
    )
    assert row["agree"] == "no" and row["resolution"] == "unresolved"  # N2 has none
    assert (row["held_out_model"], row["held_out_real"], row["held_out_agree"]) == (
        "not found",
        "not found",
        "yes",
    )
    assert row["comparison"] == "third-party" and len(row["model_hash"]) == 12
    assert row["fitted"] in ("yes", "no", "unknown")


def test_a_disagreement_without_a_resolution_is_unresolved() -> None:
    records = [
        _record("letta", "w", [3, 1], [10, 10]),
        _record("nobody (real)", "w", [0, 0], [10, 10]),
    ]
    rows = [_row("letta", "admits"), _row("nobody (real)", "not found")]
    table = ag.agreement(rows, records, [("letta", "nobody")], CONFIG)
    assert [(r["agree"], r["resolution"]) for r in table] == [("no", "unresolved")]


def test_the_ratio_of_rates_resamples_draws_in_pairs() -> None:
    ratio = ag.rate_ratio({0: 0.1, 1: 0.2, 2: 0.3}, {0: 0.2, 1: 0.4, 2: 0.6})
    assert ratio is not None and ratio[0] == 2.0 and ratio[1] == ratio[2] == 2.0
    assert ag.rate_ratio({0: 0.0}, {0: 0.5}) is None  # no ratio to a zero model rate
    wide = ag.rate_ratio({0: 0.1, 1: 0.3}, {0: 0.3, 1: 0.1})
    assert wide is not None and wide[1] < 1.0 < wide[2]


def test_identical_comparisons_count_once_and_self_comparisons_apart() -> None:
    base = {
        "comparison": "third-party",
        "fitted": "no",
        "agree": "yes",
        "model_verdict": "admits",
        "held_out_agree": "yes",
        "duplicate_of": "",
    }
    table = [
        base,
        {**base, "duplicate_of": "first"},
        {**base, "comparison": "self", "model_verdict": "not found"},
    ]
    c = ag.counts(table)
    assert c["third-party"]["distinct"] == 1 and c["third-party"]["duplicates"] == 1
    assert c["self"]["agree_absent"] == 1 and c["third-party"]["agree_admits"] == 1


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
            assert r["resolution"] == ag.resolution(r["real"], r["anomaly"]), r


def test_the_committed_agreement_table_rebuilds_from_the_matrix_files(tmp_path: Path) -> None:
    """agreement.csv/.md are a function of matrix.csv and workloads.csv (and the models'
    sources): rebuilt from copies of those, they come out byte for byte the same."""
    import shutil

    folder = Path(__file__).resolve().parents[2] / "verdict_matrix"
    if not (folder / "workloads.csv").exists():
        pytest.skip("verdict_matrix/workloads.csv not generated yet (toki matrix --real)")
    for name in ("matrix.csv", "workloads.csv", "matrix.toml"):
        shutil.copy(folder / name, tmp_path / name)
    assert ag.main([str(tmp_path), "--config", str(folder / "matrix.toml")]) == 0
    for name in ("agreement.csv", "agreement.md"):
        assert (tmp_path / name).read_text() == (folder / name).read_text(), name
    table = _read(folder / "agreement.csv")
    assert {r["comparison"] for r in table} == {"self", "third-party"}
    assert all(len(r["model_hash"]) == 12 and r["fitted"] in ("yes", "no") for r in table)
    mem0_rd = [r for r in table if r["real"] == "mem0-1.0.11" and r["anomaly"] == "RD"]
    assert mem0_rd and all(r["agree"] == "yes" or r["fitted"] == "yes" for r in mem0_rd)


@pytest.mark.parametrize(
    ("folder_name", "budget", "model", "real"),
    [
        ("letta-small", "lettasmall", "letta", "letta-0.16.8"),
        ("cognee-small", "cogneesmall", "cognee", "cognee-1.6.5"),
    ],
)
def test_a_row_run_alone_stands_beside_its_model_and_its_agreement_rebuilds(
    tmp_path: Path, folder_name: str, budget: str, model: str, real: str
) -> None:
    """verdict_matrix/letta-small and cognee-small (issue #33): a real row run alone at a small
    budget. Its agreement table is a function of its matrix.csv and workloads.csv (rebuilt byte
    for byte), every N1-N3 cell of the real row is compared with the model's, every
    disagreement carries its resolution, and every "admits" names a witness file that is
    there."""
    import shutil

    folder = Path(__file__).resolve().parents[2] / "verdict_matrix" / folder_name
    for name in ("matrix.csv", "workloads.csv", "matrix.toml"):
        shutil.copy(folder / name, tmp_path / name)
    assert ag.main([str(tmp_path), "--real-budget", budget]) == 0
    for name in ("agreement.csv", "agreement.md"):
        assert (tmp_path / name).read_text() == (folder / name).read_text(), name
    table = _read(folder / "agreement.csv")
    assert {(r["model"], r["real"]) for r in table} == {(model, real)}
    assert {(r["faults"], r["anomaly"]) for r in table} == {
        (f, a) for f in ("none", "crash") for a in ("N1", "RD", "N2", "N3")
    }
    for r in table:
        if r["agree"] == "no":
            assert r["resolution"] == ag.resolution(r["real"], r["anomaly"]) != "", r
    rows = [r for r in _read(folder / "matrix.csv") if r["system"] == f"{real} (real)"]
    admits = [r for r in rows if r["verdict"] == "admits"]
    assert admits and all((folder / r["witness"]).is_file() for r in admits)
