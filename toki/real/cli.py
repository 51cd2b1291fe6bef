"""`toki real`: set up a real library's environment, explore it, replay a witness.

    toki real list
    toki real setup SYSTEM|all [--force]
    toki real run SYSTEM --workload manager --strategy dpor --budget N --seed S
                  [--faults crash:1] [--check] [--json] [--out DIR]
    toki real replay WITNESS [--json]
    toki real scenarios [--json] [--run [--out DIR]]
    toki real scenario NAME [--fixed] [--json] [--out DIR]
    toki real procs toki-sqlite|mem0-1.0.11 --processes N --writes W [--seed S]
                  [--busy-timeout T] [--checkpoint-every N]
                  [--repetitions K] [--reload] [--json] [--out DIR]

Real runs write only into --out (default: a new folder under ./toki-out, printed), never
anywhere else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toki.cli_input import at_least, out_dir
from toki.cli_parser import TokiParser
from toki.errors import InvalidInput, TokiError

__all__ = ["REAL_SCENARIOS", "main", "make_real_workload", "parse_faults"]


def _scenarios() -> dict[str, Any]:
    from toki.sim.workload import SimClaim, Workload

    bob = SimClaim("alice:manager", "Bob", start=1, recorded=1, source="msg-1")
    carol = SimClaim("alice:manager", "Carol", start=5, recorded=5, source="msg-2")
    dave = SimClaim("alice:manager", "Dave", start=6, recorded=6, source="msg-3")
    return {
        # Bob first (agent 0), then Carol (agent 0) races Dave (agent 1): the races
        "manager-race": Workload("manager-race", ((bob, carol), (dave,))),
        # the same fact delivered to two agents at once (mem0 2.x's duplicate)
        "manager-twice": Workload("manager-twice", ((bob, carol), (carol,))),
        # Letta (family "letta"): agent 0 searches the shared archival memory and sets the
        # shared block to the newest manager it found; agent 1 records Bob, then Carol, in
        # the archive and Carol in the block (toki/real/program.py)
        "archival-decide": archival_decide(),
    }


def archival_decide() -> Any:
    from toki.real.program import OpProgram, OpStep

    def step(op: str, **args: str) -> OpStep:
        return OpStep(op, tuple(sorted(args.items())))

    return OpProgram.build(
        "archival-decide",
        "letta",
        [
            [step("decide", query="alice:manager")],
            [
                step("insert", text="alice:manager is Bob"),
                step("insert", text="alice:manager is Carol"),
                step("remember", text="alice:manager is Carol"),
            ],
        ],
    )


REAL_SCENARIOS = ("manager-race", "manager-twice", "archival-decide")


def make_real_workload(name: str | None, agents: int, claims: int, keys: int, seed: int) -> Any:
    """A named scenario (toki's, or one of REAL_SCENARIOS) or a synthetic workload."""
    from toki.sim.workload import SCENARIOS, scenario, synthetic

    extra = _scenarios()
    if name in extra:
        return extra[name]
    if name:
        if name not in SCENARIOS:
            raise InvalidInput(
                "workload",
                f"unknown workload {name!r}",
                f"use one of {', '.join(sorted([*SCENARIOS, *extra]))}",
            )
        return scenario(name)
    return synthetic(agents, claims, keys=keys, seed=seed)


def parse_faults(text: str | None) -> int:
    """`crash:N` (N crashes per agent) -> N (`toki.real.faults.crash_budget`)."""
    from toki.real.faults import crash_budget

    return crash_budget(text)


def _print(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def _cmd_list(args: argparse.Namespace) -> int:
    from toki.real.envs import env_dir
    from toki.real.systems import ALIASES, SYSTEMS

    rows = []
    for _, s in sorted(SYSTEMS.items()):
        where = "toki's own interpreter" if s.lock is None else str(env_dir(s.env_name, s.lock))
        ready = s.lock is None or (Path(where) / "ready.json").is_file()
        rows.append({**s.describe(), "environment": where, "ready": ready})
    if args.json:
        _print({"systems": rows, "aliases": ALIASES})
    else:
        for r in rows:
            state = "ready" if r["ready"] else "missing (toki real setup " + r["name"] + ")"
            print(f"{r['name']:13} {r['title']}\n{'':13} environment: {state}")
    return 0


def _cmd_setup(args: argparse.Namespace) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from toki.real.systems import SYSTEMS, setup_name, setup_system

    if args.system == "all":
        # one system per environment (systems that share a lock file share it)
        first: dict[str, str] = {}
        for n in sorted(SYSTEMS):
            if SYSTEMS[n].lock is not None:
                first.setdefault(SYSTEMS[n].env_name, n)
        names = sorted(first.values())
    else:
        names = [setup_name(args.system)]  # a system, or a library with only a lock
    if not args.json:  # pip takes a minute or more per environment: say so before it starts
        print(f"toki real setup: preparing {', '.join(names)} ...", file=sys.stderr, flush=True)
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:  # pip runs in processes
        futures = {n: pool.submit(setup_system, n, force=args.force) for n in names}
    failed = {n: f.exception() for n, f in futures.items() if f.exception() is not None}
    reports = [f.result().to_json() for n, f in futures.items() if n not in failed]
    if args.json:
        _print({"systems": reports, "failed": {n: str(e) for n, e in failed.items()}})
    else:
        for r in reports:
            verb = "created" if r["created"] else "already there"
            print(
                f"{r['system']}: environment {verb} at {r['path']} "
                f"({r['packages']} pinned packages, {r['seconds']:.1f} s)"
            )
    for n, exc in failed.items():
        print(f"toki real setup: error: {n}: {exc}", file=sys.stderr)
    return 2 if failed else 0  # the machine could not build it: not an anomaly (exit 1)


def _cmd_run(args: argparse.Namespace) -> int:
    from toki.check.runner import make_strategy
    from toki.cli import _progress
    from toki.real.explore import explore_real
    from toki.real.systems import get_real_system, worker_python
    from toki.systems.base import SimJudge

    system = get_real_system(args.system)
    worker_python(system)  # a missing environment is one line, before anything else
    from toki.real.faults import parse_faults as fault_plan

    faults = fault_plan(args.faults)
    for name, value in (
        ("--agents", args.agents),
        ("--claims", args.claims),
        ("--keys", args.keys),
    ):
        at_least(name, value, 1)
    workload = make_real_workload(args.workload, args.agents, args.claims, args.keys, args.seed)
    family = getattr(workload, "family", None)
    if family is not None:
        from toki.real.scenario import _FAMILIES

        if _FAMILIES.get(system.adapter) != family:
            raise InvalidInput(
                "--workload",
                f"{args.workload} is a program of {family} operations; {system.name} "
                "does not run them",
                f"run it on a system of the {family} family",
            )
    strategy = make_strategy(args.strategy, args.seed, args.depth, args.preemptions)
    if args.budget < 1:
        raise InvalidInput("--budget", f"{args.budget} < 1", "explore at least one schedule")
    at_least("--preemptions", args.preemptions, 0)
    at_least("--depth", args.depth, 1)
    if not 0.0 <= args.p <= 1.0:
        raise InvalidInput("--p", f"{args.p} is not a probability in [0, 1]")
    out = out_dir(args.out, "real-run")
    judge = SimJudge(args.p, args.seed)
    recovery = SimJudge(args.p, args.seed + 1)
    with _progress(args, args.system, "schedule", args.budget) as bar:
        report = explore_real(
            system,
            workload,
            strategy,
            judge,
            recovery,
            budget=args.budget,
            seed=args.seed,
            crash_budget=faults.crash,
            faults=faults,
            check=args.check,
            out=out,
            gate_timeout=args.gate_timeout,
            progress=bar.update,
        )
    data = report.to_json()
    data["out"] = str(out)
    if not args.check:
        for key in ("anomalies", "checked", "undecided", "recovery_judge_calls"):
            data.pop(key)
    if args.json:
        _print(data)
    else:
        for key, value in data.items():
            print(f"{key}: {value}")
    return 1 if args.check and any(data.get("anomalies", {}).values()) else 0  # as explore


def _cmd_replay(args: argparse.Namespace) -> int:
    from toki.real.witness import RealWitness, explain_real, replay_real

    witness = RealWitness.load(args.witness)
    rr, verdict = replay_real(witness, gate_timeout=args.gate_timeout)
    steps = explain_real(witness, rr, verdict)
    if args.json:
        _print(
            {
                "reproduced": verdict.found,
                "verdict": verdict.to_json(),
                "steps": steps,
                "digest": rr.digest,
            }
        )
    else:
        print("\n".join(steps))
        print(f"reproduced: {verdict.found}")
    return 0 if verdict.found else 1


def _cmd_scenarios(args: argparse.Namespace) -> int:
    from toki.real.scenario import load_scenarios, run_corpus

    if args.run:
        out = out_dir(args.out, "scenarios")
        results = run_corpus(load_scenarios(), out, gate_timeout=args.gate_timeout)
        results["out"] = str(out)
        if args.json:
            _print(results)
        else:
            for r in results["runs"]:
                verdict = "clean" if r["fixed"] else "reproduced"
                ok = r["clean"] if r["fixed"] else r["reproduced"]
                print(
                    f"{r['scenario']:40} {r['system']:32} {verdict}: {ok} "
                    f"({r['schedules']} schedules, {r['seconds']} s)"
                )
            print(f"results: {out / 'scenarios.json'}")
        return 0 if results["ok"] else 1
    rows = [s.describe() for s in load_scenarios()]
    if args.json:
        _print(
            {
                "scenarios": rows,
                "listed": len(rows),
                "reproduced": sum(1 for r in rows if r["reproduced"]),
            }
        )
    else:
        for r in rows:
            state = "reproduced" if r["reproduced"] else f"not reproduced: {r['reason']}"
            fix = f", fixed in {r['fixed']}" if r["fixed"] else ""
            print(f"{r['name']:34} {r['report']:26} {r['system']}{fix}\n{'':34} {state}")
    return 0


def _cmd_scenario(args: argparse.Namespace) -> int:
    from toki.real.scenario import get_scenario, run_scenario, runnable

    scenario = get_scenario(args.name)
    runnable(scenario, fixed=args.fixed)  # refused before any folder is made
    out = out_dir(args.out, f"scenario-{scenario.name}")
    result = run_scenario(scenario, fixed=args.fixed, out=out, gate_timeout=args.gate_timeout)
    result["out"] = str(out)
    if args.json:
        _print(result)
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    ok = result["clean"] if args.fixed else result["reproduced"]
    return 0 if ok else 1


def _cmd_procs(args: argparse.Namespace) -> int:
    from toki.cli_input import remove_if_left_empty
    from toki.real.procs import run_mem0, run_toki_sqlite

    toki = args.deployment == "toki-sqlite"
    if toki and args.repetitions != 1:
        raise InvalidInput("--repetitions", "toki-sqlite runs once per call", "drop it")
    existed = args.out is not None and Path(args.out).exists()
    out = out_dir(args.out, "procs-" + args.deployment)
    with remove_if_left_empty(out, existed):
        if toki:
            data = run_toki_sqlite(
                args.processes,
                args.writes,
                seed=args.seed,
                shared_keys=args.shared_keys,
                private_keys=args.private_keys,
                share=args.share,
                busy_timeout=args.busy_timeout,
                checkpoint_every=args.checkpoint_every,
                out=out,
            )
        else:
            data = run_mem0(
                args.processes,
                args.writes,
                seed=args.seed,
                repetitions=args.repetitions,
                system=args.deployment,
                reload=args.reload,
                out=out,
            )
    if args.json:
        _print(data)
    else:
        for key, value in data.items():
            print(f"{key}: {value}")
    return 0 if data["ok"] else 1  # a check found something (as run --check)


def build_parser() -> argparse.ArgumentParser:
    parser = TokiParser(
        prog="toki real", description="Drive real memory libraries under toki's scheduler."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    lst = sub.add_parser("list", help="the real systems and whether their environments exist")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    lst.set_defaults(handler=_cmd_list)

    st = sub.add_parser("setup", help="create a system's environment from its lock file")
    st.add_argument(
        "system",
        help="a system name, or 'all' (every system with an adapter and a lock file)",
    )
    st.add_argument("--force", action="store_true", help="recreate even if cached")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(handler=_cmd_setup)

    run = sub.add_parser("run", help="explore a real system's schedules (and check them)")
    run.add_argument("system", help="a real system (toki real list)")
    run.add_argument("--workload", help="a named scenario (default: synthetic)")
    run.add_argument("--agents", type=int, default=2, help="agents, synthetic (default 2)")
    run.add_argument("--claims", type=int, default=1, help="claims per agent (synthetic)")
    run.add_argument("--keys", type=int, default=1, help="keys (synthetic)")
    run.add_argument(
        "--strategy",
        default="dpor",
        choices=["dpor", "random", "pct", "bounded", "exhaustive"],
        help="how schedules are chosen: %(choices)s (default dpor)",
    )
    run.add_argument("--budget", type=int, default=100, help="maximum schedules")
    run.add_argument("--seed", type=int, default=0, help="workload, strategy and judge seed")
    run.add_argument("--p", type=float, default=0.5, help="judge's vote for the challenger")
    run.add_argument("--depth", type=int, default=3, help="PCT depth")
    run.add_argument("--preemptions", type=int, default=2, help="bounded DFS preemptions")
    run.add_argument(
        "--faults",
        help="crash:<n>, raise:<n>[:kind], restart:1, torn:1, tasks:<n> (comma-separated; "
        "docs/real.md)",
    )
    run.add_argument("--check", action="store_true", help="check N1/RD/N2/N3 on every schedule")
    run.add_argument("--out", help="folder for witnesses (default: a new one under ./toki-out)")
    run.add_argument(
        "--gate-timeout",
        type=float,
        default=60.0,
        help="seconds a released agent may run before reaching a gate point",
    )
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.set_defaults(handler=_cmd_run)

    rep = sub.add_parser("replay", help="re-run a real witness step by step")
    rep.add_argument("witness", help="a witness file written by toki real run")
    rep.add_argument(
        "--gate-timeout",
        type=float,
        default=60.0,
        help="seconds a released agent may run before reaching a gate point",
    )
    rep.add_argument("--json", action="store_true", help="machine-readable output")
    rep.set_defaults(handler=_cmd_replay)

    scs = sub.add_parser("scenarios", help="the reproduced bug reports (toki/real/scenarios)")
    scs.add_argument(
        "--run",
        action="store_true",
        help="run every reproduced scenario on its affected and its fixed version",
    )
    scs.add_argument("--out", help="folder for witnesses and scenarios.json (with --run)")
    scs.add_argument(
        "--gate-timeout",
        type=float,
        default=60.0,
        help="seconds a released agent may run before reaching a gate point",
    )
    scs.add_argument("--json", action="store_true", help="machine-readable output")
    scs.set_defaults(handler=_cmd_scenarios)

    sc = sub.add_parser("scenario", help="run one reproduced bug report on the real library")
    sc.add_argument("name", help="a scenario (toki real scenarios)")
    sc.add_argument("--fixed", action="store_true", help="run the version with the fix")
    sc.add_argument("--out", help="folder for witnesses (default: a new one under ./toki-out)")
    sc.add_argument(
        "--gate-timeout",
        type=float,
        default=60.0,
        help="seconds a released agent may run before reaching a gate point",
    )
    sc.add_argument("--json", action="store_true", help="machine-readable output")
    sc.set_defaults(handler=_cmd_scenario)

    pr = sub.add_parser(
        "procs",
        help="several free-running OS processes on one SQLite file, then check what they left",
    )
    pr.add_argument(
        "deployment",
        choices=["toki-sqlite", "mem0-1.0.11"],
        help="toki's SQLite store, or mem0 1.0.11's FAISS files and history database",
    )
    pr.add_argument("--processes", type=int, default=4, help="OS processes (default 4)")
    pr.add_argument("--writes", type=int, default=50, help="writes (adds) per process")
    pr.add_argument("--seed", type=int, default=0, help="workload seed (not the interleaving)")
    pr.add_argument(
        "--busy-timeout",
        type=float,
        default=30.0,
        help="toki-sqlite: seconds SQLite waits for the lock before StoreBusy (default 30)",
    )
    pr.add_argument(
        "--checkpoint-every",
        type=int,
        default=0,
        help="toki-sqlite: each process writes a checkpoint after every N of its writes "
        "(default 0: when toki's policy says one is due)",
    )
    pr.add_argument("--shared-keys", type=int, default=2, help="toki-sqlite: keys all write")
    pr.add_argument("--private-keys", type=int, default=2, help="toki-sqlite: keys per process")
    pr.add_argument(
        "--share", type=float, default=0.5, help="toki-sqlite: share of writes to shared keys"
    )
    pr.add_argument("--repetitions", type=int, default=1, help="mem0: runs (fresh files each)")
    pr.add_argument(
        "--reload",
        action="store_true",
        help="mem0: each add builds a new Memory first, loading the files (a process per "
        "request); default: one Memory per process, built before the processes start",
    )
    pr.add_argument("--out", help="folder for the files and logs (default: under ./toki-out)")
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    pr.set_defaults(handler=_cmd_procs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        code: int = args.handler(args)
        return code
    except TokiError as exc:
        print(f"toki real {args.command}: error: {exc}", file=sys.stderr)
        return 2
