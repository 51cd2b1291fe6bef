"""The verdict rules of the matrix (docs/verdict-matrix.md), in one place for both matrix
builders (`matrix`: model rows; `real_matrix`: real libraries): how a cell's per-workload
records are gathered (`cell_of`) and how a cell's counts become admits / excludes / not
found / undecided / abstains (`decide`, then `inherit_fault_free`). No cell is decided by
hand, and no builder has rules of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.experiments.stats import cluster_interval, wilson_interval, zero_upper_bound

__all__ = [
    "MODEL_DERIVED",
    "VERDICTS",
    "CellData",
    "cell_of",
    "columns",
    "decide",
    "decide_cells",
    "detection_power",
    "inherit_fault_free",
    "model_derived_cells",
    "shortest_witness",
]

VERDICTS = ("admits", "excludes", "not found", "undecided", "abstains")
# why every model row abstains on the derived-state classes (docs/verdict-matrix.md)
MODEL_DERIVED = "a model of the write path's rows, not of the library's derived structures"


@dataclass(frozen=True, slots=True)
class CellData:
    """What the rules need to know about one (system, fault setting, anomaly) cell."""

    system: str
    anomaly: str
    faults: str = "none"
    found: tuple[int, ...] = ()  # anomalous runs, per judge draw
    checked: tuple[int, ...] = ()  # runs the check decided, per judge draw
    undecided: tuple[int, ...] = ()  # runs the check could not decide, per judge draw
    rates: tuple[float, ...] = ()  # per judge draw: the mean over workloads of their rates
    shown_on: tuple[tuple[str, float], ...] = ()  # workloads with an anomalous run: mean rate
    outside: int = 0  # anomalous runs of DPOR explorations cut off by their budget
    sampled_runs: int = 0  # checked runs that came from random/PCT (not from finished DPOR)
    dpor_workloads: int = 0  # workloads DPOR was asked to explore
    dpor_exhausted: int = 0  # of those, the ones DPOR finished in every draw
    workloads: tuple[str, ...] = ()
    exhausted_workloads: tuple[str, ...] = ()
    recovery_judge_calls: int = 0  # made by the fresh-judge recoveries (N1's cells)
    judged_runs: int = 0  # runs in which the live write path asked the judge
    judge_free: bool = False  # the model declares (and the runs confirm) it has no judge
    witness: str = ""  # path of the shortest witness, if one was written
    witness_replays: bool = False  # it was re-run and showed the anomaly again
    abstain_reason: str = ""  # the rule (toki.systems.base.abstentions) says so
    serial_other_draws: tuple[int, int] | None = None  # N2: (reachable serially, draws tried)
    workload_runs: tuple[tuple[str, int], ...] = ()  # checked runs per workload, all draws
    workload_found: tuple[tuple[str, int], ...] = ()  # anomalous runs per workload, all draws
    n2_origins: tuple[tuple[str, str], ...] = ()  # N2: workload -> schedule / judge / bounded

    @property
    def complete(self) -> bool:
        """Every workload of the cell was explored to completion (DPOR finished in every
        draw): the only case in which no anomaly means none can happen."""
        return bool(self.workloads) and set(self.workloads) <= set(self.exhausted_workloads)

    def worst_sampled(self) -> tuple[str, int]:
        """The sampled workload with the fewest checked runs (ties: by name), and that
        count: its bound is the cell's, since every workload must be clean."""
        done = set(self.exhausted_workloads)
        sampled = [(n, w) for w, n in self.workload_runs if w not in done]
        if not sampled:
            return "", 0
        n, w = min(sampled)
        return w, n

    @property
    def by_construction(self) -> bool:
        """Every checked run of every workload showed the anomaly, in every draw: the
        design, not an interleaving, produces it."""
        runs = dict(self.workload_runs)
        return (
            bool(runs)
            and sum(runs.values()) > 0
            and all(runs.get(w, 0) == n for w, n in self.workload_found)
            and set(dict(self.workload_found)) == {w for w, n in runs.items() if n > 0}
        )


