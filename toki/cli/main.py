"""The `toki` command line: parse, dispatch to a subcommand, turn errors into exit codes.

Each group of subcommands lives in its own module with its parsers (`simulate`: demo,
calibrate, explore, relay; `checking`: check, replay, show; `experiments`: matrix, pg-grid;
`stores`: verify, checkpoint, shadow); `locomo`, `prove` and `real` have their own command lines."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from toki.cli_parser import TokiParser
from toki.errors import TokiError

__all__ = ["EXIT_CODES", "build_parser", "main"]

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


def build_parser() -> argparse.ArgumentParser:
    from toki import __version__
    from toki.cli import checking, experiments, simulate, stores

    parser = TokiParser(
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
    simulate.add_parsers(sub)
    sub.add_parser("locomo", help="LoCoMo data and experiments (fetch, info, baseline, ablate)")
    sub.add_parser(
        "prove", help="run the z3 proofs and print the table (--out DIR also writes results)"
    )
    sub.add_parser("real", help="real memory libraries under the scheduler (setup, run, replay)")
    checking.add_parsers(sub)
    stores.add_parsers(sub)
    experiments.add_parsers(sub)
    return parser


def _delegated(command: str, delegate: Callable[[Sequence[str]], int], rest: list[str]) -> int:
    """Run a command with its own parser. `SystemExit("message")`, which Python turns into
    exit 1 (the anomaly code), is a usage error there: one `error:` line and exit 2."""
    try:
        return delegate(rest)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        message = exc.code.removeprefix(f"toki {command}: ").removeprefix("error: ")
        print(f"toki {command}: error: {message}", file=sys.stderr)
        return 2


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
        build_parser().print_help()
        return 0
    command = args_list[0]
    try:
        if command in _DELEGATED:
            import importlib

            module = importlib.import_module(_DELEGATED[command])
            delegate: Callable[[Sequence[str]], int] = module.main
            return _delegated(command, delegate, args_list[1:])
        args = build_parser().parse_args(args_list)
        handler: Handler = args.handler
        return handler(args)
    except BrokenPipeError:  # the reader stopped early (`toki demo --json | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
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
