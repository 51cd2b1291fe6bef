"""The `toki` command: one subcommand per experiment; every subcommand takes --json."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from toki.errors import TokiError

__all__ = ["main"]

Handler = Callable[[argparse.Namespace], int]


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


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toki",
        description="Contradiction resolution in agent memory as write-time concurrency control.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="tell the Lisbon → Berlin story (bitemporal basics)")
    demo.add_argument("--json", action="store_true", help="machine-readable output")
    demo.set_defaults(handler=_cmd_demo)
    sub.add_parser("locomo", help="LoCoMo data and experiments (fetch, info, baseline)")
    return parser


# Subcommands with their own argument parser: everything after the name is theirs.
_DELEGATED = {"locomo": "toki.locomo.cli"}


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
