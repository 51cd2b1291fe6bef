"""The differential API fuzz (issue #36): one seeded random program of public calls, run on
several backends side by side; every call must succeed or raise a `toki.errors` exception,
and every backend must give the same outcome (value or error class) for every call.

Used by tests/test_fuzz_api.py at CI size (a few seconds) and, on demand, at full size
(>= 10,000 calls): `TOKI_FUZZ_CALLS=10000 pytest tests/test_fuzz_api.py -k
differential_fuzz_full` (docs/backends.md).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from toki import UNKNOWN, Claim, FactKey, FactVersion, Memory
from toki.algebra import AWAIT, EWM, LWW, RULE, Policy
from toki.errors import TokiError
from toki.shadow import Config

NOW = datetime(2026, 11, 29, tzinfo=UTC)

KEYS = [
    FactKey("t1", "u1", "city"),
    FactKey("t1", "u2", "city"),
    FactKey("t1", "u1", "city", "task", "42"),
    FactKey("t2", "u1", "lang"),
]
TEXT = ["s1", "s2", "m", "café ☕", "", " ", "a\x00b", "\ud800", "x\udfffy", "k" * 3000, 3, None,
        b"s1", ["s1"]]  # fmt: skip
VALUES = ["Lisbon", "Berlin", "Rome", 1, 2.5, True, None, [1, "a"], {"a": {"b": 1}},
          float("nan"), float("inf"), 10**5000, -(10**4400), {1, 2}, b"b", {1: "x"},
          "a\x00b", "\ud800", {"\ud800": 1}, "v" * 20_000, (1, 2), object()]  # fmt: skip
TIMES = [None, "2026-01-05T00:00:00Z", "2026-02-01T00:00:00Z", "2026-03-10T12:00:00+02:00",
         UNKNOWN, "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "2026-02-30T00:00:00Z",
         "last tuesday", "2026-01-01T00:00:00", "", "\ud800", datetime(2026, 1, 5),
         datetime(2026, 1, 7, tzinfo=UTC), 12345, 10**5000, b"2026"]  # fmt: skip
WEIGHTS = [1.0, 0.5, 2, 0, -1, float("inf"), float("nan"), True, "1", None, 10**400, 10**5000]
OPERATORS: list[Any] = [None, LWW, EWM, AWAIT, RULE, "LWW", 3]
POLICIES: list[Any] = [Policy("newest_valid_time"), Policy("prefer_source", ("s1", "s2")),
                       Policy("manual"), "manual", None, 10**5000]  # fmt: skip
CONFIGS: list[Any] = [
    Config(operators=(("city", "EWM"),)),
    Config(operators=(("city", "RULE"),), policies=(("t1", "city", Policy("manual")),)),
    Config(scope_chains=(("city", ("task:42", "global")),), name="scoped"),
    Config(),
    "config",
    None,
]
CONSUMERS: list[Any] = [None, None, "agent", "c" * 3000, "\ud800", "", 7]
OP_IDS: list[Any] = [None, None, "op-1", "op-2", "", 5, "x" * 300]


@dataclass
class Refs:
    """What earlier calls returned, for later calls to refer to (ids are the same on every
    backend: they hash the payload)."""

    versions: list[str] = field(default_factory=lambda: ["v-nope"])
    tokens: list[str] = field(default_factory=lambda: ["tok-nope"])
    digests: list[Any] = field(default_factory=lambda: [None, "0:", "bad", 12])


def pick(rng: random.Random, options: Sequence[Any]) -> Any:
    """Each list starts with valid values: two draws in three come from its first three, so
    programs build real histories, not only refusals."""
    if len(options) > 3 and rng.random() < 0.67:
        return options[rng.randrange(3)]
    return options[rng.randrange(len(options))]


Call = Callable[[Memory], Any]


def make_call(rng: random.Random, refs: Refs) -> tuple[str, Call]:
    """One call with its arguments drawn now (so every backend gets the same ones)."""
    name = pick(rng, sorted(_MAKERS))
    return name, _MAKERS[name](rng, refs)


def _kw(rng: random.Random) -> dict[str, Any]:
    return {
        "valid_from": pick(rng, TIMES),
        "valid_to": pick(rng, [None, None, *TIMES]),
        "recorded_at": pick(rng, [None, None, *TIMES]),
        "source_id": pick(rng, TEXT),
        "weight": pick(rng, WEIGHTS),
    }


def _ref(rng: random.Random, refs: Refs) -> Any:
    return pick(rng, [*refs.versions[-3:], refs.versions[0], None, 3])


def _m_assert(rng: random.Random, refs: Refs) -> Call:
    key, value, kw = pick(rng, KEYS), pick(rng, VALUES), _kw(rng)
    return lambda m: m.assert_fact(key, value, **kw)


def _m_write(rng: random.Random, refs: Refs) -> Call:
    kw = _kw(rng)
    claim = Claim(pick(rng, KEYS), pick(rng, VALUES[:9]), "s1", kw["valid_from"],
                  kw["valid_to"], kw["recorded_at"], None, 1.0)  # fmt: skip
    arg = pick(rng, [claim, claim, claim, "claim"])
    op, op_id = pick(rng, OPERATORS), pick(rng, OP_IDS)
    return lambda m: m.write(arg, op, op_id=op_id)


def _m_claim(rng: random.Random, refs: Refs) -> Call:
    kw = _kw(rng)
    key, value = pick(rng, KEYS), pick(rng, VALUES)
    return lambda m: Claim(key, value, kw["source_id"], kw["valid_from"], weight=kw["weight"])


def _m_supersede(rng: random.Random, refs: Refs) -> Call:
    ref, value, kw = _ref(rng, refs), pick(rng, VALUES), _kw(rng)
    return lambda m: m.supersede(ref, value, **kw)


def _m_segment(rng: random.Random, refs: Refs) -> Call:
    key, value, kw = pick(rng, KEYS), pick(rng, VALUES), _kw(rng)
    return lambda m: m.insert_segment(key, value, **kw)


def _m_revoke(rng: random.Random, refs: Refs) -> Call:
    ref, at, reason = _ref(rng, refs), pick(rng, TIMES), pick(rng, TEXT)
    return lambda m: m.revoke(ref, recorded_at=at, reason=reason)


def _m_revoke_value(rng: random.Random, refs: Refs) -> Call:
    key, value, at, reason = pick(rng, KEYS), pick(rng, VALUES), pick(rng, TIMES), "wrong"
    return lambda m: m.revoke_value(key, value, valid_at=at, reason=reason)


def _m_confirm(rng: random.Random, refs: Refs) -> Call:
    token, at = pick(rng, [*refs.tokens, None, 1]), pick(rng, [None, *TIMES])
    which = pick(rng, ["confirm", "reject"])
    return lambda m: getattr(m, which)(token, recorded_at=at)


def _m_policy(rng: random.Random, refs: Refs) -> Call:
    tenant, fk, policy = pick(rng, ["t1", *TEXT]), pick(rng, ["city", *TEXT]), pick(rng, POLICIES)
    at = pick(rng, [None, "2026-01-01T00:00:00Z", *TIMES])
    return lambda m: m.set_policy(tenant, fk, policy, recorded_at=at)


def _m_configure(rng: random.Random, refs: Refs) -> Call:
    fk, op = pick(rng, ["city", *TEXT]), pick(rng, OPERATORS)
    return lambda m: m.configure(fk, op)


def _m_read(rng: random.Random, refs: Refs) -> Call:
    key, at, as_of = pick(rng, KEYS), pick(rng, TIMES), pick(rng, TIMES)
    chain = pick(rng, [None, None, ["task:42", "global"], ["nonsense"], [5], "task:42"])
    consumer = pick(rng, CONSUMERS)
    which = pick(rng, ["resolve_at", "current", "history", "render_history", "lifecycle",
                       "open_conflicts", "audit", "version", "operator_for", "db"])  # fmt: skip
    ref = _ref(rng, refs)

    def call(m: Memory) -> Any:
        if which == "resolve_at":
            return m.resolve_at(key, at, as_of, scope_chain=chain, consumer=consumer)
        if which == "current":
            return m.current(key, scope_chain=chain, consumer=consumer)
        if which in ("history", "render_history"):
            return getattr(m, which)(key, as_of)
        if which == "lifecycle":
            return m.lifecycle(ref, as_of)
        if which == "version":
            return m.version(ref)
        if which == "db":  # the state as a value, read as known at as_of
            db = m.db(as_of)
            return db.resolve_at(key, at, scope_chain=chain), db.history(key)
        return getattr(m, which)(key)

    return call


def _m_log(rng: random.Random, refs: Refs) -> Call:
    which = pick(rng, ["keys", "events", "state_hash", "watermark", "digest", "verify",
                       "reconcile", "refresh", "write_stats", "isolation", "url",
                       "replay", "readjudicate", "checkpoint"])  # fmt: skip
    digest, key = pick(rng, refs.digests), pick(rng, [None, None, b"k", b"", "k"])
    at, op = pick(rng, TIMES), pick(rng, OPERATORS)

    def call(m: Memory) -> Any:
        if which == "digest":
            return m.digest(key=key)
        if which == "verify":
            return m.verify(digest)
        if which == "replay":
            return Memory.replay(m.events(), at).state_hash()
        if which == "readjudicate":
            return m.readjudicate(op).state_hash()
        if which == "checkpoint":  # SQLite and PostgreSQL write one, memory keeps none
            made = m.checkpoint()
            return m.state_hash(), made is None or made.seq == m.watermark
        value = getattr(m, which)
        return value() if callable(value) else value

    return call


def _m_config(rng: random.Random, refs: Refs) -> Call:
    which = pick(rng, ["promote", "promote", "rollback", "shadow", "config_in_force",
                       "current_config"])  # fmt: skip
    config, at = pick(rng, CONFIGS), pick(rng, [None, "2026-06-01T00:00:00Z", *TIMES])

    def call(m: Memory) -> Any:
        if which == "promote":
            return m.promote(config, recorded_at=at)
        if which == "rollback":
            return m.rollback(recorded_at=at)
        if which == "shadow":
            return m.shadow(config, valid_at="2026-02-01T00:00:00Z")
        if which == "config_in_force":
            return m.config_in_force(at)
        return m.current_config()

    return call


def _m_consumption(rng: random.Random, refs: Refs) -> Call:
    which = pick(rng, ["consumed_by", "impact", "revoke_source"])
    consumer, source = pick(rng, CONSUMERS), pick(rng, TEXT)

    def call(m: Memory) -> Any:
        if which == "consumed_by":
            return m.consumed_by(consumer)
        if which == "impact":
            return m.impact(source)
        return m.revoke_source(source, reason="retracted")

    return call


_MAKERS: dict[str, Callable[[random.Random, Refs], Call]] = {
    "assert_fact": _m_assert,
    "write": _m_write,
    "write2": _m_write,
    "claim": _m_claim,
    "supersede": _m_supersede,
    "insert_segment": _m_segment,
    "revoke": _m_revoke,
    "revoke_value": _m_revoke_value,
    "confirm_reject": _m_confirm,
    "set_policy": _m_policy,
    "configure": _m_configure,
    "read": _m_read,
    "read2": _m_read,
    "log": _m_log,
    "config": _m_config,
    "consumption": _m_consumption,
}

COVERED = {
    "assert_fact", "write", "supersede", "insert_segment", "revoke", "revoke_value", "confirm",
    "reject", "set_policy", "configure", "resolve_at", "current", "history", "render_history",
    "lifecycle", "open_conflicts", "audit", "version", "operator_for", "keys", "events",
    "state_hash", "watermark", "digest", "verify", "reconcile", "refresh", "write_stats",
    "isolation", "url", "db", "replay", "readjudicate", "promote", "rollback",
    "shadow", "config_in_force", "current_config", "consumed_by", "impact", "revoke_source",
    "checkpoint",
}  # fmt: skip
"""The public Memory methods the fuzz calls (a test checks none is missing); open, close
and write_steps are exercised by opening, closing and `write`."""
NOT_FUZZED = {"open", "close", "write_steps"}


@dataclass
class Tally:
    calls: int = 0
    toki_errors: int = 0
    other_errors: list[str] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)


def outcome(result: Any, url: str) -> str:
    """A call's result as comparable text: its repr without the store's URL, hashed."""
    try:
        text = repr(result)
    except ValueError:
        text = "<unrepresentable>"
    text = text.replace(url, "URL")
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def run(
    rng: random.Random, mems: Sequence[Memory], calls: int, tally: Tally, label: str
) -> None:
    """`calls` calls on every Memory in `mems` (the first one feeds the references)."""
    refs = Refs()
    for i in range(calls):
        name, call = make_call(rng, refs)
        seen = []
        for mem in mems:
            try:
                result = call(mem)
                seen.append(("ok", outcome(result, mem.url)))
            except TokiError as exc:
                tally.toki_errors += 1
                seen.append(("err", type(exc).__name__))
                result = None
            except Exception as exc:  # what the fuzz exists to find
                tally.other_errors.append(f"{label} call {i} {name}: {type(exc).__name__}: {exc}")
                seen.append(("raw", type(exc).__name__))
                result = None
            if mem is mems[0]:
                _remember(result, refs)
        tally.calls += 1
        if any(s != seen[0] for s in seen[1:]):
            tally.differences.append(f"{label} call {i} {name}: {seen}")


def _remember(result: Any, refs: Refs) -> None:
    if isinstance(result, FactVersion):
        refs.versions.append(result.id)
    claim_id = getattr(result, "claim_id", None)
    if isinstance(claim_id, str):
        refs.versions.append(claim_id)
    token = getattr(result, "token", None)
    if isinstance(token, str):
        refs.tokens.append(token)
    if type(result).__name__ == "Digest":
        refs.digests.append(result)
        refs.digests.append(str(result))


def clock() -> datetime:
    return NOW


def spread(seed: int, programs: int, calls: int) -> list[tuple[int, int]]:
    """(seed, calls) of each program: lengths vary so short and long histories are both met."""
    rng = random.Random(seed)
    return [(rng.randrange(2**31), rng.randint(max(1, calls // 2), calls)) for _ in range(programs)]

