"""`toki matrix` and `pg-grid`: the experiments whose tables the docs and paper cite."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from toki.cli.common import OUT_HELP, print_json, progress
from toki.cli_input import (
    at_least,
    check_dask_address,
    check_pg_room,
    out_dir,
    parse_ints,
    parse_levels,
    remove_if_left_empty,
)
from toki.errors import InvalidInput


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
    config = _matrix_config(args.config)
    real_tasks = _real_tasks(config, args.real_budget) if args.real else 0
    existed = args.out is not None and Path(args.out).exists()
    folder = out_dir(args.out, "matrix")
    with progress(args, "matrix", "task") as bar, remove_if_left_empty(folder, existed):

        def on_plan(n: int) -> None:  # the model tasks; the real ones run after them
            bar.total = n + real_tasks
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
    from toki.show.matrix_page import write_matrix_page

    # matrix.html and a page beside each witness, from the rows just written; here rather
    # than in the matrix writer, so that agreement.csv (written after it) is there too
    write_matrix_page(folder, result.rows, result.notes)
    files = [str(folder / f"matrix.{x}") for x in ("csv", "md", "tex", "png", "html")]
    if args.real:
        files += [str(folder / "agreement.md"), str(folder / "agreement.csv")]
    if args.json:
        rows = [
            {**{c: r[c] for c in COLUMNS}, "summary": short(r), "reason": r["reason"]}
            for r in result.rows
        ]
        print_json(
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


def _real_tasks(config: str, budget: str) -> int:
    """How many real tasks `--real` will run (the progress bar's total includes them): the
    model's plan for each real system whose environment exists."""
    from toki.experiments.matrix import load_config, systems_of
    from toki.experiments.real_matrix import missing_real, plan_real, real_pairs

    cfg = load_config(config)
    if budget not in cfg["budgets"]:
        known = ", ".join(sorted(cfg["budgets"]))
        raise InvalidInput("--real-budget", f"{budget!r} is not a budget of {config}", known)
    ready, _ = missing_real(real_pairs(systems_of(cfg)))
    return len(plan_real(cfg, budget, ready))


def _matrix_config(given: str | None) -> str:
    """--config, read and checked before anything runs; by default verdict_matrix/matrix.toml
    in the current folder, else the one beside the toki package (a source checkout), so
    `toki matrix` works from any folder of the repository's users."""
    from pathlib import Path

    import toki
    from toki.experiments.matrix import load_config

    if given is None:
        candidates = [
            Path("verdict_matrix") / "matrix.toml",
            Path(toki.__file__).resolve().parents[1] / "verdict_matrix" / "matrix.toml",
        ]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise InvalidInput(
                "--config",
                "no verdict_matrix/matrix.toml here or beside the toki package",
                "pass --config PATH/matrix.toml (the repository's verdict_matrix/matrix.toml)",
            )
        given = str(found)
    try:
        load_config(given)
    except UnicodeDecodeError:
        raise InvalidInput("--config", f"{given} is not a text (TOML) file") from None
    except InvalidInput as exc:
        raise InvalidInput("--config", exc.problem, exc.fix) from None
    return given


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
    with progress(args, "pg-grid", "run", runs) as bar:
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
        print_json({"csv": str(csv_path), "doc": None if doc is None else str(doc), "rows": rows})
    else:
        from toki.experiments.pg_grid import doc_section

        print(doc_section(rows).rstrip())
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
    with progress(args, "pg-grid --product", "round", total) as bar:
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
        print_json({"results": str(out), "doc": None if doc is None else str(doc), "rows": rows})
    else:
        print(pg_product.doc_section(pg_product.read_results(out)).rstrip())
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


def add_parsers(sub: Any) -> None:
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
    mat.add_argument("--out", help=OUT_HELP + " for matrix.csv/.md/.tex/.png and witnesses/")
    mat.add_argument(
        "--config",
        help="the matrix's TOML (default: verdict_matrix/matrix.toml here, else beside the "
        "toki package)",
    )
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
    pgg.add_argument("--out", help=OUT_HELP + " for pg_grid.csv (--product: pg_product.json)")
    pgg.add_argument(
        "--doc",
        metavar="FILE",
        help="also regenerate the table between the pg-grid (--product: pg-product) markers "
        "of FILE (make reproduce passes docs/postgres.md)",
    )
    pgg.add_argument("--json", action="store_true", help="machine-readable output")
    pgg.add_argument("--quiet", action="store_true", help="no progress bar")
    pgg.set_defaults(handler=_cmd_pg_grid)
