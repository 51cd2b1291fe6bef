"""The `toki` command: one subcommand per experiment; every subcommand takes --json."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from toki.cli_input import (
    at_least,
    check_dask_address,
    check_pg_room,
    out_dir,
    parse_faults,
    parse_ints,
    parse_levels,
    probability,
    writable_file,
)
from toki.cli_output import print_json, table
from toki.errors import InvalidInput, TokiError

__all__ = ["EXIT_CODES", "main"]

Handler = Callable[[argparse.Namespace], int]

#: Every command's exit status (docs/cli.md).
EXIT_CODES = {
    0: "success: the run finished and, where something was checked, nothing was found",
    1: "an anomaly was found (check, explore --check, relay --fail-on-flagged), a witness did "
    "not reproduce (replay), or a store changed (verify)",
    2: "bad input or usage: one line on stderr names the option or file and the fix (also a "
    "file the machine refused to read or write)",
    3: "unknown: the check could not decide (check, e.g. an empty dependency graph)",
    4: "internal error: a bug in toki (one line; TOKI_TRACEBACK=1 or --traceback shows it)",
    130: "interrupted (Ctrl-C)",
}
#: Strategies whose runs stop before the budget only when the search space is exhausted.
SEARCHES = ("dpor", "bounded", "exhaustive")


def _progress(
    args: argparse.Namespace, desc: str, unit: str, total: int | None = 0, bound: int = 0
) -> Any:
    """A progress bar on stderr for a long command; off with --json or --quiet. With
    total None the count is unknown (a search stops when it is exhausted): the bar shows
    the count and the rate, the upper `bound` in its label, and no ETA."""
    from tqdm import tqdm

    if total is None and bound:
        desc = f"{desc} (total unknown, at most {bound:,})"
    return tqdm(total=total, disable=args.json or args.quiet, desc=desc, unit=unit, file=sys.stderr)


def _print_json(data: Any) -> None:
    print_json(data)


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
    with _progress(args, "calibrate", "cell", 2 * len(ps)) as bar:
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
    witness_dir = out_dir(args.witness_dir, "explore") if args.witness_dir else None
    total = None if args.strategy in SEARCHES else args.budget  # a search may end sooner
    with _progress(args, "explore", "schedule", total, bound=args.budget) as bar:
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
        _print_json(data)
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
        with _progress(args, level.value, "schedule", None, bound=args.budget) as bar:
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
        _print_json(reports)
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
    from toki.check.columnar import check_file

    checked = check_file(args.file, fmt, models=models, anomalies=extra, **options)
    v = checked.verdict
    if args.workload != "auto" and v.workload not in (args.workload, "empty"):
        raise InvalidInput(
            "--workload", f"the history is {v.workload}, not {args.workload}", "drop --workload"
        )
    if args.json:
        _print_json(
            {"file": args.file, "format": fmt, "transactions": checked.transactions, **v.to_json()}
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
            f"{args.file}: {fmt}, {v.workload}, {checked.transactions:,} transactions; "
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
        rows = [[name, *_check_status(res)] for name, res in result["checks"].items()]
        rows += [[name, "could not run", why] for name, why in result["could_not_run"].items()]
        print(table(["check", "result", "details"], rows))
        print(f"valid? {str(result['valid?']).lower()}")
    return _exit_code(result["valid?"])


def _check_status(res: dict[str, Any]) -> tuple[str, str]:
    """One check's verdict in a word, and what it found (shortened) in a phrase."""
    import json

    if "valid?" in res:  # the Adya part: Elle's verdict
        word = {True: "valid", False: "anomaly"}.get(res["valid?"], "unknown")
        return word, "; ".join(res["explanations"][:3]) or ", ".join(res["found"]) or "-"
    details = res.get("details") or {}
    if not res.get("found"):
        if res.get("ran", True):
            return "clean", "-"
        return (
            ("abstains", str(details["abstains"]))
            if "abstains" in details
            else (
                "undecided",
                "-",
            )
        )
    parts = []
    if res.get("keys"):
        parts.append("keys " + ", ".join(str(k) for k in res["keys"]))
    if res.get("erased"):
        parts.append("erased " + ", ".join(f"{k}={v}" for k, v in res["erased"]))
    for name in ("expected", "observed"):
        if res.get(name) is not None:
            parts.append(f"{name} {json.dumps(res[name], default=str, sort_keys=True)}")
    text = "; ".join(parts) or "-"
    return "anomaly", text if len(text) <= 100 else text[:97] + "..."


