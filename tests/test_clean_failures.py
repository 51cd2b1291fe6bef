"""The cases issue #18's API fuzz found, one test each, on every backend (fixture `mem`)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki import Claim, FactKey, Memory
from toki.algebra import AWAIT, EWM, LWW, RULE, Policy
from toki.errors import (
    ConstraintViolation,
    InvalidKey,
    InvalidTime,
    InvalidValue,
    StoreBusy,
    StoreError,
)
from toki.log import EventKind
from toki.store.base import sqlite_path
from toki.store.sqlite import SQLiteStore

K = FactKey("t1", "u1", "city")
T0 = "2026-01-01T00:00:00Z"

BAD: list[tuple[str, type[Exception], str, Callable[[Memory], object]]] = [
    ("infinite weight", InvalidValue, "weight",
     lambda m: m.assert_fact(K, "x", source_id="s", weight=float("inf"))),
    ("huge int weight", InvalidValue, "weight",
     lambda m: m.assert_fact(K, "x", source_id="s", weight=10**400)),
    ("NaN in revoke_value", InvalidValue, "value",
     lambda m: m.revoke_value(K, float("nan"), valid_at=T0, reason="r")),
    ("set in revoke_value", InvalidValue, "value",
     lambda m: m.revoke_value(K, {1, 2}, valid_at=T0, reason="r")),
    ("bytes in revoke_value", InvalidValue, "value",
     lambda m: m.revoke_value(K, b"x", valid_at=T0, reason="r")),
    ("4,301-digit int", InvalidValue, "4300 digits",
     lambda m: m.assert_fact(K, 10**4300, source_id="s")),
    ("nesting 1,000 deep", InvalidValue, "nested deeper",
     lambda m: m.assert_fact(K, _deep(1_000), source_id="s")),
    ("lone surrogate in a value", InvalidValue, "surrogate",
     lambda m: m.assert_fact(K, "a\ud800", source_id="s")),
    ("lone surrogate in an object key", InvalidValue, "surrogate",
     lambda m: m.assert_fact(K, {"\udfff": 1}, source_id="s")),
    ("lone surrogate in a key", InvalidKey, "surrogate",
     lambda m: m.assert_fact(FactKey("t1", "u\ud800", "city"), "x", source_id="s")),
    ("lone surrogate in source_id", InvalidValue, "surrogate",
     lambda m: m.assert_fact(K, "x", source_id="s\ud800")),
    ("lone surrogate in reason", InvalidValue, "reason",
     lambda m: m.revoke(m.assert_fact(K, "x", source_id="s"), reason="\ud800")),
    ("NUL in a value", InvalidValue, "NUL",
     lambda m: m.assert_fact(K, "a\x00b", source_id="s")),
    ("NUL in a key", InvalidKey, "NUL",
     lambda m: m.assert_fact(FactKey("t1", "u1", "ci\x00ty"), "x", source_id="s")),
    ("NUL in source_id", InvalidValue, "NUL",
     lambda m: m.assert_fact(K, "x", source_id="s\x00")),
    ("key field over 256 bytes", InvalidKey, "256 bytes",
     lambda m: m.assert_fact(FactKey("t1", "u" * 300, "city"), "x", source_id="s")),
    ("offset before year 1", InvalidTime, "outside the calendar",
     lambda m: m.assert_fact(K, "x", valid_from="0001-01-01T00:00:00+01:00", source_id="s")),
    ("offset after year 9999", InvalidTime, "outside the calendar",
     lambda m: m.assert_fact(K, "x", valid_from="9999-12-31T23:30:00-01:00", source_id="s")),
    ("aware datetime before year 1", InvalidTime, "outside the calendar",
     lambda m: m.assert_fact(
         K, "x", recorded_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=3))),
         source_id="s")),
    ("str where FactKey expected: resolve_at", InvalidKey, "FactKey",
     lambda m: m.resolve_at("city")),  # type: ignore[arg-type]
    ("str where FactKey expected: current", InvalidKey, "FactKey",
     lambda m: m.current("city")),  # type: ignore[arg-type]
    ("str where FactKey expected: history", InvalidKey, "FactKey",
     lambda m: m.history("city")),  # type: ignore[arg-type]
    ("str where FactKey expected: Claim", InvalidKey, "FactKey",
     lambda m: m.write(Claim("city", "x", "s"))),  # type: ignore[arg-type]
    ("list as source_hash", InvalidValue, "source_hash",
     lambda m: m.assert_fact(K, "x", source_id="s", source_hash=["h"])),  # type: ignore[arg-type]
    ("int as source_hash in a claim", InvalidValue, "source_hash",
     lambda m: m.write(Claim(K, "x", "s", source_hash=5))),  # type: ignore[arg-type]
    ("int in a scope chain", InvalidKey, "resource_id",
     lambda m: m.resolve_at(K, scope_chain=[5])),  # type: ignore[list-item]
    ("unknown bound in a segment", Exception, "known bounds",
     lambda m: m.insert_segment(K, "x", valid_from="unknown", valid_to=T0, source_id="s")),
]


def _deep(n: int) -> Any:
    value: Any = []
    for _ in range(n):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("case", "error", "says", "call"), BAD, ids=[c[0] for c in BAD]
)
def test_bad_input_is_a_toki_error_and_changes_nothing(
    mem: Memory, case: str, error: type[Exception], says: str, call: Callable[[Memory], object]
) -> None:
    before = len(mem.events()), mem.state_hash()
    with pytest.raises(error, match=says) as info:
        call(mem)
    assert info.type.__module__ == "toki.errors", f"{case}: {info.type} is not a toki error"
    if case != "lone surrogate in reason":  # that one first asserts a fact, then fails
        assert (len(mem.events()), mem.state_hash()) == before


def test_years_before_1000_are_zero_padded_and_the_store_reopens(
    make_memory: Callable[[], Memory], backend: str
) -> None:
    mem = make_memory()
    v = mem.assert_fact(K, "old", valid_from="0999-12-31T00:00:00Z",
                        recorded_at="0999-12-31T12:00:00Z", source_id="chronicle")
    assert v.payload()["recorded_at"] == "0999-12-31T12:00:00Z"
    assert '"0999-12-31T00:00:00Z"' in mem.events()[0].payload
    if backend == "memory":
        return
    again = _reopen(mem, make_memory)
    assert again.current(K).value == "old"
    assert again.state_hash() == mem.state_hash()


def _reopen(mem: Memory, make_memory: Callable[[], Memory]) -> Memory:
    store = mem._store
    if hasattr(store, "schema"):
        from toki.store.postgres import PostgresStore

        return Memory(PostgresStore(store.dsn, schema=store.schema))  # type: ignore[attr-defined]
    return Memory.open(store.url)


def _old_format(at: datetime) -> str:
    """toki < 0.2's format_instant: strftime("%Y") does not zero-pad on Linux."""
    at = at.astimezone(UTC)
    year = str(at.year)
    return at.strftime(f"{year}-%m-%dT%H:%M:%S") + (f".{at.microsecond:06d}Z" if at.microsecond else "Z")


