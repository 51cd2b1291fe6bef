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
2p(1 − p); with the keyed log the replay reads the verdict and the rate is 0.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from scipy.stats import binomtest

from toki.algebra.ewm import EWM
from toki.judge import StochasticJudge
from toki.memory import Memory
from toki.model import Claim, FactKey

__all__ = [
    "CalibrationCell",
    "calibrate",
    "mean_absolute_deviation",
    "predicted_rate",
    "write_outputs",
]

KEY = FactKey("calibration", "subject", "attribute")
NOW = datetime(2026, 6, 1, tzinfo=UTC)
DEFAULT_P = tuple(round(0.05 * i, 2) for i in range(1, 20))


@dataclass(frozen=True, slots=True)
class CalibrationCell:
    p: float
    logged: bool
    runs: int
    inconsistent: int
    rate: float
    ci_low: float
    ci_high: float
    predicted: float


def predicted_rate(p: float, logged: bool) -> float:
    """The analytic N1 rate of one binary contradiction (see the module docstring)."""
    return 0.0 if logged else 2.0 * p * (1.0 - p)


def _one_run(p: float, logged: bool, live_seed: int, replay_seed: int) -> bool:
    mem = Memory(clock=lambda: NOW)
    judge = StochasticJudge(p, stream_seed=live_seed)
    mem.write(
        Claim(
            KEY,
            "A",
            "source-a",
            valid_from="2026-01-01T00:00:00Z",
            recorded_at="2026-01-02T00:00:00Z",
        ),
        EWM,
        judge=judge,
        log_judge=logged,
    )
    mem.write(
        Claim(
            KEY,
            "B",
            "source-b",
            valid_from="2026-01-01T00:00:00Z",
            recorded_at="2026-01-03T00:00:00Z",
        ),
        EWM,
        judge=judge,
        log_judge=logged,
    )
    again = mem.readjudicate(
        EWM, judge=StochasticJudge(p, stream_seed=replay_seed), use_keyed_log=logged
    )
    return again.state_hash() != mem.state_hash()


def calibrate(
    ps: Sequence[float] = DEFAULT_P,
    runs: int = 200,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> list[CalibrationCell]:
    """Measure the N1 rate for each p, unlogged and logged, with Wilson 95% intervals.

    progress, if given, is called with the number of runs just finished."""
    if runs < 1:
        raise ValueError(f"runs: {runs} must be at least 1")
    rng = random.Random(seed)
    cells = []
    for p in ps:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p: {p} is not a probability")
        for logged in (False, True):
            hits = 0
            for _ in range(runs):
                hits += _one_run(p, logged, rng.randrange(2**31), rng.randrange(2**31))
                if progress is not None:
                    progress(1)
            ci = binomtest(hits, runs).proportion_ci(confidence_level=0.95, method="wilson")
            cells.append(
                CalibrationCell(
                    p,
                    logged,
                    runs,
                    hits,
                    hits / runs,
                    float(ci.low),
                    float(ci.high),
                    predicted_rate(p, logged),
                )
            )
    return cells


def mean_absolute_deviation(cells: Sequence[CalibrationCell], logged: bool = False) -> float:
    chosen = [c for c in cells if c.logged == logged]
    return sum(abs(c.rate - c.predicted) for c in chosen) / max(1, len(chosen))


def write_outputs(cells: Sequence[CalibrationCell], folder: Path) -> tuple[Path, Path]:
    """calibration.csv and calibration.png (measured against predicted) in `folder`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / "calibration.csv"
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(cells[0])))
        writer.writeheader()
        for cell in cells:
            writer.writerow(asdict(cell))
    fig, ax = plt.subplots(figsize=(5.5, 4))
    grid = [i / 100 for i in range(101)]
    ax.plot(grid, [predicted_rate(p, False) for p in grid], color="0.4", label="predicted 2p(1-p)")
    for logged, marker, label in ((False, "o", "no keyed log"), (True, "s", "keyed log")):
        chosen = [c for c in cells if c.logged == logged]
        ax.errorbar(
            [c.p for c in chosen],
            [c.rate for c in chosen],
            yerr=[[c.rate - c.ci_low for c in chosen], [c.ci_high - c.rate for c in chosen]],
            fmt=marker,
            capsize=2,
            label=f"measured, {label}",
        )
    mad = mean_absolute_deviation(cells)
    ax.set_xlabel("p (judge votes for the challenger)")
    ax.set_ylabel("replay-inconsistency (N1) rate")
    ax.set_title(f"Replay calibration (MAD {mad:.3f}, {cells[0].runs} runs per cell)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png_path = folder / "calibration.png"
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    return csv_path, png_path