def _cmd_replay(args: argparse.Namespace) -> int:
    """Re-run a witness step by step and say whether the anomaly reproduced."""
    from toki.check.relay import RelayWitness
    from toki.check.witness import Witness, explain, read_witness_json, replay_witness
    from toki.systems.registry import get_system

    data = read_witness_json(args.witness)
    if data["format"] == "toki-relay-witness":
        relay = RelayWitness.from_json(data)
        relay_run, relay_verdict = relay.replay()
        lines = relay.explain(relay_run, relay_verdict)
        if args.json:
            _print_json(
                {
                    "reproduced": relay_verdict.found,
                    "verdict": relay_verdict.to_json(),
                    "steps": lines,
                }
            )
        else:
            print("\n".join(lines))
            print(f"reproduced: {relay_verdict.found}")
        return 0 if relay_verdict.found else 1
    witness = Witness.from_json(data)
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

    from toki.chain import Digest
    from toki.store.audit import verify_url

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
    report = verify_url(args.url, digest, key=key)
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

    from toki.experiments.matrix import COLUMNS, run_matrix, short

    if args.address and args.executor != "dask":
        raise InvalidInput("--address", "names a Dask scheduler", "add --executor dask")
    if args.address:
        check_dask_address(args.address)
    if args.workers is not None:
        at_least("--workers", args.workers, 1)
    config = args.config or str(Path("verdict_matrix") / "matrix.toml")
    folder = out_dir(args.out, "matrix")
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
            out=folder,
            progress=bar.update,
            on_plan=on_plan,
            real=args.real,
            real_budget=args.real_budget,
        )
    files = [str(folder / f"matrix.{x}") for x in ("csv", "md", "tex", "png")]
    if args.real:
        files += [str(folder / "agreement.md"), str(folder / "agreement.csv")]
    if args.json:
        rows = [
            {**{c: r[c] for c in COLUMNS}, "summary": short(r), "reason": r["reason"]}
            for r in result.rows
        ]
        _print_json(
            {
                "out": str(folder),
                "files": files,
                "seconds": round(result.seconds, 1),
                "notes": result.notes,
                "rows": rows,
            }
        )
    else:
        rows = result.csv_rows()
        for r, full in zip(rows, result.rows, strict=True):
            print(
                f"{r['system']:16} {r['faults']:5} {r['anomaly']:2} {short(full):32} "
                f"n={r['runs']:>5} {r['mode']:10} {r['witness'] or full['reason']}"
            )
        for note in result.notes:
            print(f"note: {note}", file=sys.stderr if note.startswith("real row") else sys.stdout)
        print(f"wrote {', '.join(files)} in {result.seconds:.1f} s")
    return 0


def _cmd_pg_grid(args: argparse.Namespace) -> int:
    """TOKI's operators on a real PostgreSQL server beside the simulator (the real-database
    grid); writes pg_grid.csv into --out and, with --doc FILE, regenerates its table. With
    --product: the library's own Memory.write in writer processes (toki.experiments.pg_product)."""
    from pathlib import Path

    from toki.experiments.pg_grid import OPERATORS, check_doc, run_grid, write_csv, write_doc
    from toki.store.postgres import default_dsn

    if args.product:
        return _cmd_pg_product(args)
    args.levels = args.levels or "RC,RR,SER"
    args.writers = args.writers or "2,4,8"
    args.reps = 20 if args.reps is None else args.reps
    args.claims = 1 if args.claims is None else args.claims
    writers = parse_ints("--writers", args.writers)
    operators = _pg_operators(args.operators, OPERATORS)
    levels = list(dict.fromkeys(_pg_level(x) for x in parse_levels("--levels", args.levels)))
    at_least("--reps", args.reps, 1)
    at_least("--claims", args.claims, 1)
    doc = Path(args.doc) if args.doc else None
    if doc is not None:
        check_doc(doc)
    dsn = args.dsn or default_dsn()
    check_pg_room(dsn, writers)
    folder = out_dir(args.out, "pg-grid")
    runs = len(operators) * len(levels) * len(writers) * args.reps
    with _progress(args, "pg-grid", "run", runs) as bar:
        rows = run_grid(
            dsn,
            operators=operators,
            levels=levels,
            writers=writers,
            reps=args.reps,
            seed=args.seed,
            claims_per_agent=args.claims,
            progress=bar.update,
        )
    csv_path = folder / "pg_grid.csv"
    write_csv(rows, csv_path)
    if doc is not None:
        write_doc(rows, doc)
    if args.json:
        _print_json({"csv": str(csv_path), "doc": None if doc is None else str(doc), "rows": rows})
    else:
        print(f"wrote {csv_path}" + (f" and the table in {doc}" if doc else ""))
    return 0


