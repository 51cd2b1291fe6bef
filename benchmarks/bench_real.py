"""Real-library benchmark: real schedules per second per system, worker start-up, and the
time to create a system's environment from its lock file.

For every real system whose environment exists, DPOR explores the `manager` and
`manager-race` workloads to the end (every class; the count says how many) with all three
checks on, and the time per schedule includes the checks and the serial runs N2 needs.
Worker start-up is the time from spawning the worker to its first answer (importing the
library). Setup: the time `toki real setup` took when each cached environment was made (its
ready.json: downloads included), and in full mode one new environment for mem0-1.0.11 in a
temporary cache (pip's download cache as found, so usually warm).

Graphiti (graphiti-0.31.2) takes seconds per schedule (a fresh Kuzu database per run and
~30 gate points per claim), so its DPOR runs are capped (`CAPS`): its rows say how many
schedules ran and that they are not exhaustive. `--systems a,b` re-measures those systems
only and keeps the other rows of the results file (each row carries its own load average).

Anchor: the research notes' installs took ~110-135 s each (190-290 MB per environment).
The cores are shared with other work: the load average is recorded with the numbers.
Writes benchmarks/results/real.json.

    python -m benchmarks.bench_real            # full: includes one cold environment creation
    python -m benchmarks.bench_real --quick    # cached environments only
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info, write_results
from toki.real import EnvironmentMissing, explore_real, get_real_system, open_session
from toki.real.cli import make_real_workload
from toki.real.envs import env_dir
from toki.real.systems import SYSTEMS, setup_system, worker_python
from toki.sim.dpor import DPOR
from toki.systems.base import SimJudge

ANCHOR_SETUP = "research notes: each install ~110-135 s, 190-290 MB per environment"
WORKLOADS = ("manager", "manager-race")
CAPS = {"graphiti-0.31.2": 40}  # schedules per workload for the slow systems


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def system_row(name: str, budget: int) -> dict[str, Any] | None:
    system = get_real_system(name)
    try:
        worker_python(system)
    except EnvironmentMissing as exc:
        print(f"{name}: skipped ({exc})")
        return None
    load = os.getloadavg()
    t0 = time.perf_counter()
    with open_session(system):
        start = time.perf_counter() - t0
    row: dict[str, Any] = {"worker_start_s": round(start, 3), "workloads": {}}
    budget = min(budget, CAPS.get(name, budget))
    row["budget"] = budget
    for wl in WORKLOADS:
        workload = make_real_workload(wl, 2, 1, 1, 0)
        report = explore_real(system, workload, DPOR(), SimJudge(0.5, 0), SimJudge(0.5, 1),
                              budget=budget, seed=0)
        data = report.to_json()
        row["workloads"][wl] = {
            k: data[k]
            for k in ("schedules", "steps", "exhausted", "seconds", "schedules_per_s",
                      "serial_runs", "distinct_states", "anomalies")
        }
        row["workloads"][wl]["steps_per_s"] = round(report.steps / report.seconds, 1)
        print(f"{name} {wl}: {report.schedules} schedules in {report.seconds:.1f} s "
              f"({report.schedules_per_s:.2f}/s), anomalies {data['anomalies']}")
    if system.lock is not None:
        ready = env_dir(system.env_name, system.lock) / "ready.json"
        meta = json.loads(ready.read_text())
        row["setup_recorded_s"] = meta.get("seconds")
        row["environment_mb"] = round(_du(env_dir(system.env_name, system.lock)) / 2**20)
        row["environment"] = system.env_name
    row["loadavg_1_5_15"] = {
        "before": [round(x, 2) for x in load],
        "after": [round(x, 2) for x in os.getloadavg()],
    }
    return row


def cold_setup(name: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        old = os.environ.get("TOKI_REAL_CACHE")
        os.environ["TOKI_REAL_CACHE"] = cache
        try:
            t0 = time.perf_counter()
            report = setup_system(name)
            cold = time.perf_counter() - t0
            t0 = time.perf_counter()
            setup_system(name)
            warm = time.perf_counter() - t0
        finally:
            if old is None:
                os.environ.pop("TOKI_REAL_CACHE", None)
            else:
                os.environ["TOKI_REAL_CACHE"] = old
    return {"system": name, "cold_s": round(cold, 1), "cached_s": round(warm, 3),
            "packages": report.packages,
            "note": "a new environment; pip's own download cache as found (warm after a "
                    "first install: the recorded times include the downloads)"}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_real")
    ap.add_argument("--quick", action="store_true", help="no cold environment creation")
    ap.add_argument("--budget", type=int, default=5000, help="schedules per workload (cap)")
    ap.add_argument("--systems", default="", help="comma-separated: re-measure only these")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    only = [n for n in args.systems.split(",") if n]
    systems: dict[str, Any] = {}
    previous: dict[str, Any] = {}
    if only:
        path = Path(__file__).parent / "results" / "real.json"
        previous = json.loads(path.read_text()) if path.is_file() else {}
        systems = dict(previous.get("systems") or {})
    for name in only or sorted(SYSTEMS):
        row = system_row(get_real_system(name).name, args.budget)
        if row is not None:
            systems[get_real_system(name).name] = row
    cold = None if args.quick else cold_setup("mem0-1.0.11")
    if cold is None and only:
        cold = previous.get("cold_setup")
    if cold is not None:
        print(f"cold setup of mem0-1.0.11: {cold['cold_s']} s (cached: {cold['cached_s']} s)")
    summary: dict[str, Any] = {}
    for name, row in systems.items():
        race = row["workloads"]["manager-race"]
        summary[f"{name} schedules per s (manager-race, dpor, checked)"] = race["schedules_per_s"]
        if "setup_recorded_s" in row:
            summary[f"{name} environment setup s (when made)"] = row["setup_recorded_s"]
    if "mem0-1.0.11" in systems:
        summary["mem0-1.0.11 worker start s"] = systems["mem0-1.0.11"]["worker_start_s"]
    if cold is not None:
        summary["mem0-1.0.11 environment setup s (new, pip cache warm)"] = cold["cold_s"]
    data = {
        "machine": machine_info(),
        "loadavg_1_5_15": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "anchors": {"setup": ANCHOR_SETUP},
        "budget": args.budget,
        "summary": summary,
        "systems": systems,
        "cold_setup": cold,
    }
    write_results("real", data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
