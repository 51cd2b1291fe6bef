"""The verdict matrix (system × anomaly): plan tasks from matrix.toml, run them anywhere, and
decide every cell by the written rules of docs/verdict-matrix.md (no cell is decided by hand).

One task = system × workload × strategy × seed, explored by `toki.check.runner`; it returns
plain data (counts, exhaustion, the shortest witness), so the executor cannot change it.
A cell gathers its tasks: DPOR tasks give the exhaustive tier, random/PCT tasks the sampled
tier, and `decide` turns the counts into admits / excludes / abstains.
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

from toki.errors import InvalidInput
from toki.experiments.stats import wilson_interval

__all__ = [
    "BUDGETS",
    "COLUMNS",
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

COLUMNS = ("system", "anomaly", "verdict", "rate", "ci_low", "ci_high", "runs", "mode", "witness")
BUDGETS = ("small", "default")
DEFAULT_CONFIG = Path("verdict_matrix") / "matrix.toml"
SAMPLERS = ("random", "pct")


def load_config(path: str | Path = DEFAULT_CONFIG) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            config = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput("matrix.toml", f"cannot read {path}: {exc}") from exc
    for key in ("experiment", "workloads", "budgets"):
        if key not in config:
            raise InvalidInput("matrix.toml", f"{path} has no [{key}] section")
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
    tasks: list[dict[str, Any]] = []
    for system in systems if systems is not None else systems_of(config):
        for wl in config["workloads"]:
            for strategy in wl["strategies"]:
                if strategy not in ("dpor", *SAMPLERS):
                    raise InvalidInput("matrix.toml", f"unknown strategy {strategy!r}")
                for seed in b["seeds"]:
                    tasks.append(
                        {
                            "index": len(tasks),
                            "system": system,
                            "workload": {k: v for k, v in wl.items() if k != "strategies"},
                            "strategy": strategy,
                            "seed": int(seed),
                            "budget": int(b[strategy]),
                            "judge_p": float(exp["judge_p"]),
                            "pct_depth": int(exp.get("pct_depth", 3)),
                            "anomalies": list(exp["anomalies"]),
                        }
                    )
    return tasks


def _workload(spec: Mapping[str, Any]) -> Any:
    from toki.sim.workload import Workload, scenario, synthetic

    if "scenario" in spec:
        base = scenario(str(spec["scenario"]))
    elif "synthetic" in spec:
        base = synthetic(**spec["synthetic"])
    else:
        raise InvalidInput("matrix.toml", f"workload {spec.get('name')!r} needs scenario/synthetic")
    return Workload(str(spec["name"]), base.inboxes, base.faults, base.params)


def run_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """Explore one system on one workload with one strategy and seed; plain data back."""
    from toki.check.runner import explore_system, make_strategy
    from toki.systems.base import SimJudge
    from toki.systems.registry import get_system

    system = get_system(task["system"])
    strategy = make_strategy(task["strategy"], task["seed"], task["pct_depth"])
    report = explore_system(
        system,
        _workload(task["workload"]),
        strategy,
        budget=task["budget"],
        adya_check=False,
        judge=SimJudge(task["judge_p"], task["seed"]),
    )
    return {
        "index": task["index"],
        "system": task["system"],
        "workload": task["workload"]["name"],
        "strategy": task["strategy"],
        "seed": task["seed"],
        "schedules": report.schedules,
        "steps": report.steps,
        "seconds": report.seconds,
        "exhausted": report.exhausted,
        "anomalies": {a: int(report.anomalies.get(a, 0)) for a in task["anomalies"]},
        "witnesses": {
            a: w.to_json() for a, w in sorted(report.witnesses.items()) if a in task["anomalies"]
        },
    }


@dataclass(frozen=True, slots=True)
class CellData:
    """What the rules need to know about one (system, anomaly) cell."""

    system: str
    anomaly: str
    dpor_tasks: int = 0
    dpor_exhausted: int = 0  # DPOR tasks that finished within their budget
    exhaustive_runs: int = 0  # runs of the exhausted DPOR tasks
    exhaustive_anomalous: int = 0
    sampled_runs: int = 0  # runs of random/PCT tasks
    sampled_anomalous: int = 0
    other_anomalous: int = 0  # anomalous runs of DPOR tasks cut off by their budget
    witness: str = ""  # path of the shortest witness, if one was written
    witness_replays: bool = False  # it was re-run and showed the anomaly again
    abstain_reason: str = ""  # the model declares it cannot decide this anomaly


def detection_power(runs: int, rate: float) -> float:
    """P(at least one anomalous run in `runs` independent samples) if the true rate is
    `rate`: the chance a sampled cell would have found a witness (and said admits)."""
    return 1.0 - (1.0 - rate) ** runs if runs > 0 else 0.0


def decide(
    cell: CellData, *, alpha: float = 0.05, exclude_below: float = 0.05, power_rate: float = 0.05
) -> dict[str, Any]:
    """The verdict rules (docs/verdict-matrix.md), applied to one cell's counts."""
    exhaustive = cell.dpor_tasks > 0 and cell.dpor_exhausted == cell.dpor_tasks
    mode = "exhaustive" if exhaustive else "sampled"
    runs, hits = (
        (cell.exhaustive_runs, cell.exhaustive_anomalous)
        if exhaustive
        else (cell.sampled_runs, cell.sampled_anomalous)
    )
    if runs > 0:
        ci = wilson_interval(hits, runs, alpha)
        rate, low, high = ci.estimate, ci.low, ci.high
    else:
        rate, low, high = math.nan, 0.0, 1.0
    found = cell.exhaustive_anomalous + cell.sampled_anomalous + cell.other_anomalous
    power = 1.0 if exhaustive else detection_power(runs, power_rate)
    witness = ""
    if cell.abstain_reason:
        verdict, reason = "abstains", f"model abstains: {cell.abstain_reason}"
    elif found > 0 and cell.witness and cell.witness_replays:
        verdict, reason, witness = "admits", "witness replays", cell.witness
    elif found > 0:
        verdict, reason = "abstains", "anomalous runs counted, but no witness replayed"
    elif exhaustive:
        verdict = "excludes"
        reason = f"DPOR exhausted {cell.dpor_tasks} task(s) within budget; no anomaly"
    elif runs > 0 and high < exclude_below:
        verdict = "excludes"
        reason = f"0/{runs} sampled runs; upper bound {high:.4f} < {exclude_below}"
    else:
        verdict = "abstains"
        reason = (
            f"no anomaly, but not exhaustive and upper bound {high:.4f} >= {exclude_below} "
            f"({runs} sampled runs)"
        )
    return {
        "system": cell.system,
        "anomaly": cell.anomaly,
        "verdict": verdict,
        "rate": rate,
        "ci_low": low,
        "ci_high": high,
        "runs": runs,
        "mode": mode,
        "witness": witness,
        "reason": reason,
        "power": power,
        "anomalous_runs": found,
    }


