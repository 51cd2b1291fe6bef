"""The verdict matrix (system × fault setting × anomaly): plan tasks from matrix.toml, run them
anywhere, and decide every cell by the written rules of docs/verdict-matrix.md (no cell is
decided by hand).

One task = system × workload × fault setting; it runs every judge draw of the budget and
returns plain data (per draw: how the workload was explored, runs checked, anomalous and
undecided runs, judge calls made by recoveries; the shortest witness per anomaly), so the
executor cannot change it. Per draw, DPOR runs first where the workload lists it; when it
finishes within its budget its runs (one per equivalence class) are checked, otherwise
seeded random and PCT runs are (with crashes, their crash points drawn uniformly:
`toki.experiments.crashes`). A cell gathers its tasks and
`decide` turns the per-draw counts into admits / excludes / not found / undecided / abstains.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toki.errors import InvalidInput, ProgramError
from toki.experiments.stats import cluster_interval, zero_upper_bound

__all__ = [
    "ANOMALY_NAMES",
    "BUDGETS",
    "COLUMNS",
    "FAULTS",
    "CellData",
    "MatrixResult",
    "decide",
    "detection_power",
    "load_config",
    "plan",
    "run_matrix",
    "run_task",
    "write_outputs",
]

COLUMNS = (
    "system",
    "kind",
    "version",
    "faults",
    "anomaly",
    "verdict",
    "rate",
    "ci_low",
    "ci_high",
    "draw_min",
    "draw_max",
    "draws",
    "runs",
    "undecided",
    "mode",
    "power",
    "witness",
)
BUDGETS = ("small", "default")
DEFAULT_CONFIG = Path("verdict_matrix") / "matrix.toml"
SAMPLERS = ("random", "pct")
FAULTS = {"none": 0, "crash": 1}  # fault setting -> crashes per agent
VERDICTS = ("admits", "excludes", "not found", "undecided", "abstains")
ANOMALY_NAMES = {
    "N1": "N1 replay inconsistency (fresh judge)",
    "RD": "recovery divergence (other causes)",
    "N2": "N2 belief-drift skew",
    "N3": "N3 audit erasure",
}
FAULT_NAMES = {"none": "no faults", "crash": "one crash per agent"}
OTHER_DRAWS_BASE = 10_000  # seeds of the judge draws an N2 witness is re-checked under


def load_config(path: str | Path = DEFAULT_CONFIG) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            config = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput("matrix.toml", f"cannot read {path}: {exc}") from exc
    for key in ("experiment", "workloads", "budgets"):
        if key not in config:
            raise InvalidInput("matrix.toml", f"{path} has no [{key}] section")
    unknown = [f for f in config["experiment"].get("faults", ["none"]) if f not in FAULTS]
    if unknown:
        raise InvalidInput(
            "matrix.toml", f"unknown fault settings {unknown}", f"use {list(FAULTS)}"
        )
    return config


def systems_of(config: Mapping[str, Any]) -> list[str]:
    """The systems the config names ("all": every registered model, in registry order)."""
    from toki.systems.registry import SYSTEMS

    spec = config.get("systems", {})
    include = spec.get("include", "all")
    names = list(SYSTEMS) if include == "all" else list(include)
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise InvalidInput("matrix.toml", f"unknown systems {unknown}", f"use {sorted(SYSTEMS)}")
    return [n for n in names if n not in set(spec.get("exclude", []))]


def _strategies(wl: Mapping[str, Any], fault: str) -> list[str]:
    key = "strategies" if fault == "none" else f"{fault}_strategies"
    out = list(wl.get(key, []))
    bad = [s for s in out if s not in ("dpor", *SAMPLERS)]
    if bad:
        raise InvalidInput("matrix.toml", f"workload {wl.get('name')!r}: unknown strategy {bad}")
    return out


def _instances(wl: Mapping[str, Any], system: str) -> list[dict[str, Any]]:
    """The workload specs a [[workloads]] entry stands for, for one system: itself, or (with
    `capacity = true`) one workload per capacity limit the model declares."""
    drop = {"capacity", *SAMPLERS}
    base = {k: v for k, v in wl.items() if not k.endswith("strategies") and k not in drop}
    if not wl.get("capacity"):
        return [base]
    from toki.systems.registry import get_system

    out = []
    for label, limit in sorted(get_system(system).capacities.items()):
        name = f"{wl['name']}:{label.replace(' ', '-')}={limit}"
        out.append({**base, "name": name, "capacity_limit": int(limit), "capacity_of": label})
    return out


def plan(
    config: Mapping[str, Any], budget: str = "default", systems: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Every task of the experiment, in a fixed order; each carries its own seeds."""
    if budget not in config["budgets"]:
        raise InvalidInput(
            "budget", f"unknown budget {budget!r}", f"use {sorted(config['budgets'])}"
        )
    b = config["budgets"][budget]
    exp = config["experiment"]
    draws = [int(d) for d in range(int(b["draws"]))]
    if not draws:
        raise InvalidInput("matrix.toml", f"budget {budget!r} needs draws >= 1")
    tasks: list[dict[str, Any]] = []
    for system in systems if systems is not None else systems_of(config):
        for fault in exp.get("faults", ["none"]):
            for wl in config["workloads"]:
                strategies = _strategies(wl, fault)
                if not strategies:
                    continue
                runs = {s: min(int(b[s]), int(wl.get(s, b[s]))) for s in SAMPLERS}  # may lower
                for spec in _instances(wl, system):
                    tasks.append(
                        {
                            "index": len(tasks),
                            "system": system,
                            "workload": spec,
                            "fault": fault,
                            "crash_budget": FAULTS[fault],
                            "strategies": strategies,
                            "draws": draws,
                            "budget": {
                                "dpor": int(b["dpor"] if fault == "none" else b[f"dpor_{fault}"]),
                                **runs,
                            },
                            "judge_p": float(exp["judge_p"]),
                            "pct_depth": int(exp.get("pct_depth", 3)),
                            "anomalies": list(exp["anomalies"]),
                        }
                    )
    return tasks


