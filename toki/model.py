"""The values the store speaks in: fact keys with scopes, immutable versions, answers.

A `FactVersion` never changes after it is made; its id is the hash of its canonical payload,
so delivering the same claim twice is a no-op. Lifecycle and conflicts are projections of
the event log (see `toki.replay`), never fields of a version.
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toki.canonical import (
    canonical_json,
    canonical_json_of_text,
    check_json,
    check_text,
    decode_json,
    digest,
    shown,
)
from toki.errors import InvalidKey, InvalidValue
from toki.time import Interval, format_instant, parse_instant

__all__ = [
    "MAX_KEY_BYTES",
    "SCOPE_KINDS",
    "Claim",
    "FactKey",
    "FactVersion",
    "HistoryEntry",
    "Lifecycle",
    "Resolution",
    "Scope",
    "fact_key_of_text",
    "fact_key_text",
    "need_key",
    "need_source_hash",
    "need_weight",
]

SCOPE_KINDS = ("global", "project", "task")


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """Where a fact applies. Normalised from trusted resource ids, never from model text."""

    kind: str = "global"
    key: str = "*"

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in SCOPE_KINDS:
            raise InvalidKey(
                "scope_kind",
                f"unknown scope kind {_short(self.kind)}",
                f"use one of {SCOPE_KINDS}",
            )
        if not isinstance(self.key, str) or not self.key.strip():
            raise InvalidKey("scope_key", "empty scope key", "use '*' for global scope")
        _key_text("scope_key", self.key)
        if self.kind == "global" and self.key != "*":
            raise InvalidKey("scope_key", f"global scope has key {self.key!r}", "use '*'")
        if self.kind != "global" and self.key == "*":
            raise InvalidKey("scope_key", f"{self.kind} scope needs a resource id, not '*'")

    @classmethod
    def from_resource(cls, resource_id: str | None) -> Scope:
        """Normalise a trusted resource id ('task:42', 'project:web', None) into a scope."""
        if resource_id is None or resource_id in ("", "*", "global", "global/*"):
            return cls()
        if not isinstance(resource_id, str):
            raise InvalidKey(
                "resource_id",
                f"expected a str or None, got {type(resource_id).__name__}",
                "use 'task:<id>', 'project:<id>' or None for global",
            )
        for sep in (":", "/"):
            if sep in resource_id:
                kind, _, key = resource_id.partition(sep)
                return cls(kind.strip().lower(), key.strip())
        raise InvalidKey(
            "resource_id",
            f"cannot tell the scope of {resource_id!r}",
            "use 'task:<id>', 'project:<id>' or None for global",
        )

    def __str__(self) -> str:
        return f"{self.kind}/{self.key}"


MAX_KEY_BYTES = 256
"""Longest FactKey field in UTF-8 bytes: PostgreSQL indexes the five fields together, and a
btree row holds at most 2,704 bytes. The same limit holds on every backend."""


def _need_text(name: str, value: object, error: type[InvalidValue] | type[InvalidKey]) -> str:
    if not isinstance(value, str) or not value.strip():
        raise error(name, f"must be a non-empty string, got {_short(value)}")
    try:
        check_text(value, name)
    except InvalidValue as exc:
        raise error(exc.field, exc.problem, exc.fix) from None
    return value


def _short(value: object) -> str:
    return shown(value)


def _key_text(name: str, value: object) -> str:
    text = _need_text(name, value, InvalidKey)
    if len(text) > MAX_KEY_BYTES // 4 and len(text.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidKey(
            name, f"is longer than {MAX_KEY_BYTES} bytes in UTF-8", "use a shorter identifier"
        )
    return text


def need_key(key: object, field: str = "key") -> FactKey:
    """The argument if it is a FactKey; otherwise a clear error (not an AttributeError later)."""
    if not isinstance(key, FactKey):
        raise InvalidKey(
            field,
            f"expected a toki.FactKey, got {type(key).__name__} {_short(key)}",
            "build one with FactKey(tenant, subject, fact_key)",
        )
    return key


def need_weight(weight: object, field: str = "weight") -> float:
    """A weight must be a finite number >= 0 (bool is not a number here)."""
    if isinstance(weight, bool) or not isinstance(weight, int | float):
        raise InvalidValue(field, f"must be a number, got {_short(weight)}")
    try:
        as_float = float(weight)
    except OverflowError:
        as_float = math.inf
    if not (math.isfinite(as_float) and as_float >= 0):
        raise InvalidValue(field, f"must be a finite number >= 0, got {_short(weight)}")
    return as_float


def need_source_hash(source_hash: object, field: str = "source_hash") -> str | None:
    """None (toki derives one) or a non-empty string."""
    if source_hash is None:
        return None
    return _need_text(field, source_hash, InvalidValue)


def _plain_key(tenant: str, subject: str, fact_key: str, kind: str, key: str) -> bool:
    """True when every check of a FactKey passes on a plain ASCII key (the common case, in one
    pass: a store opens thousands of keys); False sends it to the checks that name the
    problem, which also decide every non-ASCII key."""
    if not (
        type(tenant) is str
        and type(subject) is str
        and type(fact_key) is str
        and type(key) is str
        and ((kind == "global" and key == "*") or (kind in ("project", "task") and key != "*"))
    ):
        return False
    text = tenant + "\x00" + subject + "\x00" + fact_key + "\x00" + key
    return (
        len(text) <= MAX_KEY_BYTES + 3  # then every field fits too
        and text.isascii()
        and text.count("\x00") == 3
        and "" not in (tenant, subject, fact_key, key)
        and not (tenant.isspace() or subject.isspace() or fact_key.isspace() or key.isspace())
    )


@dataclass(frozen=True, slots=True, order=True)
class FactKey:
    """The identity of a fact: (tenant, subject, scope_kind, scope_key, fact_key)."""

    tenant: str
    subject: str
    fact_key: str
    scope_kind: str = "global"
    scope_key: str = "*"
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        scope = (self.scope_kind, self.scope_key)
        if not _plain_key(self.tenant, self.subject, self.fact_key, *scope):
            _key_text("tenant", self.tenant)  # the checks that name what is wrong
            _key_text("subject", self.subject)
            _key_text("fact_key", self.fact_key)
            Scope(self.scope_kind, self.scope_key)
        # keys are hashed on every event folded: compute the hash once
        object.__setattr__(
            self,
            "_hash",
            hash((self.tenant, self.subject, self.fact_key, self.scope_kind, self.scope_key)),
        )

    def __hash__(self) -> int:
        return self._hash

    @property
    def scope(self) -> Scope:
        return Scope(self.scope_kind, self.scope_key)

    def in_scope(self, scope: Scope) -> FactKey:
        """The same fact in another scope (for scope-chain lookups)."""
        return FactKey(self.tenant, self.subject, self.fact_key, scope.kind, scope.key)

    def to_json(self) -> dict[str, str]:
        return {
            "tenant": self.tenant,
            "subject": self.subject,
            "scope_kind": self.scope_kind,
            "scope_key": self.scope_key,
            "fact_key": self.fact_key,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FactKey:
        return cls(
            tenant=data.get("tenant", ""),
            subject=data.get("subject", ""),
            fact_key=data.get("fact_key", ""),
            scope_kind=data.get("scope_kind", "global"),
            scope_key=data.get("scope_key", "*"),
        )

    def __str__(self) -> str:
        return f"{self.tenant}:{self.subject}:{self.scope_kind}/{self.scope_key}:{self.fact_key}"


def fact_key_text(key: FactKey) -> str:
    """A key as the projection tables and the checkpoint record name it (canonical JSON)."""
    return canonical_json_of_text(key.to_json())


_PLAIN = r"( *[!#-\[\]-~][ !#-\[\]-~]*)"
r"""A plain key field: printable ASCII but " and \ (JSON writes it as it is), with at least
one character other than a space (so neither empty nor blank)."""
_PLAIN_KEY_TEXT = re.compile(
    f'{{"fact_key":"{_PLAIN}","scope_key":"{_PLAIN}","scope_kind":"{_PLAIN}",'
    f'"subject":"{_PLAIN}","tenant":"{_PLAIN}"}}'
)


def fact_key_of_text(text: str, strict: bool = True) -> FactKey:
    """The key whose `fact_key_text` is `text`; ValueError (InvalidKey) if there is none
    (strict: also if `text` is JSON of a key but not its canonical text). A plain ASCII key
    is read with one regex match, its remaining checks inline (an open reads one key per
    record entry); anything else goes through FactKey's own checks."""
    plain = _PLAIN_KEY_TEXT.fullmatch(text)
    if plain is not None:
        fields = fact_key, scope_key, scope_kind, subject, tenant = plain.groups()
        if (
            scope_kind in SCOPE_KINDS
            and (scope_kind == "global") == (scope_key == "*")
            and max(map(len, fields)) <= MAX_KEY_BYTES
        ):  # every check of FactKey and Scope holds: build it without running them again
            return _checked_key((tenant, subject, fact_key, scope_kind, scope_key))
    data = decode_json(text)
    if not isinstance(data, dict):
        raise ValueError(f"key text {text!r} is not a JSON object")
    key = FactKey.from_json(data)
    if strict and fact_key_text(key) != text:
        raise ValueError(f"key text {text!r} is not the canonical text of {key}")
    return key