@dataclass(slots=True)
class MatrixResult:
    rows: list[dict[str, Any]]  # decide()'s rows, COLUMNS plus reason/power/anomalous_runs
    tasks: list[dict[str, Any]]  # run_task()'s results, in plan order
    seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    budget: str = "default"

    def csv_rows(self) -> list[dict[str, str]]:
        return [_csv_row(r) for r in self.rows]


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.4f}"


def _csv_row(row: Mapping[str, Any]) -> dict[str, str]:
    return {c: _fmt(row[c]) if c in ("rate", "ci_low", "ci_high") else str(row[c]) for c in COLUMNS}


def _shortest(results: Sequence[Mapping[str, Any]], anomaly: str) -> dict[str, Any] | None:
    best: tuple[int, int] | None = None
    out: dict[str, Any] | None = None
    for r in results:
        w = r["witnesses"].get(anomaly)
        if w is not None and (best is None or (len(w["schedule"]), r["index"]) < best):
            best, out = (len(w["schedule"]), r["index"]), w
    return out


def _verify(system: str, data: Mapping[str, Any], path: Path) -> bool:
    """Write the witness under the registry name and re-run it before trusting it."""
    from toki.check.witness import Witness, replay_witness
    from toki.systems.registry import get_system

    w = dataclasses.replace(Witness.from_json(data), system=system)
    _, verdict = replay_witness(w, get_system(system))
    if verdict.found:
        w.save(path)
    return verdict.found


def cells(
    config: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    out: Path | None,
) -> list[CellData]:
    """Gather task results into cells; write (and replay) the shortest witness of each."""
    from toki.systems.registry import get_system

    by_system: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        by_system.setdefault(r["system"], []).append(r)
    out_cells = []
    for system, rs in by_system.items():
        abstains = dict(get_system(system).abstains)
        dpor = [r for r in rs if r["strategy"] == "dpor"]
        done = [r for r in dpor if r["exhausted"]]
        cut = [r for r in dpor if not r["exhausted"]]
        sampled = [r for r in rs if r["strategy"] in SAMPLERS]
        for anomaly in config["experiment"]["anomalies"]:
            cell = CellData(
                system,
                anomaly,
                dpor_tasks=len(dpor),
                dpor_exhausted=len(done),
                exhaustive_runs=sum(r["schedules"] for r in done),
                exhaustive_anomalous=sum(r["anomalies"][anomaly] for r in done),
                sampled_runs=sum(r["schedules"] for r in sampled),
                sampled_anomalous=sum(r["anomalies"][anomaly] for r in sampled),
                other_anomalous=sum(r["anomalies"][anomaly] for r in cut),
                abstain_reason=str(abstains.get(anomaly, "")),
            )
            w = _shortest(rs, anomaly)
            if w is not None and out is not None and not cell.abstain_reason:
                rel = f"witnesses/{system}-{anomaly}.json"
                ok = _verify(system, w, out / rel)
                cell = dataclasses.replace(cell, witness=rel, witness_replays=ok)
            out_cells.append(cell)
    return out_cells


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
) -> MatrixResult:
    """Plan, run, decide and write every output file; returns the rows and task results."""
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
    seconds = time.perf_counter() - t0
    folder = Path(out)
    wdir = folder / "witnesses"
    wdir.mkdir(parents=True, exist_ok=True)
    for old in wdir.glob("*.json"):  # a witness from an earlier run must not linger
        old.unlink()
    exp = config["experiment"]
    rows = [
        decide(
            c,
            alpha=float(exp["alpha"]),
            exclude_below=float(exp["exclude_below"]),
            power_rate=float(exp["power_rate"]),
        )
        for c in cells(config, results, folder)
    ]
    result = MatrixResult(rows, list(results), seconds, dict(config), budget)
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