def _workload(spec: Mapping[str, Any]) -> Any:
    from toki.sim.workload import Workload, capacity, scenario, synthetic

    if "scenario" in spec:
        base = scenario(str(spec["scenario"]))
    elif "synthetic" in spec:
        base = synthetic(**spec["synthetic"])
    elif "capacity_limit" in spec:
        base = capacity(int(spec["capacity_limit"]))
    else:
        raise InvalidInput(
            "matrix.toml", f"workload {spec.get('name')!r} needs scenario/synthetic/capacity"
        )
    return Workload(str(spec["name"]), base.inboxes, base.faults, base.params)


def run_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """Explore one system on one workload under one fault setting, for every judge draw;
    plain data back (see the module docstring).

    A workload is explored by DPOR in every draw or in none: DPOR runs draw after draw until
    it finishes in all of them; at the first draw whose DPOR is cut off by the budget, every
    draw is sampled instead (the workload could not be called exhaustive anyway). The runs of
    the cut-off exploration are still checked: an anomaly they show counts (and may give the
    witness), but they are no sample of anything and take no part in a rate."""
    from toki.check.runner import ExploreReport, explore_system, make_strategy
    from toki.experiments.crashes import CrashPoints
    from toki.systems.base import SimJudge
    from toki.systems.registry import get_system

    system = get_system(task["system"])
    workload = _workload(task["workload"])
    anomalies = list(task["anomalies"])
    judge_free = not getattr(system, "uses_judge", True)
    t0 = time.perf_counter()
    steps = 0

    def explore(strategy: str, seed: int, budget: int) -> ExploreReport:
        nonlocal steps
        judge = SimJudge(task["judge_p"], seed)
        if task["crash_budget"] and strategy in SAMPLERS:
            depth = task["pct_depth"] if strategy == "pct" else None
            chosen: Any = CrashPoints(seed, depth)  # crash points drawn uniformly
        else:
            chosen = make_strategy(strategy, seed, task["pct_depth"])
        report = explore_system(
            system,
            workload,
            chosen,
            budget=budget,
            adya_check=False,
            judge=judge,
            recovery=SimJudge(task["judge_p"], seed + 1),
            crash_budget=task["crash_budget"],
            anomalies=anomalies,
        )
        steps += report.steps
        if judge_free and (report.judged_runs or report.recovery_judge_calls):
            raise ProgramError(
                f"{task['system']} declares uses_judge = False but asked the judge in "
                f"{report.judged_runs} runs on {workload.name}"
            )
        return report

    per_draw: list[list[ExploreReport]] = []
    outside: list[ExploreReport] = []  # DPOR explorations dropped because one was cut off
    if "dpor" in task["strategies"]:
        shared: ExploreReport | None = None
        for seed in task["draws"]:
            if judge_free and shared is not None:
                report = shared  # no judge is ever asked: every draw explores the same
            else:
                report = shared = explore("dpor", seed, task["budget"]["dpor"])
            if not report.exhausted:
                outside = [r for draw in per_draw for r in draw] + [report]
                per_draw = []
                break
            per_draw.append([report])
    mode = "exhaustive" if per_draw else "sampled"
    if not per_draw:
        for seed in task["draws"]:
            per_draw.append(
                [
                    explore(strategy, seed, task["budget"][strategy])
                    for strategy in SAMPLERS
                    if strategy in task["strategies"] and task["budget"][strategy] > 0
                ]
            )
    draws_out: list[dict[str, Any]] = []
    best: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
    for d, (seed, reports) in enumerate(zip(task["draws"], per_draw, strict=True)):
        counts = {
            a: {
                "found": sum(r.anomalies.get(a, 0) for r in reports),
                "checked": sum(r.checked.get(a, 0) for r in reports),
                "undecided": sum(r.undecided.get(a, 0) for r in reports),
            }
            for a in anomalies
        }
        draws_out.append(
            {
                "seed": seed,
                "mode": mode,
                "runs": sum(r.schedules for r in reports),
                "recovery_judge_calls": sum(r.recovery_judge_calls for r in reports),
                "judged_runs": sum(r.judged_runs for r in reports),
                "counts": counts,
            }
        )
        for r in reports:
            _best_witnesses(best, r, d, anomalies)
    for r in outside:
        _best_witnesses(best, r, len(per_draw), anomalies)
    return {
        "index": task["index"],
        "system": task["system"],
        "workload": workload.name,
        "fault": task["fault"],
        "dpor": "dpor" in task["strategies"],
        "dpor_cut_after": outside[-1].schedules if outside else 0,
        "outside_found": {a: sum(r.anomalies.get(a, 0) for r in outside) for a in anomalies},
        "draws": draws_out,
        "steps": steps,
        "seconds": time.perf_counter() - t0,
        "witnesses": {a: w for a, (_, w) in sorted(best.items())},
    }


