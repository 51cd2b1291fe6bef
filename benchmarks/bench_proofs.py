"""Seconds per z3 proof at its default bound, and how time grows with the bound k (claim
transactions) up to the largest k each bounded statement finishes in within 60 s →
benchmarks/results/proofs.json (`largest_k_within_60s`; docs/proofs.md quotes it).

For each statement k grows from 2 (k = 1 has no concurrent pair: vacuous) until the statement (its premise witness included) takes
more than 60 s or is not proved (z3 gives up at 60 s per check); each row also times the
statement's first false variant at the same k."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import machine_info, write_results  # noqa: E402
from proofs import (  # noqa: E402
    isolation_await,
    isolation_ewm,
    isolation_lww,
    isolation_rule,
    schema_soundness,
)
from proofs.run import run_all  # noqa: E402

SCALED = {
    "isolation_lww": isolation_lww,
    "isolation_ewm": isolation_ewm,
    "isolation_await": isolation_await,
    "isolation_rule": isolation_rule,
    "schema_soundness": schema_soundness,
}
TARGET = 60.0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_proofs")
    parser.add_argument("--max-k", type=int, default=10, help="stop growing k here")
    parser.add_argument("--only", choices=sorted(SCALED), help="grow one statement only")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results = run_all()
    total = time.perf_counter() - start
    per_proof = [
        {"name": r.name, "status": r.status.value, "ok": r.ok, "seconds": round(r.seconds, 4)}
        for r in results
    ]
    growth: dict[str, list[dict[str, Any]]] = {}
    largest: dict[str, int] = {}
    for name, mod in SCALED.items():
        if args.only is not None and name != args.only:
            continue
        rows = []
        for k in range(2, args.max_k + 1):  # k = 1 admits no conflicting pair: vacuous
            r = mod.prove(k)
            v = mod.false_variants(k)[0]
            rows.append(
                {
                    "k": k,
                    "status": r.status.value,
                    "seconds": round(r.seconds, 4),
                    "weaker_level_status": v.status.value,
                    "weaker_level_seconds": round(v.seconds, 4),
                }
            )
            print(
                f"{name} k={k}: {r.status.value} {r.seconds:.3f}s / {v.name} {v.seconds:.3f}s",
                flush=True,
            )
            if r.status.value != "proved" or r.seconds > TARGET:
                break
            largest[name] = k
        growth[name] = rows
    print(f"all proofs at default bounds: {total:.2f} s; largest k within 60 s: {largest}")
    write_results(
        "proofs",
        {
            "machine": machine_info(),
            "default_bounds_total_seconds": round(total, 3),
            "target_seconds": TARGET,
            "per_proof": per_proof,
            "growth_with_k": growth,
            "largest_k_within_60s": largest,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
