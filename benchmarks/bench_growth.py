"""Costs that grow with the work (issue 21, goals 1-2): conflicts on one key, and replay.

Writes benchmarks/results/growth.json.

- conflicts: n different values asserted for one key over overlapping valid time (no
  supersession), through Memory.assert_fact; events written, write time, and resolve_at
  (now, a past valid time, and as of a past system time) against n, with the growth
  exponent (least-squares slope of log cost on log n) and the last decade's slope beside it
  (fixed costs flatter the fit at small n); targets, on the larger of the two: events ≤ 1.2,
  resolve_at ≤ 1.3. Writes are not targeted: each write rewrites its key's projection row,
  which names every live version, so a write costs O(n) on a key with n live versions.
- replay: the fold (toki.replay.replay) on the core benchmark's workload (supersession
  chains) and on a conflict-heavy one (20,000 assertions over 500 subjects x 7 fact keys,
  overlapping intervals), events/s each; target ≥ 500k/s and the conflict-heavy rate within
  2x per event. Best of `--repeat` runs (2 shared cores: the best is the least disturbed).

    python -m benchmarks.bench_growth            # n up to 10,000; 10^6 replay events
    python -m benchmarks.bench_growth --quick    # n up to 1,000; 10^5 replay events
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.bench_core import make_events
from benchmarks.common import machine_info, write_results
from toki.log import Event
from toki.memory import Memory
from toki.model import FactKey
from toki.replay import replay

BASE = datetime(2024, 1, 1, tzinfo=UTC)


def growth_exponent(ns: list[int], costs: list[float]) -> float:
    """Least-squares slope of log(cost) against log(n)."""
    xs = [math.log(n) for n in ns]
    ys = [math.log(max(c, 1e-12)) for c in costs]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def _median_us(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(times)


def conflicts_at(n: int) -> dict[str, Any]:
    mem = Memory(clock=lambda: BASE + timedelta(days=1000))
    key = FactKey("bench", "agent", "current_task")
    t0 = time.perf_counter()
    for i in range(n):
        mem.assert_fact(
            key,
            f"task-{i}",
            valid_from=BASE + timedelta(seconds=i),
            recorded_at=BASE + timedelta(days=1, seconds=i),
            source_id=f"source-{i}",
        )
    write_s = time.perf_counter() - t0
    now = BASE + timedelta(days=2)
    past_valid = BASE + timedelta(seconds=n // 2)
    past_system = BASE + timedelta(days=1, seconds=n // 2)
    t0 = time.perf_counter()
    first = mem.resolve_at(key, now)
    first_us = (time.perf_counter() - t0) * 1e6
    assert first.kind == "conflict" and len(first.version_ids) == n
    assert len(first.conflicts) == 1 and len(first.conflicts[0]) == n  # one group
    reps = 7
    return {
        "n": n,
        "events": len(mem.events()),
        "events_per_assertion": len(mem.events()) / n,
        "write_seconds": write_s,
        "resolve_at_first_us": first_us,
        "resolve_at_now_us": _median_us(lambda: mem.resolve_at(key, now), reps),
        "resolve_at_past_valid_us": _median_us(lambda: mem.resolve_at(key, past_valid), reps),
        "resolve_at_past_system_us": _median_us(
            lambda: mem.resolve_at(key, now, past_system), reps
        ),
        "open_conflict_groups": len(mem.open_conflicts(key)),
    }


def conflict_heavy_events(assertions: int = 20_000, seed: int = 5) -> list[Event]:
    """500 subjects x 7 fact keys, overlapping intervals, six competing values."""
    rng = random.Random(seed)
    mem = Memory(clock=lambda: BASE)
    keys = [FactKey("bench", f"s{i}", f"k{j}") for i in range(500) for j in range(7)]
    for n in range(assertions):
        start = rng.randrange(0, 400)
        mem.assert_fact(
            rng.choice(keys),
            f"v{rng.randrange(6)}",
            valid_from=BASE + timedelta(days=start),
            valid_to=BASE + timedelta(days=start + rng.randrange(1, 120)),
            recorded_at=BASE + timedelta(days=400 + n // 50),
            source_id=f"src{n}",
        )
    return list(mem.events())


def replay_rate(events: list[Event], repeat: int) -> dict[str, Any]:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        replay(events)
        best = min(best, time.perf_counter() - t0)
    return {
        "events": len(events),
        "keys": len({e.key for e in events}),
        "best_seconds": best,
        "events_per_s": len(events) / best,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    ns = [10, 100, 1_000] if args.quick else [10, 100, 1_000, 10_000]
    rows = []
    for n in ns:
        rows.append(conflicts_at(n))
        print("  conflicts:", rows[-1])
    exps = {
        metric: growth_exponent(ns, [r[metric] for r in rows])
        for metric in (
            "events",
            "resolve_at_now_us",
            "resolve_at_past_valid_us",
            "resolve_at_past_system_us",
            "write_seconds",
        )
    }
    # the fit over every n is flattered by fixed costs at small n: the last decade's slope
    # (between the two largest n) is reported beside it, and the targets take the larger
    tail = {metric: growth_exponent(ns[-2:], [r[metric] for r in rows[-2:]]) for metric in exps}
    print("  growth exponents:", {k: round(v, 3) for k, v in exps.items()})
    print("  last-decade exponents:", {k: round(v, 3) for k, v in tail.items()})
    core_n = 100_000 if args.quick else 1_000_000
    core = replay_rate(make_events(core_n, 10_000), args.repeat)
    print("  replay core:", core)
    heavy = replay_rate(conflict_heavy_events(), args.repeat)
    print("  replay conflict-heavy:", heavy)
    ratio = core["events_per_s"] / heavy["events_per_s"]
    results = {
        "machine": machine_info(),
        "quick": args.quick,
        "conflicts": rows,
        "growth_exponents": exps,
        "last_decade_exponents": tail,
        "replay_core": core,
        "replay_conflict_heavy": heavy,
        "targets": {
            "conflict_events_growth": {
                "target": 1.2,
                "measured": max(exps["events"], tail["events"]),
            },
            "resolve_at_growth": {
                "target": 1.3,
                "measured": max(
                    e[m]
                    for e in (exps, tail)
                    for m in (
                        "resolve_at_now_us",
                        "resolve_at_past_valid_us",
                        "resolve_at_past_system_us",
                    )
                ),
            },
            "replay_events_per_s": {"target": 500_000, "measured": core["events_per_s"]},
            "conflict_heavy_slowdown_per_event": {"target": 2.0, "measured": ratio},
        },
    }
    write_results("growth", results)


if __name__ == "__main__":
    main()
