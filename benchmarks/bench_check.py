"""Benchmark of the Adya checker (toki.check.adya) against the published checker anchors.

Generates random typed histories of 10^3 … 10^6 committed transactions, executed serially
(acyclic), or with short anomalous pairs planted at random places (cyclic), and measures
``check`` time and peak memory. Each configuration runs in a fresh subprocess, so peak RSS
(VmHWM, reset after generation) belongs to that configuration alone.

    python -m benchmarks.bench_check            # full: 10^3 … 10^6, writes results/check.json
    python -m benchmarks.bench_check --quick    # 10^3 and 10^4 only
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toki.check.adya import History, Op, Txn, check

RESULTS = Path(__file__).resolve().parent / "results" / "check.json"

ANCHORS = {
    "elle": "Jepsen Elle: ~100k-op list-append histories in ~55-73 s on a 24-core Xeon "
    "(Kingsbury & Alvaro, VLDB 2020, Fig. 4, read off plot)",
    "plume": "Plume: 1,000,000 txns (20M ops) checked for RC/RA/TCC in ~92-105 s "
    "(Liu et al., OOPSLA 2024, artifact fig13a)",
    "target": "toki target: 10^6 committed txns checked in <= 60 s on 2 cores",
}

PLANTS = ("lost-update", "write-skew", "G1c", "G0")


@dataclass
class _State:
    """A serial store: current value of each key and each key's installed version order."""

    values: dict[int, Any]
    order: dict[int, list[Any]]
    next_value: int = 0

    def fresh(self) -> int:
        self.next_value += 1
        return self.next_value