def _cmd_pg_product(args: argparse.Namespace) -> int:
    """`toki pg-grid --product`: writer processes × operators × levels through Memory.write on
    the server, N1/N2/N3 on the recorded history; pg_product.json into --out and, with --doc
    FILE, the table between FILE's pg-product markers."""
    import platform
    from pathlib import Path

    from toki.experiments import pg_product
    from toki.isolation import Isolation
    from toki.store.postgres import default_dsn

    names = {level: name for name, level in pg_product.LEVELS.items()}
    writers = parse_ints("--writers", args.writers or "2,4")
    operators = _pg_operators(args.operators, pg_product.OPERATORS_ORDER)
    parsed = parse_levels("--levels", args.levels or ",".join(pg_product.LEVELS))
    levels = list(
        dict.fromkeys(
            names[Isolation.SNAPSHOT if x is Isolation.REPEATABLE_READ else x] for x in parsed
        )
    )
    rounds = 10 if args.reps is None else args.reps
    claims = 2 if args.claims is None else args.claims
    at_least("--reps", rounds, 1)
    at_least("--claims", claims, 1)
    doc = Path(args.doc) if args.doc else None
    if doc is not None and pg_product.BEGIN not in doc.read_text(encoding="utf-8"):
        raise InvalidInput("--doc", f"{doc}: no {pg_product.BEGIN} … {pg_product.END} markers")
    dsn = args.dsn or default_dsn()
    check_pg_room(dsn, writers)
    out = out_dir(args.out, "pg-grid-product") / "pg_product.json"
    total = len(operators) * len(levels) * len(writers) * rounds
    with _progress(args, "pg-grid --product", "round", total) as bar:
        rows = pg_product.run_product(
            dsn,
            operators=operators,
            levels=levels,
            writers=writers,
            rounds=rounds,
            seed=args.seed,
            claims_per_writer=claims,
            progress=bar.update,
        )
    meta = {
        "command": f"toki pg-grid --product --reps {rounds} --writers "
        f"{','.join(map(str, writers))} --claims {claims} --seed {args.seed}",
        "python": f"Python {platform.python_version()}",
        "machine": "shared 2-core machine",
    }
    pg_product.write_results(rows, out, meta)
    if doc is not None:
        pg_product.write_doc(pg_product.read_results(out), doc)
    if args.json:
        _print_json({"results": str(out), "doc": None if doc is None else str(doc), "rows": rows})
    else:
        print(f"wrote {out}" + (f" and the table in {doc}" if doc else ""))
    return 0


def _pg_operators(text: str, known: Sequence[str]) -> list[str]:
    """--operators of both pg-grid modes: comma-separated, some of the operators `known`."""
    operators = [x.strip().upper() for x in text.split(",") if x.strip()]
    if not operators or set(operators) - set(known):
        raise InvalidInput("--operators", f"{text!r}", "use some of " + ",".join(known))
    return operators


def _pg_level(level: Any) -> str:
    """The grid's name of a level PostgreSQL offers: RC, RR (its repeatable read, which is
    snapshot isolation) or SER."""
    from toki.isolation import Isolation

    names = {
        Isolation.READ_COMMITTED: "RC",
        Isolation.REPEATABLE_READ: "RR",
        Isolation.SNAPSHOT: "RR",
        Isolation.SERIALIZABLE: "SER",
    }
    if level not in names:
        raise InvalidInput(
            "--levels",
            f"PostgreSQL has no {level.value} (it runs read uncommitted as read committed)",
            "use RC, RR (= SI) or SER",
        )
    return names[level]


