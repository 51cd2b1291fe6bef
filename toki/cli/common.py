"""What every `toki` subcommand shares: the progress bar, JSON printing, help phrases, and
the parser that says "did you mean"."""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from toki.cli_output import print_json

__all__ = [
    "LEVELS_HELP",
    "OUT_HELP",
    "SEARCHES",
    "TokiParser",
    "did_you_mean",
    "print_json",
    "progress",
]

#: Strategies whose runs stop before the budget only when the search space is exhausted.
SEARCHES = ("dpor", "bounded", "exhaustive")
OUT_HELP = "folder (default: a new one under ./toki-out, printed)"
LEVELS_HELP = "any spelling: RU, RC, RR, SI, SER, read_committed, 'read committed', snapshot, ..."


def progress(
    args: argparse.Namespace, desc: str, unit: str, total: int | None = 0, bound: int = 0
) -> Any:
    """A progress bar on stderr for a long command; off with --json or --quiet. With
    total None the count is unknown (a search stops when it is exhausted): the bar shows
    the count and the rate, the upper `bound` in its label, and no ETA."""
    from tqdm import tqdm

    if total is None and bound:
        desc = f"{desc} (total unknown, at most {bound:,})"
    return tqdm(total=total, disable=args.json or args.quiet, desc=desc, unit=unit, file=sys.stderr)


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """ " (did you mean X?)" for the closest of `known`, or "" when none is close."""
    close = difflib.get_close_matches(word, list(dict.fromkeys(known)), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class TokiParser(argparse.ArgumentParser):
    """argparse that says "did you mean" for a mistyped subcommand, choice or option."""

    def error(self, message: str) -> NoReturn:
        super().error(message + self.suggestion(message))

    def options(self) -> list[str]:
        return [o for a in self._actions for o in a.option_strings if o.startswith("--")]

    def suggestion(self, message: str) -> str:
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            return did_you_mean(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
        unknown = re.search(r"unrecognized arguments: (.*)", message)
        if unknown:
            for word in unknown.group(1).split():
                if word.startswith("--"):
                    hint = did_you_mean(word.split("=", 1)[0], self.options())
                    if hint:
                        return hint
        return ""
