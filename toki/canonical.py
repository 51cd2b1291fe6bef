"""Canonical JSON and content hashes: one text per value, so equal payloads share one id."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from toki.errors import InvalidValue

__all__ = ["JSON", "canonical_json", "check_json", "digest"]

JSON = None | bool | int | float | str | list[Any] | dict[str, Any]


def check_json(value: object, field: str = "value") -> None:
    """Refuse anything canonical JSON cannot represent exactly (NaN, non-str keys, objects)."""
    stack: list[tuple[object, str]] = [(value, field)]
    while stack:
        item, path = stack.pop()
        if item is None or isinstance(item, bool | int | str):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidValue(path, f"{item!r} is not valid JSON", "use a finite number")
            continue
        if isinstance(item, list | tuple):
            stack.extend((x, f"{path}[{i}]") for i, x in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidValue(path, f"object key {k!r} is not a string", "use str keys")
                stack.append((v, f"{path}.{k}"))
            continue
        raise InvalidValue(
            path,
            f"{type(item).__name__} is not JSON",
            "values must be JSON: null, bool, number, string, list or object",
        )


def canonical_json(value: object) -> str:
    """Sorted keys, no whitespace, UTF-8 text: the bytes we hash and store."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def digest(text: str, length: int = 32) -> str:
    """Hex sha256 prefix (128 bits by default) of a canonical text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]
