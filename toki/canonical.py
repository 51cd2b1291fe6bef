"""Canonical JSON and content hashes: one text per value, so equal payloads share one id."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from toki.errors import InvalidValue

__all__ = [
    "JSON",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "canonical_json",
    "check_json",
    "check_text",
    "digest",
]

JSON = None | bool | int | float | str | list[Any] | dict[str, Any]

MAX_DEPTH = 100
"""Deepest nesting of lists/objects in a value: the encoder and decoder recurse per level."""

MAX_INT_DIGITS = 4300
"""Longest integer (decimal digits) in a value: Python refuses to print or parse longer ones."""

_INT_LIMIT = 10**MAX_INT_DIGITS


def check_text(value: object, field: str) -> str:
    """Refuse text no backend can store: not a str, NUL characters, lone surrogates.

    PostgreSQL text cannot hold NUL and UTF-8 cannot encode a lone surrogate; refusing both
    here gives every backend the same rule.
    """
    if not isinstance(value, str):
        raise InvalidValue(field, f"must be a string, got {type(value).__name__}")
    if value.isascii():
        if "\x00" in value:
            raise InvalidValue(field, "contains a NUL character (\\x00)", "remove it")
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidValue(
            field,
            f"contains a lone surrogate {value[exc.start]!r} at position {exc.start}",
            "decode the text properly (a surrogate pair must come whole)",
        ) from None
    if "\x00" in value:
        raise InvalidValue(field, "contains a NUL character (\\x00)", "remove it")
    return value


def check_json(value: object, field: str = "value") -> None:
    """Refuse anything canonical JSON cannot represent exactly and every backend cannot store:
    NaN and infinities, integers over MAX_INT_DIGITS digits, nesting deeper than MAX_DEPTH,
    non-str object keys, NUL characters and lone surrogates in text, non-JSON objects."""
    stack: list[tuple[object, str, int]] = [(value, field, 0)]
    while stack:
        item, path, depth = stack.pop()
        if item is None or isinstance(item, bool):
            continue
        if isinstance(item, str):
            check_text(item, path)
            continue
        if isinstance(item, int):
            if not -_INT_LIMIT < item < _INT_LIMIT:
                raise InvalidValue(
                    path,
                    f"an integer of more than {MAX_INT_DIGITS} digits",
                    "store it as a string",
                )
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise InvalidValue(path, f"{item!r} is not valid JSON", "use a finite number")
            continue
        if isinstance(item, list | tuple | dict) and depth >= MAX_DEPTH:
            raise InvalidValue(
                path, f"nested deeper than {MAX_DEPTH} levels", "flatten the value"
            )
        if isinstance(item, list | tuple):
            stack.extend((x, f"{path}[{i}]", depth + 1) for i, x in enumerate(item))
            continue
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidValue(path, f"object key {k!r} is not a string", "use str keys")
                check_text(k, f"{path} key")
                stack.append((v, f"{path}.{k}", depth + 1))
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
