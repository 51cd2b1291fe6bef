"""Algebra benchmark: claims/s through Memory.write per operator, with and without keyed
logging; bytes per decision and write amplification of the dual-row schema.

Writes benchmarks/results/algebra.json. Target (issue "Typed operator algebra"): the keyed
log plus the audit row cost at most 1.5× a bare insert.

    python -m benchmarks.bench_algebra [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from benchmarks.common import machine_info, write_results
from toki import Claim, FactKey, Memory
from toki.algebra import AWAIT, EWM, LWW, RULE, Operator, Policy
from toki.judge import PreferNewestJudge

BASE = datetime(2026, 1, 1, tzinfo=UTC)


def _claims(n: int, keys: int, contradict: bool) -> list[Claim]:
    """n claims over `keys` subjects; contradicting claims share a valid start."""
    out = []
    for i in range(n):
        key = FactKey("bench", f"s{i % keys}", "city")
        start = BASE if contradict else BASE + timedelta(days=i)
        out.append(
            Claim(
                key,
                f"value-{i}",
                f"src-{i}",
                valid_from=start,
                valid_to=None if contradict else start + timedelta(days=1),
                recorded_at=BASE + timedelta(seconds=i),
            )
        )
    return out


def _timed_writes(
    claims: list[Claim], write: Callable[[Memory, Claim], object], mem: Memory
) -> tuple[float, Memory]:
    t0 = time.perf_counter()
    for c in claims:
        write(mem, c)
    return time.perf_counter() - t0, mem


def _bytes(mem: Memory) -> int:
    return sum(len(e.payload.encode()) for e in mem.events())


def _new_memory() -> Memory:
    mem = Memory(clock=lambda: BASE)
    mem.set_policy("bench", "city", Policy("newest_valid_time"), recorded_at=BASE)
    return mem


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n = 2_000 if args.quick else 20_000
    keys = max(1, n // 10)
    results: dict[str, Any] = {"machine": machine_info(), "claims": n, "keys": keys}

    # bare insert: non-contradicting claims through assert_fact (no operator, no decision)
    bare = _claims(n, keys, contradict=False)
    secs, mem = _timed_writes(
        bare,
        lambda m, c: m.assert_fact(
            c.key,
            c.value,
            valid_from=c.valid_from,
            valid_to=c.valid_to,
            recorded_at=c.recorded_at,
            source_id=c.source_id,
        ),
        _new_memory(),
    )
    bare_bytes = _bytes(mem) / n
    results["bare_insert"] = {
        "claims_per_s": n / secs,
        "bytes_per_claim": bare_bytes,
        "events_per_claim": len(mem.events()) / n,
    }

    contradicting = _claims(n, keys, contradict=True)
    per_op: dict[str, Any] = {}
    ops: dict[str, Operator] = {"LWW": LWW, "EWM": EWM, "AWAIT": AWAIT, "RULE": RULE}
    for name, op in ops.items():
        for logged in (True, False):
            judge = PreferNewestJudge() if name == "EWM" else None
            secs, mem = _timed_writes(
                contradicting,
                lambda m, c, op=op, judge=judge, logged=logged: m.write(
                    c, op, judge=judge, log_judge=logged
                ),
                _new_memory(),
            )
            decisions = sum(1 for e in mem.events() if e.kind.value == "DECISION")
            per_op[f"{name}{'' if logged else '_unlogged'}"] = {
                "claims_per_s": n / secs,
                "bytes_per_claim": _bytes(mem) / n,
                "events_per_claim": len(mem.events()) / n,
                "decision_events": decisions,
                "audit_rows": sum(len(mem.audit(k)) for k in mem.keys()),  # noqa: SIM118 (Memory.keys is a method)
            }
    results["operators"] = per_op
    # cost of keyed log + audit row relative to a bare insert, per contradicting claim
    lww = per_op["LWW"]
    results["dual_row_cost"] = {
        "time_ratio_vs_bare_insert": results["bare_insert"]["claims_per_s"] / lww["claims_per_s"],
        "bytes_ratio_vs_bare_insert": lww["bytes_per_claim"] / bare_bytes,
        "write_amplification_events": lww["events_per_claim"],
        "target_ratio": 1.5,
    }
    ewm = per_op["EWM"]
    results["keyed_log_cost"] = {
        "time_ratio_logged_vs_unlogged": per_op["EWM_unlogged"]["claims_per_s"]
        / ewm["claims_per_s"],
        "bytes_ratio_logged_vs_unlogged": ewm["bytes_per_claim"]
        / per_op["EWM_unlogged"]["bytes_per_claim"],
    }
    for k, v in results.items():
        if k != "machine":
            print(k, v)
    if not args.quick:
        write_results("algebra", results)
    return results


if __name__ == "__main__":
    main()