_OUT_HELP = "folder (default: a new one under ./toki-out, printed)"
_LEVELS_HELP = "any spelling: RU, RC, RR, SI, SER, read_committed, 'read committed', snapshot, ..."
#: toki relay's default schedules per level: the full DPOR search of 2 rows finishes within it
RELAY_BUDGET = 20_000


def _cmd_shadow(args: argparse.Namespace) -> int:
    """Fold a store's log under another configuration (docs/shadow.md) and print every read
    whose answer differs, classified; exit 1 when anything is unexplained or an input could
    not be re-run (the rollout gate), 0 otherwise. The store is read, never written."""
    from toki.memory import Memory
    from toki.shadow import Config
    from toki.store.audit import open_existing

    config = Config.from_toml(args.config)
    with Memory(open_existing(args.url)) as mem:  # never creates a store (issue #36)
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
    from toki import __version__
    from toki.sim.workload import SCENARIOS
    from toki.systems.registry import LIBRARY, SYSTEMS

    parser = argparse.ArgumentParser(
        prog="toki",
        description="Contradiction resolution in agent memory as write-time concurrency control.",
        epilog="Exit status: 0 success, 1 an anomaly found, 2 bad input, 3 unknown, 4 internal "
        "error (docs/cli.md). Results go to --out, by default a new folder under ./toki-out.",
    )
    parser.add_argument("--version", action="version", version=f"toki {__version__}")
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="on an internal error, show the Python traceback (or set TOKI_TRACEBACK=1)",
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
    cal.add_argument("--seed", type=int, default=0, help="base seed of the judges (default 0)")
    cal.add_argument("--out", help=_OUT_HELP + " for calibration.csv and .png")
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
        "--isolation", help="override the model's isolation level (" + _LEVELS_HELP + ")"
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
        help="comma-separated isolation levels (" + _LEVELS_HELP + ")",
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
        "--out", help=_OUT_HELP + " for the shortest flagged schedule of each level (witness)"
    )
    rel.add_argument("--json", action="store_true", help="machine-readable output")
    rel.add_argument("--quiet", action="store_true", help="no progress bar")
    rel.set_defaults(handler=_cmd_relay)

    chk = sub.add_parser(
        "check",
        help="check a history (toki JSONL, Jepsen/Elle EDN or JSON) for anomalies",
        description="Exit status: 0 valid, 1 invalid, 3 unknown (e.g. an empty dependency "
        "graph), 2 bad input.",
    )
    chk.add_argument("file", help="the history file (docs/history-format.md)")
    chk.add_argument(
        "--format",
        default="auto",
        choices=["auto", "toki", "elle-edn", "elle-json"],
        help="%(choices)s (default: detected from the content)",
    )
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
    chk.add_argument("--json", action="store_true", help="machine-readable output")
    chk.set_defaults(handler=_cmd_check)

    rep = sub.add_parser(
        "replay", help="re-run a witness step by step (exit 0 reproduced, 1 not reproduced)"
    )
    rep.add_argument("witness", help="a witness file (toki explore, matrix or relay)")
    rep.add_argument("--json", action="store_true", help="machine-readable output")
    rep.set_defaults(handler=_cmd_replay)

    ver = sub.add_parser(
        "verify", help="walk a store's hash chain; prove it unchanged up to a saved digest"
    )
    ver.add_argument("url", help="the store: sqlite:///path.db, postgresql://…")
    ver.add_argument("--digest", help="'seq:head' saved earlier (Memory.digest(), or this command)")
    ver.add_argument(
        "--key-file", help="keyed mode: a file holding the HMAC key (never stored with the data)"
    )
    ver.add_argument("--json", action="store_true", help="machine-readable output")
    ver.set_defaults(handler=_cmd_verify)

    mat = sub.add_parser("matrix", help="regenerate the verdict matrix (system × anomaly)")
    mat.add_argument(
        "--budget",
        default="default",
        choices=["small", "default"],
        help="a [budgets.*] of matrix.toml: %(choices)s (default default)",
    )
    mat.add_argument(
        "--executor",
        default="local",
        choices=["local", "dask"],
        help="local processes or a Dask cluster: %(choices)s (default local)",
    )
    mat.add_argument("--address", help="a Dask scheduler, tcp://host:port (--executor dask)")
    mat.add_argument("--workers", type=int, help="worker processes (default: all cores)")
    mat.add_argument("--out", help=_OUT_HELP + " for matrix.csv/.md/.tex/.png and witnesses/")
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
    pgg.add_argument(
        "--product",
        action="store_true",
        help="the library's own Memory.write in writer processes on the server, N1/N2/N3 on "
        "its recorded history (defaults: --reps 10 rounds, --writers 2,4, --levels "
        "RU,RC,RR,SER, --claims 2; writes pg_product.json)",
    )
    pgg.add_argument(
        "--reps", type=int, help="seeded schedules (rounds) per cell (default 20; --product 10)"
    )
    pgg.add_argument(
        "--writers",
        help="comma-separated writer counts (default 2,4,8; --product 2,4; each needs a "
        "connection: the server's max_connections is checked first)",
    )
    pgg.add_argument(
        "--operators", default="LWW,EWM,AWAIT,RULE", help="comma-separated, from LWW,EWM,AWAIT,RULE"
    )
    pgg.add_argument(
        "--levels",
        help="comma-separated levels (default RC,RR,SER; --product RU,RC,RR,SER) PostgreSQL "
        "runs: read committed, repeatable read (= SI), "
        "serializable, in any spelling toki reads (RC, rr, SI, serializable, ...)",
    )
    pgg.add_argument("--claims", type=int, help="claims per writer (default 1; --product 2)")
    pgg.add_argument("--seed", type=int, default=0, help="seed of rep 0 (rep i uses seed + i)")
    pgg.add_argument("--out", help=_OUT_HELP + " for pg_grid.csv (--product: pg_product.json)")
    pgg.add_argument(
        "--doc",
        metavar="FILE",
        help="also regenerate the table between the pg-grid (--product: pg-product) markers "
        "of FILE (make reproduce passes docs/postgres.md)",
    )
    pgg.add_argument("--json", action="store_true", help="machine-readable output")
    pgg.add_argument("--quiet", action="store_true", help="no progress bar")
    pgg.set_defaults(handler=_cmd_pg_grid)
    _add_shadow_parser(sub)
    return parser


