"""`toki prove`: run every statement and its false variants, print a table, and (with
`--out DIR`) write DIR/RESULTS.md and DIR/results.json. The tracked proofs/RESULTS.md and
proofs/results.json are written only by `make reproduce` (scripts/reproduce.py passes
`--out proofs`): generated, never edit them."""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toki.cli_parser import TokiParser
from toki.errors import InvalidInput
from toki.formal.result import ProofResult

__all__ = ["MODULES", "main", "run_all", "write_results"]


# one module per statement, in the order of docs/proofs.md
MODULES = (
    "isolation_lww",
    "isolation_ewm",
    "isolation_await",
    "isolation_rule",
    "schema_soundness",
    "provenance_soundness",
    "lift_lww_semilattice",
    "lift_ewm_monoid",
    "lift_pipeline",
    "tightness",
    "replay_deterministic_judge",
)


# the statements bounded by k claim transactions (`--k` changes their bound)
BOUNDED_BY_K = (
    "isolation_lww",
    "isolation_ewm",
    "isolation_await",
    "isolation_rule",
    "schema_soundness",
)


def run_all(
    only: str | None = None, *, variants: bool = True, k: int | None = None
) -> list[ProofResult]:
    """Every statement (or the one named `only`), each followed by its false variants; `k`
    (when given) is the bound of the statements in BOUNDED_BY_K."""
    if only is not None and only not in MODULES:
        raise InvalidInput("--only", f"unknown proof {only!r}", f"one of: {', '.join(MODULES)}")
    if k is not None and k < 2:
        raise InvalidInput(
            "--k",
            f"{k} cannot express a bounded statement: each is about concurrent claim "
            "transactions, and a premise witness needs two of them",
            "use --k 2 or more",
        )
    results: list[ProofResult] = []
    for name in MODULES if only is None else (only,):
        mod = importlib.import_module(f"proofs.{name}")
        kw = {"k": k} if k is not None and name in BOUNDED_BY_K else {}
        assert not kw or "k" in inspect.signature(mod.prove).parameters
        results.append(mod.prove(**kw))
        if variants:
            results.extend(mod.false_variants(**kw))
    return results


def _bounds(b: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in b.items())


