"""The verdict matrix (system × fault setting × anomaly) for model rows: run each planned task
(`matrix_plan`) on a model, gather the tasks into cells and decide them by the written rules
(`verdicts`, docs/verdict-matrix.md; no cell is decided by hand), write and replay each
cell's shortest witness, and write the outputs (`matrix_output`). With `real`, the real
libraries' rows are added beside (`real_matrix`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from toki.errors import ProgramError
from toki.experiments.agreement import write_agreement
from toki.experiments.exploration import explore_task, witness_name
from toki.experiments.matrix_output import (
    ANOMALY_NAMES,
    COLUMNS,
    FAULT_NAMES,
    MatrixResult,
    render_latex,
    render_markdown,
    short,
    write_outputs,
)
from toki.experiments.matrix_plan import (
    BUDGETS,
    DEFAULT_CONFIG,
    FAULTS,
    SAMPLERS,
    load_config,
    plan,
    systems_of,
    workload_of,
)
from toki.experiments.real_matrix import add_real_rows
from toki.experiments.verdicts import (
    VERDICTS,
    CellData,
    cell_of,
    decide,
    decide_cells,
    detection_power,
    inherit_fault_free,
    model_derived_cells,
    shortest_witness,
)

__all__ = [
    "ANOMALY_NAMES",
    "BUDGETS",
    "COLUMNS",
    "DEFAULT_CONFIG",
    "FAULTS",
    "FAULT_NAMES",
    "SAMPLERS",
    "VERDICTS",
    "CellData",
    "MatrixResult",
    "decide",
    "detection_power",
    "inherit_fault_free",
    "load_config",
    "plan",
    "render_latex",
    "render_markdown",
    "run_matrix",
    "run_task",
    "same_model_notes",
    "short",
    "systems_of",
    "witness_name",
    "workload_of",
    "write_outputs",
]

_workload = workload_of  # the name tests/real/test_toki_memory.py imports
OTHER_DRAWS_BASE = 10_000  # seeds of the judge draws an N2 witness is re-checked under


def run_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """Explore one model on one workload under one fault setting, for every judge draw, by
    the policy of `toki.experiments.exploration`; plain data back."""
    from toki.check.runner import ExploreReport, explore_system, make_strategy
    from toki.experiments.crashes import CrashPoints
    from toki.systems.base import SimJudge
    from toki.systems.registry import get_system

    system = get_system(task["system"])
    workload = workload_of(task["workload"])
    judge_free = not getattr(system, "uses_judge", True)

    def explore(strategy: str, seed: int, budget: int) -> ExploreReport:
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
            judge=SimJudge(task["judge_p"], seed),
            recovery=SimJudge(task["judge_p"], seed + 1),
            crash_budget=task["crash_budget"],
            anomalies=list(task["anomalies"]),
        )
        if judge_free and (report.judged_runs or report.recovery_judge_calls):
            raise ProgramError(
                f"{task['system']} declares uses_judge = False but asked the judge in "
                f"{report.judged_runs} runs on {workload.name}"
            )
        return report

    return explore_task(task, explore, judge_free=judge_free)


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


def n2_origin(system: str, data: Mapping[str, Any], budget: int) -> str:
    """Classify an N2 witness by enumerating the judge's answers (toki.check.anomalies.
    n2_origin_by_answers): "judge" when some serial execution of its committed claims
    reaches its state under some answers, "schedule" when none does under any answers,
    "bounded" when `budget` serial runs did not finish the enumeration, "" when the witness
    does not replay."""
    from toki.check.anomalies import n2_origin_by_answers
    from toki.check.witness import Witness, replay_witness
    from toki.systems.registry import get_system

    w = dataclasses.replace(Witness.from_json(data), system=system)
    model = get_system(system)
    run, verdict = replay_witness(w, model)
    if not verdict.found:
        return ""
    return n2_origin_by_answers(model, w.workload, run, budget)[0]


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
    answer_runs = int(exp.get("n2_answer_runs", 0))
    out_cells = []
    for (system, fault), rs in groups.items():
        model = get_system(system)
        for anomaly in exp["anomalies"]:
            cell = cell_of(
                system,
                fault,
                anomaly,
                rs,
                judge_free=not getattr(model, "uses_judge", True),
                abstain_reason=str(dict(model.abstains).get(anomaly, "")),
            )
            w = shortest_witness(rs, anomaly)
            if w is not None and out is not None and not cell.abstain_reason:
                rel = witness_name(system, anomaly, fault)
                ok, extra = _verify(system, w, out / rel, other_draws)
                cell = dataclasses.replace(
                    cell, witness=rel, witness_replays=ok, serial_other_draws=extra
                )
            if anomaly == "N2" and out is not None and not cell.abstain_reason and answer_runs:
                origins = tuple(
                    (r["workload"], n2_origin(system, r["witnesses"]["N2"], answer_runs))
                    for r in rs
                    if "N2" in r["witnesses"]
                )
                cell = dataclasses.replace(cell, n2_origins=tuple(o for o in origins if o[1]))
            out_cells.append(cell)
        out_cells += model_derived_cells(system, fault, exp)
    return out_cells


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
    decided = decide_cells(cells(config, results, folder), config["experiment"])
    rows = [{**r, **_identity(r["system"])} for r in decided]
    names = list(dict.fromkeys(r["system"] for r in rows))
    notes = same_model_notes(names)
    results = list(results)
    ran = None
    if real:
        ran = add_real_rows(
            config, real_budget, rows, notes, folder, executor, workers, address, progress
        )
        rows, notes, results = ran.rows, ran.notes, results + ran.records
    seconds = time.perf_counter() - t0
    result = MatrixResult(rows, results, seconds, dict(config), budget, notes)
    write_outputs(result, folder)
    if ran is not None:  # from the files just written, as `python -m ...agreement` does
        write_agreement(folder, config, ran.pairs, budget=real_budget, missing=ran.missing)
    return result
