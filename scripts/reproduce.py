"""Regenerate every result of toki from scratch (`make reproduce`), timing each part.

    python scripts/reproduce.py              # everything that can run here
    python scripts/reproduce.py --only proofs,paper-assets
    python scripts/reproduce.py --list

Commands that write results are given explicit --out/--doc paths here: this script (through
`make reproduce`) is the only thing that changes the committed results and docs; run by hand,
each command writes into a new folder under ./toki-out instead.

A part whose command is not available (e.g. `toki pg-grid` before it exists, or no PostgreSQL
server) is skipped with the reason. The benchmarks themselves are not rerun unless --bench is
given (they take long and want an idle machine); their report is always regenerated.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


# execute, save, and stamp the source hash of the toki code the notebook calls into its
# metadata (tests/test_notebooks.py fails when that code changed after the outputs were made)
EXECUTE = (
    "import sys, nbformat; from pathlib import Path; from nbclient import NotebookClient; "
    "from toki.experiments.notebooks import stamp; "
    "nb = nbformat.read(sys.argv[1], as_version=4); "
    "NotebookClient(nb, timeout=1800, kernel_name='python3', "
    "resources={'metadata': {'path': 'notebooks'}}).execute(); "
    "nbformat.write(nb, sys.argv[1]); print(sys.argv[1], stamp(Path(sys.argv[1])))"
)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def toki_cmd(*args: str) -> list[str]:
    exe = BIN / "toki"
    return [str(exe), *args] if exe.exists() else [sys.executable, "-m", "toki.cli", *args]


def toki_has(command: str) -> bool:
    out = subprocess.run(toki_cmd("--help"), capture_output=True, text=True, cwd=ROOT)
    return f" {command} " in out.stdout or f"{{{command}" in out.stdout or (
        f"\n    {command}" in out.stdout)


def pg_reachable() -> str | None:
    """None when a server answers; otherwise why not."""
    dsn = os.environ.get("TOKI_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        import psycopg
    except ImportError:
        return "psycopg is not installed"
    try:
        with psycopg.connect(dsn, connect_timeout=3):
            return None
    except Exception as exc:
        return f"no PostgreSQL server at $TOKI_PG_DSN ({type(exc).__name__})"


@dataclass
class Part:
    name: str
    what: str
    commands: list[list[str]]
    stdout_to: str | None = None
    skip: str | None = None


def parts(bench: bool) -> list[Part]:
    py = sys.executable
    notebooks = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
    out = [
        Part("proofs", "proofs/results.json, proofs/RESULTS.md",
             [toki_cmd("prove", "--out", "proofs")]),
        Part("proof-agreement", "proofs/agreement.json, the counts in docs/proofs.md",
             [[py, "-m", "proofs.agreement", "--out", "proofs", "--docs", "docs/proofs.md"]]),
        Part("encoding-mutants", "proofs/mutants.json, the score in docs/proofs.md, proofs/macros.tex",
             [[py, "-m", "tests.mutants.encoding"], [py, "-m", "proofs.macros"]]),
        # --real: the committed matrix carries a real row beside each model row whose
        # library's environment exists (`make real-envs`); missing ones are named, not faked
        Part("matrix", "verdict_matrix/matrix.*, agreement.*",
             [toki_cmd("matrix", "--real", "--out", "verdict_matrix")],
             skip=None if toki_has("matrix") else "`toki matrix` is not available yet"),
        # Letta's and Cognee's real rows at a budget that finishes in minutes (the full
        # matrix above runs them at [budgets.real] too, when their environments exist)
        Part("letta-small", "verdict_matrix/letta-small/ (Letta's real row, agreement)",
             [toki_cmd("matrix", "--config", "verdict_matrix/letta-small/matrix.toml",
                       "--budget", "small", "--real", "--real-budget", "lettasmall",
                       "--out", "verdict_matrix/letta-small")],
             skip=None if toki_has("matrix") else "`toki matrix` is not available yet"),
        Part("cognee-small", "verdict_matrix/cognee-small/ (Cognee's real row, agreement)",
             [toki_cmd("matrix", "--config", "verdict_matrix/cognee-small/matrix.toml",
                       "--budget", "small", "--real", "--real-budget", "cogneesmall",
                       "--out", "verdict_matrix/cognee-small")],
             skip=None if toki_has("matrix") else "`toki matrix` is not available yet"),
        Part("calibration", "verdict_matrix/calibration.csv/.png",
             [toki_cmd("calibrate", "--out", "verdict_matrix")]),
        Part("pg-grid", "verdict_matrix/pg_grid.csv, the table in docs/postgres.md",
             [toki_cmd("pg-grid", "--out", "verdict_matrix", "--doc", "docs/postgres.md")],
             skip=(None if toki_has("pg-grid") else "`toki pg-grid` is not available yet")
             or pg_reachable()),
        Part("pg-product", "verdict_matrix/pg_product.json, the product table in docs/postgres.md",
             [toki_cmd("pg-grid", "--product", "--out", "verdict_matrix",
                       "--doc", "docs/postgres.md")],
             skip=(None if toki_has("pg-grid") else "`toki pg-grid` is not available yet")
             or pg_reachable()),
        # executed and saved, with the source hash of the code each calls in its metadata;
        # executing also regenerates notebooks/figures/
        Part("notebooks", "notebooks/*.ipynb (executed, saved, stamped), notebooks/figures/",
             [[py, "-c", EXECUTE, nb] for nb in notebooks],
             skip=None if notebooks and _has("nbclient") else "nbclient is not installed"),
        Part("laws", "docs/laws.md", [[py, "-m", "toki.algebra.laws", "--write", "docs/laws.md"]]),
        Part("mutants", "mutant table in docs/anomalies.md",
             [[py, "-m", "tests.mutants.make_table"]]),
        Part("locomo", "paper/data/locomo_ablations.json", [toki_cmd("locomo", "ablate", "--json")],
             stdout_to="paper/data/locomo_ablations.json"),
        Part("locomo-doc", "the results tables of docs/locomo.md (from locomo_ablations.json)",
             [[py, "-m", "toki.locomo.report", "--doc", "docs/locomo.md"]]),
        Part("locomo-provenance", "notebooks/results/locomo_provenance.json",
             [toki_cmd("locomo", "provenance", "--out",
                       "notebooks/results/locomo_provenance.json")]),
    ]
    # the long real explorations issue targets name (50 schedules of Letta, Cognee, ...)
    out.append(Part("heavy-tests", "nothing written: pytest -m heavy must pass",
                    [["env", "TOKI_HEAVY=1", py, "-m", "pytest", "-q", "-m", "heavy"]]))
    if bench:
        out.append(Part("bench", "benchmarks/results/*.json", [[py, "-m", "benchmarks.run"]]))
    out += [
        Part("bench-report", "benchmarks/README.md", [[py, "-m", "benchmarks.report"]]),
        Part("paper-assets", "paper/generated/", [[py, "paper/assets.py"]]),
    ]
    return out


def run(part: Part) -> tuple[str, float]:
    t0 = time.perf_counter()
    for cmd in part.commands:
        print("$", " ".join(cmd) + (f" > {part.stdout_to}" if part.stdout_to else ""), flush=True)
        if part.stdout_to:
            proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE)
            if proc.returncode == 0:
                target = ROOT / part.stdout_to
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(proc.stdout)
        else:
            proc = subprocess.run(cmd, cwd=ROOT)
        if proc.returncode != 0:
            return f"FAILED (exit {proc.returncode})", time.perf_counter() - t0
    return "regenerated", time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated part names")
    parser.add_argument("--bench", action="store_true", help="also rerun every benchmark")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    todo = parts(args.bench)
    if args.list:
        for p in todo:
            print(f"{p.name:14} {p.what}" + (f"  [skipped: {p.skip}]" if p.skip else ""))
        return 0
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = sorted(only - {p.name for p in todo})
    if unknown:
        print(f"reproduce: error: --only: unknown part(s) {', '.join(unknown)} "
              f"(use some of {', '.join(p.name for p in todo)})", file=sys.stderr)
        return 2
    summary = []
    for p in todo:
        if only and p.name not in only:
            continue
        print(f"\n== {p.name}: {p.what}", flush=True)
        if p.skip:
            print(f"   skipped: {p.skip}")
            summary.append((p.name, f"skipped: {p.skip}", 0.0, p.what))
            continue
        status, secs = run(p)
        summary.append((p.name, status, secs, p.what))
    print("\n== reproduce: summary")
    for name, status, secs, what in summary:
        print(f"  {name:14} {secs:8.1f} s  {status:12}  {what}")
    print(f"  {'total':14} {sum(s for _, _, s, _ in summary):8.1f} s")
    return 1 if any(s.startswith("FAILED") for _, s, _, _ in summary) else 0


if __name__ == "__main__":
    sys.exit(main())