def table(results: Sequence[ProofResult]) -> str:
    rows = [("name", "status", "expected", "ok", "seconds", "bounds")]
    for r in results:
        rows.append(
            (
                r.name,
                r.status.value,
                r.expected.value,
                "yes" if r.ok else "NO",
                f"{r.seconds:.3f}",
                _bounds(r.bounds),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    lines = []
    for row in rows:
        lines.append(
            "  ".join(c.ljust(w) for c, w in zip(row[:5], widths, strict=True)) + "  " + row[5]
        )
    return "\n".join(lines)


def _witness(r: ProofResult) -> str:
    w = r.premise_witness
    if w is None:
        return ""
    if "per_operator" in w:
        per = w["per_operator"]
        return "; ".join(f"{op}: {_pair(x)}" for op, x in per.items() if x)
    if "truly_concurrent_conflicting_pairs" in w:
        return _pair(w)
    if "judge_changes_answer" in w:
        return (
            f"{w['contradicting_questions']} contradicting questions, "
            f"{w['repeated_log_keys']} repeated (key, θ), judge changes {w['judge_changes_answer']}"
        )
    return str(w.get("premises", "none found" if not w.get("exists") else ""))


def _pair(w: dict[str, Any]) -> str:
    """A replayed execution witness in a few words."""
    if not w.get("exists"):
        return "none found"
    both = "both committed" if w["both_committed"] else "one of each pair aborts"
    return (
        f"{w['truly_concurrent_conflicting_pairs']} truly concurrent conflicting pairs "
        f"({both}), replayed: `{w['schedule']}`"
    )


def robustness_lines(results: Sequence[ProofResult]) -> list[str]:
    """One line per operator: its robustness verdict at RC, SI and SER (every k)."""
    seen: dict[str, dict[str, Any]] = {}
    for r in results:
        for op, levels in r.extra.get("robustness", {}).items():
            seen.setdefault(op, levels)
    return [
        f"robustness {op} (every k): "
        + ", ".join(f"{lvl} {v['verdict']}" for lvl, v in levels.items())
        for op, levels in seen.items()
    ]


def robustness_table(results: Sequence[ProofResult]) -> list[str]:
    """The robustness verdicts the results carry, one row per operator."""
    seen: dict[str, dict[str, Any]] = {}
    for r in results:
        for op, levels in r.extra.get("robustness", {}).items():
            seen.setdefault(op, levels)
    if not seen:
        return []
    lines = [
        "## Robustness (every k)",
        "",
        "Is every execution at the level serializable, for any number of concurrent claims? "
        "Static dependency-graph analysis over symbolic transactions in z3 "
        "(toki/formal/robustness.py); *not robust* carries a cyclic history the simulator "
        "replays.",
        "",
        "| operator | read_committed | snapshot | serializable |",
        "|---|---|---|---|",
    ]
    for op, levels in seen.items():
        cells = []
        for lvl in ("read_committed", "snapshot", "serializable"):
            v = levels[lvl]
            cell = v["verdict"] + (" (all k)" if v["verdict"] == "robust" else "")
            if "witness" in v:
                cell += f", k = {v['witness']['k']}: `{v['witness']['schedule']}`"
            cells.append(cell)
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def write_results(results: Sequence[ProofResult], total: float, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = [r.to_json() for r in results]
    (out / "results.json").write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    md = [
        "# Proof results",
        "",
        "Generated by `toki prove` (proofs/run.py); do not edit. Statements, encodings and "
        "bounds: docs/proofs.md. A row named `stmt@variant` is a deliberately false variant of "
        "`stmt` and must end in a counterexample.",
        "",
        "SERIALIZABLE is some serial order of the committed transactions (an acyclic "
        "dependency graph, as PostgreSQL's SSI gives it), not the commit order. The premise "
        "witness of a bounded statement is an execution: a model of its premises with a truly "
        "concurrent conflicting pair (each reads before the other ends), replayed in the "
        "simulator at the statement's level (docs/proofs.md); without one the statement is "
        "vacuous and fails. Bounded statements hold for at most k claim transactions (the "
        "bounds column).",
        "",
        "| name | status | expected | ok | seconds | bounds | premise witness |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        md.append(
            f"| {r.name} | {r.status.value} | {r.expected.value} | {'yes' if r.ok else '**NO**'} "
            f"| {r.seconds:.3f} | {_bounds(r.bounds)} | {_witness(r)} |"
        )
    md += ["", f"Total: {total:.2f} s for {len(results)} checks.", ""]
    md += robustness_table(results)
    md += ["## Counterexamples", ""]
    for r in results:
        if r.scenario is not None:
            md += [f"### {r.name}", "", r.notes or r.statement, "", "```json"]
            md.append(json.dumps(r.scenario, sort_keys=True))
            md += ["```", ""]
        elif r.model is not None:
            md += [f"### {r.name}", "", r.notes or r.statement, "", "```json"]
            md.append(json.dumps(r.model, sort_keys=True))
            md += ["```", ""]
    (out / "RESULTS.md").write_text("\n".join(md))


def main(argv: Sequence[str] | None = None) -> int:
    parser = TokiParser(
        prog="toki prove", description="Run toki's z3 proofs and their false variants."
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--only", metavar="NAME", help=f"one proof: {', '.join(MODULES)}")
    parser.add_argument(
        "--k",
        type=int,
        metavar="N",
        help=f"bound (claim transactions) of {', '.join(BOUNDED_BY_K)} (default: theirs, 3)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="write DIR/RESULTS.md and DIR/results.json (default: write nothing; the tracked "
        "proofs/ files are written by make reproduce)",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    start = time.perf_counter()
    results = run_all(args.only, k=args.k)
    total = time.perf_counter() - start
    if args.out is not None:
        write_results(results, total, args.out)
    if args.json:
        json.dump([r.to_json() for r in results], sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(table(results))
        for line in robustness_lines(results):
            print(line)
        print(f"total {total:.2f} s")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