def _best_witnesses(
    best: dict[str, tuple[tuple[int, int], dict[str, Any]]],
    report: Any,
    draw: int,
    anomalies: Sequence[str],
) -> None:
    """Keep the shortest witness per anomaly (ties: the earliest draw)."""
    for a, w in report.witnesses.items():
        rank = (len(w.schedule), draw)
        if a in anomalies and (a not in best or rank < best[a][0]):
            best[a] = (rank, w.to_json())


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
    exhaustive = cell.dpor_workloads > 0 and cell.dpor_exhausted == cell.dpor_workloads
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
    }
    if rates:
        ci = cluster_interval(rates, alpha)
        row.update(rate=ci.estimate, draw_min=min(rates), draw_max=max(rates))
        row.update(ci_low=ci.low, ci_high=ci.high)
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
    elif (
        cell.anomaly == "N1"
        and runs > 0
        and cell.recovery_judge_calls == 0
        and (cell.judge_free or cell.judged_runs > 0)
    ):
        row.update(verdict="excludes", mode="check", rate=math.nan, ci_low=math.nan)
        row.update(ci_high=math.nan, draw_min=math.nan, draw_max=math.nan)
        asked = (
            "the model has no judge"
            if cell.judge_free
            else f"the live write path asked the judge in {cell.judged_runs} of them"
        )
        row["reason"] = (
            f"recovery asked the judge 0 times in {runs} runs ({asked}): nothing is "
            "re-adjudicated, so a fresh judge cannot change a winner (a deterministic check, "
            "not a rate)"
        )
    elif undecided > 0:
        row.update(verdict="undecided", rate=math.nan, ci_low=math.nan, ci_high=math.nan)
        row["reason"] = f"no anomaly in {runs} decided runs, but {undecided} runs undecided"
    elif exhaustive:
        row.update(verdict="excludes", power=1.0, reason=f"no anomaly; {scope}")
    else:
        bound = zero_upper_bound(cell.sampled_runs, alpha / 2) if cell.sampled_runs else 1.0
        power = detection_power(cell.sampled_runs, power_rate)
        row.update(verdict="not found", ci_low=0.0, ci_high=bound, power=power)
        row["reason"] = (
            f"0 of {runs} runs ({cell.sampled_runs} sampled); rate < {bound:.4f} at "
            f"{100 * (1 - alpha / 2):.1f} % if runs were independent; power {power:.3f} to "
            f"see a rate of {power_rate} in every draw; {scope}"
        )
    return row


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


