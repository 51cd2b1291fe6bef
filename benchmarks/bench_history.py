"""Loading and checking Jepsen/Elle histories from files (issue #21 goal 4).

Generates Elle-shaped list-append histories the way Elle's own generator and a database
would produce them: ``--processes`` concurrent clients, each with one operation in flight;
transactions of 1–4 micro-ops, each a read of the whole list or an append, over a sliding
window of 10 active keys (a key is retired after 32 appends, as Elle's ``max-writes-per-key``,
and a fresh one takes its place); appended values count 1, 2, … per key, as Elle's do. The
database applies each transaction atomically when it completes, so the history is strict
serializable and the check must come out valid. The history is written as JSON lines, as a
JSON array (one op per line, elle-cli's layout) and as EDN (one map per line, Jepsen's), then
each file is read by ``toki.check.elle.load`` and checked by ``toki.check.adya.verdict``
(strict serializability, real-time edges included) in a fresh subprocess, which records the
seconds of each stage (wall clock, and the process's CPU time, which other processes on a
shared machine inflate less) and the peak RSS of load + check together.

    python -m benchmarks.bench_history            # 10^4, 10^5, 10^6: results/history.json
    python -m benchmarks.bench_history --quick    # 10^4 only, writes nothing
    python -m benchmarks.bench_history --toki-check   # results/toki_check.json (below)

``--toki-check`` measures what ``toki check FILE`` runs (``toki.check.columnar.check_file``: the
columnar path, or the exact one when it hands over) end to end, load and check together, in
a fresh subprocess per file (modules imported before the clock starts): wall and CPU
seconds, transactions per second, the process's peak RSS, and which path decided. Sizes 10^3 … 10^6 (JSON lines and the JSON array at every
size, EDN up to ``--edn-max``); per format the growth exponent (least-squares log-log slope
of time over all sizes, and between the two largest). In the same run, at sizes up to
``--exact-max``, the exact path alone (``load`` + ``verdict``) on the same file, for the
ratio. Targets (issue #37): 10^6 transactions at >= 100,000 txns/s, peak <= 1,536 MB,
exponent <= 1.1.

Targets (issue #21): 10^6 transactions loaded from JSON/JSONL in <= 20 s, from EDN in <= 60 s,
peak memory of load + check <= 1.5 GB. Anchors: the same loads before this work took 108-112 s
(JSON) and 690 s with 8.7 GiB (EDN); Elle checks ~100k-op histories in ~55-73 s (24 cores).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info

RESULTS = Path(__file__).resolve().parent / "results" / "history.json"
TOKI_CHECK = Path(__file__).resolve().parent / "results" / "toki_check.json"
CHECK_TARGETS = {"txns_per_s": 100_000, "peak_rss_mb": 1536.0, "exponent": 1.1}
TARGETS = {"json_load_s": 20.0, "edn_load_s": 60.0, "peak_rss_mb": 1536.0}
ANCHORS = {
    "before": "toki before issue #21: 10^6 txns read in 108-112 s from JSON, 690 s and 8.7 GiB "
    "from EDN; check alone 13-20 s, 2.0-2.3 GB (issue #21)",
    "elle": "Jepsen Elle: ~100k-op list-append histories checked in ~55-73 s on a 24-core Xeon "
    "(Kingsbury & Alvaro, VLDB 2020, Fig. 4, read off plot)",
}
FORMATS = ("jsonl", "json", "edn")


def ops(n: int, *, processes: int = 10, seed: int = 0) -> Iterator[dict[str, Any]]:
    """The operations (invocations and completions) of an Elle-shaped history of n txns."""
    rng = random.Random(seed)
    active = list(range(10))
    next_key = 10
    count: dict[int, int] = {}
    state: dict[int, list[int]] = {}
    open_: dict[int, list[list[Any]]] = {}
    index = 0
    started = 0
    done = 0
    while done < n:
        idle = [p for p in range(processes) if p not in open_]
        if started < n and idle and (not open_ or rng.random() < 0.5):
            p = rng.choice(idle)
            txn: list[list[Any]] = []
            for _ in range(rng.randint(1, 4)):
                k = active[min(int(rng.expovariate(0.35)), len(active) - 1)]
                if rng.random() < 0.5:
                    txn.append(["r", k, None])
                else:
                    v = count.get(k, 0) + 1
                    count[k] = v
                    txn.append(["append", k, v])
                    if v >= 32:  # retire the key, as Elle's generator does
                        active[active.index(k)] = next_key
                        next_key += 1
            open_[p] = txn
            started += 1
            yield {"index": index, "time": index, "type": "invoke", "process": p, "f": "txn",
                   "value": txn}
        else:
            p = rng.choice(sorted(open_))
            txn = open_.pop(p)
            done_txn = []
            for f, k, v in txn:  # applied atomically at completion
                if f == "r":
                    done_txn.append(["r", k, list(state.get(k, ()))])
                else:
                    state.setdefault(k, []).append(v)
                    done_txn.append([f, k, v])
            done += 1
            yield {"index": index, "time": index, "type": "ok", "process": p, "f": "txn",
                   "value": done_txn}
        index += 1


def _edn(v: Any) -> str:
    if v is None:
        return "nil"
    if isinstance(v, list):
        return "[" + " ".join(_edn(x) for x in v) + "]"
    if isinstance(v, str):
        return ":" + v
    return str(v)


def write(n: int, directory: Path, seed: int = 0) -> dict[str, Path]:
    """The same history as JSON lines, a JSON array (one op per line) and EDN."""
    paths = {f: directory / f"h{n}.{f}" for f in FORMATS}
    with (
        paths["jsonl"].open("w") as jl,
        paths["json"].open("w") as ja,
        paths["edn"].open("w") as ed,
    ):
        ja.write("[")
        first = True
        for op in ops(n, seed=seed):
            line = json.dumps(op, separators=(",", ":"))
            jl.write(line + "\n")
            ja.write(("" if first else ",\n ") + line)
            first = False
            ed.write(
                f"{{:index {op['index']}, :time {op['time']}, :type :{op['type']}, "
                f":process {op['process']}, :f :txn, :value {_edn(op['value'])}}}\n"
            )
        ja.write("]\n")
    return paths


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(path: Path) -> dict[str, Any]:
    """Load and check one file in this process: seconds per stage, peak RSS of both."""
    import gc

    from toki.check.adya import verdict
    from toki.check.elle import load

    rss0 = _peak_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    gc.disable()
    history = load(path)
    gc.enable()
    load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    rss_load = _peak_mb()
    gc.freeze()
    t1, c1 = time.perf_counter(), time.process_time()
    v = verdict(history, models=["strict-serializable"])
    check_s, check_cpu = time.perf_counter() - t1, time.process_time() - c1
    return {
        "file": path.name,
        "format": path.suffix.lstrip("."),
        "mb": round(path.stat().st_size / 2**20, 1),
        "txns": len(history.txns),
        "ops": sum(len(t.ops) for t in history.txns),
        "load_s": round(load_s, 2),
        "check_s": round(check_s, 2),
        "load_cpu_s": round(load_cpu, 2),
        "check_cpu_s": round(check_cpu, 2),
        "total_s": round(load_s + check_s, 2),
        "txns_per_s_load": round(len(history.txns) / load_s) if load_s else None,
        "peak_rss_after_load_mb": round(rss_load, 1),
        "peak_rss_load_and_check_mb": round(_peak_mb(), 1),
        "rss_at_start_mb": round(rss0, 1),
        "valid": v.valid,
        "anomalies": v.anomaly_types,
    }


def check_one(path: Path, exact: bool) -> dict[str, Any]:
    """``toki check``'s work on one file in this process (or the exact path's, ``exact``):
    wall and CPU seconds of load + check together, peak RSS of the process."""
    import toki.check.columnar  # noqa: F401  (imports are not the work measured)
    from toki.check.adya import verdict
    from toki.check.columnar import check_file
    from toki.check.elle import load

    t0, c0 = time.perf_counter(), time.process_time()
    if exact:
        history = load(path)
        v = verdict(history, models=["strict-serializable"])
        txns, decided = len(history.txns), "exact"
    else:
        checked = check_file(path)
        v, txns, decided = checked.verdict, checked.transactions, checked.path
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "file": path.name,
        "format": path.suffix.lstrip("."),
        "mb": round(path.stat().st_size / 2**20, 1),
        "txns": txns,
        "path": decided,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "txns_per_s": round(txns / wall),
        "txns_per_cpu_s": round(txns / cpu),
        "peak_rss_mb": round(_peak_mb(), 1),
        "valid": v.valid,
    }


def slope(ns: Sequence[int], ys: Sequence[float]) -> float:
    """Least-squares slope of log y against log n."""
    xs = [math.log(n) for n in ns]
    ls = [math.log(max(y, 1e-9)) for y in ys]
    mx, my = sum(xs) / len(xs), sum(ls) / len(ls)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ls, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def _child(path: Path, exact: bool) -> dict[str, Any]:
    load1 = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "benchmarks.bench_history", "--check-one", str(path)]
    out = subprocess.run(
        [*cmd, "--exact"] if exact else cmd,
        capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1],
    )
    row: dict[str, Any] = json.loads(out.stdout)
    row["loadavg_1min"] = [round(load1, 2), round(os.getloadavg()[0], 2)]
    return row


def toki_check(args: argparse.Namespace) -> int:
    """The ``--toki-check`` run (see the module docstring)."""
    sizes = ([int(x) for x in args.sizes.split(",")] if args.sizes
             else [10**3, 10**4] if args.quick else [10**3, 10**4, 10**5, 10**6])
    runs: list[dict[str, Any]] = []
    exact_runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="toki-bench-check-") as tmp:
        where = Path(args.keep) if args.keep else Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            paths = {f: where / f"h{n}.{f}" for f in FORMATS}
            if not all(p.exists() for p in paths.values()):
                write(n, where)
            for fmt in FORMATS:
                if fmt == "edn" and n > args.edn_max:
                    continue
                row = _child(paths[fmt], exact=False)
                runs.append(row)
                print(f"{n:>8} txns {fmt:>5} {row['path']:>8}: {row['wall_s']:>7.2f} s "
                      f"(CPU {row['cpu_s']:.2f}) {row['txns_per_s']:>8} txns/s  peak "
                      f"{row['peak_rss_mb']:>7.1f} MB  valid={row['valid']}  "
                      f"load avg {row['loadavg_1min']}", flush=True)
                if n <= args.exact_max:
                    ex = _child(paths[fmt], exact=True)
                    exact_runs.append(ex)
                    print(f"{'':>8}      {fmt:>5}    exact: {ex['wall_s']:>7.2f} s (CPU "
                          f"{ex['cpu_s']:.2f})  peak {ex['peak_rss_mb']:>7.1f} MB  "
                          f"valid={ex['valid']}", flush=True)
    exponents: dict[str, dict[str, float]] = {}
    for fmt in FORMATS:
        rs = sorted((r for r in runs if r["format"] == fmt), key=lambda r: r["txns"])
        if len(rs) >= 2:
            ns = [r["txns"] for r in rs]
            exponents[fmt] = {
                "wall": round(slope(ns, [r["wall_s"] for r in rs]), 3),
                "cpu": round(slope(ns, [r["cpu_s"] for r in rs]), 3),
                "wall_last_decade": round(slope(ns[-2:], [r["wall_s"] for r in rs[-2:]]), 3),
                "cpu_last_decade": round(slope(ns[-2:], [r["cpu_s"] for r in rs[-2:]]), 3),
            }
    biggest = max(sizes)
    top = [r for r in runs if r["txns"] == biggest]
    summary: dict[str, Any] = {"largest_size": biggest, "targets": CHECK_TARGETS}
    if top:
        slowest = min(top, key=lambda r: r["txns_per_s"])
        summary.update({
            "slowest_format": slowest["format"],
            "txns_per_s": slowest["txns_per_s"],
            "txns_per_cpu_s": min(r["txns_per_cpu_s"] for r in top),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in top),
            "exponent": max((e["wall"] for e in exponents.values()), default=None),
            "exponent_cpu": max((e["cpu"] for e in exponents.values()), default=None),
            "all_valid": all(r["valid"] is True for r in runs + exact_runs),
            "paths": sorted({r["path"] for r in runs}),
        })
        summary["targets_met"] = (
            biggest >= 10**6
            and summary["txns_per_s"] >= CHECK_TARGETS["txns_per_s"]
            and summary["peak_rss_mb"] <= CHECK_TARGETS["peak_rss_mb"]
            and summary["exponent"] is not None
            and summary["exponent"] <= CHECK_TARGETS["exponent"]
        )
        summary["targets_met_in_cpu_time"] = (
            biggest >= 10**6
            and summary["txns_per_cpu_s"] >= CHECK_TARGETS["txns_per_s"]
            and summary["peak_rss_mb"] <= CHECK_TARGETS["peak_rss_mb"]
            and summary["exponent_cpu"] is not None
            and summary["exponent_cpu"] <= CHECK_TARGETS["exponent"]
        )
    ratios = []
    for ex in exact_runs:
        mine = next(r for r in runs if r["file"] == ex["file"])
        ratios.append({"file": ex["file"], "txns": ex["txns"],
                       "speedup_wall": round(ex["wall_s"] / mine["wall_s"], 2),
                       "speedup_cpu": round(ex["cpu_s"] / mine["cpu_s"], 2)})
    result = {
        "benchmark": "toki check FILE end to end (toki.check.columnar.check_file), "
        "strict-serializable, fresh process per file",
        "summary": summary,
        "machine": machine_info(),
        "anchors": {"elle": ANCHORS["elle"], "before": "toki before issue #37: 10^6 txns "
                    "in 15.6 s load + 13-20 s check, ~30k txns/s end to end (issue #37)"},
        "generator": __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else "",
        "exponents": exponents,
        "runs": runs,
        "exact_path_runs": exact_runs,
        "speedup_over_exact": ratios,
    }
    out_path = args.out if args.out is not None else (None if args.quick else TOKI_CHECK)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out_path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="10^4 only, results not written")
    ap.add_argument("--sizes", help="comma-separated transaction counts")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--toki-check", action="store_true",
                    help="measure toki check end to end: results/toki_check.json")
    ap.add_argument("--edn-max", type=int, default=10**5,
                    help="--toki-check: largest size checked from EDN (default 10^5)")
    ap.add_argument("--exact-max", type=int, default=10**5,
                    help="--toki-check: largest size also checked by the exact path alone")
    ap.add_argument("--keep", help="--toki-check: keep (and reuse) the generated files here")
    ap.add_argument("--check-one", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--exact", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one)))
        return 0
    if args.check_one:
        print(json.dumps(check_one(args.check_one, args.exact)))
        return 0
    if args.toki_check:
        return toki_check(args)
    sizes = ([int(x) for x in args.sizes.split(",")] if args.sizes
             else [10**4] if args.quick else [10**4, 10**5, 10**6])
    runs = []
    with tempfile.TemporaryDirectory(prefix="toki-bench-history-") as tmp:
        for n in sizes:
            t0 = time.perf_counter()
            paths = write(n, Path(tmp))
            gen_s = time.perf_counter() - t0
            for fmt in FORMATS:
                load1 = os.getloadavg()[0]
                out = subprocess.run(
                    [sys.executable, "-m", "benchmarks.bench_history", "--one", str(paths[fmt])],
                    capture_output=True, text=True, check=True, cwd=Path(__file__).parents[1],
                )
                row = json.loads(out.stdout)
                row["generate_s"] = round(gen_s, 1)
                row["loadavg_1min"] = [round(load1, 2), round(os.getloadavg()[0], 2)]
                runs.append(row)
                print(f"{n:>8} txns {fmt:>5} {row['mb']:>7.1f} MB  load {row['load_s']:>7.2f} s"
                      f" (cpu {row['load_cpu_s']:.1f})"
                      f"  check {row['check_s']:>6.2f} s  peak {row['peak_rss_load_and_check_mb']:>7.1f}"
                      f" MB  valid={row['valid']}  load avg {row['loadavg_1min']}", flush=True)
                paths[fmt].unlink()
    biggest = max(sizes)
    at = {r["format"]: r for r in runs if r["txns"] == biggest}
    summary: dict[str, Any] = {"largest_size": biggest, "targets": TARGETS}
    if at:
        summary.update({
            "json_load_s": max(at[f]["load_s"] for f in ("json", "jsonl") if f in at),
            "edn_load_s": at["edn"]["load_s"] if "edn" in at else None,
            "peak_rss_mb": max(r["peak_rss_load_and_check_mb"] for r in at.values()),
            "all_valid": all(r["valid"] is True for r in runs),
        })
        summary["targets_met"] = biggest >= 10**6 and all(
            summary[k] is not None and summary[k] <= TARGETS[k] for k in TARGETS
        )
    result = {
        "benchmark": "toki.check.elle.load + toki.check.adya.verdict (strict-serializable)",
        "summary": summary,
        "machine": machine_info(),
        "anchors": ANCHORS,
        "generator": __doc__.split("\n\n")[1].replace("\n", " ") if __doc__ else "",
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
