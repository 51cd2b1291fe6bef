"""canonical_json (msgspec with fallbacks) must produce the standard library's exact bytes.

Every stored id and hash is a digest of the canonical text, so any difference would change
hashes of existing stores. The corpus: every JSON file in the repository (results, fixtures,
histories) with all of its sub-values, the event payloads of the Lisbon → Berlin demo and a
conflict workload, and hypothesis-generated values (unicode incl. surrogates and controls,
floats of every magnitude, big ints, nesting). Inputs the standard library refuses (NaN,
non-JSON types) must be refused alike.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.canonical import (
    canonical_json,
    canonical_json_of_text,
    canonical_json_stdlib,
    decode_json,
)
from toki.memory import Memory
from toki.model import FactKey
from toki.time import format_instant

ROOT = Path(__file__).resolve().parents[1]


def _same(value: object) -> None:
    try:
        expected = canonical_json_stdlib(value)
    except (TypeError, ValueError) as exc:
        try:
            canonical_json(value)
        except type(exc):
            return
        raise AssertionError(f"stdlib refuses {value!r} ({exc}); canonical_json accepts it") from exc
    assert canonical_json(value) == expected


def _sub_values(value: Any) -> Iterator[Any]:
    stack = [value]
    while stack:
        item = stack.pop()
        yield item
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())


def _repo_json_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.json"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.split()
    return [ROOT / p for p in listed if (ROOT / p).is_file()]


def test_every_json_file_in_the_repository_encodes_alike() -> None:
    files = _repo_json_files()
    assert len(files) >= 10, "the corpus should not be empty"
    checked = 0
    for path in files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        for value in _sub_values(data):
            _same(value)
            checked += 1
    assert checked > 1000


def test_event_payloads_and_version_ids_of_stores_are_unchanged() -> None:
    """Each stored payload must re-encode to itself, so its hash and event id stay valid."""
    mem = Memory(clock=lambda: datetime(2026, 9, 1, tzinfo=UTC))
    key = FactKey("t", "alice", "mood")
    first = mem.assert_fact(key, "calm", valid_from="2026-01-01T00:00:00Z", source_id="s")
    mem.supersede(first, "tense", valid_from="2026-02-01T00:00:00Z", source_id="s2")
    for i in range(30):
        mem.assert_fact(key, {"v": i % 4, "w": [1.5e-7 * i, 10.0**i, "é\u2028\x01"]},
                        valid_from=f"2026-01-{1 + i % 20:02d}T00:00:00Z", source_id=f"s{i}")
    mem.revoke(first, reason="wrong")
    assert len(mem.events()) > 30
    for event in mem.events():
        body = json.loads(event.payload)
        assert canonical_json(body) == event.payload == canonical_json_stdlib(body)
        event.verify()
        if event.version is not None:
            assert event.version.computed_id() == event.version.id


_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e-5, 1.5e-5, 9.99e-5, 1e-4, 1e15, 1e16, 1.2345e16, 5e-324, 1.7976931348623157e308, -0.0]
)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | _floats
    | st.text()
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x3F))
    | st.text(alphabet=st.characters(blacklist_categories=()))  # incl. lone surrogates
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=800, derandomize=True)
@given(_json)
def test_generated_json_values_encode_alike(value: Any) -> None:
    _same(value)


@settings(max_examples=300, derandomize=True)
@given(st.floats() | st.tuples(st.integers()) | st.dictionaries(st.integers(), st.none()))
def test_values_the_standard_library_refuses_or_reshapes_agree(value: Any) -> None:
    """NaN/inf (msgspec writes null), tuples and int keys (msgspec accepts) fall back."""
    _same(value)
    _same([value, {"k": value}])


def test_non_json_types_are_refused_like_the_standard_library() -> None:
    for bad in (datetime(2026, 1, 1, tzinfo=UTC), {1, 2}, b"x", object(), math.nan):
        _same(bad)
        _same({"a": [bad]})


_texts = st.text() | st.text(alphabet=st.characters(blacklist_categories=()))  # incl. surrogates


@settings(max_examples=500, derandomize=True)
@given(st.lists(st.lists(_texts, max_size=3), max_size=6))
def test_rows_of_text_encode_like_the_standard_library_without_the_round_trip(
    rows: list[list[str]],
) -> None:
    assert canonical_json_of_text(rows) == canonical_json_stdlib(rows) == canonical_json(rows)


def _decoded_alike(text: str) -> None:
    """decode_json must give what json.loads gives, value and type, at every depth."""
    expected = json.loads(text)
    got = decode_json(text)
    assert got == expected or (got != got and expected != expected)
    assert repr(got) == repr(expected)  # types too (1 vs 1.0, -0.0 vs 0.0)


@settings(max_examples=800, derandomize=True)
@given(_json)
def test_decode_json_reads_canonical_and_loose_texts_like_the_standard_library(
    value: Any,
) -> None:
    _decoded_alike(canonical_json_stdlib(value))
    _decoded_alike(json.dumps(value, indent=1))  # whitespace, \\u escapes, surrogates


def test_decode_json_falls_back_where_msgspec_refuses_and_fails_like_json() -> None:
    for text in ('"\\ud800"', "1e400", "-1e400", "NaN", "[Infinity]", '{"a":1,"a":2}'):
        _decoded_alike(text)
    for bad in ("", "{", "[1,]", "nul"):
        try:
            json.loads(bad)
        except ValueError as exc:
            with pytest.raises(type(exc)):
                decode_json(bad)


def test_every_payload_of_the_demo_store_decodes_alike() -> None:
    mem = Memory(clock=lambda: datetime(2026, 9, 1, tzinfo=UTC))
    key = FactKey("t", "alice", "mood")
    first = mem.assert_fact(
        key, {"x": [1.5e-7, 2**70, "é\u2028"]}, valid_from="2026-01-01T00:00:00Z", source_id="s"
    )
    mem.supersede(first, "tense", valid_from="2026-02-01T00:00:00Z", source_id="s2")
    for event in mem.events():
        _decoded_alike(event.payload)


def _instant_by_fields(at: datetime) -> str:
    """format_instant as toki 0.3 spelled it, field by field (the stored texts' definition)."""
    at = at.astimezone(UTC)
    text = f"{at.year:04d}-{at.month:02d}-{at.day:02d}T{at.hour:02d}:{at.minute:02d}:{at.second:02d}"
    return f"{text}.{at.microsecond:06d}Z" if at.microsecond else text + "Z"


_OFFSETS = st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23)).map(
    lambda d: timezone(timedelta(minutes=d // timedelta(minutes=1)))
)


@settings(max_examples=1000, derandomize=True)
@given(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
                    timezones=st.one_of(st.just(UTC), _OFFSETS)))
def test_an_instant_is_spelled_as_its_fields_are(at: datetime) -> None:
    """Every event hashes its instants' text: the isoformat fast path must give the exact
    field-by-field spelling (four-digit years, microseconds only when present), in UTC and
    from any offset."""
    assert format_instant(at) == _instant_by_fields(at)
