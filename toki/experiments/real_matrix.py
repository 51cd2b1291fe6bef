"""Real rows of the verdict matrix and the model-versus-real agreement table (issue #15).

A real row is a real library (`toki.real`) explored beside its model row: the same
workloads (`matrix.toml`), fault settings, judge draws (the same `SimJudge` seeds, the same
question text), strategies (`toki.experiments.exploration`: DPOR first, random + PCT when
DPOR is cut off; `CrashPoints` for crashes) and verdict rules (`toki.experiments.verdicts`,
the model's abstentions). What differs is the subject, the budget (`[budgets.real]`: real
schedules cost a fresh library instance each) and the witness check (the real schedule is
replayed on the real code, `toki real replay`).

`agreement` sets every real cell beside its model cell: both verdicts, both rates, and
whether they agree (admits against admits; excludes or not found against excludes or not
found). Every disagreement needs a resolution in `RESOLUTIONS` (a corrected model, or a
stated simplification); one without is reported as unresolved.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from toki.experiments.exploration import explore_task, witness_name
from toki.experiments.matrix_plan import SAMPLERS, plan, workload_of
from toki.experiments.verdicts import CellData, cell_of, decide_cells, shortest_witness

__all__ = [
    "AGREEMENT_COLUMNS",
    "RESOLUTIONS",
    "agreement",
    "missing_real",
    "plan_real",
    "real_pairs",
    "real_rows",
    "run_real_task",
    "write_agreement",
]

REAL_BUDGET = "real"
AGREEMENT_COLUMNS = (
    "model",
    "real",
    "version",
    "faults",
    "anomaly",
    "model_verdict",
    "real_verdict",
    "model_rate",
    "model_ci",
    "real_rate",
    "real_ci",
    "model_mode",
    "real_mode",
    "agree",
    "resolution",
)
NEGATIVE = ("excludes", "not found")

# Every disagreement between a model cell and its real cell, explained: (real system,
# anomaly) -> why. "*" matches any anomaly. Written after investigating the real witness.
RESOLUTIONS: dict[tuple[str, str], str] = {
    ("mem0-1.0.11", "RD"): (
        "A stated simplification of the model: it writes a FAISS `update` as one atomic "
        "upsert, while mem0's FAISS store deletes the point and inserts it again (two steps, "
        "docs/real.md). The real witness (duplicate-delivery) has two updates of one memory "
        "interleave inside their delete/insert pairs, so the point written last is the one "
        "whose clock read came first; `Memory.history` lists the rows by that time and "
        "re-applies the other value. The model's own ordering defect (rows re-applied in the "
        "order written, which made it report RD where the library does not) was corrected "
        "with a real run as its test."
    ),
}


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

        def explore(strategy: str, seed: int, budget: int) -> RealReport:
            if task["crash_budget"] and strategy in SAMPLERS:
                depth = task["pct_depth"] if strategy == "pct" else None
                chosen: Any = CrashPoints(seed, depth)
            else:
                chosen = make_strategy(strategy, seed, task["pct_depth"])
            return explore_real(
                system,
                workload,
                chosen,
                SimJudge(task["judge_p"], seed),
                SimJudge(task["judge_p"], seed + 1),
                budget=budget,
                crash_budget=task["crash_budget"],
                session=session,
            )

        # a system whose DPOR can never finish (Graphiti: its async sibling tasks are
        # released in a fixed order) is sampled straight away
        record = explore_task(
            task, explore, dpor_possible=system.exhaustible, judge_free=judge_free
        )
    return {**record, "real_system": task["real_system"], "model": task["model"]}


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
    witness replayed on the real code."""
    from toki.systems.registry import get_system

    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["system"], r["fault"]), []).append(r)
    out_cells = []
    for (system, fault), rs in groups.items():
        model = get_system(rs[0]["model"])
        for anomaly in config["experiment"]["anomalies"]:
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
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """The model rows with the real rows beside them, the notes with a line per real system
    whose environment is missing, and the real task records; writes agreement.md / .csv
    into `folder`."""
    t0 = time.perf_counter()
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
    merged = interleave(rows, real, ready)
    table = agreement(merged, ready)
    write_agreement(folder, table, budget=budget, missing=missing, seconds=time.perf_counter() - t0)
    return merged, [*notes, *(f"real row missing: {m}" for m in missing)], records


# ---------------------------------------------------------------- agreement