def generate(
    n: int,
    *,
    workload: str = "register",
    plants: int = 0,
    seed: int = 0,
    keys: int | None = None,
    ops: int = 4,
) -> tuple[History, list[str]]:
    """A history of ``n`` committed txns run one after another, then ``plants`` anomalous pairs.

    Each txn touches ``ops`` distinct keys, reading or writing each with equal chance.
    ``register`` histories carry the explicit version order (as toki's simulator does);
    ``append`` histories do not, so the checker infers it from reads (as for Elle's files).
    Returns the history and the kinds of anomaly planted, in order.
    """
    rng = random.Random(seed)
    nkeys = keys if keys is not None else max(8, n // 8)
    append = workload == "append"
    st = _State({k: () if append else None for k in range(nkeys)}, {k: [] for k in range(nkeys)})
    plant_at = set(rng.sample(range(n), min(plants, n))) if plants else set()
    txns: list[Txn] = []
    planted: list[str] = []

    def read(k: int) -> Op:
        return Op("r", k, st.values[k])

    def write(k: int) -> Op:
        v = st.fresh()
        st.order[k].append(v)
        st.values[k] = (*st.values[k], v) if append else v
        return Op("append" if append else "w", k, v)

    def emit(ops_: Sequence[Op]) -> None:
        i = len(txns)
        txns.append(Txn(i, i % 16, tuple(ops_), "ok", 2 * i, 2 * i + 1))

    i = 0
    while len(txns) < n:
        if i in plant_at and len(txns) + 2 <= n:
            kind = PLANTS[len(planted) % len(PLANTS)]
            planted.append(kind)
            x, y = rng.sample(range(nkeys), 2)
            _plant(kind, x, y, read, write, emit)
        else:
            ks = rng.sample(range(nkeys), ops)
            emit([read(k) if rng.random() < 0.5 else write(k) for k in ks])
        i += 1
    order = None if append else {k: tuple(v) for k, v in st.order.items() if v}
    return History(tuple(txns), order), planted


def _plant(kind: str, x: int, y: int, read: Any, write: Any, emit: Any) -> None:
    """Two txns whose ops interleave so that they form a 2-cycle of the given kind."""
    if kind == "lost-update":  # both read x, both write x: G-single and lost update
        ra, rb = read(x), read(x)
        emit([ra, write(x)])
        emit([rb, write(x)])
    elif kind == "write-skew":  # both read x and y; one writes x, one writes y: G2-item
        rax, ray, rbx, rby = read(x), read(y), read(x), read(y)
        emit([rax, ray, write(x)])
        emit([rbx, rby, write(y)])
    elif kind == "G1c":  # a writes x and reads b's y; b reads a's x and writes y
        wa = write(x)
        rb = read(x)
        wb = write(y)
        emit([wa, read(y)])
        emit([rb, wb])
    else:  # G0: a and b write x and y in opposite orders
        wax = write(x)
        wby = write(y)
        wbx = write(x)
        way = write(y)
        emit([wax, way])
        emit([wbx, wby])


def _peak_reset() -> bool:
    """Reset the kernel's peak-RSS mark (Linux), so the next peak is the check's alone."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _peak_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def run_one(n: int, workload: str, plants: int, seed: int = 1) -> dict[str, Any]:
    """Generate one history and check it; time and memory of the check alone."""
    t0 = time.perf_counter()
    gc.disable()  # millions of small objects: the cyclic GC would only slow generation down
    history, planted = generate(n, workload=workload, plants=plants, seed=seed)
    gc.enable()
    gen_s = time.perf_counter() - t0
    gc.collect()
    gc.freeze()  # the history lives until the end; keep later collections off it
    history_mb = _rss_mb()
    reset = _peak_reset()
    t1 = time.perf_counter()
    anomalies = check(history)
    check_s = time.perf_counter() - t1
    peak = _peak_mb()
    names: dict[str, int] = {}
    for a in anomalies:
        names[a.name] = names.get(a.name, 0) + 1
    return {
        "txns": n,
        "ops": sum(len(t.ops) for t in history.txns),
        "workload": workload,
        "version_order": "explicit" if history.version_order is not None else "inferred",
        "planted": len(planted),
        "anomalies": dict(sorted(names.items())),
        "generate_s": round(gen_s, 3),
        "check_s": round(check_s, 3),
        "txns_per_s": round(n / check_s) if check_s > 0 else None,
        "rss_before_check_mb": round(history_mb, 1),
        "peak_rss_during_check_mb": round(peak, 1),
        "peak_is_check_only": reset,
    }


def _machine() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="sizes 10^3 and 10^4 only")
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="results file (default: full run "
        "writes benchmarks/results/check.json, --quick writes nothing)",
    )
    ap.add_argument("--one", nargs=3, metavar=("N", "WORKLOAD", "PLANTS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        n, workload, plants = int(args.one[0]), args.one[1], int(args.one[2])
        print(json.dumps(run_one(n, workload, plants)))
        return 0
    sizes = [10**3, 10**4] if args.quick else [10**3, 10**4, 10**5, 10**6]
    runs: list[dict[str, Any]] = []
    for n in sizes:
        for workload in ("register", "append"):
            for plants in (0, max(4, n // 10_000)):
                cmd = [
                    sys.executable,
                    "-m",
                    "benchmarks.bench_check",
                    "--one",
                    str(n),
                    workload,
                    str(plants),
                ]
                out = subprocess.run(
                    cmd, capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1]
                )
                row = json.loads(out.stdout)
                runs.append(row)
                print(
                    f"{n:>8} txns {workload:>8} planted={plants:<4} check {row['check_s']:>7.2f} s"
                    f"  peak {row['peak_rss_during_check_mb']:>8.1f} MB  {row['anomalies']}",
                    flush=True,
                )
    biggest = [r for r in runs if r["txns"] == max(sizes)]
    summary = {
        "largest_size": max(sizes),
        "worst_check_s_at_largest": max(r["check_s"] for r in biggest),
        "worst_peak_rss_mb_at_largest": max(r["peak_rss_during_check_mb"] for r in biggest),
        "target_met": max(sizes) == 10**6 and max(r["check_s"] for r in biggest) <= 60,
    }
    result = {
        "benchmark": "toki.check.adya.check",
        "summary": summary,
        "machine": _machine(),
        "anchors": ANCHORS,
        "generator": "serial execution of random txns (4 distinct keys each, read or write "
        "with p=0.5, n/8 keys); planted = anomalous 2-txn pairs (lost update, write skew, G1c, "
        "G0) at random positions; register = explicit version order, append = inferred",
        "runs": runs,
    }
    out_path = args.out if args.out is not None else (None if args.quick else RESULTS)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