@dataclass(slots=True)
class MatrixResult:
    rows: list[dict[str, Any]]  # decide()'s rows plus kind/version, in CSV order
    tasks: list[dict[str, Any]]  # run_task()'s results, in plan order
    seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    budget: str = "default"
    notes: list[str] = field(default_factory=list)  # footnotes (rows that are one model)

    def csv_rows(self) -> list[dict[str, str]]:
        return [_csv_row(r) for r in self.rows]


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.4f}"
    return str(x)


def _csv_row(row: Mapping[str, Any]) -> dict[str, str]:
    return {c: _fmt(row[c]) for c in COLUMNS}


def _shortest(results: Sequence[Mapping[str, Any]], anomaly: str) -> dict[str, Any] | None:
    best: tuple[int, int] | None = None
    out: dict[str, Any] | None = None
    for r in results:
        w = r["witnesses"].get(anomaly)
        if w is not None and (best is None or (len(w["schedule"]), r["index"]) < best):
            best, out = (len(w["schedule"]), r["index"]), w
    return out


def _verify(system: str, data: Mapping[str, Any], path: Path, other_draws: int) -> tuple[bool, Any]:
    """Write the witness under the registry name and re-run it before trusting it; for N2,
    also count the judge draws under which its state is reachable serially."""
    from toki.check.anomalies import serial_draws
    from toki.check.witness import Witness, replay_witness
    from toki.systems.registry import get_system

    w = dataclasses.replace(Witness.from_json(data), system=system)
    model = get_system(system)
    run, verdict = replay_witness(w, model)
    extra = None
    if verdict.found and w.anomaly == "N2" and other_draws > 0:
        seeds = [OTHER_DRAWS_BASE + i for i in range(other_draws)]
        hits = serial_draws(model, w.workload, run, seeds, w.judge_p)
        extra = (hits, other_draws)
        details = {
            **dict(w.details),
            "serial_under_other_draws": {"reachable": hits, "draws": other_draws},
        }
        w = dataclasses.replace(w, details=details)
    if verdict.found:
        w.save(path)
    return verdict.found, extra


