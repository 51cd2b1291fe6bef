"""FactKey's one-pass check for plain keys and its text form (issue #37: an open parses one
key per record entry, so both have fast paths). The fast path must accept exactly what the
checks that name problems accept, and the text must be canonical JSON both ways."""

from __future__ import annotations

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from toki.canonical import canonical_json_stdlib
from toki.errors import InvalidKey
from toki.model import (
    FactKey,
    Scope,
    _key_text,
    _plain_key,
    fact_key_of_text,
    fact_key_text,
)

SEED = 3737
print(f"test_fact_key_text: hypothesis seed {SEED}")

PIECES = st.sampled_from(["", " ", "\t", "a", "Z9", "*", '"', "\\", "\x00", "é", "\ud800", "x" * 130])
PLAIN = st.sampled_from(["a", "Z9", " a", "a b", "*", "p/1", "x" * 256, "x" * 257, "é"])
FIELD = st.one_of(
    PLAIN, PLAIN, PLAIN, st.lists(PIECES, max_size=3).map("".join), st.text(max_size=8),
    st.integers(),
)
KIND = st.sampled_from(["global", "project", "task", "Global", "", 7])
SCOPE_KEY = st.one_of(st.just("*"), FIELD)


def _reference(tenant: object, subject: object, fact_key: object, kind: object, key: object) -> bool:
    """The checks that name what is wrong, alone: True if they all pass."""
    try:
        _key_text("tenant", tenant)
        _key_text("subject", subject)
        _key_text("fact_key", fact_key)
        Scope(kind, key)  # type: ignore[arg-type]
    except InvalidKey:
        return False
    return True


@seed(SEED)
@settings(max_examples=600, deadline=None)
@given(FIELD, FIELD, FIELD, KIND, SCOPE_KEY)
def test_the_fast_check_accepts_only_what_the_full_checks_accept(
    tenant: object, subject: object, fact_key: object, kind: object, key: object
) -> None:
    fields = (tenant, subject, fact_key, kind, key)
    ok = _reference(*fields)
    if _plain_key(*fields):  # type: ignore[arg-type]
        assert ok
    try:
        made = FactKey(*fields)  # type: ignore[arg-type]
    except InvalidKey:
        assert not ok
    else:
        assert ok
        text = fact_key_text(made)
        assert text == canonical_json_stdlib(made.to_json())
        assert fact_key_of_text(text) == made


@seed(SEED)
@settings(max_examples=600, deadline=None)
@given(FIELD, FIELD, FIELD, KIND, SCOPE_KEY)
def test_a_key_text_reads_back_exactly_the_keys_the_checks_accept(
    tenant: object, subject: object, fact_key: object, kind: object, key: object
) -> None:
    """The canonical text of any five fields (a key or not): read back, it is the key when
    FactKey's checks accept the fields, and refused when they do not (the regex path must
    not let through what the checks refuse)."""
    fields = (tenant, subject, fact_key, kind, key)
    names = ("tenant", "subject", "fact_key", "scope_kind", "scope_key")
    text = canonical_json_stdlib(dict(zip(names, fields, strict=True)))
    if _reference(*fields):
        made = fact_key_of_text(text)
        assert made == FactKey(*fields) and hash(made) == hash(FactKey(*fields))  # type: ignore[arg-type]
        assert (made.tenant, made.subject, made.fact_key, made.scope) == (
            tenant, subject, fact_key, Scope(kind, key)  # type: ignore[arg-type]
        )
    else:
        with pytest.raises(ValueError):
            fact_key_of_text(text)


def test_a_key_text_that_is_not_canonical_is_refused_when_strict() -> None:
    key = FactKey("t", "s", "f")
    loose = '{"tenant":"t","subject":"s","fact_key":"f"}'
    with pytest.raises(ValueError, match="not the canonical text"):
        fact_key_of_text(loose)
    assert fact_key_of_text(loose, strict=False) == key
    with pytest.raises(InvalidKey, match="subject"):
        fact_key_of_text(fact_key_text(key).replace('"s"', '" "'))
    with pytest.raises(ValueError, match="not a JSON object"):
        fact_key_of_text("[1]")
