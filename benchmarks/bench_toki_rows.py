"""The matrix's TOKI rows run by the library (`TokiLibrary`, the registry's `toki*` names
since issue #38) and by the retired model (`TokiModel`): the time each takes for the same
row of the verdict matrix, and the verdicts each gives.

Why: docs/architecture.md keeps `systems/toki_model.py` only where something measured needs
it; this is the measurement for the matrix (one row = every workload, fault setting and
anomaly of verdict_matrix/matrix.toml for one system, at the matrix's default budget, one
worker). The machine is shared, so read the two times against each other, not alone.

Writes benchmarks/results/toki_rows.json.

    python -m benchmarks.bench_toki_rows [--system toki-ewm-nolog] [--budget default]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import machine_info, write_results
from toki.experiments.matrix import DEFAULT_CONFIG, run_matrix
from toki.systems import registry
from toki.systems.base import SystemModel
from toki.systems.toki_lib import TokiLibrary
from toki.systems.toki_model import TokiModel

SUBJECTS: dict[str, Callable[[str, bool], SystemModel]] = {
    "library": lambda op, log: TokiLibrary(op, keyed_log=log, prefix="toki"),
    "model": lambda op, log: TokiModel(op, keyed_log=log),
}


def _install() -> None:
    """Point the registry's row at the subject named in the environment. Module level too:
    the matrix runs its tasks in spawned processes, which import this module again."""
    subject, system = os.environ.get(ENV, ""), os.environ.get(ENV + "_SYSTEM", "")
    if subject in SUBJECTS and system in registry.SYSTEMS:
        op = "EWM" if system == "toki" else system.split("-")[1].upper()
        log = not system.endswith("-nolog")
        registry.SYSTEMS[system] = lambda: SUBJECTS[subject](op, log)


ENV = "TOKI_BENCH_ROWS"
_install()


def _row(system: str, budget: str, subject: str) -> dict[str, Any]:
    os.environ[ENV], os.environ[ENV + "_SYSTEM"] = subject, system
    _install()
    start = time.perf_counter()
    out = run_matrix(
        DEFAULT_CONFIG,
        budget=budget,
        workers=1,
        out=tempfile.mkdtemp(prefix="toki-rows-"),
        systems=[system],
    )
    seconds = time.perf_counter() - start
    cells = {f"{r['faults']}/{r['anomaly']}": r["verdict"] for r in out.csv_rows()}
    versions = sorted({r["version"] for r in out.csv_rows()})
    return {"seconds": round(seconds, 1), "release": versions, "verdicts": cells}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="toki-ewm-nolog")
    parser.add_argument("--budget", default="default")
    args = parser.parse_args()
    rows = {s: _row(args.system, args.budget, s) for s in SUBJECTS}
    for subject, row in rows.items():
        print(f"{args.system} ({subject}): {row['seconds']} s  {row['verdicts']}")
    write_results(
        "toki_rows",
        {
            "machine": machine_info(),
            "system": args.system,
            "budget": args.budget,
            "config": str(DEFAULT_CONFIG.name),
            "summary": {
                "library_s": rows["library"]["seconds"],
                "model_s": rows["model"]["seconds"],
                "library_over_model": round(
                    rows["library"]["seconds"] / rows["model"]["seconds"], 2
                ),
                "cells_that_differ": sum(
                    rows["library"]["verdicts"][c] != v
                    for c, v in rows["model"]["verdicts"].items()
                ),
            },
            "rows": rows,
        },
    )


if __name__ == "__main__":
    main()
