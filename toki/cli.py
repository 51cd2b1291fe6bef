"""The `toki` command: one subcommand per experiment; every subcommand takes --json."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from toki.errors import InvalidInput, TokiError

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]


def _progress(args: argparse.Namespace, desc: str, unit: str, total: int = 0) -> Any:
    """A progress bar on stderr for a long command; off with --json or --quiet."""
    from tqdm import tqdm

    return tqdm(total=total, disable=args.json or args.quiet, desc=desc, unit=unit, file=sys.stderr)


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def _cmd_demo(args: argparse.Namespace) -> int:
    """The Lisbon → Berlin story from the seeds, told through the public API."""
    from toki.demo import lisbon_berlin

    story = lisbon_berlin()
    if args.json:
        _print_json(story.to_json())
    else:
        print(story.render())
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Measured vs predicted N1 rate of an unlogged stochastic judge, and of the keyed log."""
    from pathlib import Path

    from toki.experiments.calibration import (
        calibrate,
        mean_absolute_deviation,
        noise_mad,
        write_outputs,
    )

    try:
        ps = [float(x) for x in args.p.split(",") if x.strip()]
    except ValueError:
        raise InvalidInput("--p", f"cannot read {args.p!r}", "use e.g. 0.1,0.5,0.9") from None
    if args.runs < 1 or args.logged_runs < 1:
        raise InvalidInput("--runs", f"{args.runs}/{args.logged_runs} is not a positive count")
    if args.workers is not None and args.workers < 1:
        raise InvalidInput("--workers", f"{args.workers} is not a positive count")
    bad = [p for p in ps if not 0.0 <= p <= 1.0]
    if bad or not ps:
        raise InvalidInput("--p", f"{bad or 'nothing'} is not a list of probabilities in [0, 1]")
    with _progress(args, "calibrate", "cell", 2 * len(ps)) as bar:
        cells = calibrate(
            ps,
            args.runs,
            args.seed,
            progress=bar.update,
            logged_runs=args.logged_runs,
            workers=args.workers,
        )
    csv_path, png_path = write_outputs(cells, Path(args.out))
    mad, noise = mean_absolute_deviation(cells), noise_mad(cells)
    if args.json:
        _print_json(
            {
                "cells": [
                    {
                        "p": c.p,
                        "logged": c.logged,
                        "rate": c.rate,
                        "ci_low": c.ci_low,
                        "ci_high": c.ci_high,
                        "runs": c.runs,
                        "inconsistent": c.inconsistent,
                        "predicted": c.predicted,
                        "judge_calls": c.judge_calls,
                        "check": c.check,
                    }
                    for c in cells
                ],
                "mad": mad,
                "noise_mad": noise,
            }
        )
        return 0
    print(f"{'p':>5} {'logged':>7} {'rate':>7} {'95% CI':>17} {'predicted':>9} {'judge calls':>11}")
    for c in cells:
        ci = "check (no judge)" if c.check else f"[{c.ci_low:6.3f}, {c.ci_high:6.3f}]"
        print(
            f"{c.p:5.2f} {c.logged!s:>7} {c.rate:7.3f} {ci:>17} {c.predicted:9.3f}"
            f" {c.judge_calls:11d}"
        )
    print(
        f"mean absolute deviation (unlogged): {mad:.4f}; sampling noise alone would give "
        f"{noise:.4f} at {args.runs} runs per cell"
    )
    print(f"wrote {csv_path} and {png_path}")
    return 0


def _cmd_explore(args: argparse.Namespace) -> int:
    """Explore interleavings of a system model's agents; with --check, check every run."""
    from pathlib import Path

    from toki.check.runner import explore_system, make_strategy, make_workload
    from toki.isolation import Isolation
    from toki.systems.base import SimJudge
    from toki.systems.registry import get_system

    system = get_system(args.system)
    faults = [f for f in (args.faults or "").split(",") if f]
    workload = make_workload(args.workload, args.agents, args.claims, args.seed, args.keys, faults)
    strategy = make_strategy(args.strategy, args.seed, args.depth, args.preemptions)
    level = Isolation.parse(args.isolation) if args.isolation else None
    with _progress(args, "explore", "schedule", args.budget) as bar:
        report = explore_system(
            system,
            workload,
            strategy,
            level=level,
            budget=args.budget,
            check=args.check,
            judge=SimJudge(args.p, args.seed),
            progress=bar.update,
        )
    saved = {}
    if args.witness_dir and report.witnesses:
        for name, w in report.witnesses.items():
            saved[name] = str(w.save(Path(args.witness_dir) / f"{system.name}-{name}.json"))
    data = report.to_json()
    data["witness_files"] = saved
    if not args.check:
        data.pop("anomalies")
    if args.json:
        _print_json(data)
    else:
        for k, v in data.items():
            print(f"{k}: {v}")
    return 0