def detection_power(runs: int, rate: float) -> float:
    """P(at least one anomalous run in `runs` independent samples) if the true rate is
    `rate` in every draw: the chance a sampled cell would have found a witness."""
    return 1.0 - (1.0 - rate) ** runs if runs > 0 else 0.0


def decide(cell: CellData, *, alpha: float = 0.05, power_rate: float = 0.05) -> dict[str, Any]:
    """The verdict rules (docs/verdict-matrix.md), applied to one cell's counts."""
    draws = len(cell.checked)
    runs = sum(cell.checked)
    found = sum(cell.found) + cell.outside
    undecided = sum(cell.undecided)
    exhaustive = cell.complete
    rates = list(cell.rates)
    row: dict[str, Any] = {
        "system": cell.system,
        "anomaly": cell.anomaly,
        "faults": cell.faults,
        "verdict": "",
        "rate": math.nan,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "draw_min": math.nan,
        "draw_max": math.nan,
        "draws": draws,
        "runs": runs,
        "undecided": undecided,
        "mode": "exhaustive" if exhaustive else "sampled",
        "power": math.nan,
        "witness": "",
        "reason": "",
        "anomalous_runs": found,
        "serial_other_draws": cell.serial_other_draws,
        "workloads": len(cell.workloads),
        "exhaustive_workloads": len(set(cell.workloads) & set(cell.exhausted_workloads)),
        "worst_workload": "",
        "worst_runs": 0,
        "n2_schedule": sum(1 for _, o in cell.n2_origins if o == "schedule"),
        "n2_judge": sum(1 for _, o in cell.n2_origins if o == "judge"),
        "n2_bounded": sum(1 for _, o in cell.n2_origins if o == "bounded"),
        "construction": "",
    }
    if rates:
        ci = cluster_interval(rates, alpha)
        low, high = ci.low, ci.high
        if runs > 0:  # never narrower than the runs themselves allow (see _floor)
            low, high = _floor(ci.low, ci.high, sum(cell.found), runs, alpha)
        row.update(rate=ci.estimate, draw_min=min(rates), draw_max=max(rates))
        row.update(ci_low=low, ci_high=high)
    scope = _scope(cell)
    if cell.abstain_reason:
        row.update(verdict="abstains", reason=f"abstains by rule: {cell.abstain_reason}")
        row.update(rate=math.nan, ci_low=math.nan, ci_high=math.nan, mode="", runs=0)
        row.update(draw_min=math.nan, draw_max=math.nan, undecided=0)
    elif found > 0 and cell.witness and cell.witness_replays:
        shown = ", ".join(
            f"{w} ({'cut-off DPOR' if math.isnan(x) or x == 0 else f'{x:.3f}'})"
            for w, x in cell.shown_on
        )
        row.update(verdict="admits", witness=cell.witness)
        row["reason"] = f"witness replays; shown on {shown}; {scope}"
        if found == cell.outside:
            row["reason"] += (
                f"; found only in {found} runs of a DPOR exploration cut off by its budget "
                "(not a sample, so not in the rate)"
            )
    elif found > 0:
        row.update(verdict="undecided", reason="anomalous runs counted, but no witness replayed")
    elif cell.anomaly == "N1" and runs > 0 and cell.judge_free and not cell.recovery_judge_calls:
        row.update(verdict="excludes", mode="check", rate=math.nan, ci_low=math.nan)
        row.update(ci_high=math.nan, draw_min=math.nan, draw_max=math.nan, construction="yes")
        row["reason"] = (
            f"by construction: the model has no judge (and its recovery asked none in {runs} "
            "runs), so a fresh judge has nothing to re-adjudicate (a check, not a rate)"
        )
    elif undecided > 0:
        row.update(verdict="undecided", rate=math.nan, ci_low=math.nan, ci_high=math.nan)
        row["reason"] = f"no anomaly in {runs} decided runs, but {undecided} runs undecided"
    elif exhaustive:
        row.update(verdict="excludes", power=1.0, reason=f"no anomaly; {scope}")
    else:
        worst, n = cell.worst_sampled()
        bound = zero_upper_bound(n, alpha) if n else 1.0
        power = detection_power(n, power_rate)
        row.update(verdict="not found", ci_low=0.0, ci_high=bound, power=power)
        row.update(worst_workload=worst, worst_runs=n)
        row["reason"] = (
            f"0 of {runs} runs ({cell.sampled_runs} sampled); on {worst}, the sampled "
            f"workload with the fewest runs ({n}), the rate per run is < {bound:.4f} "
            f"(one-sided {100 * (1 - alpha):.0f} %, if its runs were independent); power "
            f"{power:.3f} there to see a rate of {power_rate}; {scope}"
        )
    if row["verdict"] == "admits" and cell.by_construction:
        row["construction"] = "yes"
        row["reason"] += "; true by construction: every checked run of every workload shows it"
    return row