def _checked_key(values: tuple[str, str, str, str, str]) -> FactKey:
    """A FactKey of (tenant, subject, fact_key, scope_kind, scope_key) that passed every
    check already: its fields set as the dataclass's __init__ would."""
    key = object.__new__(FactKey)
    setattr_ = object.__setattr__
    setattr_(key, "tenant", values[0])
    setattr_(key, "subject", values[1])
    setattr_(key, "fact_key", values[2])
    setattr_(key, "scope_kind", values[3])
    setattr_(key, "scope_key", values[4])
    setattr_(key, "_hash", hash(values))
    return key


class Lifecycle(enum.Enum):
    """A version's standing as of some system time (a projection, never stored)."""

    PROPOSED = "PROPOSED"  # awaiting confirmation (AWAIT operator)
    ACTIVE = "ACTIVE"
    SUPERSEDED = "SUPERSEDED"  # the world changed: its valid interval was closed
    REVOKED = "REVOKED"  # we were wrong: it never held


@dataclass(frozen=True, slots=True)
class FactVersion:
    """One immutable claim about a fact: value, valid interval, when and whence we learned it."""

    key: FactKey
    value: Any
    valid: Interval
    recorded_at: datetime
    source_id: str
    source_hash: str
    supersedes: str | None = None
    weight: float = 1.0
    id: str = field(default="", compare=False)
    # canonical text of the value, computed on first use: conflict checks and resolve
    # compare values of every overlapping version, on every write
    _value_json: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_json(self.value)
        _need_text("source_id", self.source_id, InvalidValue)
        if need_source_hash(self.source_hash) is None:
            raise InvalidValue("source_hash", "must be a non-empty string, got None")
        need_weight(self.weight)
        if not self.id:
            object.__setattr__(self, "id", self.computed_id())

    def payload(self) -> dict[str, Any]:
        """The canonical content the id is a hash of."""
        return {
            "key": self.key.to_json(),
            "value": self.value,
            "valid": self.valid.to_json(),
            "recorded_at": format_instant(self.recorded_at),
            "source_id": self.source_id,
            "source_hash": self.source_hash,
            "supersedes": self.supersedes,
            "weight": self.weight,
        }

    @classmethod
    def from_payload(
        cls, data: dict[str, Any], version_id: str = "", key: FactKey | None = None
    ) -> FactVersion:
        """Rebuild from a stored payload; a known id skips re-hashing (verify it separately)."""
        return cls(
            key=key if key is not None else FactKey.from_json(data["key"]),
            value=data["value"],
            valid=Interval.from_json(data["valid"]),
            recorded_at=parse_instant(data["recorded_at"], "recorded_at"),
            source_id=data["source_id"],
            source_hash=data["source_hash"],
            supersedes=data.get("supersedes"),
            weight=data.get("weight", 1.0),
            id=version_id,
        )

    def computed_id(self) -> str:
        """The id this version's payload hashes to (equal to `id` unless tampered with)."""
        return "v-" + digest(canonical_json(self.payload()))

    @property
    def value_json(self) -> str:
        text = self._value_json
        if text is None:
            text = canonical_json(self.value)
            object.__setattr__(self, "_value_json", text)
        return text