def _cmd_relay(args: argparse.Namespace) -> int:
    """Explore the seeds' outbox relay under scheduled failures and crashes, per level."""

    from toki.check.relay import CAUSES, explore_relay
    from toki.errors import InvalidInput
    from toki.isolation import Isolation
    from toki.sim.relay import SEED_OUTBOX, relay_program

    if not 1 <= args.rows <= len(SEED_OUTBOX):
        raise InvalidInput("rows", f"{args.rows}", f"use 1 to {len(SEED_OUTBOX)}")
    levels = [Isolation.parse(x) for x in args.levels.split(",") if x.strip()]
    reports = []
    for level in levels:
        prog = relay_program(
            SEED_OUTBOX[: args.rows],
            level=level,
            writer=not args.no_writer,
            failures=args.failures,
            crash_budget=args.crashes,
            knowledge=args.knowledge,
            on_failure=args.on_failure,
        )
        with _progress(args, level.value, "schedule", args.budget) as bar:
            summary = explore_relay(prog, budget=args.budget, progress=bar.update)
        reports.append({"level": level.value, **summary})
    if args.json:
        _print_json(reports)
    else:
        for r in reports:
            causes = ", ".join(f"{c.removesuffix('_rows')} {r[c]}" for c in CAUSES)
            more = "" if r["complete"] else "+ (budget reached)"
            print(
                f"{r['level']:17} {r['schedules']}{more} schedules, {r['flagged']} lose or "
                f"invent history ({causes})"
            )
            if r["shortest_flagged"] is not None:
                print(f"{'':17} shortest: {r['shortest_flagged']}")
    return 1 if args.fail_on_flagged and any(r["flagged"] for r in reports) else 0


def _cmd_check(args: argparse.Namespace) -> int:
    """Check a history file: toki's JSONL (N1/N2/N3 and Adya) or Jepsen/Elle's EDN or JSON
    (Elle's verdict for the consistency models asked for). Exit 0 valid, 1 invalid, 3 unknown."""
    from toki.history import detect_format

    fmt = args.format if args.format != "auto" else detect_format(args.file)
    models = [
        m
        for spec in args.consistency_model or ["strict-serializable"]
        for m in spec.split(",")
        if m.strip()
    ]
    extra = [a for spec in args.anomalies or [] for a in spec.split(",") if a.strip()]
    options = {
        "wfr_keys": args.wfr_keys,
        "sequential_keys": args.sequential_keys,
        "linearizable_keys": args.linearizable_keys,
        "search_budget": args.search_budget,
    }
    if fmt == "toki":
        return _check_toki(args, models, extra, options)
    from toki.check.adya import verdict, workload
    from toki.check.elle import load

    history = load(args.file, fmt)
    found = workload(history)
    if args.workload != "auto" and found not in (args.workload, "empty"):
        raise InvalidInput(
            "--workload", f"the history is {found}, not {args.workload}", "drop --workload"
        )
    v = verdict(history, models=models, anomalies=extra, **options)
    if args.json:
        _print_json(
            {"file": args.file, "format": fmt, "transactions": len(history.txns), **v.to_json()}
        )
    else:
        graphs = " + ".join(
            [
                "ww/wr/rw",
                *(
                    n
                    for n, on in (("process", v.process_edges), ("realtime", v.realtime_edges))
                    if on
                ),
            ]
        )
        print(
            f"{args.file}: {fmt}, {v.workload}, {len(history.txns):,} transactions; "
            f"checked for {', '.join(v.models)} ({graphs})"
        )
        print(v.render(args.limit))
    return _exit_code(v.valid)


