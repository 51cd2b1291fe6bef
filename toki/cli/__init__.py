"""The `toki` command (docs/cli.md): `main` parses and dispatches; one module per group of
subcommands (`simulate`, `checking`, `experiments`, `stores`), each with its parsers."""

from __future__ import annotations

from toki.cli.common import progress as _progress
from toki.cli.experiments import _pg_level
from toki.cli.main import EXIT_CODES, build_parser, main

_build_parser = build_parser

__all__ = ["EXIT_CODES", "_build_parser", "_pg_level", "_progress", "build_parser", "main"]