def source_hash_of(source_id: str, value: object) -> str:
    """Default source hash when the caller has no hash of the source document."""
    return digest(canonical_json({"source_id": source_id, "value": value}))


@dataclass(frozen=True, slots=True)
class Claim:
    """A new belief on its way into the store through `Memory.write` (times as given)."""

    key: FactKey
    value: Any
    source_id: str
    valid_from: str | datetime | None = None
    valid_to: str | datetime | None = None
    recorded_at: str | datetime | None = None
    source_hash: str | None = None
    weight: float = 1.0

    def __post_init__(self) -> None:
        """The same checks as a FactVersion's, before anything touches the store (times are
        checked where they are parsed, against the recording time)."""
        need_key(self.key, "claim.key")
        check_json(self.value, "claim.value")
        _need_text("claim.source_id", self.source_id, InvalidValue)
        need_source_hash(self.source_hash, "claim.source_hash")
        need_weight(self.weight, "claim.weight")


@dataclass(frozen=True, slots=True)
class Resolution:
    """The answer to "what held at valid time T, as known at system time S?".

    kind is exactly one of "value", "unknown", "conflict" (and "stale" from `current` when
    the projection lags and catch-up was declined). A conflict never carries a value.
    `conflicts` names what contests the point: per open conflict group (toki.conflicts) the
    sorted ids of its members that hold there (a pair when two versions contest it), or the
    open pairs of a store written before groups; all eligible ids if none names them.
    """

    kind: str
    value: Any = None
    version_ids: tuple[str, ...] = ()
    conflicts: tuple[tuple[str, ...], ...] = ()

    @property
    def is_value(self) -> bool:
        return self.kind == "value"


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One version as it stood at the query's system time, with what replaced it and why."""

    version: FactVersion
    lifecycle: Lifecycle
    effective: Interval | None  # None when a later supersession replaced all of it
    superseded_at: datetime | None  # system time of the supersession, if any
    replaced_by: tuple[str, ...]
    revoked_at: datetime | None
    revoke_reason: str | None

    def render(self) -> str:
        """One line with every date labelled by its meaning."""
        v = self.version
        parts = [f"{v.value_json} [{self.lifecycle.value}]"]
        parts.append(v.valid.render() if self.effective is None else self.effective.render())
        parts.append(f"recorded at {format_instant(v.recorded_at)} from {v.source_id}")
        if self.superseded_at is not None:
            by = ", ".join(self.replaced_by)
            parts.append(f"superseded at {format_instant(self.superseded_at)} by {by}")
        if self.revoked_at is not None:
            parts.append(f"revoked at {format_instant(self.revoked_at)} ({self.revoke_reason})")
        return "; ".join(parts)