def _floor(low: float, high: float, found: int, runs: int, alpha: float) -> tuple[float, float]:
    """The interval over judge draws, widened to cover the Wilson interval of all runs pooled:
    draws that happen to give the same rate would otherwise print a zero-width interval for a
    sampled rate (memoryos N3 0.1111 [0.1111, 0.1111]), which claims more than the runs can."""
    w = wilson_interval(min(found, runs), runs, alpha)
    return min(low, w.low), max(high, w.high)


def _scope(cell: CellData) -> str:
    """What the exploration covered, in words (the stated bounds of an excludes)."""
    done = list(cell.exhausted_workloads)
    rest = [w for w in cell.workloads if w not in done]
    parts = []
    if done:
        parts.append(f"DPOR exhaustive on {', '.join(done)}")
    if rest:
        parts.append(f"sampled (random + PCT) on {', '.join(rest)}")
    crash = "one crash per agent" if cell.faults == "crash" else "no faults"
    return f"{'; '.join(parts)}; {crash}; {len(cell.checked)} judge draws"


def cell_of(
    system: str,
    fault: str,
    anomaly: str,
    results: Sequence[Mapping[str, Any]],
    *,
    judge_free: bool,
    abstain_reason: str = "",
) -> CellData:
    """The cell (without its witness) of one system, fault setting and anomaly, from the
    records of its tasks (one per workload, `exploration.explore_task`)."""
    ndraws = len(results[0]["draws"])
    dpor = [r for r in results if r["dpor"]]
    exhausted = [r["workload"] for r in dpor if all(d["mode"] == "exhaustive" for d in r["draws"])]
    return CellData(
        system,
        anomaly,
        fault,
        found=_per_draw(results, ndraws, anomaly, "found"),
        checked=_per_draw(results, ndraws, anomaly, "checked"),
        undecided=_per_draw(results, ndraws, anomaly, "undecided"),
        rates=_draw_rates(results, ndraws, anomaly),
        shown_on=_shown_on(results, anomaly),
        outside=sum(r["outside_found"][anomaly] for r in results),
        sampled_runs=sum(
            d["counts"][anomaly]["checked"]
            for r in results
            for d in r["draws"]
            if d["mode"] == "sampled"
        ),
        dpor_workloads=len(dpor),
        dpor_exhausted=len(exhausted),
        workloads=tuple(r["workload"] for r in results),
        exhausted_workloads=tuple(exhausted),
        workload_runs=tuple(
            (r["workload"], sum(d["counts"][anomaly]["checked"] for d in r["draws"]))
            for r in results
        ),
        workload_found=tuple(
            (r["workload"], f)
            for r in results
            if (f := sum(d["counts"][anomaly]["found"] for d in r["draws"]))
        ),
        recovery_judge_calls=sum(d["recovery_judge_calls"] for r in results for d in r["draws"]),
        judged_runs=sum(d["judged_runs"] for r in results for d in r["draws"]),
        judge_free=judge_free,
        abstain_reason=abstain_reason,
    )


def columns(experiment: Mapping[str, Any]) -> list[str]:
    """The matrix's anomaly columns in order: N1-N3 (`anomalies`), then the derived-state
    classes (`derived`, checked on real rows only)."""
    return [*experiment["anomalies"], *experiment.get("derived", [])]


