"""How one matrix task is explored, for models and real libraries alike: DPOR first where the
workload lists it, random + PCT where DPOR is cut off or not listed, and the plain per-draw
record both matrix builders return (so the executor cannot change it).

A workload is explored by DPOR in every draw or in none: DPOR runs draw after draw until it
finishes in all of them; at the first draw whose DPOR is cut off by the budget, every draw is
sampled instead (the workload could not be called exhaustive anyway). The runs of the cut-off
exploration are still checked: an anomaly they show counts (and may give the witness), but
they are no sample of anything and take no part in a rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from toki.experiments.matrix_plan import SAMPLERS

__all__ = ["Report", "explore_task", "witness_name"]


class Report(Protocol):
    """What an exploration reports (`toki.check.runner.ExploreReport`, `RealReport`)."""

    @property
    def exhausted(self) -> bool: ...
    @property
    def schedules(self) -> int: ...
    @property
    def steps(self) -> int: ...
    @property
    def recovery_judge_calls(self) -> int: ...
    @property
    def judged_runs(self) -> int: ...
    @property
    def anomalies(self) -> Mapping[str, int]: ...
    @property
    def checked(self) -> Mapping[str, int]: ...
    @property
    def undecided(self) -> Mapping[str, int]: ...
    @property
    def witnesses(self) -> Mapping[str, Any]: ...


def explore_task(
    task: Mapping[str, Any],
    explore: Callable[[str, int, int], Report],
    *,
    dpor_possible: bool = True,
    judge_free: bool = False,
) -> dict[str, Any]:
    """Run `explore(strategy, seed, budget)` over the task's draws by the policy above and
    return the task's record: per draw its mode, runs and counts per anomaly; the shortest
    witness per anomaly. `judge_free`: every draw's DPOR explores the same, so it runs once.
    `dpor_possible=False` samples straight away (a system whose DPOR can never finish)."""
    t0 = time.perf_counter()
    anomalies = list(task["anomalies"])
    ran: list[Report] = []

    def run(strategy: str, seed: int, budget: int) -> Report:
        report = explore(strategy, seed, budget)
        ran.append(report)
        return report

    per_draw: list[list[Report]] = []
    outside: list[Report] = []  # DPOR explorations dropped because one was cut off
    if "dpor" in task["strategies"] and dpor_possible:
        shared: Report | None = None
        for seed in task["draws"]:
            if judge_free and shared is not None:
                report = shared  # no judge is ever asked: every draw explores the same
            else:
                report = shared = run("dpor", seed, task["budget"]["dpor"])
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
                    run(strategy, seed, task["budget"][strategy])
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
        "workload": str(task["workload"]["name"]),
        "fault": task["fault"],
        "dpor": "dpor" in task["strategies"],
        "dpor_cut_after": outside[-1].schedules if outside else 0,
        "outside_found": {a: sum(r.anomalies.get(a, 0) for r in outside) for a in anomalies},
        "draws": draws_out,
        "steps": sum(r.steps for r in ran),
        "seconds": time.perf_counter() - t0,
        "witnesses": {a: w for a, (_, w) in sorted(best.items())},
    }


def _best_witnesses(
    best: dict[str, tuple[tuple[int, int], dict[str, Any]]],
    report: Report,
    draw: int,
    anomalies: Sequence[str],
) -> None:
    """Keep the shortest witness per anomaly (ties: the earliest draw)."""
    for a, w in report.witnesses.items():
        rank = (len(w.schedule), draw)
        if a in anomalies and (a not in best or rank < best[a][0]):
            best[a] = (rank, w.to_json())


def witness_name(system: str, anomaly: str, faults: str) -> str:
    suffix = "" if faults == "none" else f"-{faults}"
    return f"witnesses/{system}-{anomaly}{suffix}.json"
