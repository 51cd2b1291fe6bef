"""Entry point of `toki prove` (toki/cli.py delegates here): the proofs live in the
repository's top-level `proofs/` package, which is put on the path when toki runs from a
checkout."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    root = Path(__file__).resolve().parents[2]
    if (root / "proofs" / "run.py").exists() and str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        run = importlib.import_module("proofs.run")
    except ModuleNotFoundError:
        print("toki prove: the proofs/ package was not found (run from a toki checkout)")
        return 2
    entry: Callable[[Sequence[str] | None], int] = run.main
    return entry(argv)