def witness_name(system: str, anomaly: str, faults: str) -> str:
    suffix = "" if faults == "none" else f"-{faults}"
    return f"witnesses/{system}-{anomaly}{suffix}.json"


def cells(
    config: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    out: Path | None,
) -> list[CellData]:
    """Gather task results into cells; write (and replay) the shortest witness of each."""
    from toki.systems.registry import get_system

    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["system"], r["fault"]), []).append(r)
    exp = config["experiment"]
    other_draws = int(exp.get("other_draws", 0))
    out_cells = []
    for (system, fault), rs in groups.items():
        abstains = dict(get_system(system).abstains)
        ndraws = len(rs[0]["draws"])
        dpor = [r for r in rs if r["dpor"]]
        exhausted = [
            r["workload"] for r in dpor if all(d["mode"] == "exhaustive" for d in r["draws"])
        ]
        for anomaly in exp["anomalies"]:
            cell = CellData(
                system,
                anomaly,
                fault,
                found=_per_draw(rs, ndraws, anomaly, "found"),
                checked=_per_draw(rs, ndraws, anomaly, "checked"),
                undecided=_per_draw(rs, ndraws, anomaly, "undecided"),
                rates=_draw_rates(rs, ndraws, anomaly),
                shown_on=_shown_on(rs, anomaly),
                outside=sum(r["outside_found"][anomaly] for r in rs),
                sampled_runs=sum(
                    d["counts"][anomaly]["checked"]
                    for r in rs
                    for d in r["draws"]
                    if d["mode"] == "sampled"
                ),
                dpor_workloads=len(dpor),
                dpor_exhausted=len(exhausted),
                workloads=tuple(r["workload"] for r in rs),
                exhausted_workloads=tuple(exhausted),
                recovery_judge_calls=sum(d["recovery_judge_calls"] for r in rs for d in r["draws"]),
                judged_runs=sum(d["judged_runs"] for r in rs for d in r["draws"]),
                judge_free=not getattr(get_system(system), "uses_judge", True),
                abstain_reason=str(abstains.get(anomaly, "")),
            )
            w = _shortest(rs, anomaly)
            if w is not None and out is not None and not cell.abstain_reason:
                rel = witness_name(system, anomaly, fault)
                ok, extra = _verify(system, w, out / rel, other_draws)
                cell = dataclasses.replace(
                    cell, witness=rel, witness_replays=ok, serial_other_draws=extra
                )
            out_cells.append(cell)
    return out_cells


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


def _identity(system: str) -> dict[str, str]:
    """Row identity: a model row (`kind` model) and the revision it models; real rows
    (issue #15) add kind "real" and the library version that ran."""
    from toki.systems.registry import get_system

    model = get_system(system)
    return {"kind": "model", "version": model.version or model.release}


def same_model_notes(systems: Sequence[str]) -> list[str]:
    """Footnotes for registry names that are one and the same model (same description)."""
    from toki.canonical import canonical_json
    from toki.systems.registry import get_system

    seen: dict[str, str] = {}
    notes = []
    for s in systems:
        key = canonical_json(get_system(s).describe())
        if key in seen:
            notes.append(f"{seen[key]} and {s} are the same model (same configuration)")
        else:
            seen[key] = s
    return notes


