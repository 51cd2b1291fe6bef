"""The argument parser every toki command line uses (`toki`, `toki real`, `toki locomo`,
`toki prove`, the `python -m` entry points): a mistyped subcommand, choice or option gets
"did you mean X?", and an unknown option is reported by the subcommand that was meant.
It imports nothing of toki, so any layer may use it."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

__all__ = ["TokiParser", "did_you_mean"]


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """ " (did you mean X?)" for the closest of `known`, or "" when none is close."""
    close = difflib.get_close_matches(word, list(dict.fromkeys(known)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class TokiParser(argparse.ArgumentParser):
    """argparse that says "did you mean" for a mistyped subcommand, choice or option.
    Subparsers are TokiParsers too (`add_subparsers` makes them of the parent's class)."""

    def parse_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        """As argparse, but an unknown option is reported by the subcommand it was given
        to (argparse reports it from the top, which knows no option to suggest)."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self._chosen(parsed).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def _chosen(self, parsed: argparse.Namespace) -> TokiParser:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                sub = action.choices.get(str(getattr(parsed, action.dest, "")))
                if isinstance(sub, TokiParser):
                    return sub._chosen(parsed)
        return self

    def error(self, message: str) -> NoReturn:
        """The usage, then one `PROG: error: ...` line with the suggestion, exit 2. A usage
        of many lines (`toki explore`) is cut to one: the error line stays in sight."""
        self._print_message(self.short_usage(), sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}{self.suggestion(message)}\n")

    def short_usage(self) -> str:
        usage = self.format_usage()
        if usage.count("\n") <= 3:
            return usage
        formatter = self._get_formatter()
        positional = [formatter._format_args(a, a.dest) for a in self._get_positional_actions()]
        return f"usage: {' '.join([self.prog, '[options]', *positional])} (--help lists them)\n"

    def suggestion(self, message: str) -> str:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            return did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        if not unknown:
            return ""
        options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        positional = {
            f"--{a.dest.replace('_', '-')}": a.metavar if isinstance(a.metavar, str) else a.dest
            for a in self._actions
            if not a.option_strings and not isinstance(a, argparse._SubParsersAction)
        }
        for word in unknown.group(1).split():
            if word.startswith("--"):
                hint = did_you_mean(word.split("=", 1)[0], [*options, *positional])
                for flag, name in positional.items():  # `toki real run --system mem0`
                    if hint == f" (did you mean {flag}?)":
                        return f" (did you mean {name}? it is positional, written without --)"
                if hint:
                    return hint
        return ""