def _exit_code(valid: bool | str) -> int:
    return 0 if valid is True else 1 if valid is False else 3


def _check_toki(
    args: argparse.Namespace, models: list[str], extra: list[str], options: dict[str, Any]
) -> int:
    from toki.check.runner import check_history_file
    from toki.history import read_history

    result = check_history_file(read_history(args.file), models=models, anomalies=extra, **options)
    if args.json:
        _print_json(result)
    else:
        for name, res in result["checks"].items():
            print(f"{name}: {res}")
        for name, why in result["could_not_run"].items():
            print(f"{name}: could not run: {why}")
    return _exit_code(result["valid?"])


def _cmd_replay(args: argparse.Namespace) -> int:
    """Re-run a witness step by step and say whether the anomaly reproduced."""
    from toki.check.witness import Witness, explain, replay_witness
    from toki.systems.registry import get_system

    witness = Witness.load(args.witness)
    system = get_system(witness.system)
    run, verdict = replay_witness(witness, system)
    if args.json:
        _print_json(
            {
                "reproduced": verdict.found,
                "verdict": verdict.to_json(),
                "steps": explain(witness, run, system),
            }
        )
    else:
        print("\n".join(explain(witness, run, system)))
        print(f"reproduced: {verdict.found}")
    return 0 if verdict.found else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    """Walk a store's hash chain (without opening it as a Memory, which would refuse a
    tampered log) and compare it with a digest saved earlier; exit 1 names the first change."""
    from pathlib import Path

    from toki.chain import Digest, verify
    from toki.store.base import ALL_SEQS, open_store

    digest = None if args.digest is None else Digest.parse(args.digest)
    key = None
    if args.key_file is not None:
        try:
            key = Path(args.key_file).read_bytes().strip()
        except OSError as exc:
            raise InvalidInput(
                "--key-file", f"cannot read {args.key_file}: {exc.strerror}"
            ) from None
        if not key:
            raise InvalidInput("--key-file", f"{args.key_file} is empty", "put the key in it")
    store = open_store(args.url)
    try:
        report = verify(
            store.url, ((e, e.chain) for e in store.load(ALL_SEQS)), digest=digest, key=key
        )
    finally:
        store.close()
    if args.json:
        _print_json(
            {
                "ok": report.ok,
                "events": report.events,
                "digest": str(report.digest),
                "keyed": key is not None,
                "checked_against": None if digest is None else str(digest),
                "first_bad_seq": report.first_bad,
                "problem": report.problem,
            }
        )
    else:
        print(report.describe())
    return 0 if report.ok else 1


def _cmd_matrix(args: argparse.Namespace) -> int:
    """Regenerate the verdict matrix (system × anomaly) from verdict_matrix/matrix.toml."""
    from pathlib import Path

    from toki.experiments.matrix import run_matrix

    config = args.config or str(Path("verdict_matrix") / "matrix.toml")
    with _progress(args, "matrix", "task") as bar:

        def on_plan(n: int) -> None:
            bar.total = n
            bar.refresh()

        result = run_matrix(
            config,
            budget=args.budget,
            executor=args.executor,
            workers=args.workers,
            address=args.address,
            out=args.out,
            progress=bar.update,
            on_plan=on_plan,
            real=args.real,
            real_budget=args.real_budget,
        )
    rows = result.csv_rows()
    if args.json:
        _print_json(rows)
    else:
        from toki.experiments.matrix import short

        for r, full in zip(rows, result.rows, strict=True):
            print(
                f"{r['system']:16} {r['faults']:5} {r['anomaly']:2} {short(full):32} "
                f"n={r['runs']:>5} {r['mode']:10} {r['witness'] or full['reason']}"
            )
        print(f"wrote {args.out}/matrix.csv, .md, .tex, .png in {result.seconds:.1f} s")
        if args.real:
            print(f"wrote {args.out}/agreement.md, .csv")
            for note in result.notes:
                if note.startswith("real row missing"):
                    print(note, file=sys.stderr)
    return 0