def _grid(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str], dict[Any, Any]]:
    systems = list(dict.fromkeys(r["system"] for r in rows))
    anomalies = list(dict.fromkeys(r["anomaly"] for r in rows))
    return systems, anomalies, {(r["system"], r["anomaly"]): r for r in rows}


def _short(row: Mapping[str, Any]) -> str:
    mark = "E" if row["mode"] == "exhaustive" else "S"
    if math.isnan(row["rate"]):
        return f"{row['verdict']} ({mark})"
    return (
        f"{row['verdict']} {row['rate']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}] "
        f"n={row['runs']} {mark}"
    )


def render_markdown(result: MatrixResult) -> str:
    exp = result.config.get("experiment", {})
    b = result.config.get("budgets", {}).get(result.budget, {})
    systems, anomalies, at = _grid(result.rows)
    lines = [
        "# Verdict matrix",
        "",
        f"Generated by `toki matrix --budget {result.budget}` from `matrix.toml`; rules in "
        "`docs/verdict-matrix.md`. Judge p = "
        f"{exp.get('judge_p')}, seeds {b.get('seeds')}, budgets dpor={b.get('dpor')} "
        f"random={b.get('random')} pct={b.get('pct')} per task. Rate = anomalous runs / runs "
        f"with a two-sided {100 * (1 - float(exp.get('alpha', 0.05))):.0f} % Wilson interval; "
        "E = exhaustive (DPOR finished: runs are equivalence classes), S = sampled "
        f"(random + PCT runs). Sampled excludes needs an upper bound < {exp.get('exclude_below')}; "
        f"power = P(at least one anomalous run) at a true rate of {exp.get('power_rate')}.",
        "",
        "| system | " + " | ".join(anomalies) + " |",
        "|---|" + "---|" * len(anomalies),
    ]
    for s in systems:
        lines.append(f"| {s} | " + " | ".join(_short(at[s, a]) for a in anomalies) + " |")
    lines += [
        "",
        "## Cells",
        "",
        "| system | anomaly | verdict | rate | 95 % CI | runs | mode | power | witness | why |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        w = f"[{Path(r['witness']).name}]({r['witness']})" if r["witness"] else ""
        lines.append(
            f"| {r['system']} | {r['anomaly']} | {r['verdict']} | {_fmt(r['rate'])} | "
            f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}] | {r['runs']} | {r['mode']} | "
            f"{r['power']:.3f} | {w} | {r['reason']} |"
        )
    return "\n".join(lines) + "\n"


def _tex(text: str) -> str:
    return text.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def render_latex(result: MatrixResult) -> str:
    systems, anomalies, at = _grid(result.rows)
    lines = [
        "% generated by `toki matrix` -- do not edit",
        r"\begin{tabular}{l" + "c" * len(anomalies) + "}",
        r"\toprule",
        "System & " + " & ".join(anomalies) + r" \\",
        r"\midrule",
    ]
    for s in systems:
        cells_tex = []
        for a in anomalies:
            r = at[s, a]
            mark = r"$^{E}$" if r["mode"] == "exhaustive" else ""
            rate = "" if math.isnan(r["rate"]) else f" {r['rate']:.2f}"
            cells_tex.append(f"{r['verdict']}{mark}{rate}")
        lines.append(_tex(s) + " & " + " & ".join(cells_tex) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


_COLOURS = {"admits": "#d7301f", "excludes": "#1a9850", "abstains": "#bdbdbd"}


def plot(result: MatrixResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    systems, anomalies, at = _grid(result.rows)
    order = list(_COLOURS)
    data = [[order.index(at[s, a]["verdict"]) for a in anomalies] for s in systems]
    fig, ax = plt.subplots(figsize=(1.9 * len(anomalies) + 2.5, 0.42 * len(systems) + 1.4))
    ax.imshow(data, cmap=ListedColormap(list(_COLOURS.values())), vmin=0, vmax=2, aspect="auto")
    for i, s in enumerate(systems):
        for j, a in enumerate(anomalies):
            r = at[s, a]
            rate = "-" if math.isnan(r["rate"]) else f"{r['rate']:.2f}"
            mark = "E" if r["mode"] == "exhaustive" else "S"
            ax.text(j, i, f"{rate} {mark}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(anomalies)), anomalies)
    ax.set_yticks(range(len(systems)), systems, fontsize=8)
    ax.set_title(f"verdict matrix ({result.budget} budget): rate, E=exhaustive S=sampled")
    ax.legend(
        handles=[Patch(color=c, label=v) for v, c in _COLOURS.items()],
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize=8,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
