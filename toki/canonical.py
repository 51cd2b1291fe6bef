"""Canonical JSON and content hashes: one text per value, so equal payloads share one id.

The canonical text is the standard library's `json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`; every stored id and hash is a digest of it, so it may
never change. `canonical_json` produces those exact bytes through msgspec (about 4x faster)
and falls back to the standard library whenever msgspec could differ: a float in exponent or
tiny-positional form (the two format those differently), or an output that does not decode
back to the input (NaN/inf, which msgspec writes as null; tuples, non-str keys or non-JSON
types, which msgspec accepts and json refuses or spells differently). Float spellings are
checked while decoding: msgspec hands each float literal's text to `_float_as_repr`.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import msgspec

from toki.errors import InvalidValue

__all__ = [
    "JSON",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "canonical_json",
    "canonical_json_stdlib",
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


def shown(value: object, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters for an error message; never raises (an int
    beyond Python's 4,300-digit str limit is described, not converted: issue #36)."""
    try:
        text = repr(value)
    except ValueError:  # int -> str refused over sys.get_int_max_str_digits()
        size = int(abs(value).bit_length() * 0.30103) if isinstance(value, int) else 0
        return f"an integer of about {size} digits" if size else f"a {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
            raise InvalidValue(path, f"nested deeper than {MAX_DEPTH} levels", "flatten the value")
        if isinstance(item, tuple):  # stored as a JSON array, read back as a list (issue #36)
            raise InvalidValue(path, "a tuple is not JSON", "use a list")
        if isinstance(item, list):
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


_STDLIB = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_FAST = msgspec.json.Encoder(order="sorted")


def _float_as_repr(text: str) -> float:
    """Decoding msgspec's output: accept a float literal only if Python spells it alike."""
    value = float(text)
    if repr(value) != text:
        raise _Differs
    return value


class _Differs(Exception):
    """msgspec spelled a float unlike `repr(float)` (exponent forms, 1e-5..1e-4)."""


_DECODE = msgspec.json.Decoder(float_hook=_float_as_repr)


def canonical_json(value: object) -> str:
    """Sorted keys, no whitespace, UTF-8 text: the bytes we hash and store."""
    try:
        out = _FAST.encode(value)
        if _DECODE.decode(out) == value:
            return out.decode("utf-8")
    except (_Differs, TypeError, ValueError, OverflowError):  # lone surrogates, unknown types
        pass
    return _STDLIB.encode(value)


def canonical_json_of_text(value: list[list[str]] | dict[str, str]) -> str:
    """`canonical_json` of rows of strings (or a mapping of strings to strings), without its
    round-trip check: that check catches the float spellings and reshaped types on which the
    two encoders differ, and strings have neither (the projection hashes one such row per
    live version; a store names each key by one such mapping)."""
    try:
        return _FAST.encode(value).decode("utf-8")
    except (TypeError, ValueError, OverflowError):  # lone surrogates: as canonical_json does
        return _STDLIB.encode(value)


_READ = msgspec.json.Decoder()


def decode_json(text: str) -> Any:
    """`json.loads(text)`, about twice as fast: msgspec decodes, and wherever it refuses
    what the standard library reads (lone surrogates, numbers beyond a double, NaN) the
    standard library does. Where msgspec accepts it returns the same values (tested)."""
    try:
        return _READ.decode(text)
    except (msgspec.DecodeError, UnicodeEncodeError):  # a raw lone surrogate is not UTF-8
        return json.loads(text)


def canonical_json_stdlib(value: object) -> str:
    """The reference definition `canonical_json` must agree with byte for byte (tests)."""
    return _STDLIB.encode(value)


def digest(text: str, length: int = 32) -> str:
    """Hex sha256 prefix (128 bits by default) of a canonical text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:length]
