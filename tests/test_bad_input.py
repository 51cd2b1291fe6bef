"""Bad input: a specific error naming the field and the fix, and an unchanged store."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki import FactKey, Memory
from toki.errors import (
    InvalidInput,
    InvalidInterval,
    InvalidKey,
    InvalidTime,
    InvalidValue,
    LifecycleError,
    TokiError,
    UnknownVersion,
)
from toki.time import Interval, format_instant, parse_instant

K = FactKey(tenant="t1", subject="u1", fact_key="city")


def _seeded(mem: Memory) -> tuple[str, str]:
    a = mem.assert_fact(
        K,
        "Lisbon",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-02-01T00:00:00Z",
        source_id="m1",
    )
    b = mem.supersede(
        a,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="m2",
    )
    mem.revoke(b, recorded_at="2026-08-13T00:00:00Z", reason="wrong")
    return a.id, b.id


CASES: list[tuple[str, type[TokiError], str, Callable[[Memory, str, str], object]]] = [
    (
        "naive datetime",
        InvalidTime,
        "valid_from",
        lambda m, a, b: m.assert_fact(K, "X", valid_from=datetime(2026, 1, 1), source_id="s"),
    ),
    (
        "unparseable time",
        InvalidTime,
        "recorded_at",
        lambda m, a, b: m.assert_fact(K, "X", recorded_at="last tuesday", source_id="s"),
    ),
    (
        "time without zone",
        InvalidTime,
        "valid_to",
        lambda m, a, b: m.assert_fact(
            K, "X", valid_from="2026-01-01T00:00:00Z", valid_to="2026-02-01T00:00:00", source_id="s"
        ),
    ),
    (
        "end before start",
        InvalidInterval,
        "valid_to",
        lambda m, a, b: m.assert_fact(
            K,
            "X",
            valid_from="2026-02-01T00:00:00Z",
            valid_to="2026-01-01T00:00:00Z",
            source_id="s",
        ),
    ),
    (
        "end equal to start",
        InvalidInterval,
        "valid_to",
        lambda m, a, b: m.assert_fact(
            K,
            "X",
            valid_from="2026-02-01T00:00:00Z",
            valid_to="2026-02-01T00:00:00Z",
            source_id="s",
        ),
    ),
    (
        "unknown version id",
        UnknownVersion,
        "version",
        lambda m, a, b: m.revoke("v-nope", reason="x"),
    ),
    (
        "unknown superseded id",
        UnknownVersion,
        "old",
        lambda m, a, b: m.supersede("v-nope", "X", source_id="s"),
    ),
    (
        "revoking twice",
        LifecycleError,
        "already revoked",
        lambda m, a, b: m.revoke(b, reason="again"),
    ),
    (
        "superseding a revoked version",
        LifecycleError,
        "revoked",
        lambda m, a, b: m.supersede(b, "Munich", source_id="s"),
    ),
    (
        "supersede starting before the old version",
        InvalidInterval,
        "valid_from",
        lambda m, a, b: m.supersede(
            a,
            "Porto",
            valid_from="2025-01-01T00:00:00Z",
            recorded_at="2026-09-01T00:00:00Z",
            source_id="s",
        ),
    ),
    (
        "supersession known before its target (clock rollback)",
        InvalidTime,
        "recorded_at",
        lambda m, a, b: m.supersede(
            a,
            "Porto",
            valid_from="2026-09-01T00:00:00Z",
            recorded_at="2026-01-15T00:00:00Z",
            source_id="s",
        ),
    ),
    (
        "non-JSON value",
        InvalidValue,
        "value",
        lambda m, a, b: m.assert_fact(K, {1, 2}, source_id="s"),
    ),
    (
        "NaN value",
        InvalidValue,
        "value",
        lambda m, a, b: m.assert_fact(K, float("nan"), source_id="s"),
    ),
    (
        "non-string object key",
        InvalidValue,
        "value",
        lambda m, a, b: m.assert_fact(K, {1: "x"}, source_id="s"),
    ),
    (
        "empty source id",
        InvalidInput,
        "source_id",
        lambda m, a, b: m.assert_fact(K, "X", source_id=""),
    ),
    ("empty revoke reason", InvalidInput, "reason", lambda m, a, b: m.revoke(a, reason="  ")),
    (
        "segment without end",
        InvalidInterval,
        "valid_to",
        lambda m, a, b: m.insert_segment(
            K, "X", valid_from="2026-01-01T00:00:00Z", valid_to=None, source_id="s"
        ),
    ),  # type: ignore[arg-type]
    (
        "key that is not a FactKey",
        InvalidInput,
        "key",
        lambda m, a, b: m.assert_fact("city", "X", source_id="s"),
    ),  # type: ignore[arg-type]
    (
        "revoke_value with nothing holding it",
        LifecycleError,
        "no standing version",
        lambda m, a, b: m.revoke_value(K, "Tokyo", valid_at="2026-03-01T00:00:00Z", reason="x"),
    ),
    (
        "empty scope chain",
        InvalidInput,
        "scope_chain",
        lambda m, a, b: m.resolve_at(K, scope_chain=[]),
    ),
    (
        "negative weight",
        InvalidValue,
        "weight",
        lambda m, a, b: m.assert_fact(K, "X", source_id="s", weight=-1.0),
    ),
]


@pytest.mark.parametrize(("name", "error", "mention", "action"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_store_unchanged(
    mem: Memory,
    name: str,
    error: type[TokiError],
    mention: str,
    action: Callable[[Memory, str, str], object],
) -> None:
    a, b = _seeded(mem)
    before = (len(mem.events()), mem.state_hash(), mem.reconcile().ok)
    with pytest.raises(error) as info:
        action(mem, a, b)
    assert mention in str(info.value)
    assert (len(mem.events()), mem.state_hash(), mem.reconcile().ok) == before


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tenant": "", "subject": "u", "fact_key": "k"}, "tenant"),
        ({"tenant": "t", "subject": " ", "fact_key": "k"}, "subject"),
        ({"tenant": "t", "subject": "u", "fact_key": ""}, "fact_key"),
        (
            {
                "tenant": "t",
                "subject": "u",
                "fact_key": "k",
                "scope_kind": "galaxy",
                "scope_key": "x",
            },
            "scope_kind",
        ),
        (
            {
                "tenant": "t",
                "subject": "u",
                "fact_key": "k",
                "scope_kind": "task",
                "scope_key": "*",
            },
            "scope_key",
        ),
        (
            {
                "tenant": "t",
                "subject": "u",
                "fact_key": "k",
                "scope_kind": "global",
                "scope_key": "42",
            },
            "scope_key",
        ),
        ({"tenant": 7, "subject": "u", "fact_key": "k"}, "tenant"),
    ],
)
def test_malformed_keys_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidKey) as info:
        FactKey(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field


def test_time_parsing_normalises_offsets_to_utc() -> None:
    a = parse_instant("2026-07-03T02:00:00+02:00")
    assert a == parse_instant("2026-07-03T00:00:00Z")
    assert a.utcoffset() is not None and a.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    with pytest.raises(InvalidTime):
        parse_instant(1234567890)


def _parsed_or_error(text: str) -> object:
    try:
        return parse_instant(text, "t")
    except InvalidTime as exc:
        return ("InvalidTime", type(exc))


_z_texts = st.one_of(
    st.datetimes(timezones=st.just(UTC)).map(format_instant),
    st.datetimes().map(lambda d: d.isoformat() + "Z"),
    st.dates().map(lambda d: d.isoformat() + "Z"),
    st.text(alphabet="0123456789-T:.+ W", max_size=26).map(lambda t: t + "Z"),
    st.sampled_from(["999-01-01T00:00:00Z", "0999-01-01T00:00:00Z", " 2026-01-01T00:00:00Z"]),
)


@settings(max_examples=600, derandomize=True)
@given(_z_texts)
def test_the_fast_path_for_z_times_parses_as_the_offset_form_does(text: str) -> None:
    """parse_instant reads `...Z` with the C parser directly; the result (or the refusal)
    must be the general path's, which reads the same text with +00:00 instead of Z."""
    fast = _parsed_or_error(text)
    general = _parsed_or_error(text[:-1] + "+00:00")
    assert fast == general
    if isinstance(fast, datetime):
        assert fast.utcoffset() == timedelta(0)


def test_interval_semantics() -> None:
    a = Interval.make("2026-01-01T00:00:00Z", "2026-02-01T00:00:00Z")
    b = Interval.make("2026-02-01T00:00:00Z", None)
    c = Interval.make(None, "2026-01-15T00:00:00Z")
    assert not a.overlaps(b) and not b.overlaps(a)
    assert a.overlaps(c) and c.overlaps(a)
    assert not a.contains(parse_instant("2026-02-01T00:00:00Z"))
    assert a.contains(parse_instant("2026-01-01T00:00:00Z"))
    assert c.contains(parse_instant("1900-01-01T00:00:00Z"))
    assert "unknown" in c.render()
