"""Replay calibration: how often does re-adjudication without a keyed log change the belief?

Setup (one run): a binary contradiction — claim A, then claim B about the same key and valid
time — resolved by EWM with a `StochasticJudge(p)` that votes for the challenger B with
probability p. The unlogged configuration neither logs verdicts live nor has a log at
recovery; the logged one does both. Recovery re-runs both claims through the write path
(`Memory.readjudicate`) with a fresh judge: without the keyed log the judge is asked again;
with it the logged verdict is reused. A run is replay-inconsistent (N1) when the recovered
state hash differs from the live one.

Prediction for the unlogged configuration: the live decision picks B with probability p and
the replay independently picks B with probability p, so they differ with probability
2p(1 − p); a measured rate is a binomial sample of it (Wilson interval). With the keyed log
the replay never asks the judge: the count of judge calls at replay is recorded, and a cell
with none is a deterministic check (no interval), not an estimate.
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binom, binomtest

from toki.algebra.ewm import EWM
from toki.judge import StochasticJudge
from toki.memory import Memory
from toki.model import Claim, FactKey

__all__ = [
    "DEFAULT_LOGGED_RUNS",
    "DEFAULT_RUNS",
    "CalibrationCell",
    "calibrate",
    "mean_absolute_deviation",
    "noise_mad",
    "predicted_rate",
    "write_outputs",
]

KEY = FactKey("calibration", "subject", "attribute")
NOW = datetime(2026, 6, 1, tzinfo=UTC)
DEFAULT_P = tuple(round(0.05 * i, 2) for i in range(1, 20))
DEFAULT_RUNS = 5000  # per unlogged cell: sampling noise alone then gives a MAD of about 0.005
DEFAULT_LOGGED_RUNS = 200  # per logged cell: a check that the replay asks no judge


@dataclass(frozen=True, slots=True)
class CalibrationCell:
    p: float
    logged: bool
    runs: int
    inconsistent: int
    rate: float
    ci_low: float | None  # None for a check (no judge call at replay: nothing is estimated)
    ci_high: float | None
    predicted: float
    judge_calls: int  # judge calls made by the replays of this cell
    check: bool  # the rate is a deterministic check, not a binomial estimate


def predicted_rate(p: float, logged: bool) -> float:
    """The analytic N1 rate of one binary contradiction (see the module docstring)."""
    return 0.0 if logged else 2.0 * p * (1.0 - p)


def _one_run(p: float, logged: bool, live_seed: int, replay_seed: int) -> tuple[bool, int]:
    """(replay differs from the live state, judge calls the replay made)."""
    mem = Memory(clock=lambda: NOW)
    judge = StochasticJudge(p, stream_seed=live_seed)
    for value, source, recorded in (("A", "source-a", "02"), ("B", "source-b", "03")):
        mem.write(
            Claim(
                KEY,
                value,
                source,
                valid_from="2026-01-01T00:00:00Z",
                recorded_at=f"2026-01-{recorded}T00:00:00Z",
            ),
            EWM,
            judge=judge,
            log_judge=logged,
        )
    replay_judge = StochasticJudge(p, stream_seed=replay_seed)
    again = mem.readjudicate(EWM, judge=replay_judge, use_keyed_log=logged)
    return again.state_hash() != mem.state_hash(), replay_judge.calls


def _cell_seed(seed: int, p: float, logged: bool) -> int:
    """Each cell's own seed: cells are independent, so they can run anywhere."""
    digest = hashlib.sha256(f"calibration:{seed}:{p!r}:{logged}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def calibrate_cell(spec: dict[str, Any]) -> CalibrationCell:
    """One cell (p, logged, runs, seed): plain data in and out (for `run_tasks`)."""
    import random

    p, logged, runs = float(spec["p"]), bool(spec["logged"]), int(spec["runs"])
    rng = random.Random(_cell_seed(int(spec["seed"]), p, logged))
    hits = calls = 0
    for _ in range(runs):
        differs, asked = _one_run(p, logged, rng.randrange(2**31), rng.randrange(2**31))
        hits += differs
        calls += asked
    check = calls == 0  # no judge asked at replay: the rate cannot be anything but 0
    low: float | None = None
    high: float | None = None
    if not check:
        ci = binomtest(hits, runs).proportion_ci(confidence_level=0.95, method="wilson")
        low, high = float(ci.low), float(ci.high)
    return CalibrationCell(
        p, logged, runs, hits, hits / runs, low, high, predicted_rate(p, logged), calls, check
    )


def calibrate(
    ps: Sequence[float] = DEFAULT_P,
    runs: int = DEFAULT_RUNS,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    *,
    logged_runs: int | None = None,
    workers: int | None = 1,
) -> list[CalibrationCell]:
    """Measure the N1 rate for each p, unlogged (`runs` runs, Wilson 95 % intervals) and
    logged (`logged_runs`, default `runs`; a check when the replay asks no judge). Cells are
    independent and seeded from (seed, p, logged): `workers` > 1 runs them on a process
    pool with the same result. `progress` is called once per finished cell."""
    if runs < 1 or (logged_runs is not None and logged_runs < 1):
        raise ValueError(f"runs: {runs}/{logged_runs} must be at least 1")
    for p in ps:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p: {p} is not a probability")
    specs = [
        {"p": p, "logged": logged, "seed": seed,
         "runs": runs if not logged or logged_runs is None else logged_runs}
        for p in ps
        for logged in (False, True)
    ]  # fmt: skip
    if workers == 1:
        out = []
        for spec in specs:
            out.append(calibrate_cell(spec))
            if progress is not None:
                progress(1)
        return out
    from toki.experiments.executors import run_tasks

    return run_tasks(calibrate_cell, specs, workers=workers, progress=progress)


def mean_absolute_deviation(cells: Sequence[CalibrationCell], logged: bool = False) -> float:
    chosen = [c for c in cells if c.logged == logged]
    return sum(abs(c.rate - c.predicted) for c in chosen) / max(1, len(chosen))


def noise_mad(cells: Sequence[CalibrationCell], logged: bool = False) -> float:
    """The MAD sampling noise alone would give if the law held exactly: the mean over the
    cells of E|X/n − r| for X ~ Binomial(n, r), r the predicted rate (exact, not simulated).
    A measured MAD near it means the deviations are noise; one well above it, a misfit."""
    chosen = [c for c in cells if c.logged == logged]
    total = 0.0
    for c in chosen:
        k = np.arange(c.runs + 1)
        total += float((binom.pmf(k, c.runs, c.predicted) * np.abs(k / c.runs - c.predicted)).sum())
    return total / max(1, len(chosen))


def write_outputs(cells: Sequence[CalibrationCell], folder: Path) -> tuple[Path, Path]:
    """calibration.csv and calibration.png (measured against predicted) in `folder`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / "calibration.csv"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(cells[0])), lineterminator="\n")
        writer.writeheader()
        for cell in cells:
            writer.writerow(asdict(cell))
    fig, ax = plt.subplots(figsize=(6, 5))
    grid = [i / 100 for i in range(101)]
    ax.plot(grid, [predicted_rate(p, False) for p in grid], color="0.4", label="predicted 2p(1-p)")
    unlogged = [c for c in cells if not c.logged]
    ax.errorbar(
        [c.p for c in unlogged],
        [c.rate for c in unlogged],
        yerr=[
            [c.rate - (c.ci_low if c.ci_low is not None else c.rate) for c in unlogged],
            [(c.ci_high if c.ci_high is not None else c.rate) - c.rate for c in unlogged],
        ],
        fmt="o",
        color="#0072B2",
        capsize=2,
        label=f"no keyed log ({unlogged[0].runs} runs per p, Wilson 95 %)",
    )
    logged = [c for c in cells if c.logged]
    if logged:
        ax.plot(
            [c.p for c in logged],
            [c.rate for c in logged],
            "s",
            color="#D55E00",
            label=f"keyed log: {sum(c.inconsistent for c in logged)} of "
            f"{sum(c.runs for c in logged)} replays differ, "
            f"{sum(c.judge_calls for c in logged)} judge calls (a check)",
        )
    mad, noise = mean_absolute_deviation(cells), noise_mad(cells)
    ax.set_xlabel("p (judge votes for the challenger)")
    ax.set_ylabel("replay-inconsistency (N1) rate")
    ax.set_title(f"Replay calibration: MAD {mad:.4f} (noise alone {noise:.4f})", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    fig.tight_layout()
    png_path = folder / "calibration.png"
    fig.savefig(png_path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    return csv_path, png_path