# Subcommands with their own argument parser: everything after the name is theirs.
_DELEGATED = {"locomo": "toki.locomo.cli", "prove": "toki.formal.cli", "real": "toki.real.cli"}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns its exit status (`EXIT_CODES`). Bare `toki` prints the help
    and exits 0. An error toki raises on purpose is one line and exit 2; anything else is a
    bug: one line and exit 4, the traceback only with --traceback or TOKI_TRACEBACK=1."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    show_traceback = os.environ.get("TOKI_TRACEBACK", "") not in ("", "0")
    if args_list[:1] == ["--traceback"]:
        show_traceback, args_list = True, args_list[1:]
    if not args_list:
        _build_parser().print_help()
        return 0
    command = args_list[0]
    try:
        if command in _DELEGATED:
            import importlib

            module = importlib.import_module(_DELEGATED[command])
            delegate: Callable[[Sequence[str]], int] = module.main
            return delegate(args_list[1:])
        args = _build_parser().parse_args(args_list)
        handler: Handler = args.handler
        return handler(args)
    except TokiError as exc:
        print(f"toki {command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the machine's, not toki's: a disk full, a file vanished
        if show_traceback:
            raise
        print(f"toki {command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"toki {command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if show_traceback:
            raise
        first = next(iter(str(exc).strip().splitlines()), "")
        print(
            f"toki {command}: internal error: {type(exc).__name__}: {first} (a bug in toki: "
            "rerun with --traceback or TOKI_TRACEBACK=1 and report it)",
            file=sys.stderr,
        )
        return 4


if __name__ == "__main__":
    sys.exit(main())
