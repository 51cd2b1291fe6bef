"""Real rows of the verdict matrix (issue #15).

A real row is a real library (`toki.real`) explored beside its model row: the same
workloads (`matrix.toml`), fault settings, judge draws (the same `SimJudge` seeds, the same
question text), strategies (`toki.experiments.exploration`: DPOR first, random + PCT when
DPOR is cut off; `CrashPoints` for crashes) and verdict rules (`toki.experiments.verdicts`,
the model's abstentions). What differs is the subject, the budget (`[budgets.real]`: real
schedules cost a fresh library instance each) and the witness check (the real schedule is
replayed on the real code, `toki real replay`).

The agreement table (model against real, as a held-out test) is `toki.experiments.agreement`,
built from the files this writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toki.experiments.exploration import explore_task, witness_name
from toki.experiments.matrix_plan import SAMPLERS, plan, workload_of
from toki.experiments.verdicts import (
    CellData,
    cell_of,
    columns,
    decide_cells,
    shortest_witness,
)

__all__ = [
    "add_real_rows",
    "missing_real",
    "plan_real",
    "real_pairs",
    "real_rows",
    "run_real_task",
]

REAL_BUDGET = "real"


def real_row_name(name: str) -> str:
    return f"{name} (real)"


def real_pairs(models: Sequence[str]) -> list[tuple[str, str]]:
    """(model, real system) for every real system that stands beside one of `models`, in
    the models' order (whether or not its environment exists)."""
    from toki.real.systems import SYSTEMS

    out = []
    for model in models:
        out += [(model, name) for name, s in sorted(SYSTEMS.items()) if s.model == model]
    return out


def missing_real(pairs: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]]:
    """(pairs whose environment exists, one line per missing one naming its setup command)."""
    from toki.real.errors import EnvironmentMissing
    from toki.real.systems import get_real_system, worker_python

    ready, missing = [], []
    for model, name in pairs:
        try:
            worker_python(get_real_system(name))
        except EnvironmentMissing:
            missing.append(f"{name}: no environment (create it with `toki real setup {name}`)")
            continue
        ready.append((model, name))
    return ready, missing


def plan_real(
    config: Mapping[str, Any], budget: str, pairs: Sequence[tuple[str, str]]
) -> list[dict[str, Any]]:
    """The model's tasks (same workloads, capacity instances, faults, draws), each for the
    real system standing beside it."""
    tasks: list[dict[str, Any]] = []
    for model, name in pairs:
        for task in plan(config, budget, [model]):
            tasks.append(
                {
                    **task,
                    "index": len(tasks),
                    "system": real_row_name(name),
                    "real_system": name,
                    "model": model,
                    "anomalies": columns(config["experiment"]),
                }
            )
    return tasks


def run_real_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """`matrix.run_task` for a real system: the same exploration policy and the same plain
    record, with `explore_real` (one worker for every draw of the task)."""
    from toki.check.runner import make_strategy
    from toki.experiments.crashes import CrashPoints
    from toki.real.driver import open_session
    from toki.real.explore import RealReport, explore_real
    from toki.real.systems import get_real_system
    from toki.systems.base import SimJudge
    from toki.systems.registry import get_system

    system = get_real_system(task["real_system"])
    workload = workload_of(task["workload"])
    judge_free = not getattr(get_system(task["model"]), "uses_judge", True)
    with open_session(system) as session:
        reports: list[RealReport] = []

        def explore(strategy: str, seed: int, budget: int) -> RealReport:
            if task["crash_budget"] and strategy in SAMPLERS:
                depth = task["pct_depth"] if strategy == "pct" else None
                chosen: Any = CrashPoints(seed, depth)
            else:
                chosen = make_strategy(strategy, seed, task["pct_depth"])
            report = explore_real(
                system,
                workload,
                chosen,
                SimJudge(task["judge_p"], seed),
                SimJudge(task["judge_p"], seed + 1),
                budget=budget,
                crash_budget=task["crash_budget"],
                session=session,
                anomalies=task["anomalies"],
            )
            reports.append(report)
            return report

        # a system whose DPOR can never finish (Graphiti: its async sibling tasks are
        # released in a fixed order) is sampled straight away
        record = explore_task(
            task, explore, dpor_possible=system.exhaustible, judge_free=judge_free
        )
    return {
        **record,
        "real_system": task["real_system"],
        "model": task["model"],
        "abstains": _abstains(reports, task["anomalies"]),
    }


def _abstains(reports: Sequence[Any], anomalies: Sequence[str]) -> dict[str, str]:
    """The checks that abstained on every run of the task (none decided, none undecided
    for another cause), with the checks' reasons: the adapter cannot read what they need."""
    out = {}
    for a in anomalies:
        abstained = sum(r.abstained.get(a, 0) for r in reports)
        decided = sum(r.checked.get(a, 0) for r in reports)
        if abstained and not decided and abstained == sum(r.undecided.get(a, 0) for r in reports):
            reasons = dict.fromkeys(r.abstain_reasons[a] for r in reports if a in r.abstain_reasons)
            out[a] = "; ".join(reasons)
    return out