def model_derived_cells(system: str, fault: str, experiment: Mapping[str, Any]) -> list[CellData]:
    """A model row's derived-state cells: each abstains by one rule (`MODEL_DERIVED`)."""
    return [
        CellData(system, a, fault, abstain_reason=MODEL_DERIVED)
        for a in experiment.get("derived", [])
    ]


def decide_cells(cells: Sequence[CellData], experiment: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every cell decided (`decide`, then `inherit_fault_free`), in row order: systems as
    first seen, then fault setting and anomaly in matrix.toml's order."""
    decided = inherit_fault_free(
        [
            decide(c, alpha=float(experiment["alpha"]), power_rate=float(experiment["power_rate"]))
            for c in cells
        ]
    )
    names = list(dict.fromkeys(r["system"] for r in decided))
    order = {a: i for i, a in enumerate(columns(experiment))}
    faults = {f: i for i, f in enumerate(experiment.get("faults", ["none"]))}
    return sorted(
        decided, key=lambda r: (names.index(r["system"]), faults[r["faults"]], order[r["anomaly"]])
    )


def inherit_fault_free(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A run without faults is also a run with at most one crash per agent: a crash-setting
    cell whose own runs found nothing admits what its fault-free cell admits (same witness).
    Its rate is left empty: the crash runs did not show it."""
    free = {(r["system"], r["anomaly"]): r for r in rows if r["faults"] == "none"}
    out = []
    for r in rows:
        base = free.get((r["system"], r["anomaly"]))
        if (
            r["faults"] != "none"
            and base is not None
            and base["verdict"] == "admits"
            and r["verdict"] in ("excludes", "not found", "undecided")
        ):
            r = {
                **r,
                "verdict": "admits",
                "mode": "fault-free",
                "witness": base["witness"],
                "rate": math.nan,
                "ci_low": math.nan,
                "ci_high": math.nan,
                "draw_min": math.nan,
                "draw_max": math.nan,
                "power": math.nan,
                "reason": f"admitted without faults (a fault-free run is a run with at most one "
                f"crash per agent); its own {r['runs']} crash-setting runs showed none "
                f"({r['verdict']}: {r['reason']})",
            }
        out.append(r)
    return out


def _per_draw(
    results: Sequence[Mapping[str, Any]], ndraws: int, anomaly: str, key: str
) -> tuple[int, ...]:
    return tuple(sum(r["draws"][i]["counts"][anomaly][key] for r in results) for i in range(ndraws))


def _draw_rates(
    results: Sequence[Mapping[str, Any]], ndraws: int, anomaly: str
) -> tuple[float, ...]:
    """Per draw, the mean over workloads of each workload's anomalous fraction of checked
    runs: every workload weighs the same, whether DPOR gave it a thousand classes or the
    samplers two dozen runs."""
    out = []
    for i in range(ndraws):
        fractions = [
            c["found"] / c["checked"]
            for r in results
            if (c := r["draws"][i]["counts"][anomaly])["checked"] > 0
        ]
        if fractions:
            out.append(sum(fractions) / len(fractions))
    return tuple(out)


def _shown_on(results: Sequence[Mapping[str, Any]], anomaly: str) -> tuple[tuple[str, float], ...]:
    """The workloads on which some run showed the anomaly, with their mean rate over draws
    (NaN when only a cut-off DPOR exploration showed it)."""
    out = []
    for r in results:
        counts = [d["counts"][anomaly] for d in r["draws"]]
        if sum(c["found"] for c in counts) + r["outside_found"][anomaly] == 0:
            continue
        fractions = [c["found"] / c["checked"] for c in counts if c["checked"] > 0]
        out.append((r["workload"], sum(fractions) / len(fractions) if fractions else math.nan))
    return tuple(out)


def shortest_witness(results: Sequence[Mapping[str, Any]], anomaly: str) -> dict[str, Any] | None:
    """The shortest witness of `anomaly` over the task records (ties: the first task)."""
    best: tuple[int, int] | None = None
    out: dict[str, Any] | None = None
    for r in results:
        w = r["witnesses"].get(anomaly)
        if w is not None and (best is None or (len(w["schedule"]), r["index"]) < best):
            best, out = (len(w["schedule"]), r["index"]), w
    return out
