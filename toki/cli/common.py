"""What every `toki` subcommand shares: the progress bar, JSON printing and help phrases
(the parser that says "did you mean" is `toki.cli_parser`, which every command line uses)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from toki.cli_output import print_json

__all__ = [
    "LEVELS_HELP",
    "OUT_HELP",
    "SEARCHES",
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
