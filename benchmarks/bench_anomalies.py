"""N1/N2/N3 checker time per run (issue "Anomaly checkers"), per system model.

For each model, explore the evidence-race and manager scenarios with DPOR (up to --runs
schedules) and time each checker on every run. N2 dominates: it re-executes the committed
claims serially in every order (3 claims: 6 serial runs per checked run).

    python -m benchmarks.bench_anomalies [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from benchmarks.common import machine_info, write_results
from toki.check.anomalies import n1_replay, n2_drift, n3_erasure
from toki.sim import DPOR, iter_runs
from toki.sim.workload import scenario
from toki.systems.base import SimJudge, build_program
from toki.systems.registry import SYSTEMS, get_system

MODELS = ["toki-lww", "toki-ewm", "mem0-1.0.11", "graphiti", "letta", "worlddb"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args(argv)
    runs_wanted = 10 if args.quick else args.runs
    judge, recovery = SimJudge(0.5, 1), SimJudge(0.5, 99)
    results: dict[str, Any] = {"machine": machine_info(), "runs_per_cell": runs_wanted,
                               "cells": []}
    for name in [m for m in MODELS if m in SYSTEMS]:
        model = get_system(name)
        for wl_name in ("evidence-race", "manager"):
            wl = scenario(wl_name)
            program = build_program(model, wl, judge=judge)
            times: dict[str, list[float]] = {"N1": [], "N2": [], "N3": []}
            n = 0
            for run in iter_runs(program, DPOR(), budget=runs_wanted):
                n += 1
                for label in ("N1", "N2", "N3"):
                    if label in model.abstains:
                        continue
                    t0 = time.perf_counter()
                    if label == "N1":
                        n1_replay(model, wl, run, recovery)
                    elif label == "N2":
                        n2_drift(model, wl, run, judge)
                    else:
                        n3_erasure(model, wl, run)
                    times[label].append((time.perf_counter() - t0) * 1000)
            cell = {"system": name, "workload": wl_name, "runs": n}
            for label, values in times.items():
                cell[f"{label}_ms_median"] = statistics.median(values) if values else None
            results["cells"].append(cell)
            print(cell)
    if not args.quick:
        write_results("anomalies", results)
    return results


if __name__ == "__main__":
    main()
