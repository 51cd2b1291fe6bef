"""`toki locomo …` subcommands: fetch the data, describe it, run the flat baseline and the
ablations.

`main(argv)` is self-contained so the top-level `toki` command can delegate to it and
`python -m toki.locomo` works on its own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence

from toki.errors import DataError
from toki.locomo.ablations import ABLATIONS, SEED, run_ablations
from toki.locomo.data import LOCOMO_URL, fetch_locomo, load_locomo
from toki.locomo.flat import run_flat_baseline


def main(argv: Sequence[str] | None = None) -> int:
    """Run a `locomo` subcommand; returns the process exit code."""
    parser = argparse.ArgumentParser(prog="toki locomo", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="download the pinned LoCoMo file and verify its sha256")
    f.add_argument("--dest", help="file or directory (default: the user cache directory)")
    f.add_argument("--url", default=LOCOMO_URL)
    i = sub.add_parser("info", help="counts and parsing problems of the data file")
    i.add_argument("--path")
    i.add_argument("--json", action="store_true")
    b = sub.add_parser("baseline", help="flat BM25 + extractive baseline, per category")
    b.add_argument("--path")
    b.add_argument("-k", type=int, default=5)
    b.add_argument("--categories", default="1,2,3,4")
    b.add_argument("--limit", type=int)
    b.add_argument("--turns", action="store_true", help="also index raw turns")
    b.add_argument("--json", action="store_true")
    a = sub.add_parser("ablate", help="typed-layer, audit-row and operator ablations")
    a.add_argument("--path")
    a.add_argument(
        "--ablation",
        choices=ABLATIONS,
        action="append",
        help="run only this ablation (repeatable; default: all)",
    )
    a.add_argument("--limit", type=int, help="only the first N conversations")
    a.add_argument("-k", type=int, default=5)
    a.add_argument("--seed", type=int, default=SEED)
    a.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    a.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "fetch":
            print(fetch_locomo(args.dest, url=args.url))
            return 0
        ds = load_locomo(args.path)
        if args.cmd == "info":
            info = {
                "path": str(ds.path),
                "sha256": ds.sha256,
                "reference_copy": ds.is_reference_copy(),
                "conversations": len(ds.conversations),
                "sessions": sum(len(c.sessions) for c in ds.conversations),
                "turns": sum(1 for c in ds.conversations for _ in c.turns()),
                "qa_by_category": dict(
                    sorted(Counter(int(q.category) for _, q in ds.questions()).items())
                ),
                "problems": dict(Counter(f"{p.source}:{p.kind}" for p in ds.problems)),
            }
            print(
                json.dumps(info, indent=2)
                if args.json
                else "\n".join(f"{k}: {v}" for k, v in info.items())
            )
            return 0
        if args.cmd == "ablate":
            rows = run_ablations(
                ds,
                ablations=args.ablation or ABLATIONS,
                limit=args.limit,
                k=args.k,
                seed=args.seed,
                resamples=args.resamples,
            )
            if args.json:
                print(json.dumps(rows, indent=2))
            else:
                for r in rows:
                    print(_ablation_line(r))
            return 0
        cats = tuple(int(c) for c in args.categories.split(",") if c.strip())
        rows = run_flat_baseline(
            ds, k=args.k, categories=cats, limit=args.limit, include_turns=args.turns
        )
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(
                    "  ".join(
                        f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()
                    )
                )
        return 0
    except DataError as e:
        print(f"toki locomo: {e}", file=sys.stderr)
        return 2


def _ablation_line(r: dict[str, object]) -> str:
    """One human-readable line per ablation row."""

    def f(x: object) -> str:
        return f"{x:.3f}" if isinstance(x, float) else str(x)

    head = f"{r['ablation']:<11} {r['slice']:<14} cat={f(r['category']):<3} n={f(r['n']):<5}"
    if r["kind"] == "comparison":
        return (
            f"{head} {r['variant']} - {r['baseline']}: {f(r['score'])} "
            f"[{f(r['ci_low'])}, {f(r['ci_high'])}] McNemar p={r['mcnemar_p']:.2g} "
            f"power={f(r['power_mcnemar'])}"
        )
    return f"{head} {r['variant']}: {f(r['score'])} [{f(r['ci_low'])}, {f(r['ci_high'])}]"
