"""Seconds per z3 proof at its default bound, and how time grows with the bound k = 2 … 6
(k claim transactions for the isolation statements) → benchmarks/results/proofs.json.

RULE's serial outcomes are enumerated ((k+1)! orders), so it stops at k = 4."""

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
from proofs import isolation_await, isolation_ewm, isolation_lww, isolation_rule  # noqa: E402
from proofs.run import run_all  # noqa: E402

SCALED = {
    "isolation_lww": (isolation_lww, 6),
    "isolation_ewm": (isolation_ewm, 6),
    "isolation_await": (isolation_await, 6),
    "isolation_rule": (isolation_rule, 4),
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_proofs")
    parser.add_argument("--max-k", type=int, default=6)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    results = run_all()
    total = time.perf_counter() - start
    per_proof = [
        {"name": r.name, "status": r.status.value, "ok": r.ok, "seconds": round(r.seconds, 4)}
        for r in results
    ]
    growth: dict[str, list[dict[str, Any]]] = {}
    for name, (mod, cap) in SCALED.items():
        rows = []
        for k in range(2, min(cap, args.max_k) + 1):
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
            print(f"{name} k={k}: {r.status.value} {r.seconds:.3f}s / {v.name} {v.seconds:.3f}s")
        growth[name] = rows
    print(f"all proofs at default bounds: {total:.2f} s")
    write_results(
        "proofs",
        {
            "machine": machine_info(),
            "default_bounds_total_seconds": round(total, 3),
            "target_seconds": 60,
            "per_proof": per_proof,
            "growth_with_k": growth,
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