def run_matrix(
    config_path: str | Path = DEFAULT_CONFIG,
    *,
    budget: str = "default",
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    processes: bool = True,
    out: str | Path = "verdict_matrix",
    systems: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
    real: bool = False,
    real_budget: str = "real",
) -> MatrixResult:
    """Plan, run, decide and write every output file; returns the rows and task results.
    With `real`, the real libraries' rows are added beside their model rows and the
    agreement table is written (`toki.experiments.real_matrix`)."""
    from toki.experiments.executors import run_tasks

    config = load_config(config_path)
    tasks = plan(config, budget, systems)
    if on_plan is not None:
        on_plan(len(tasks))
    t0 = time.perf_counter()
    results = run_tasks(
        run_task,
        tasks,
        executor=executor,
        workers=workers,
        address=address,
        processes=processes,
        progress=progress,
    )
    folder = Path(out)
    wdir = folder / "witnesses"
    wdir.mkdir(parents=True, exist_ok=True)
    for old in wdir.glob("*.json"):  # a witness from an earlier run must not linger
        old.unlink()
    exp = config["experiment"]
    rows = []
    order = {a: i for i, a in enumerate(exp["anomalies"])}
    faults = {f: i for i, f in enumerate(exp.get("faults", ["none"]))}
    decided = [
        decide(c, alpha=float(exp["alpha"]), power_rate=float(exp["power_rate"]))
        for c in cells(config, results, folder)
    ]
    decided = inherit_fault_free(decided)
    names = list(dict.fromkeys(r["system"] for r in decided))
    for r in sorted(
        decided, key=lambda r: (names.index(r["system"]), faults[r["faults"]], order[r["anomaly"]])
    ):
        rows.append({**r, **_identity(r["system"])})
    notes = same_model_notes(names)
    if real:
        from toki.experiments.real_matrix import add_real_rows

        rows, notes = add_real_rows(
            config, real_budget, rows, notes, folder, executor, workers, address, progress
        )
    seconds = time.perf_counter() - t0
    result = MatrixResult(rows, list(results), seconds, dict(config), budget, notes)
    write_outputs(result, folder)
    return result


# ---------------------------------------------------------------- outputs


