"""Replay calibration: the unlogged judge follows 2p(1-p); the keyed log is a deterministic
check (the replay asks no judge), reported without an interval."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from toki.cli import main
from toki.experiments.calibration import (
    CalibrationCell,
    calibrate,
    mean_absolute_deviation,
    noise_mad,
    predicted_rate,
)


def test_prediction() -> None:
    assert predicted_rate(0.5, False) == 0.5
    assert predicted_rate(0.0, False) == predicted_rate(1.0, False) == 0.0
    assert predicted_rate(0.3, True) == 0.0


def test_measured_rates_follow_the_prediction_and_the_log_is_a_check() -> None:
    cells = calibrate([0.0, 0.2, 0.5, 1.0], runs=150, seed=11, logged_runs=40)
    for c in cells:
        if c.logged:
            # the keyed log: the replay never asks the judge, so nothing is estimated
            assert (c.judge_calls, c.inconsistent, c.check) == (0, 0, True), c
            assert c.ci_low is None and c.ci_high is None and c.runs == 40
        else:
            assert c.judge_calls >= c.runs and not c.check  # asked again on every replay
            assert c.ci_low is not None and c.ci_high is not None
            if c.p in (0.0, 1.0):
                assert c.inconsistent == 0  # a judge with no choice cannot disagree
            else:
                assert c.ci_low <= c.predicted <= c.ci_high, c  # fixed seed: deterministic
    assert mean_absolute_deviation(cells) < 0.08


def test_calibration_is_deterministic_for_a_seed_and_any_worker_count() -> None:
    one = calibrate([0.4, 0.7], runs=30, seed=3)
    assert one == calibrate([0.4, 0.7], runs=30, seed=3)
    assert one == calibrate([0.4, 0.7], runs=30, seed=3, workers=2)  # cells seed themselves
    assert one != calibrate([0.4, 0.7], runs=30, seed=4)


def _cell(p: float, runs: int, hits: int) -> CalibrationCell:
    return CalibrationCell(
        p, False, runs, hits, hits / runs, 0, 1, predicted_rate(p, False), 1, False
    )


def test_noise_mad_is_the_expected_deviation_of_a_binomial_sample() -> None:
    """Exact E|X/n - r| against a seeded simulation, and it shrinks like 1/sqrt(n)."""
    seed = 20240601
    print(f"seed {seed}")
    rng = random.Random(seed)
    p, n = 0.3, 400
    r = predicted_rate(p, False)
    sims = [abs(sum(rng.random() < r for _ in range(n)) / n - r) for _ in range(2000)]
    exact = noise_mad([_cell(p, n, 0)])
    assert abs(exact - sum(sims) / len(sims)) < 0.002
    assert noise_mad([_cell(p, 4 * n, 0)]) == pytest.approx(exact / 2, rel=0.1)
    assert noise_mad([_cell(0.0, n, 0)]) == 0.0  # a rate of 0 has no noise


def test_cli_json_and_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["calibrate", "--p", "0.5", "--runs", "20", "--logged-runs", "5", "--workers", "1"]
    assert main([*argv, "--out", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["cells"]
    assert {(r["p"], r["logged"]) for r in rows} == {(0.5, False), (0.5, True)}
    logged = next(r for r in rows if r["logged"])
    assert logged["check"] and logged["judge_calls"] == 0 and logged["ci_low"] is None
    assert out["noise_mad"] > 0 and out["mad"] >= 0
    with open(tmp_path / "calibration.csv", newline="") as fh:
        on_disk = list(csv.DictReader(fh))
    assert next(r for r in on_disk if r["logged"] == "True")["ci_low"] == ""  # no interval
    assert (tmp_path / "calibration.png").stat().st_size > 0


def test_cli_refuses_bad_probabilities(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--p", "0.5,1.5", "--runs", "5", "--out", "/tmp/x"]) == 2
    assert "--p" in capsys.readouterr().err
