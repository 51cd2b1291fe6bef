"""What the readers of `toki.show` share: short JSON text, JSON-safe records, lane order,
the facts every witness page lists, and whether a store key belongs to a belief key."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toki.show.page import Row

__all__ = ["lanes", "plain", "short", "touches", "witness_facts"]


def short(value: Any, limit: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plain(value: Any) -> Any:
    """JSON-safe copy of a record (tuples as lists, unknown objects as their repr)."""
    return json.loads(json.dumps(value, default=repr))


def touches(key: Any, keys: Iterable[str]) -> bool:
    """Whether a store key belongs to one of the witness's belief keys: a tuple key names
    it as one of its parts (("mem", "alice:manager", id)) or spelled out in several
    (("item", "alice", "manager"))."""
    parts = key if isinstance(key, tuple | list) else (key,)
    joined = ":".join(str(p) for p in parts)
    return any(k in parts or k == key or k in joined for k in keys)


def lanes(rows: Iterable[Row]) -> tuple[str, ...]:
    def order(lane: str) -> tuple[int, Any]:
        nums = [int(n) for n in re.findall(r"\d+", lane)]
        return (1 if lane == "faults" else 0, (nums, lane))

    return tuple(sorted(dict.fromkeys(r.lane for r in rows), key=order))


def witness_facts(
    data: Mapping[str, Any], extra: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    facts = [(k, v) for k, v in extra if v]
    facts += [
        ("keys", ", ".join(map(str, data.get("keys", ()))) or "-"),
        ("expected", short(data.get("expected"), 400)),
        ("observed", short(data.get("observed"), 400)),
    ]
    if data.get("details"):
        facts.append(("details", short(data["details"], 400)))
    return facts