def check_abstains(results: Sequence[Mapping[str, Any]], anomaly: str) -> str:
    """A real cell's abstention by its check: every workload's task abstained on every run
    (the reason: the check's own), else ""."""
    if not results or not all(anomaly in r.get("abstains", {}) for r in results):
        return ""
    reasons = dict.fromkeys(r["abstains"][anomaly] for r in results)
    return f"the check abstains on every run: {'; '.join(reasons)}"


def _verify_real(data: Mapping[str, Any], path: Path) -> bool:
    """Replay the witness on the real code before trusting it; save it when it holds."""
    from toki.real.witness import RealWitness, replay_real

    w = RealWitness.from_json(dict(data))
    _, verdict = replay_real(w)
    if verdict.found:
        w.save(path)
    return verdict.found


def real_cells(
    config: Mapping[str, Any], results: Sequence[Mapping[str, Any]], out: Path | None
) -> list[CellData]:
    """`matrix.cells` for real results: the model's abstentions and judge declaration, the
    witness replayed on the real code; the derived-state classes too (`derived`), which
    abstain where the check does on every run (`check_abstains`)."""
    from toki.systems.registry import get_system

    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["system"], r["fault"]), []).append(r)
    out_cells = []
    for (system, fault), rs in groups.items():
        model = get_system(rs[0]["model"])
        for anomaly in columns(config["experiment"]):
            cell = cell_of(
                system,
                fault,
                anomaly,
                rs,
                judge_free=not getattr(model, "uses_judge", True),
                abstain_reason=str(dict(model.abstains).get(anomaly, ""))
                or check_abstains(rs, anomaly),
            )
            w = shortest_witness(rs, anomaly)
            if w is not None and out is not None and not cell.abstain_reason:
                rel = witness_name(_file_name(system), anomaly, fault)
                ok = _verify_real(w, out / rel)
                cell = dataclasses.replace(cell, witness=rel, witness_replays=ok)
            out_cells.append(cell)
    return out_cells


def _file_name(system: str) -> str:
    return system.replace(" (real)", "-real")


def real_rows(
    config: Mapping[str, Any],
    budget: str,
    pairs: Sequence[tuple[str, str]],
    *,
    out: Path | None,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Callable[[int], None] | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(decided rows with kind "real" and the library version, task results)."""
    from toki.experiments.executors import run_tasks
    from toki.real.systems import get_real_system

    tasks = plan_real(config, budget, pairs)
    if on_plan is not None:
        on_plan(len(tasks))
    results = run_tasks(
        run_real_task,
        tasks,
        executor=executor,
        workers=workers,
        address=address,
        processes=True,
        progress=progress,
    )
    decided = decide_cells(real_cells(config, results, out), config["experiment"])
    names = {real_row_name(n): n for _, n in pairs}
    keys = list(names)
    rows = []
    for r in sorted(decided, key=lambda r: keys.index(r["system"])):  # stable: pairs' order
        system = get_real_system(names[r["system"]])
        version = f"{system.library} {system.version}" if system.version else "toki (this tree)"
        rows.append({**r, "kind": "real", "version": version})
    return rows, list(results)


def interleave(
    model_rows: Sequence[dict[str, Any]],
    real: Sequence[dict[str, Any]],
    pairs: Sequence[tuple[str, str]],
) -> list[dict[str, Any]]:
    """Model rows with each model's real rows right after them."""
    by_model: dict[str, list[dict[str, Any]]] = {}
    for model, name in pairs:
        by_model.setdefault(model, []).extend(r for r in real if r["system"] == real_row_name(name))
    out: list[dict[str, Any]] = []
    systems = list(dict.fromkeys(r["system"] for r in model_rows))
    for s in systems:
        out += [r for r in model_rows if r["system"] == s]
        out += by_model.get(s, [])
    return out


def add_real_rows(
    config: Mapping[str, Any],
    budget: str,
    rows: Sequence[dict[str, Any]],
    notes: Sequence[str],
    folder: Path,
    executor: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> RealRun:
    """The model rows with the real rows beside them, the notes with a line per real system
    whose environment is missing, the real task records and the pairs that ran (the
    agreement table is built from the written files: `toki.experiments.agreement`)."""
    models = list(dict.fromkeys(r["system"] for r in rows))
    ready, missing = missing_real(real_pairs(models))
    real, records = real_rows(
        config,
        budget,
        ready,
        out=folder,
        executor=executor,
        workers=workers,
        address=address,
        progress=progress,
    )
    return RealRun(
        interleave(rows, real, ready),
        [*notes, *(f"real row missing: {m}" for m in missing)],
        records,
        ready,
        missing,
    )


@dataclass(frozen=True, slots=True)
class RealRun:
    rows: list[dict[str, Any]]  # model rows with each model's real rows after them
    notes: list[str]
    records: list[dict[str, Any]]  # the real tasks' records
    pairs: list[tuple[str, str]]  # (model, real system) that ran
    missing: list[str]  # one line per real system without an environment
