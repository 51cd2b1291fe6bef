"""`toki demo`, `calibrate`, `explore` and `relay`: the simulator's commands."""

from __future__ import annotations

import argparse
from typing import Any

from toki.cli.common import LEVELS_HELP, OUT_HELP, SEARCHES, print_json, progress
from toki.cli_input import at_least, out_dir, parse_faults, parse_levels, probability, writable_file
from toki.cli_output import table
from toki.errors import InvalidInput

#: toki relay's default schedules per level: the full DPOR search of 2 rows finishes within it
RELAY_BUDGET = 20_000


def _cmd_demo(args: argparse.Namespace) -> int:
    """The Lisbon → Berlin story from the seeds, told through the public API."""
    from toki.demo import lisbon_berlin

    story = lisbon_berlin()
    if args.json:
        print_json(story.to_json())
    else:
        print(story.render())
    return 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Measured vs predicted N1 rate of an unlogged stochastic judge, and of the keyed log."""
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
    folder = out_dir(args.out, "calibrate")  # checked before the run, not after it
    with progress(args, "calibrate", "cell", 2 * len(ps)) as bar:
        cells = calibrate(
            ps,
            args.runs,
            args.seed,
            progress=bar.update,
            logged_runs=args.logged_runs,
            workers=args.workers,
        )
    csv_path, png_path = write_outputs(cells, folder)
    mad, noise = mean_absolute_deviation(cells), noise_mad(cells)
    if args.json:
        print_json(
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
                "files": [str(csv_path), str(png_path)],
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
    """Explore interleavings of a system model's agents; with --check, check every run
    (exit 1 when some run shows an anomaly, as toki check)."""
    from toki.check.runner import explore_system, make_strategy
    from toki.isolation import Isolation
    from toki.systems.base import SimJudge
    from toki.systems.registry import get_system

    system = get_system(args.system)
    workload = _explore_workload(args)
    at_least("--budget", args.budget, 1, "explore at least one schedule")
    probability("--p", args.p)
    at_least("--depth", args.depth, 1)
    at_least("--preemptions", args.preemptions, 0, "0 runs each agent to its end")
    strategy = make_strategy(args.strategy, args.seed, args.depth, args.preemptions)
    level = Isolation.parse(args.isolation) if args.isolation else None
    history_out = writable_file("--history-out", args.history_out) if args.history_out else None
    witness_dir = (
        out_dir(args.witness_dir, "explore", "--witness-dir") if args.witness_dir else None
    )
    total = None if args.strategy in SEARCHES else args.budget  # a search may end sooner
    with progress(args, "explore", "schedule", total, bound=args.budget) as bar:
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
    if witness_dir is not None and report.witnesses:
        for name, w in report.witnesses.items():
            saved[name] = str(w.save(witness_dir / f"{system.name}-{name}.json"))
    data = report.to_json()
    data["witness_files"] = saved
    data["search"] = _search_word(args, report.exhausted)
    if history_out is not None:
        data["history_file"] = str(
            _write_explored_history(args, system, workload, report, history_out)
        )
    if not args.check:
        data.pop("anomalies")
    found = args.check and any(report.anomalies.values())
    if args.json:
        print_json(data)
    else:
        _print_explore(data, args.check)
    return 1 if found else 0


def _explore_workload(args: argparse.Namespace) -> Any:
    """The named scenario, or a synthetic workload of --agents × --claims over --keys; a
    scenario fixes its own sizes, so giving both is refused rather than half-ignored."""
    from toki.check.runner import make_workload

    sizes = {"--agents": args.agents, "--claims": args.claims, "--keys": args.keys}
    if args.workload:
        given = [k for k, v in sizes.items() if v is not None]
        if given:
            raise InvalidInput(
                "--workload",
                f"the scenario {args.workload!r} fixes its own agents and claims, "
                f"so {'/'.join(given)} would be ignored",
                "drop " + " and ".join(given) + ", or drop --workload for a synthetic workload",
            )
    agents = at_least("--agents", 2 if args.agents is None else args.agents, 1)
    claims = at_least("--claims", 2 if args.claims is None else args.claims, 1)
    keys = at_least("--keys", 1 if args.keys is None else args.keys, 1)
    base = make_workload(args.workload, agents, claims, args.seed, keys)
    faults = parse_faults("--faults", args.faults, len(base.inboxes))
    return make_workload(args.workload, agents, claims, args.seed, keys, faults)


def _search_word(args: argparse.Namespace, exhausted: bool) -> str:
    """How complete the exploration was, in words that claim no more than it did."""
    if args.strategy not in SEARCHES:
        return f"sampled ({args.strategy})"
    if not exhausted:
        return "budget reached (incomplete)"
    if args.strategy == "bounded":
        return f"complete within {args.preemptions} preemption(s)"
    return "complete"


def _write_explored_history(
    args: argparse.Namespace, system: Any, workload: Any, report: Any, path: Any
) -> Any:
    """The history of one explored run in toki's JSONL format (docs/history-format.md):
    the shortest witness's run when --check found one, else the first run explored. The
    header names the system, workload and schedule, so `toki check` re-runs it exactly."""
    from toki.check.runner import make_strategy
    from toki.history import run_to_records, write_history
    from toki.isolation import Isolation
    from toki.sim.explore import iter_runs, replay_schedule
    from toki.systems.base import SimJudge, build_program

    level = report.isolation
    judge = SimJudge(args.p, args.seed)
    program = build_program(system, workload, level=Isolation(level), judge=judge)
    if report.witnesses:
        best = min(report.witnesses.values(), key=lambda w: (len(w.schedule), w.anomaly))
        run = replay_schedule(program, best.schedule)
    else:
        strategy = make_strategy(args.strategy, args.seed, args.depth, args.preemptions)
        run = next(iter(iter_runs(program, strategy, budget=1)))
    header = {
        "system": system.name,
        "isolation": level,
        "workload": workload.to_json(),
        "schedule": list(run.schedule),
        "strategy": args.strategy,
        "seeds": list(run.seeds),
        "judge_seed": args.seed,
        "recovery_seed": args.seed + 1,
        "judge_p": args.p,
        "crash_budget": 0,
    }
    return write_history(path, header, run_to_records(run.history))


#: explore's summary table: report field -> column header
_EXPLORE_SUMMARY = {
    "system": "system",
    "isolation": "isolation",
    "workload": "workload",
    "strategy": "strategy",
    "schedules": "schedules",
    "distinct_states": "states",
    "steps": "steps",
    "seconds": "seconds",
    "search": "search",
}
_EXPLORE_ANOMALIES = ["anomaly", "runs found", "runs checked", "undecided", "witness steps"]


def _print_explore(data: dict[str, Any], checked: bool) -> None:
    print(table(list(_EXPLORE_SUMMARY.values()), [[data[k] for k in _EXPLORE_SUMMARY]]))
    if checked:
        names = sorted(set(data["anomalies"]) | set(data["checked"]) | set(data["undecided"]))
        rows = [
            [
                name,
                data["anomalies"].get(name, 0),
                data["checked"].get(name, "-"),
                data["undecided"].get(name, 0),
                data["witnesses"].get(name, {}).get("steps", "-"),
                data["witness_files"].get(name, "-"),
            ]
            for name in names
        ]
        print()
        print(table([*_EXPLORE_ANOMALIES, "witness file"], rows))
    if "history_file" in data:
        print(f"wrote the history of one run to {data['history_file']} (toki check reads it)")


def _cmd_relay(args: argparse.Namespace) -> int:
    """Explore the seeds' outbox relay under scheduled failures and crashes, per level; the
    shortest schedule that loses or invents history is saved as a witness (toki replay)."""
    import dataclasses
    from pathlib import Path

    from toki.check.relay import CAUSES, RelayWitness, explore_relay
    from toki.sim.relay import SEED_OUTBOX, relay_program

    if not 1 <= args.rows <= len(SEED_OUTBOX):
        raise InvalidInput("rows", f"{args.rows}", f"use 1 to {len(SEED_OUTBOX)}")
    levels = parse_levels("--levels", args.levels)
    at_least("--budget", args.budget, 1, "explore at least one schedule")
    at_least("--failures", args.failures, 0)
    at_least("--crashes", args.crashes, 0)
    folder: Path | None = out_dir(args.out, "relay") if args.out is not None else None
    reports = []
    for level in levels:
        settings = {
            "writer": not args.no_writer,
            "failures": args.failures,
            "crash_budget": args.crashes,
            "knowledge": args.knowledge,
            "on_failure": args.on_failure,
        }
        prog = relay_program(SEED_OUTBOX[: args.rows], level=level, **settings)
        with progress(args, level.value, "schedule", None, bound=args.budget) as bar:
            summary = explore_relay(prog, budget=args.budget, progress=bar.update)
        report = {"level": level.value, **summary, "witness_file": None}
        if summary["shortest_flagged"] is not None:
            folder = folder or out_dir(None, "relay")
            witness = RelayWitness(
                args.rows, level.value, tuple(summary["shortest_flagged"]), **settings
            )
            _, verdict = witness.replay()  # what it loses or invents, kept in the file
            witness = dataclasses.replace(witness, details=dict(verdict.details))
            report["witness_file"] = str(witness.save(folder / f"relay-{level.value}.json"))
        reports.append(report)
    if args.json:
        print_json(reports)
    else:
        rows = [
            [
                r["level"],
                f"{r['schedules']:,}" + ("" if r["complete"] else "+"),
                "complete" if r["complete"] else "budget reached (incomplete)",
                r["flagged"],
                *(r[c] for c in CAUSES),
                r["witness_file"] or "-",
            ]
            for r in reports
        ]
        heads = [c.removesuffix("_rows").replace("_", "-") for c in CAUSES]
        print(
            table(
                [
                    "level",
                    "schedules",
                    "search",
                    "lose or invent history",
                    *heads,
                    "shortest (toki replay FILE)",
                ],
                rows,
            )
        )
    return 1 if args.fail_on_flagged and any(r["flagged"] for r in reports) else 0


def add_parsers(sub: Any) -> None:
    from toki.sim.workload import SCENARIOS
    from toki.systems.registry import LIBRARY, SYSTEMS

    demo = sub.add_parser("demo", help="tell the Lisbon → Berlin story (bitemporal basics)")
    demo.add_argument("--json", action="store_true", help="machine-readable output")
    demo.set_defaults(handler=_cmd_demo)
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
    cal.add_argument("--seed", type=int, default=0, help="base seed of the judges (default 0)")
    cal.add_argument("--out", help=OUT_HELP + " for calibration.csv and .png")
    cal.add_argument("--json", action="store_true", help="machine-readable output")
    cal.add_argument("--quiet", action="store_true", help="no progress bar")
    cal.set_defaults(handler=_cmd_calibrate)

    exp = sub.add_parser("explore", help="explore interleavings of a system model's agents")
    exp.add_argument(
        "--system",
        default="toki",
        choices=sorted([*SYSTEMS, *LIBRARY]),
        metavar="SYSTEM",
        help="a model (docs/systems.md): "
        + ", ".join(sorted(SYSTEMS))
        + "; or the library's own write path (docs/exploration.md §6): "
        + ", ".join(sorted(LIBRARY))
        + " (default toki)",
    )
    exp.add_argument(
        "--strategy",
        default="dpor",
        choices=["dpor", "random", "pct", "bounded", "exhaustive"],
        help="how schedules are chosen: %(choices)s (default dpor)",
    )
    exp.add_argument(
        "--workload",
        choices=sorted(SCENARIOS),
        metavar="NAME",
        help="a named scenario: " + ", ".join(sorted(SCENARIOS)) + " (default: a synthetic "
        "workload of --agents × --claims; a scenario fixes its own sizes)",
    )
    exp.add_argument("--agents", type=int, help="agents of the synthetic workload (default 2)")
    exp.add_argument("--claims", type=int, help="claims per agent, synthetic (default 2)")
    exp.add_argument("--keys", type=int, help="keys of the synthetic workload (default 1)")
    exp.add_argument("--faults", help="comma-separated: duplicate:<agent>, clock-rollback:<n>")
    exp.add_argument(
        "--isolation", help="override the model's isolation level (" + LEVELS_HELP + ")"
    )
    exp.add_argument("--seed", type=int, default=0, help="workload, strategy and judge seed")
    exp.add_argument("--p", type=float, default=0.5, help="judge's vote for the challenger")
    exp.add_argument("--depth", type=int, default=3, help="PCT depth (at least 1)")
    exp.add_argument("--preemptions", type=int, default=2, help="bounded DFS preemptions (>= 0)")
    exp.add_argument("--budget", type=int, default=1000, help="maximum schedules (default 1000)")
    exp.add_argument(
        "--check", action="store_true", help="check every run for anomalies; exit 1 if found"
    )
    exp.add_argument("--witness-dir", help="save the shortest witness of each anomaly here")
    exp.add_argument(
        "--history-out",
        metavar="FILE",
        help="write one run's history (the shortest witness's, else the first) as toki JSONL "
        "for toki check",
    )
    exp.add_argument("--json", action="store_true", help="machine-readable output")
    exp.add_argument("--quiet", action="store_true", help="no progress bar")
    exp.set_defaults(handler=_cmd_explore)

    rel = sub.add_parser("relay", help="explore the outbox relay under scheduled failures")
    rel.add_argument(
        "--levels",
        default="RU,RC,SI",
        help="comma-separated isolation levels (" + LEVELS_HELP + ")",
    )
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
    rel.add_argument(
        "--budget",
        type=int,
        default=RELAY_BUDGET,
        help=f"maximum schedules per level (default {RELAY_BUDGET:,}; the search reports when "
        "it stopped at the budget)",
    )
    rel.add_argument(
        "--fail-on-flagged",
        action="store_true",
        help="exit 1 when a schedule loses or invents history",
    )
    rel.add_argument(
        "--out", help=OUT_HELP + " for the shortest flagged schedule of each level (witness)"
    )
    rel.add_argument("--json", action="store_true", help="machine-readable output")
    rel.add_argument("--quiet", action="store_true", help="no progress bar")
    rel.set_defaults(handler=_cmd_relay)