def _cmd_pg_grid(args: argparse.Namespace) -> int:
    """TOKI's operators on a real PostgreSQL server beside the simulator (the real-database
    grid); writes the CSV and regenerates the table in docs/postgres.md."""
    from pathlib import Path

    from toki.experiments.pg_grid import LEVELS, OPERATORS, run_grid, write_csv, write_doc
    from toki.store.postgres import default_dsn

    try:
        writers = [int(x) for x in args.writers.split(",") if x.strip()]
    except ValueError:
        raise InvalidInput("--writers", f"cannot read {args.writers!r}", "e.g. 2,4,8") from None
    operators = [x.strip().upper() for x in args.operators.split(",") if x.strip()]
    levels = [x.strip().upper() for x in args.levels.split(",") if x.strip()]
    if not writers or min(writers) < 1:
        raise InvalidInput("--writers", f"{args.writers!r} is not a list of positive counts")
    if args.reps < 1:
        raise InvalidInput("--reps", f"{args.reps} is not a positive count")
    if not operators or not levels or set(operators) - set(OPERATORS) or set(levels) - set(LEVELS):
        raise InvalidInput(
            "--operators/--levels",
            f"{args.operators!r} / {args.levels!r}",
            "operators from LWW,EWM,AWAIT,RULE; levels from RC,RR,SER",
        )
    runs = len(operators) * len(levels) * len(writers) * args.reps
    with _progress(args, "pg-grid", "run", runs) as bar:
        rows = run_grid(
            args.dsn or default_dsn(),
            operators=operators,
            levels=levels,
            writers=writers,
            reps=args.reps,
            seed=args.seed,
            claims_per_agent=args.claims,
            progress=bar.update,
        )
    write_csv(rows, Path(args.out))
    if args.doc:
        write_doc(rows, Path(args.doc))
    if args.json:
        _print_json({"csv": args.out, "doc": args.doc, "rows": rows})
    else:
        print(f"wrote {args.out}" + (f" and the table in {args.doc}" if args.doc else ""))
    return 0


def _cmd_shadow(args: argparse.Namespace) -> int:
    """Fold a store's log under another configuration (docs/shadow.md) and print every read
    whose answer differs, classified; exit 1 when anything is unexplained or an input could
    not be re-run (the rollout gate), 0 otherwise. The store is read, never written."""
    from toki.memory import Memory
    from toki.shadow import Config

    config = Config.from_toml(args.config)
    with Memory.open(args.url) as mem:
        report = mem.shadow(config, valid_at=args.valid_at)
    if args.json:
        _print_json(report.to_json())
    else:
        print(report.describe())
    return 0 if report.ok else 1