def test_a_store_written_with_unpadded_years_opens(
    make_memory: Callable[[], Memory], backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the old toki wrote (years before 1000 as '999-…') still opens, with the same
    state; the events keep their stored text (the log is append-only)."""
    if backend == "memory":
        pytest.skip("nothing durable to reopen")
    import toki.log
    import toki.model
    import toki.replay
    import toki.store.pg_rows  # imported under the patch, it would keep the old form for good
    import toki.time

    for module in (toki.time, toki.model, toki.log, toki.replay):
        monkeypatch.setattr(module, "format_instant", _old_format)
    toki.replay._fmt_us.cache_clear()  # segment texts are cached per instant: the old ones
    mem = make_memory()
    a = mem.assert_fact(K, "old", valid_from="0999-06-01T00:00:00Z",
                        recorded_at="0999-12-31T12:00:00Z", source_id="chronicle")
    mem.supersede(a, "older", valid_from="0999-09-01T00:00:00Z",
                  recorded_at="0999-12-31T13:00:00Z", source_id="chronicle")
    assert '"999-06-01T00:00:00Z"' in mem.events()[0].payload  # the old form, really
    monkeypatch.undo()
    toki.replay._fmt_us.cache_clear()  # today's toki, as a fresh process has it
    again = _reopen(mem, make_memory)
    assert again.resolve_at(K, "0999-07-01T00:00:00Z").value == "old"
    assert again.resolve_at(K, "0999-10-01T00:00:00Z").value == "older"
    assert again.state_hash() == Memory.replay(again.events()).state_hash()


def test_nul_bytes_are_refused_on_every_backend(mem: Memory) -> None:
    for bad in ("a\x00", {"k\x00": 1}, ["\x00"]):
        with pytest.raises(InvalidValue, match="NUL"):
            mem.assert_fact(K, bad, source_id="s")
    assert mem.events() == ()


def test_large_values_are_accepted_on_every_backend(
    make_memory: Callable[[], Memory], backend: str
) -> None:
    """A 24 KB incompressible value: PostgreSQL indexes its digest, not the value."""
    mem = make_memory()
    big = os.urandom(12_000).hex()
    mem.assert_fact(K, big, valid_from=T0, source_id="s")
    mem.assert_fact(FactKey("t1", "u1", "notes"), {"text": big, "more": [big]}, source_id="s")
    assert mem.current(K).value == big
    if backend != "memory":
        assert _reopen(mem, make_memory).current(K).value == big


def test_set_policy_twice_is_one_event(make_memory: Callable[[], Memory], backend: str) -> None:
    mem = make_memory()
    for _ in range(2):
        mem.set_policy("t1", "city", Policy("manual"), recorded_at=T0)
    assert [e.kind for e in mem.events()] == [EventKind.POLICY]
    assert [e.seq for e in mem.events()] == [1]
    if backend != "memory":
        assert len(_reopen(mem, make_memory).events()) == 1


def test_a_rejected_claim_settles_its_conflict(mem: Memory) -> None:
    """RULE (highest confidence) rejects the weaker claim A: it is closed entirely, so its
    conflict with the incumbent B no longer counts, in open_conflicts and in the summary."""
    mem.set_policy("t1", "city", Policy("highest_confidence"), recorded_at=T0)
    day = lambda n: f"2026-01-{n:02d}T00:00:00Z"  # noqa: E731
    mem.write(Claim(K, "B", "s0", day(3), recorded_at=day(2), weight=0.5), RULE)
    mem.write(Claim(K, "B", "s1", day(3), recorded_at=day(3), weight=1), RULE)
    decision = mem.write(Claim(K, "A", "s2", day(7), recorded_at=day(4), weight=0.5), RULE)
    assert decision.action.value == "REJECT"
    assert mem.open_conflicts(K) == []
    assert mem._snapshot.summaries()[K].open_conflicts == 0
    assert mem.current(K).value == "B"
    assert mem.reconcile().ok


def test_a_rejected_hold_settles_its_conflict(mem: Memory) -> None:
    mem.write(Claim(K, "Lisbon", "s1", T0, recorded_at="2026-01-02T00:00:00Z"), AWAIT)
    held = mem.write(Claim(K, "Berlin", "s2", T0, recorded_at="2026-01-03T00:00:00Z"), AWAIT)
    assert mem.open_conflicts(K)
    mem.reject(held.token, recorded_at="2026-01-04T00:00:00Z")
    assert mem.open_conflicts(K) == []
    assert mem.current(K).value == "Lisbon"


DAYS = st.integers(0, 30)


@st.composite
def serial_claims(draw: st.DrawFn) -> list[Claim]:
    out = []
    keys = [K, FactKey("t1", "u2", "city")]
    for i in range(draw(st.integers(1, 8))):
        start = draw(st.one_of(st.none(), DAYS))
        end = draw(st.one_of(st.none(), DAYS))
        if start is not None and end is not None and end <= start:
            end = None
        base = datetime(2026, 1, 1, tzinfo=UTC)
        claim = Claim(
            draw(st.sampled_from(keys)),
            draw(st.sampled_from(["Lisbon", "Berlin", "Rome"])),
            f"s{draw(st.integers(0, 3))}",
            None if start is None else base + timedelta(days=start),
            None if end is None else base + timedelta(days=40 + end),
            base + timedelta(days=35 + i),
            weight=draw(st.sampled_from([0.5, 1.0, 2.0])),
        )
        out.append(claim)
    return out


@settings(max_examples=150)
@given(st.sampled_from([LWW, EWM, RULE]), serial_claims())
def test_readjudicate_reproduces_a_serial_history(op: Any, claims: list[Claim]) -> None:
    """Recovery by re-running the claims (under the configured operator) gives the same
    state on a serial history: assumed start times stay assumed (they used to come back as
    evidence, so versions got new ids)."""
    mem = Memory(clock=lambda: datetime(2026, 6, 1, tzinfo=UTC))
    mem.set_policy("t1", "city", Policy("newest_valid_time"), recorded_at=T0)
    mem.configure("city", op)
    for claim in claims:
        mem.write(claim)
    assert mem.readjudicate().state_hash() == mem.state_hash()


# -- URLs and SQLite files -------------------------------------------------------------------


def test_sqlite_urls_follow_the_usual_convention() -> None:
    assert sqlite_path("sqlite:///memory.db") == "memory.db"
    assert sqlite_path("sqlite:///sub/dir.db") == "sub/dir.db"
    assert sqlite_path("sqlite:////var/toki.db") == "/var/toki.db"
    assert sqlite_path("sqlite://") == ":memory:"
    assert sqlite_path("sqlite:///:memory:") == ":memory:"
    with pytest.raises(StoreError, match="no path"):
        sqlite_path("sqlite://memory.db")


def test_a_relative_sqlite_url_writes_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with Memory.open("sqlite:///memory.db") as mem:
        mem.assert_fact(K, "x", source_id="s")
        assert mem.url == "sqlite:///memory.db"
    assert (tmp_path / "memory.db").exists()
    with Memory.open(f"sqlite:///{tmp_path / 'memory.db'}") as again:  # four slashes: absolute
        assert again.current(K).value == "x"


def test_a_sqlite_file_that_is_not_a_toki_store_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users VALUES (1, 'ana')")
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"{path}.*not a toki store.*untouched"):
        Memory.open(f"sqlite:///{path}")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_file_that_is_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"not a database, just some notes\n" * 100)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=f"{path}"):
        Memory.open(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_sqlite_busy_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    Memory.open(f"sqlite:///{path}").close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        mem = Memory(SQLiteStore(path, busy_timeout=0.05))
        with pytest.raises(StoreBusy, match="busy timeout"):
            mem.assert_fact(K, "x", source_id="s")
        assert mem.events() == ()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    mem.assert_fact(K, "x", source_id="s")  # usable again once the lock is free
    assert len(mem.events()) == 1
    mem.close()


def test_sqlite_integrity_errors_are_constraint_violations(tmp_path: Path) -> None:
    mem = Memory.open(f"sqlite:///{tmp_path / 'a.db'}")
    mem.assert_fact(K, "x", source_id="s")
    store = mem._store
    with pytest.raises(ConstraintViolation, match="nothing of it was kept"):
        store.append(mem.events(), {}, 1)  # the same events again
    assert len(list(store.load(0))) == 1
    mem.close()


def test_threads_sharing_a_sqlite_memory_get_toki_errors_only(tmp_path: Path) -> None:
    mem = Memory.open(f"sqlite:///{tmp_path / 'a.db'}")
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(20):
                mem.assert_fact(FactKey("t1", f"u{n}", "city"), i, source_id="s")
        except BaseException as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(e.kind is EventKind.ASSERT for e in mem.events()) == 60
    assert mem.reconcile().ok
    mem.close()
