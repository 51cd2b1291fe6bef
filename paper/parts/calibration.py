"""Paper assets from the replay calibration (verdict_matrix/calibration.csv)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from paper.parts.common import (
    Assets,
    Macros,
    _figure,
    _pdf,
    _plt,
    missing_block,
    num,
    read,
    tabular,
)


def _noise_mad(rows: list[dict[str, str]]) -> float:
    """E|X/n - r| for X ~ Binomial(n, r), averaged over the cells: the MAD noise alone gives."""
    import numpy as np
    from scipy.stats import binom

    total = 0.0
    for r in rows:
        n, rate = int(r["runs"]), float(r["predicted"])
        k = np.arange(n + 1)
        total += float((binom.pmf(k, n, rate) * np.abs(k / n - rate)).sum())
    return total / len(rows)


def _wilson_level(rows: list[dict[str, str]]) -> str:
    """The confidence level (percent) of calibration.csv's Wilson intervals, recovered from the
    intervals themselves ("--" when no usual level reproduces them)."""
    from statistics import NormalDist

    for level in (0.90, 0.95, 0.99):
        z = NormalDist().inv_cdf(1 - (1 - level) / 2)
        ok = True
        for r in rows:
            n, k = int(r["runs"]), int(r["inconsistent"])
            p = k / n
            centre = (p + z * z / (2 * n)) / (1 + z * z / n)
            half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
            if 0 < k < n and abs(centre - half - float(r["ci_low"])) > 1e-6:
                ok = False
                break
        if ok:
            return f"{100 * level:g}"
    return "--"


def calibration(root: Path, m: Macros) -> Assets:
    cmd = "toki calibrate"
    text = read(root, "verdict_matrix/calibration.csv")
    names = ["CalibCells", "CalibRuns", "CalibMAD", "CalibNoiseMAD", "CalibRsq", "CalibMaxLogged",
             "CalibMaxDev", "CalibLoggedRuns", "CalibLoggedInconsistent", "CalibLoggedJudgeCalls",
             "CalibConfidence"]
    if text is None:
        m.missing(names, cmd)
        return {"tab_calibration.tex": missing_block("Calibration table", cmd),
                **_figure("fig_calibration", "Calibration figure", cmd, None)}
    rows = list(csv.DictReader(io.StringIO(text)))
    un = [r for r in rows if r["logged"] == "False"]
    lo = [r for r in rows if r["logged"] == "True"]
    meas = [float(r["rate"]) for r in un]
    pred = [float(r["predicted"]) for r in un]
    dev = [abs(a - b) for a, b in zip(meas, pred, strict=True)]
    mean = sum(meas) / len(meas)
    ss_tot = sum((a - mean) ** 2 for a in meas)
    ss_res = sum((a - b) ** 2 for a, b in zip(meas, pred, strict=True))
    m.set("CalibCells", len(un))
    m.set("CalibConfidence", _wilson_level(un))
    m.set("CalibRuns", "/".join(str(r) for r in sorted({int(r["runs"]) for r in un})))
    m.set("CalibMAD", num(sum(dev) / len(dev), 4))
    m.set("CalibNoiseMAD", num(_noise_mad(un), 4))
    m.set("CalibRsq", num(1 - ss_res / ss_tot, 3) if ss_tot else "n/a")
    m.set("CalibMaxDev", num(max(dev)))
    m.set("CalibMaxLogged", num(max(float(r["rate"]) for r in lo)))
    m.set("CalibLoggedRuns", sum(int(r["runs"]) for r in lo))
    m.set("CalibLoggedInconsistent", sum(int(r["inconsistent"]) for r in lo))
    m.set("CalibLoggedJudgeCalls", sum(int(r.get("judge_calls") or 0) for r in lo))
    body = []
    logged = {r["p"]: r for r in lo}
    for r in un:
        lg = logged.get(r["p"])
        if lg is None:
            keyed = "---"
        elif lg.get("check") == "True":
            keyed = f"{num(float(lg['rate']))} (check: {lg['judge_calls']} judge calls)"
        else:
            keyed = num(float(lg["rate"]))
        body.append([r["p"], num(float(r["predicted"])), num(float(r["rate"])),
                     f"[{num(float(r['ci_low']))}, {num(float(r['ci_high']))}]", keyed])
    table = tabular("@{}rrrcl@{}", ["$p$", r"predicted $2p(1-p)$", "measured (no log)",
                                    "Wilson 95\\%", "measured (keyed log)"], body, r"\scriptsize")

    def draw() -> bytes:
        plt = _plt()
        fig, ax = plt.subplots(figsize=(3.4, 2.3))
        ps = [float(r["p"]) for r in un]
        grid = [i / 100 for i in range(101)]
        ax.plot(grid, [2 * p * (1 - p) for p in grid], color="0.4", lw=1, label="predicted 2p(1-p)")
        pairs = list(zip(meas, un, strict=True))
        yerr = [[a - float(r["ci_low"]) for a, r in pairs],
                [float(r["ci_high"]) - a for a, r in pairs]]
        ax.errorbar(ps, meas, yerr=yerr, fmt="o", ms=3, capsize=2, color="#0072B2",
                    label="measured, no log (Wilson 95%)")
        ax.plot([float(r["p"]) for r in lo], [float(r["rate"]) for r in lo], "s", ms=3,
                color="#D55E00", label="keyed log (a check: no judge call)")
        ax.set_xlabel("p (judge votes for the challenger)")
        ax.set_ylabel("N1 rate (replay differs)")
        ax.set_ylim(-0.02, 0.7)
        ax.legend(frameon=False, fontsize=7)
        data = _pdf(fig)
        plt.close(fig)
        return data

    return {"tab_calibration.tex": table,
            **_figure("fig_calibration", "Calibration figure", cmd, draw)}
