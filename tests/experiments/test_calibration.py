"""Replay calibration: the keyed log gives 0, the unlogged judge follows 2p(1-p)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toki.cli import main
from toki.experiments.calibration import calibrate, mean_absolute_deviation, predicted_rate


def test_prediction() -> None:
    assert predicted_rate(0.5, False) == 0.5
    assert predicted_rate(0.0, False) == predicted_rate(1.0, False) == 0.0
    assert predicted_rate(0.3, True) == 0.0


def test_measured_rates_follow_the_prediction_and_the_log_removes_n1() -> None:
    cells = calibrate([0.0, 0.2, 0.5, 1.0], runs=150, seed=11)
    for c in cells:
        if c.logged or c.p in (0.0, 1.0):
            assert c.inconsistent == 0  # deterministic cases: nothing to disagree about
        else:
            assert c.ci_low <= c.predicted <= c.ci_high, c  # fixed seed: deterministic
    assert mean_absolute_deviation(cells) < 0.08


def test_calibration_is_deterministic_for_a_seed() -> None:
    assert calibrate([0.4], runs=30, seed=3) == calibrate([0.4], runs=30, seed=3)
    assert calibrate([0.4], runs=30, seed=3) != calibrate([0.4], runs=30, seed=4)


def test_cli_json_and_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--p", "0.5", "--runs", "20", "--out", str(tmp_path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["p"], r["logged"]) for r in rows} == {(0.5, False), (0.5, True)}
    assert {"p", "logged", "rate", "ci_low", "ci_high", "runs"} <= set(rows[0])
    assert (tmp_path / "calibration.csv").exists() and (tmp_path / "calibration.png").exists()


def test_cli_refuses_bad_probabilities(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--p", "0.5,1.5", "--runs", "5", "--out", "/tmp/x"]) == 2
    assert "--p" in capsys.readouterr().err