def _rate(row: Mapping[str, Any]) -> str:
    rate = row.get("rate")
    if isinstance(rate, float) and not math.isnan(rate):
        return f"{rate:.4f}"
    return ""


def _ci(row: Mapping[str, Any]) -> str:
    lo, hi = row.get("ci_low"), row.get("ci_high")
    if isinstance(hi, float) and not math.isnan(hi):
        return f"[{lo:.4f}, {hi:.4f}]"
    return ""


def _agree(model: str, real: str) -> str:
    if model == "admits" and real == "admits":
        return "yes"
    if model in NEGATIVE and real in NEGATIVE:
        return "yes"
    if {model, real} & {"abstains", "undecided"}:
        return "not compared"
    return "no"


def resolution(real: str, anomaly: str) -> str:
    return RESOLUTIONS.get((real, anomaly)) or RESOLUTIONS.get((real, "*")) or ""


def agreement(
    rows: Sequence[Mapping[str, Any]], pairs: Sequence[tuple[str, str]]
) -> list[dict[str, str]]:
    """Cell by cell: each real cell beside its model cell."""
    at = {(r["system"], r["faults"], r["anomaly"]): r for r in rows}
    out = []
    for model, name in pairs:
        for r in rows:
            if r["system"] != real_row_name(name):
                continue
            m = at.get((model, r["faults"], r["anomaly"]))
            if m is None:
                continue
            agree = _agree(m["verdict"], r["verdict"])
            why = resolution(name, r["anomaly"]) if agree == "no" else ""
            out.append(
                {
                    "model": model,
                    "real": name,
                    "version": str(r["version"]),
                    "faults": r["faults"],
                    "anomaly": r["anomaly"],
                    "model_verdict": m["verdict"],
                    "real_verdict": r["verdict"],
                    "model_rate": _rate(m),
                    "model_ci": _ci(m),
                    "real_rate": _rate(r),
                    "real_ci": _ci(r),
                    "model_mode": str(m["mode"]),
                    "real_mode": str(r["mode"]),
                    "agree": agree,
                    "resolution": why or ("unresolved" if agree == "no" else ""),
                }
            )
    return out


def render_agreement(
    table: Sequence[Mapping[str, str]],
    *,
    budget: str,
    missing: Sequence[str],
    seconds: float | None = None,
) -> str:
    counts = {k: sum(1 for r in table if r["agree"] == k) for k in ("yes", "no", "not compared")}
    lines = [
        "# Model verdicts against real verdicts",
        "",
        f"Generated by `toki matrix --real` (real budget `{budget}`, `matrix.toml`): every cell "
        "of a real row (the library itself, `toki.real`) beside the cell of the model row it "
        "stands beside, judged by the same rules (`docs/verdict-matrix.md`) on the same "
        "workloads, fault settings and judge draws. Agree: both admit, or neither found the "
        "anomaly (excludes / not found); abstains and undecided cells are not compared. Rates "
        "are not comparable number for number: a real schedule has many more steps (gate "
        "points) than the model's, so the fractions of runs differ; the verdicts compare.",
        "",
        f"{counts['yes']} cells agree, {counts['no']} disagree, {counts['not compared']} "
        "not compared.",
        "",
    ]
    if missing:
        lines += ["Real rows missing (no environment):", ""]
        lines += [f"- {m}" for m in missing]
        lines.append("")
    lines += [
        "| model | real | version | faults | anomaly | model | rate | real | rate | agree |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {r['model']} | {r['real']} | {r['version']} | {r['faults']} | {r['anomaly']} | "
            f"{r['model_verdict']} ({r['model_mode']}) | {r['model_rate']} {r['model_ci']} | "
            f"{r['real_verdict']} ({r['real_mode']}) | {r['real_rate']} {r['real_ci']} | "
            f"{r['agree']} |"
        )
    lines.append("")
    disagreements = [r for r in table if r["agree"] == "no"]
    lines += ["## Disagreements and their resolution", ""]
    if not disagreements:
        lines.append("None.")
    for r in disagreements:
        lines.append(
            f"- **{r['real']} {r['anomaly']} ({r['faults']})**: model {r['model_verdict']}, "
            f"real {r['real_verdict']}. {r['resolution']}"
        )
    lines.append("")
    return "\n".join(lines)


def write_agreement(folder: Path, table: Sequence[Mapping[str, str]], **kw: Any) -> None:
    with open(folder / "agreement.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(AGREEMENT_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    (folder / "agreement.md").write_text(render_agreement(table, **kw))
