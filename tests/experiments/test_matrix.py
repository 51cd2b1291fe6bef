"""The verdict matrix: rules on synthetic cells, a small-budget run through the CLI (columns,
witnesses that replay), and the same rows for the same seeds on any executor."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from toki.cli import main
from toki.errors import InvalidInput
from toki.experiments.executors import run_tasks
from toki.experiments.matrix import (
    COLUMNS,
    CellData,
    decide,
    detection_power,
    load_config,
    plan,
    run_matrix,
)
from toki.experiments.stats import wilson_interval
from toki.systems.registry import SYSTEMS

CONFIG = Path(__file__).resolve().parents[2] / "verdict_matrix" / "matrix.toml"
# a few systems for the repeat runs: the unlogged TOKI ablation, an operator at its
# precondition, and a model that declares an abstention (those present in the registry)
SUBSET = [s for s in SYSTEMS if s in ("toki-ewm-nolog", "toki-lww", "mirix")]


# ------------------------------------------------------------- rules on synthetic cells


def _cell(**kw: Any) -> CellData:
    return CellData("sys", "N1", **kw)


def test_admits_needs_a_witness_that_replays() -> None:
    hits = {"dpor_tasks": 2, "dpor_exhausted": 2, "exhaustive_runs": 10, "exhaustive_anomalous": 3}
    assert decide(_cell(**hits))["verdict"] == "abstains"  # counted, but no witness
    unreplayed = decide(_cell(**hits, witness="witnesses/sys-N1.json"))
    assert unreplayed["verdict"] == "abstains" and unreplayed["witness"] == ""
    row = decide(_cell(**hits, witness="witnesses/sys-N1.json", witness_replays=True))
    assert row["verdict"] == "admits" and row["witness"] == "witnesses/sys-N1.json"
    assert row["rate"] == pytest.approx(0.3) and row["mode"] == "exhaustive"
    # an anomaly found only by a DPOR task cut off by its budget still needs the witness
    cut = {"dpor_tasks": 1, "other_anomalous": 1, "sampled_runs": 500}
    assert decide(_cell(**cut))["verdict"] == "abstains"
    assert decide(_cell(**cut, witness="w.json", witness_replays=True))["verdict"] == "admits"


def test_excludes_needs_exhaustive_or_a_low_upper_bound() -> None:
    done = decide(_cell(dpor_tasks=3, dpor_exhausted=3, exhaustive_runs=5))
    assert (done["verdict"], done["mode"]) == ("excludes", "exhaustive")
    # one DPOR task cut off: the cell is sampled and decided by its sampled runs
    verdicts = {}
    for n in range(1, 200):
        row = decide(_cell(dpor_tasks=3, dpor_exhausted=2, sampled_runs=n), exclude_below=0.05)
        assert row["mode"] == "sampled" and row["runs"] == n
        assert row["ci_high"] == pytest.approx(wilson_interval(0, n).high)
        verdicts[n] = row["verdict"]
        assert (row["verdict"] == "excludes") == (row["ci_high"] < 0.05), row
    assert set(verdicts.values()) == {"excludes", "abstains"}
    # a stricter threshold needs more runs
    strict = [
        n
        for n in range(1, 200)
        if decide(_cell(sampled_runs=n), exclude_below=0.03)["verdict"] == "excludes"
    ]
    assert min(strict) > min(n for n, v in verdicts.items() if v == "excludes")


def test_abstains_when_the_model_says_so_or_no_rule_applies() -> None:
    strong = {
        "dpor_tasks": 1,
        "dpor_exhausted": 1,
        "exhaustive_runs": 9,
        "exhaustive_anomalous": 9,
        "witness": "w.json",
        "witness_replays": True,
    }
    row = decide(_cell(**strong, abstain_reason="no recovery procedure in the notes"))
    assert row["verdict"] == "abstains" and "no recovery procedure" in row["reason"]
    assert row["witness"] == ""
    empty = decide(_cell())
    assert empty["verdict"] == "abstains" and empty["runs"] == 0 and math.isnan(empty["rate"])
    assert (empty["ci_low"], empty["ci_high"]) == (0.0, 1.0)


def test_power_to_detect_a_rate() -> None:
    assert detection_power(0, 0.05) == 0.0
    assert detection_power(1, 0.05) == pytest.approx(0.05)
    assert detection_power(60, 0.05) == pytest.approx(1 - 0.95**60)
    powers = [detection_power(n, 0.05) for n in (10, 50, 100, 400)]
    assert powers == sorted(powers) and powers[-1] > 0.99
    sampled = decide(_cell(sampled_runs=100), power_rate=0.05)
    assert sampled["power"] == pytest.approx(detection_power(100, 0.05))
    assert decide(_cell(dpor_tasks=1, dpor_exhausted=1, exhaustive_runs=4))["power"] == 1.0


# ------------------------------------------------------------- planning and executors


def test_plan_gives_every_task_its_own_seeds() -> None:
    config = load_config(CONFIG)
    tasks = plan(config, "small", ["toki"])
    per_system = sum(len(w["strategies"]) for w in config["workloads"]) * len(
        config["budgets"]["small"]["seeds"]
    )
    assert len(tasks) == per_system
    assert [t["index"] for t in tasks] == list(range(len(tasks)))
    assert len({(t["workload"]["name"], t["strategy"], t["seed"]) for t in tasks}) == len(tasks)
    assert any(w.get("scenario") == "manager" for w in config["workloads"])
    with pytest.raises(InvalidInput):
        plan(config, "huge")


def test_local_executor_keeps_task_order() -> None:
    assert run_tasks(math.factorial, [5, 3, 4, 0], workers=2) == [120, 6, 24, 1]
    with pytest.raises(InvalidInput):
        run_tasks(math.factorial, [1], executor="cloud")


# ------------------------------------------------------------- a small-budget run


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, str]]]:
    out = tmp_path_factory.mktemp("matrix")
    argv = ["matrix", "--budget", "small", "--workers", "2", "--json"]
    capture = out / "stdout.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*argv, "--out", str(out), "--config", str(CONFIG)]) == 0
    capture.write_text(buf.getvalue())
    return out, json.loads(buf.getvalue())


def test_csv_has_exactly_the_columns(small: tuple[Path, list[dict[str, str]]]) -> None:
    out, rows = small
    with open(out / "matrix.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        assert tuple(reader.fieldnames or ()) == COLUMNS
        on_disk = list(reader)
    assert on_disk == rows  # --json prints the same rows
    config = load_config(CONFIG)
    assert {(r["system"], r["anomaly"]) for r in rows} == {
        (s, a) for s in SYSTEMS for a in config["experiment"]["anomalies"]
    }
    for r in rows:
        assert r["verdict"] in {"admits", "excludes", "abstains"}
        assert r["mode"] in {"exhaustive", "sampled"}
        assert float(r["ci_low"]) <= float(r["ci_high"])
        assert (r["verdict"] == "admits") == bool(r["witness"])
    for name in ("matrix.md", "matrix.tex", "matrix.png"):
        assert (out / name).stat().st_size > 0


def test_every_witness_replays(small: tuple[Path, list[dict[str, str]]]) -> None:
    out, rows = small
    listed = {r["witness"] for r in rows if r["witness"]}
    on_disk = {f"witnesses/{p.name}" for p in (out / "witnesses").glob("*.json")}
    assert listed == on_disk and listed, "admits cells and witness files must match"
    for rel in sorted(listed):
        assert main(["replay", str(out / rel), "--json"]) == 0, rel


def _subset_rows(out: Path) -> list[dict[str, str]]:
    with open(out / "matrix.csv", newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["system"] in SUBSET]


def test_same_seeds_same_rows_on_a_rerun(
    small: tuple[Path, list[dict[str, str]]], tmp_path: Path
) -> None:
    out, _ = small
    again = run_matrix(CONFIG, budget="small", workers=1, out=tmp_path, systems=SUBSET)
    assert again.csv_rows() == _subset_rows(out)
    for p in (tmp_path / "witnesses").glob("*.json"):
        assert p.read_text() == (out / "witnesses" / p.name).read_text()


def test_dask_gives_the_same_rows_as_local(
    small: tuple[Path, list[dict[str, str]]], tmp_path: Path
) -> None:
    out, _ = small
    seen: list[int] = []
    dask = run_matrix(
        CONFIG,
        budget="small",
        executor="dask",
        workers=2,
        processes=False,
        out=tmp_path,
        systems=SUBSET,
        progress=seen.append,
    )
    assert dask.csv_rows() == _subset_rows(out)
    assert len(seen) == len(dask.tasks)  # progress covered every task


@pytest.mark.slow
def test_the_committed_verdict_matrix_is_what_the_code_produces(tmp_path: Path) -> None:
    """verdict_matrix/ is committed output: a change to a model, a checker or the engine that
    moves a cell must come with the regenerated matrix (`make run` or `toki matrix`)."""
    fresh = run_matrix(CONFIG, budget="default", workers=2, out=tmp_path)
    committed = CONFIG.parent / "matrix.csv"
    with open(committed, newline="") as fh:
        old = list(csv.DictReader(fh))
    assert fresh.csv_rows() == old, "verdict_matrix/ is stale: run `toki matrix --budget default`"
    for p in sorted((tmp_path / "witnesses").glob("*.json")):
        assert p.read_text() == (CONFIG.parent / "witnesses" / p.name).read_text(), p.name