def _add_shadow_parser(sub: Any) -> None:
    shd = sub.add_parser(
        "shadow", help="a store's projection under another configuration, differences classified"
    )
    shd.add_argument("url", help="the store (sqlite:///path.db, postgresql://…)")
    shd.add_argument("--config", required=True, help="the new configuration (TOML)")
    shd.add_argument("--valid-at", help="the valid time compared (default now)")
    shd.add_argument("--json", action="store_true", help="machine-readable output")
    shd.set_defaults(handler=_cmd_shadow)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toki",
        description="Contradiction resolution in agent memory as write-time concurrency control.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="tell the Lisbon → Berlin story (bitemporal basics)")
    demo.add_argument("--json", action="store_true", help="machine-readable output")
    demo.set_defaults(handler=_cmd_demo)
    sub.add_parser("locomo", help="LoCoMo data and experiments (fetch, info, baseline, ablate)")
    sub.add_parser("prove", help="run the z3 proofs; writes proofs/RESULTS.md and results.json")
    sub.add_parser("real", help="real memory libraries under the scheduler (setup, run, replay)")
    cal = sub.add_parser("calibrate", help="replay calibration: N1 rate of an unlogged judge")
    cal.add_argument(
        "--p",
        default=",".join(f"{0.05 * i:.2f}" for i in range(1, 20)),
        help="comma-separated probabilities (default 0.05,...,0.95)",
    )
    cal.add_argument(
        "--runs",
        type=int,
        default=5000,
        help="runs per unlogged cell (default 5000: noise MAD about 0.005)",
    )
    cal.add_argument(
        "--logged-runs",
        type=int,
        default=200,
        help="runs per keyed-log cell, a check (default 200)",
    )
    cal.add_argument("--workers", type=int, help="worker processes (default: all cores)")
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument("--out", default="verdict_matrix", help="folder for the csv and png")
    cal.add_argument("--json", action="store_true")
    cal.add_argument("--quiet", action="store_true", help="no progress bar")
    cal.set_defaults(handler=_cmd_calibrate)

    exp = sub.add_parser("explore", help="explore interleavings of a system model's agents")
    exp.add_argument("--system", default="toki", help="a model name (see docs/systems.md)")
    exp.add_argument(
        "--strategy", default="dpor", choices=["dpor", "random", "pct", "bounded", "exhaustive"]
    )
    exp.add_argument("--workload", help="a named scenario (default: synthetic)")
    exp.add_argument("--agents", type=int, default=2)
    exp.add_argument("--claims", type=int, default=2, help="claims per agent (synthetic)")
    exp.add_argument("--keys", type=int, default=1, help="keys (synthetic)")
    exp.add_argument("--faults", help="comma-separated: duplicate:<agent>, clock-rollback:<n>")
    exp.add_argument("--isolation", help="override the model's isolation level")
    exp.add_argument("--seed", type=int, default=0)
    exp.add_argument("--p", type=float, default=0.5, help="judge's vote for the challenger")
    exp.add_argument("--depth", type=int, default=3, help="PCT depth")
    exp.add_argument("--preemptions", type=int, default=2, help="bounded DFS preemptions")
    exp.add_argument("--budget", type=int, default=1000, help="maximum schedules")
    exp.add_argument("--check", action="store_true", help="check every run for anomalies")
    exp.add_argument("--witness-dir", help="save the shortest witness of each anomaly here")
    exp.add_argument("--json", action="store_true")
    exp.add_argument("--quiet", action="store_true")
    exp.set_defaults(handler=_cmd_explore)

    rel = sub.add_parser("relay", help="explore the outbox relay under scheduled failures")
    rel.add_argument("--levels", default="RU,RC,SI", help="comma-separated isolation levels")
    rel.add_argument("--rows", type=int, default=2, help="outbox rows (the seeds' 1 to 3)")
    rel.add_argument("--failures", type=int, default=1, help="scheduled delivery failures")
    rel.add_argument("--crashes", type=int, default=1, help="crashes per process")
    rel.add_argument("--no-writer", action="store_true", help="a filled outbox, no writer")
    rel.add_argument(
        "--knowledge",
        default="source",
        choices=["source", "relay"],
        help="'relay' plants the relay-clock mistake",
    )
    rel.add_argument(
        "--on-failure",
        default="stop",
        choices=["stop", "skip"],
        help="'skip' plants the carry-on mistake",
    )
    rel.add_argument("--budget", type=int, default=1_000_000, help="maximum schedules per level")
    rel.add_argument(
        "--fail-on-flagged",
        action="store_true",
        help="exit 1 when a schedule loses or invents history",
    )
    rel.add_argument("--json", action="store_true")
    rel.add_argument("--quiet", action="store_true")
    rel.set_defaults(handler=_cmd_relay)

    chk = sub.add_parser(
        "check",
        help="check a history (toki JSONL, Jepsen/Elle EDN or JSON) for anomalies",
        description="Exit status: 0 valid, 1 invalid, 3 unknown (e.g. an empty dependency "
        "graph), 2 bad input.",
    )
    chk.add_argument("file")
    chk.add_argument("--format", default="auto", choices=["auto", "toki", "elle-edn", "elle-json"])
    chk.add_argument(
        "--workload",
        default="auto",
        choices=["auto", "list-append", "rw-register"],
        help="refuse a history of another workload (default: detect)",
    )
    chk.add_argument(
        "--consistency-model",
        action="append",
        metavar="MODEL",
        help="Elle's model names, repeatable or comma-separated (default strict-serializable)",
    )
    chk.add_argument(
        "--anomalies",
        action="append",
        metavar="TYPES",
        help="extra anomaly types that must not occur (Elle's names)",
    )
    chk.add_argument(
        "--sequential-keys",
        action="store_true",
        help="registers: infer version orders from each process's order",
    )
    chk.add_argument(
        "--linearizable-keys",
        action="store_true",
        help="registers: infer version orders from real-time order",
    )
    chk.add_argument(
        "--wfr-keys",
        action="store_true",
        help="registers: a txn's writes follow its reads of the same key",
    )
    chk.add_argument(
        "--search-budget",
        type=int,
        default=2_000_000,
        help="edge relaxations per cycle type and component",
    )
    chk.add_argument("--limit", type=int, default=10, help="anomalies shown per type")
    chk.add_argument("--json", action="store_true")
    chk.set_defaults(handler=_cmd_check)

    rep = sub.add_parser("replay", help="re-run a witness step by step")
    rep.add_argument("witness")
    rep.add_argument("--json", action="store_true")
    rep.set_defaults(handler=_cmd_replay)

    ver = sub.add_parser(
        "verify", help="walk a store's hash chain; prove it unchanged up to a saved digest"
    )
    ver.add_argument("url", help="the store: sqlite:///path.db, postgresql://…")
    ver.add_argument("--digest", help="'seq:head' saved earlier (Memory.digest(), or this command)")
    ver.add_argument(
        "--key-file", help="keyed mode: a file holding the HMAC key (never stored with the data)"
    )
    ver.add_argument("--json", action="store_true")
    ver.set_defaults(handler=_cmd_verify)

    mat = sub.add_parser("matrix", help="regenerate the verdict matrix (system × anomaly)")
    mat.add_argument("--budget", default="default", choices=["small", "default"])
    mat.add_argument("--executor", default="local", choices=["local", "dask"])
    mat.add_argument("--address", help="a Dask scheduler, tcp://host:port (--executor dask)")
    mat.add_argument("--workers", type=int, help="worker processes (default: all cores)")
    mat.add_argument("--out", default="verdict_matrix", help="folder for the outputs")
    mat.add_argument("--config", help="default: verdict_matrix/matrix.toml")
    mat.add_argument("--json", action="store_true", help="print the rows as JSON")
    mat.add_argument("--quiet", action="store_true", help="no progress bar")
    mat.add_argument(
        "--real",
        action="store_true",
        help="add the real libraries' rows (every system whose environment "
        "exists; `toki real setup all` creates them) and agreement.md/.csv",
    )
    mat.add_argument(
        "--real-budget",
        default="real",
        help="matrix.toml budget for the real rows (default: [budgets.real])",
    )
    mat.set_defaults(handler=_cmd_matrix)

    pgg = sub.add_parser("pg-grid", help="TOKI's operators on PostgreSQL beside the simulator")
    pgg.add_argument("--dsn", help="server (default $TOKI_PG_DSN or the local test server)")
    pgg.add_argument("--reps", type=int, default=20, help="seeded schedules per cell")
    pgg.add_argument("--writers", default="2,4,8", help="comma-separated writer counts")
    pgg.add_argument("--operators", default="LWW,EWM,AWAIT,RULE")
    pgg.add_argument("--levels", default="RC,RR,SER")
    pgg.add_argument("--claims", type=int, default=1, help="claims per writer")
    pgg.add_argument("--seed", type=int, default=0)
    pgg.add_argument("--out", default="verdict_matrix/pg_grid.csv")
    pgg.add_argument("--doc", default="docs/postgres.md", help="'' leaves the docs alone")
    pgg.add_argument("--json", action="store_true")
    pgg.add_argument("--quiet", action="store_true")
    pgg.set_defaults(handler=_cmd_pg_grid)
    _add_shadow_parser(sub)
    return parser


# Subcommands with their own argument parser: everything after the name is theirs.
_DELEGATED = {"locomo": "toki.locomo.cli", "prove": "toki.formal.cli", "real": "toki.real.cli"}


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in _DELEGATED:
        import importlib

        module = importlib.import_module(_DELEGATED[args_list[0]])
        delegate: Callable[[Sequence[str]], int] = module.main
        return delegate(args_list[1:])
    parser = _build_parser()
    args = parser.parse_args(args_list)
    handler: Handler = args.handler
    try:
        return handler(args)
    except TokiError as exc:
        print(f"toki {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
