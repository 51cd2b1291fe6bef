"""`toki locomo …` subcommands: fetch the data, describe it, run the flat baseline and the
ablations (rule-based, or with a language model behind an OpenAI-compatible endpoint).

`main(argv)` is self-contained so the top-level `toki` command can delegate to it and
`python -m toki.locomo` works on its own.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toki.cli_parser import TokiParser
from toki.errors import InvalidInput, TokiError
from toki.locomo.ablations import ABLATIONS, SEED, run_ablations
from toki.locomo.data import LOCOMO_URL, cache_dir, fetch_locomo, load_locomo, sha256_of
from toki.locomo.flat import run_flat_baseline
from toki.locomo.llm import LLMAnswerer, LLMAnswerJudge, LLMExtractor

LLM_CACHE = "llm-responses.sqlite"
_PATH_HELP = "the LoCoMo file (default: $TOKI_LOCOMO, ../shared/data/locomo, the user cache)"


def build_parser() -> TokiParser:
    parser = TokiParser(prog="toki locomo", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    f = sub.add_parser("fetch", help="download the pinned LoCoMo file and verify its sha256")
    f.add_argument("--dest", help="file or directory (default: the user cache directory)")
    f.add_argument("--url", default=LOCOMO_URL, help="where to download from (default: upstream)")
    f.add_argument("--json", action="store_true", help="print the path and sha256 as JSON")
    i = sub.add_parser("info", help="counts and parsing problems of the data file")
    i.add_argument("--path", help=_PATH_HELP)
    i.add_argument("file", nargs="?", help="the LoCoMo file, as --path (either spelling)")
    i.add_argument("--json", action="store_true", help="machine-readable output")
    b = sub.add_parser("baseline", help="flat BM25 + extractive baseline, per category")
    b.add_argument("--path", help=_PATH_HELP)
    b.add_argument("-k", type=int, default=5, help="items retrieved per question (default 5)")
    b.add_argument(
        "--categories",
        default="1,2,3,4",
        help="comma-separated: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, "
        "5 adversarial (default 1,2,3,4)",
    )
    b.add_argument("--limit", type=int, help="only the first N conversations")
    b.add_argument("--turns", action="store_true", help="also index raw turns")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    a = sub.add_parser("ablate", help="typed-layer, audit-row and operator ablations")
    a.add_argument("--path", help=_PATH_HELP)
    a.add_argument(
        "--ablation",
        choices=ABLATIONS,
        action="append",
        help="run only this ablation (repeatable; default: all)",
    )
    a.add_argument("--limit", type=int, help="only the first N conversations")
    a.add_argument("-k", type=int, default=5, help="items retrieved per question (default 5)")
    a.add_argument("--seed", type=int, default=SEED, help=f"bootstrap seed (default {SEED})")
    a.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    m = a.add_argument_group(
        "language model", "an OpenAI-compatible chat-completions endpoint (see docs/locomo.md)"
    )
    m.add_argument(
        "--answerer",
        choices=("extractive", "llm"),
        default="extractive",
        help="who answers: %(choices)s (default extractive)",
    )
    m.add_argument(
        "--extractor",
        choices=("rule", "llm"),
        default="rule",
        help="who extracts typed facts: %(choices)s (default rule)",
    )
    m.add_argument(
        "--judge",
        choices=("none", "llm"),
        default="none",
        help="also score answers with an LLM judge (the J score)",
    )
    m.add_argument("--base-url", help="API root, e.g. http://127.0.0.1:8000/v1")
    m.add_argument("--model", help="the model name the server knows")
    m.add_argument("--temperature", type=float, default=0.0, help="sampling temperature")
    m.add_argument("--llm-seed", type=int, default=0, help="decoder seed sent with each call")
    m.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="environment variable holding the API key (local servers need none)",
    )
    m.add_argument("--cache", help=f"response cache (default: <user cache>/toki/{LLM_CACHE})")
    m.add_argument(
        "--offline", action="store_true", help="make no call: every response must be in the cache"
    )
    m.add_argument(
        "--dry-run",
        action="store_true",
        help="make no call: count the calls the run would need, print only that",
    )
    m.add_argument("--timeout", type=float, default=120.0, help="seconds per request")
    m.add_argument("--max-retries", type=int, default=5, help="retries per request")
    m.add_argument("--quiet", action="store_true", help="no progress bar")
    pv = sub.add_parser(
        "provenance", help="shadow LWW against EWM and RULE; revoke a source (docs/shadow.md)"
    )
    pv.add_argument("--path", help=_PATH_HELP)
    pv.add_argument("--limit", type=int, default=2, help="the first N conversations")
    pv.add_argument("-k", type=int, default=5, help="items retrieved per question")
    pv.add_argument(
        "--out",
        help="results file (default: locomo_provenance.json in a new folder under ./toki-out; "
        "make reproduce writes notebooks/results/locomo_provenance.json)",
    )
    pv.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run a `locomo` subcommand; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "file", None):
        if args.path and args.path != args.file:
            parser.error(f"info: two paths ({args.file} and --path {args.path}); give one")
        args.path = args.file
    try:
        _check_numbers(args)
        if args.cmd == "fetch":
            path = fetch_locomo(args.dest, url=args.url)
            print(json.dumps({"path": str(path), "sha256": sha256_of(path)}) if args.json else path)
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
            return _ablate(args, ds)
        if args.cmd == "provenance":
            return _provenance(args, ds)
        cats = _categories(args.categories)
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
    except TokiError as e:
        print(f"toki locomo: {e}", file=sys.stderr)
        return 2


def _check_numbers(args: argparse.Namespace) -> None:
    """Range checks before the data is even loaded (a bad -k or --resamples would otherwise
    surface as an IndexError deep in the scoring)."""
    from toki.cli_input import at_least

    if getattr(args, "k", None) is not None:
        at_least("-k", args.k, 1, "retrieve at least one item")
    if getattr(args, "limit", None) is not None:
        at_least("--limit", args.limit, 1, "drop --limit for every conversation")
    if getattr(args, "resamples", None) is not None:
        at_least("--resamples", args.resamples, 1, "e.g. 10000")
    if getattr(args, "categories", None) is not None:
        _categories(args.categories)
    if getattr(args, "timeout", None) is not None and not args.timeout > 0:
        raise InvalidInput("--timeout", f"{args.timeout} is not a positive number of seconds")
    if getattr(args, "max_retries", None) is not None:
        at_least("--max-retries", args.max_retries, 0)


def _categories(text: str) -> tuple[int, ...]:
    """Comma-separated LoCoMo category numbers (1 multi-hop … 5 adversarial)."""
    from toki.locomo.data import Category

    valid = ", ".join(f"{c.value} {c.name.lower().replace('_', '-')}" for c in Category)
    try:
        cats = tuple(int(c) for c in text.split(",") if c.strip())
    except ValueError:
        raise InvalidInput("--categories", f"cannot read {text!r}", f"use {valid}") from None
    bad = [c for c in cats if c not in {x.value for x in Category}]
    if bad or not cats:
        raise InvalidInput("--categories", f"{bad or 'nothing'} is not a category", f"use {valid}")
    return cats


def _provenance(args: argparse.Namespace, ds: Any) -> int:
    """Issue 20's demonstration (toki.locomo.provenance), written to a results file."""

    from toki.cli_input import fresh_out_dir, writable_file
    from toki.locomo.provenance import run

    out = (
        writable_file("--out", args.out)
        if args.out
        else fresh_out_dir("locomo-provenance") / "locomo_provenance.json"
    )
    result = run(ds, limit=args.limit, k=args.k)
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        for name, counts in result["shadow_totals"].items():
            print(f"shadow LWW -> {name}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
        for row in result["rows"]:
            r = row["revocation"]
            print(
                f"{row['sample_id']}: revoked {r['source_id']}: {r.get('versions', 0)} versions, "
                f"{r.get('questions', 0)} questions read them, {r.get('stale_reads', 0)} stale "
                f"reads, {r.get('answers_changed', 0)} answers changed"
            )
        print(f"wrote {out}")
    return 0


def _ablate(args: argparse.Namespace, ds: Any) -> int:
    """The ablations, with the model roles the arguments ask for; an LLM run ends with one
    row of kind "run": the configuration, the prompts' hashes and what it cost."""
    uses_llm = "llm" in (args.answerer, args.extractor, args.judge)
    if not uses_llm:
        if args.offline or args.dry_run or args.base_url or args.model:
            raise InvalidInput(
                "--answerer",
                "the model options need a model role",
                "add --answerer llm, --extractor llm or --judge llm",
            )
        rows = run_ablations(
            ds,
            ablations=args.ablation or ABLATIONS,
            limit=args.limit,
            k=args.k,
            seed=args.seed,
            resamples=args.resamples,
        )
        _print_rows(args, rows)
        return 0
    from tqdm import tqdm

    from toki.llm import LLMClient, LLMConfig, LLMStats

    if not args.base_url or not args.model:
        raise InvalidInput(
            "--base-url",
            "an LLM role needs --base-url and --model",
            "e.g. --base-url http://127.0.0.1:8000/v1 --model NAME",
        )
    config = LLMConfig(
        args.base_url,
        args.model,
        temperature=args.temperature,
        seed=args.llm_seed,
        timeout=args.timeout,
        max_retries=args.max_retries,
        api_key_env=args.api_key_env,
    )
    cache_path = Path(args.cache) if args.cache else cache_dir() / LLM_CACHE
    started = time.perf_counter()
    with tqdm(disable=args.quiet, desc="model requests", unit="req", file=sys.stderr) as bar:

        def update(stats: LLMStats) -> None:
            bar.update(1)
            bar.set_postfix_str(stats.line(), refresh=False)

        client = LLMClient(
            config, cache_path, offline=args.offline, dry_run=args.dry_run, on_update=update
        )
        roles: dict[str, Any] = {
            "answerer": LLMAnswerer(client) if args.answerer == "llm" else None,
            "extractor": LLMExtractor(client) if args.extractor == "llm" else None,
            "judge": LLMAnswerJudge(client) if args.judge == "llm" else None,
        }
        try:
            rows = run_ablations(
                ds,
                ablations=args.ablation or ABLATIONS,
                limit=args.limit,
                k=args.k,
                seed=args.seed,
                resamples=args.resamples,
                **roles,
            )
        finally:
            client.cache.close()
    run = {
        "ablation": "run",
        "kind": "run",
        "answerer": args.answerer,
        "extractor": args.extractor,
        "judge": args.judge,
        "llm": config.to_json(),
        "prompts": {r.prompt.name: r.prompt.hash for r in roles.values() if r is not None},
        "cache": str(cache_path),
        "offline": args.offline,
        "dry_run": args.dry_run,
        "wall_seconds": round(time.perf_counter() - started, 1),
        "costs": client.stats.to_json(),
        "roles": {k: r.costs() for k, r in roles.items() if r is not None},
    }
    if args.dry_run:  # answers were placeholders: only the plan means anything
        rows = []
    _print_rows(args, [*rows, run])
    return 0


def _print_rows(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(_ablation_line(r))


def _ablation_line(r: dict[str, Any]) -> str:
    """One human-readable line per ablation row."""

    def f(x: object) -> str:
        return f"{x:.3f}" if isinstance(x, float) else str(x)

    if r["kind"] == "run":
        c = r["costs"]
        plan = f", calls still needed {c['planned']}" if r["dry_run"] else ""
        return (
            f"run: {r['llm']['model']} at {r['llm']['base_url']}: {c['calls']} calls, "
            f"{c['cache_hits']} cache hits, tokens in/out {c['tokens_in']}/{c['tokens_out']}, "
            f"{c['retries']} retries, {c['malformed']} malformed, {r['wall_seconds']} s{plan}; "
            f"roles {r['roles']}; cache {r['cache']}"
        )
    head = f"{r['ablation']:<11} {r['slice']:<14} cat={f(r['category']):<3} n={f(r['n']):<5}"
    metric = (
        ""
        if r["metric"] in ("f1", "accuracy", "f1 difference", "accuracy difference")
        else (f" [{r['metric']}]")
    )
    if r["kind"] == "check":
        verdict = "holds" if r["holds"] else "FAILS"
        return (
            f"{head} {r['variant']}: {f(r['score'])} check (expected {f(r['expected'])}): {verdict}"
        )
    if r["kind"] == "comparison":
        holm = f" Holm p={r['holm_p']:.2g}" if "holm_p" in r else ""
        if "conv_p" in r:  # the conversation as the unit; McNemar over questions secondary
            return (
                f"{head} {r['variant']} - {r['baseline']}{metric}: {f(r['score'])} "
                f"[{f(r['conv_ci_low'])}, {f(r['conv_ci_high'])}] over "
                f"{r['conversations']} conversations, permutation p={r['conv_p']:.2g}{holm}; "
                f"questions: McNemar p={r['mcnemar_p']:.2g} power={f(r['power_mcnemar'])}"
            )
        return (
            f"{head} {r['variant']} - {r['baseline']}{metric}: {f(r['score'])} "
            f"[{f(r['ci_low'])}, {f(r['ci_high'])}] McNemar p={r['mcnemar_p']:.2g}{holm} "
            f"power={f(r['power_mcnemar'])}"
        )
    if "conv_ci_low" in r:
        return (
            f"{head} {r['variant']}{metric}: {f(r['score'])} "
            f"[{f(r['conv_ci_low'])}, {f(r['conv_ci_high'])}] over {r['conversations']} "
            "conversations"
        )
    return f"{head} {r['variant']}{metric}: {f(r['score'])} [{f(r['ci_low'])}, {f(r['ci_high'])}]"