def write_outputs(result: MatrixResult, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "matrix.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(result.csv_rows())
    (folder / "matrix.md").write_text(render_markdown(result))
    (folder / "matrix.tex").write_text(render_latex(result))
    plot(result, folder / "matrix.png")


def _grid(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[list[str], list[str], list[str], dict[Any, Any]]:
    systems = list(dict.fromkeys(r["system"] for r in rows))
    faults = list(dict.fromkeys(r["faults"] for r in rows))
    anomalies = list(dict.fromkeys(r["anomaly"] for r in rows))
    return systems, faults, anomalies, {(r["system"], r["faults"], r["anomaly"]): r for r in rows}


def short(row: Mapping[str, Any]) -> str:
    """A cell in a few characters: the rate and interval of an admits, the bound of a not
    found, and no number where nothing was measured."""
    v = row["verdict"]
    if v == "admits" and row["mode"] == "fault-free":
        return "admits (fault-free witness)"
    if v == "admits":
        return f"admits {row['rate']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    if v == "excludes":
        return "excludes (check)" if row["mode"] == "check" else "excludes"
    if v == "not found":
        return f"not found (< {row['ci_high']:.3f})"
    return str(v)


def render_markdown(result: MatrixResult) -> str:
    exp = result.config.get("experiment", {})
    b = result.config.get("budgets", {}).get(result.budget, {})
    systems, faults, anomalies, at = _grid(result.rows)
    level = 100 * (1 - float(exp.get("alpha", 0.05)))
    lines = [
        "# Verdict matrix",
        "",
        f"Generated by `toki matrix --budget {result.budget}` from `matrix.toml`; the rules are "
        f"in `docs/verdict-matrix.md`. Judge p = {exp.get('judge_p')}; {b.get('draws')} judge "
        f"draws (seeds 0–{int(b.get('draws', 1)) - 1}); per draw and workload DPOR up to "
        f"{b.get('dpor')} runs ({b.get('dpor_crash')} with crashes), else random "
        f"{b.get('random')} + PCT {b.get('pct')} runs. Rate = mean over judge draws of the "
        f"fraction of checked runs showing the anomaly, with a {level:.0f} % Student-t interval "
        "over the draws (the draw is the unit) and the lowest and highest draw. A not found "
        "gives the one-sided upper bound of the rate; excludes needs DPOR to have finished.",
        "",
    ]
    for note in result.notes:
        lines.append(f"Note: {note}.")
    if result.notes:
        lines.append("")
    for f in faults:
        lines += [
            f"## {FAULT_NAMES.get(f, f)}",
            "",
            "| system | " + " | ".join(ANOMALY_NAMES.get(a, a) for a in anomalies) + " |",
            "|---|" + "---|" * len(anomalies),
        ]
        for s in systems:
            lines.append(f"| {s} | " + " | ".join(short(at[s, f, a]) for a in anomalies) + " |")
        lines.append("")
    changed = changed_by_faults(result.rows)
    if changed:
        lines += [
            "## Verdicts that change with crashes",
            "",
            "A run of the crash setting may crash each agent once, at any point (DPOR: every "
            "point; samples: a point drawn uniformly, or none), so its rates mix runs with and "
            "without crashes and are not comparable with the fault-free ones; compare the "
            "verdicts.",
            "",
        ]
        lines += [f"- {s} {ANOMALY_NAMES.get(a, a)}: {v0} → {v1}" for s, a, v0, v1 in changed]
        lines.append("")
    lines += [
        "## Cells",
        "",
        "| system | faults | anomaly | verdict | rate | CI | draws (min–max) | runs | "
        "undecided | mode | power | witness | why |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        w = f"[{Path(r['witness']).name}]({r['witness']})" if r["witness"] else ""
        if r["serial_other_draws"]:
            hits, tried = r["serial_other_draws"]
            w += f" (serially reachable under {hits} of {tried} other judge draws)"
        ci = "" if math.isnan(r["ci_high"]) else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
        spread = "" if math.isnan(r["draw_min"]) else f"{r['draw_min']:.3f}–{r['draw_max']:.3f}"
        power = "" if math.isnan(r["power"]) else f"{r['power']:.3f}"
        lines.append(
            f"| {r['system']} | {r['faults']} | {r['anomaly']} | {r['verdict']} | "
            f"{_fmt(r['rate'])} | {ci} | {r['draws']}: {spread} | {r['runs']} | "
            f"{r['undecided']} | {r['mode']} | {power} | {w} | {r['reason']} |"
        )
    return "\n".join(lines) + "\n"


def changed_by_faults(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(system, anomaly, fault-free verdict, crash verdict) where the two differ."""
    systems, faults, anomalies, at = _grid(rows)
    if "none" not in faults or "crash" not in faults:
        return []
    out = []
    for s in systems:
        for a in anomalies:
            v0, v1 = at[s, "none", a]["verdict"], at[s, "crash", a]["verdict"]
            if v0 != v1:
                out.append((s, a, v0, v1))
    return out


def _tex(text: str) -> str:
    return text.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def _tex_cell(r: Mapping[str, Any]) -> str:
    v = r["verdict"]
    if v == "admits" and r["mode"] == "fault-free":
        return r"adm.$^{f}$"
    if v == "admits":
        return f"{r['rate']:.2f}"
    if v == "excludes":
        return r"$\checkmark^{c}$" if r["mode"] == "check" else r"$\checkmark$"
    if v == "not found":
        return rf"$<${r['ci_high']:.3f}"
    return {"abstains": "abst.", "undecided": "und."}.get(str(v), str(v))


def render_latex(result: MatrixResult) -> str:
    systems, faults, anomalies, at = _grid(result.rows)
    n = len(anomalies)
    lines = [
        "% generated by `toki matrix` -- do not edit",
        r"\begin{tabular}{l" + ("c" * n + "|") * (len(faults) - 1) + "c" * n + "}",
        r"\toprule",
        " & "
        + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{FAULT_NAMES.get(f, f)}}}" for f in faults)
        + r" \\",
        "System & " + " & ".join(a for _ in faults for a in anomalies) + r" \\",
        r"\midrule",
    ]
    for s in systems:
        lines.append(
            _tex(s)
            + " & "
            + " & ".join(_tex_cell(at[s, f, a]) for f in faults for a in anomalies)
            + r" \\"
        )
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


# Okabe–Ito colours (distinguishable with the common colour-vision deficiencies); abstains
# and not found also carry a hatch, so they differ from measured zeros in grey print too.
STYLE = {
    "admits": ("#D55E00", ""),
    "excludes": ("#0072B2", ""),
    "not found": ("#56B4E9", "///"),
    "undecided": ("#F0E442", "..."),
    "abstains": ("#FFFFFF", "xxx"),
}


def plot(result: MatrixResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    systems, faults, anomalies, at = _grid(result.rows)
    ncol = len(anomalies)
    fig, axes = plt.subplots(
        1,
        len(faults),
        figsize=(2.0 * ncol * len(faults) + 2.6, 0.36 * len(systems) + 2.4),
        sharey=True,
        squeeze=False,
    )
    for k, f in enumerate(faults):
        ax = axes[0][k]
        for i, s in enumerate(systems):
            for j, a in enumerate(anomalies):
                r = at[s, f, a]
                colour, hatch = STYLE[r["verdict"]]
                moved = f != faults[0] and at[s, faults[0], a]["verdict"] != r["verdict"]
                ax.add_patch(
                    Rectangle(
                        (j - 0.5, i - 0.5),
                        1,
                        1,
                        facecolor=colour,
                        hatch=hatch,
                        edgecolor="black" if moved else "#555555",
                        linewidth=2.0 if moved else 0.5,
                    )
                )
                dark = r["verdict"] in ("admits", "excludes")
                box = None if dark else {"facecolor": "white", "edgecolor": "none", "pad": 1.0}
                ax.text(
                    j,
                    i,
                    _figure_text(r),
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="white" if dark else "black",
                    bbox=box,
                )
        ax.set_xlim(-0.5, ncol - 0.5)
        ax.set_ylim(len(systems) - 0.5, -0.5)
        ax.set_xticks(
            range(ncol),
            [
                ANOMALY_NAMES.get(a, a)
                .replace(" (", "\n(", 1)
                .replace("N1 replay", "N1 replay\n")
                .replace("skew", "\nskew")
                for a in anomalies
            ],
            fontsize=7,
            rotation=0,
        )
        ax.xaxis.tick_top()
        ax.set_yticks(range(len(systems)), systems, fontsize=8)
        ax.set_title(FAULT_NAMES.get(f, f), fontsize=9, pad=34)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.tick_params(length=0)
    legend = [
        Patch(facecolor=c, hatch=h, edgecolor="#555555", label=v) for v, (c, h) in STYLE.items()
    ]
    fig.legend(handles=legend, loc="lower center", ncol=len(STYLE), fontsize=7, frameon=False)
    notes = "; ".join(result.notes)
    caption = (
        "admits: rate of anomalous runs (mean over judge draws and workloads); excludes: none, "
        "DPOR exhaustive ('check': recovery never asks the judge); not found: none in sampled "
        "runs, rate < the upper bound shown.\nA thick border marks a verdict that changes "
        "with crashes (runs with at most one crash per agent, at uniformly drawn points)."
    )
    fig.text(0.5, 0.045, caption + (f"\n{notes}" if notes else ""), ha="center", fontsize=6.5)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.savefig(path, dpi=150, metadata={"Software": None})
    plt.close(fig)


def _figure_text(r: Mapping[str, Any]) -> str:
    v = r["verdict"]
    if v == "admits" and r["mode"] == "fault-free":
        return "admits\n(fault-free)"
    if v == "admits":
        return f"{r['rate']:.2f}" if r["rate"] >= 0.095 else f"{r['rate']:.3f}"
    if v == "excludes":
        return "0 (check)" if r["mode"] == "check" else "0 (exhaustive)"
    if v == "not found":
        return f"< {r['ci_high']:.3f}"
    return str(v)
