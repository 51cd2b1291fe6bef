"""Run every benchmark (`make bench`); each writes its own results file."""

from __future__ import annotations

import importlib
import sys
import time

SCRIPTS = [
    "benchmarks.bench_core",
    "benchmarks.bench_algebra",
    "benchmarks.bench_backends",
    "benchmarks.bench_sim",
    "benchmarks.bench_check",
    "benchmarks.bench_history",
    "benchmarks.bench_anomalies",
    "benchmarks.bench_proofs",
    "benchmarks.bench_matrix",
    "benchmarks.bench_real",
    "benchmarks.bench_writers",
    "benchmarks.bench_integrity",
    "benchmarks.bench_consumption",
    "benchmarks.bench_show",
    "benchmarks.bench_write_cost",
    "benchmarks.bench_write_cost_pg",  # $TOKI_PG_DSN; skipped when unreachable
    "benchmarks.bench_open",
    "benchmarks.bench_scale",  # after bench_open and bench_history: it reads their results
]


def main() -> int:
    quick = "--quick" in sys.argv
    for name in SCRIPTS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            print(f"== {name}: not present, skipped")
            continue
        t0 = time.perf_counter()
        print(f"== {name}")
        module.main(["--quick"] if quick else [])
        print(f"== {name}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
