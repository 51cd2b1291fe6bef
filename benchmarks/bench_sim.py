"""Exploration benchmark: scheduling throughput and schedules explored per trace class.

For each program of `toki.sim.examples.BENCHMARKS` it counts the schedules explored by
exhaustive search, by preemption-bounded search (bounds 1 and 2) and by DPOR, beside the
number of Mazurkiewicz trace classes (exhaustive enumeration, each run hashed by
`trace_class`). The figure of merit is DPOR schedules / classes (optimal DPOR = 1.0).
Throughput is engine steps per second (replayed prefixes included) for a seeded random walk
(no footprints), exhaustive search, and DPOR (footprints and race analysis on).

Targets: ≥ 100k steps/s for the random walk; DPOR/classes ≤ 1.5 on every program.
Also: the outbox relay (`toki.sim.relay`) explored by DPOR at three isolation levels, with a
concurrent source writer, one scheduled delivery failure and one crash per process; each
final state judged by `toki.check.relay.relay_verdict`.
Writes benchmarks/results/sim.json.

    python -m benchmarks.bench_sim            # full: exhaustive up to 10^6 schedules
    python -m benchmarks.bench_sim --quick    # exhaustive up to 2·10^4 schedules
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.common import machine_info, write_results
from toki.check.relay import CAUSES, explore_relay
from toki.isolation import Isolation
from toki.sim import (
    DPOR,
    BoundedDFS,
    ExploreResult,
    RandomStrategy,
    Run,
    Strategy,
    explore,
    trace_class,
)
from toki.sim.examples import BENCHMARKS
from toki.sim.relay import SEED_OUTBOX, relay_program

TARGET_STEPS_PER_S = 100_000
TARGET_RATIO = 1.5


def _explore(name: str, strategy: Strategy, budget: int, **kw: Any) -> ExploreResult:
    return explore(BENCHMARKS[name](), strategy, budget=budget, keep_runs=False, **kw)


def program_row(name: str, budget: int) -> dict[str, Any]:
    """One row of the table: schedule counts per strategy and the trace classes."""
    classes: set[str] = set()

    def hash_class(run: Run) -> None:
        classes.add(trace_class(run))

    full = _explore(name, BoundedDFS(track=True), budget, on_run=hash_class)
    pb1 = _explore(name, BoundedDFS(1), budget)
    pb2 = _explore(name, BoundedDFS(2), budget)
    dpor = _explore(name, DPOR(), budget)
    n_classes = len(classes) if full.complete else None
    row: dict[str, Any] = {
        "program": name,
        "exhaustive": full.schedules,
        "exhaustive_complete": full.complete,
        "bounded_1": pb1.schedules,
        "bounded_2": pb2.schedules,
        "dpor": dpor.schedules,
        "dpor_complete": dpor.complete,
        "classes": n_classes,
        "ratio": round(dpor.schedules / n_classes, 4) if n_classes else None,
        "final_states": len(full.finals) if full.complete else None,
        "dpor_final_states": len(dpor.finals),
        "dpor_same_finals": dpor.finals == full.finals if full.complete else None,
        "dpor_notes": dict(dpor.notes),
        "seconds": {
            "exhaustive_with_classes": round(full.elapsed, 3),
            "bounded_1": round(pb1.elapsed, 3),
            "bounded_2": round(pb2.elapsed, 3),
            "dpor": round(dpor.elapsed, 3),
        },
    }
    return row


def throughput(runs: int) -> dict[str, Any]:
    """Engine steps per second, best of three, on the judged-increments program."""
    out: dict[str, Any] = {}
    for label, make, budget in (
        ("random_walk", lambda: RandomStrategy(seed=1), runs),
        ("exhaustive", lambda: BoundedDFS(), runs),
        ("exhaustive_tracked", lambda: BoundedDFS(track=True), runs),
        ("dpor", lambda: DPOR(), runs),
    ):
        best = None
        for _ in range(3):
            result = _explore("judges-rc", make(), budget)
            if best is None or result.steps_per_s > best.steps_per_s:
                best = result
        assert best is not None
        out[label] = {
            "steps": best.steps,
            "schedules": best.schedules,
            "seconds": round(best.elapsed, 4),
            "steps_per_s": round(best.steps_per_s),
        }
    return out


def relay_rows(rows: int, budget: int = 1_000_000) -> list[dict[str, Any]]:
    """Schedules DPOR explores for the relay per level, and how many lose or invent history."""
    out = []
    for level in (Isolation.READ_UNCOMMITTED, Isolation.READ_COMMITTED, Isolation.SNAPSHOT):
        prog = relay_program(SEED_OUTBOX[:rows], level=level, failures=1, crash_budget=1)
        started = time.perf_counter()
        summary = explore_relay(prog, budget=budget)
        out.append({"level": level.value, "rows": rows,
                    **{k: summary[k] for k in ("schedules", "complete", "flagged", *CAUSES)},
                    "seconds": round(time.perf_counter() - started, 2)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small budgets (CI smoke run)")
    args = parser.parse_args(argv)
    budget = 20_000 if args.quick else 1_000_000
    started = time.perf_counter()
    speed = throughput(2_000 if args.quick else 20_000)
    rows = []
    for name in BENCHMARKS:
        row = program_row(name, budget)
        rows.append(row)
        print(
            f"{name:16} exhaustive {row['exhaustive']:>8}{'' if row['exhaustive_complete'] else '+'}"
            f"  pb1 {row['bounded_1']:>6}  pb2 {row['bounded_2']:>7}  dpor {row['dpor']:>6}"
            f"  classes {row['classes']!s:>6}  ratio {row['ratio']!s:>6}",
            flush=True,
        )
    relay = relay_rows(1 if args.quick else 2)
    for r in relay:
        print(f"relay {r['level']:17} {r['schedules']:>7} schedules, {r['flagged']:>6} flagged")
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    walk = speed["random_walk"]["steps_per_s"]
    summary = {
        "random_walk_steps_per_s": walk,
        "steps_per_s_target": TARGET_STEPS_PER_S,
        "steps_per_s_met": walk >= TARGET_STEPS_PER_S,
        "max_dpor_ratio": max(ratios) if ratios else None,
        "ratio_target": TARGET_RATIO,
        "ratio_met": bool(ratios) and max(ratios) <= TARGET_RATIO and len(ratios) == len(rows),
        "programs_with_classes": len(ratios),
        "programs": len(rows),
    }
    for label, s in speed.items():
        print(f"{label:20} {s['steps_per_s']:>9} steps/s ({s['steps']} steps)")
    print(summary)
    write_results(
        "sim",
        {
            "machine": machine_info(),
            "mode": "quick" if args.quick else "full",
            "budget": budget,
            "throughput": speed,
            "programs": rows,
            "relay": relay,
            "summary": summary,
            "wall_seconds": round(time.perf_counter() - started, 1),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
