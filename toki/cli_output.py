"""What `toki` prints: strict JSON for --json, and plain tables with headers otherwise.

JSON keeps numbers as numbers; a value that was not measured (NaN) is null, because NaN is
not JSON and a reader would choke on it.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["json_safe", "print_json", "table"]


def json_safe(data: Any) -> Any:
    """`data` with non-finite floats as None and tuples as lists (recursively)."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, Mapping):
        return {str(k): json_safe(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [json_safe(v) for v in data]
    return data


def print_json(data: Any) -> None:
    json.dump(json_safe(data), sys.stdout, indent=2, sort_keys=True, default=str, allow_nan=False)
    sys.stdout.write("\n")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "-" if math.isnan(value) else f"{value:.4g}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A left-aligned text table: a header line, a rule, one line per row."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip()

    return "\n".join(
        [line(list(headers)), line(["-" * w for w in widths]), *(line(r) for r in cells)]
    )
