"""Issue #36, finding 2: a PostgreSQL write whose connection is killed at any statement
(before or after it, COMMIT included) reports its true outcome, a retry with the same op id
never stores it twice, and the store opens and verifies afterwards.

The connection is terminated from a second session (pg_terminate_backend), so the server
really drops it mid-write; the true outcome is read from the tables, not from toki."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from toki import Claim, FactKey, Memory
from toki.algebra import LWW
from toki.errors import OutcomeUnknown, StoreError
from toki.store.postgres import PostgresStore

K = FactKey("acme", "u1", "city")
START = datetime(2026, 3, 1, tzinfo=UTC)


def _ticking() -> Callable[[], datetime]:
    """A clock one second on at every call: a retry is a new claim unless its op id says not."""
    ticks = itertools.count()
    return lambda: START + timedelta(seconds=next(ticks))


def _statements(store: PostgresStore, mem: Memory) -> list[str]:
    """The statements of one LWW write that supersedes (recorded through the hook)."""
    seen: list[str] = []
    store.statement_hook = lambda stage, text: seen.append(text) if stage == "before" else None
    mem.write(Claim(K, "probe", source_id="probe"), LWW)
    store.statement_hook = None
    return seen


def _stored(store: PostgresStore, source: str) -> int:
    """How many ASSERTs of claims from `source` the store holds, sequenced or pending."""
    rows = store.execute(
        "SELECT (SELECT count(*) FROM toki_event WHERE kind = 'ASSERT' AND payload LIKE %s) + "
        "(SELECT count(*) FROM toki_pending WHERE kind = 'ASSERT' AND payload LIKE %s)",
        (f'%"source_id":"{source}"%', f'%"source_id":"{source}"%'),
    )
    return int(rows[0][0])


def test_a_connection_killed_at_every_statement_reports_the_true_outcome(
    pg_store: Callable[..., PostgresStore], pg_dsn: str
) -> None:
    store = pg_store()
    mem = Memory(store, clock=_ticking())
    mem.write(Claim(K, "Lisbon", source_id="first"), LWW)
    statements = _statements(store, mem)
    assert statements[0].startswith("BEGIN") and statements[-1] == "COMMIT"
    assert len(statements) >= 8, statements
    admin = psycopg.connect(pg_dsn, autocommit=True)
    outcomes: dict[str, int] = {}
    try:
        for index, stage in itertools.product(range(len(statements)), ("before", "after")):
            case = f"s{index}-{stage}"
            fired: list[bool] = []
            count = itertools.count()

            def kill(
                at: str,
                text: str,
                index: int = index,
                stage: str = stage,
                count: Any = count,
                fired: list[bool] = fired,
            ) -> None:
                if at != stage:
                    return
                if next(count) == index and not fired:
                    fired.append(True)
                    pid = store._conn.info.backend_pid
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

            store.statement_hook = kill
            claim = Claim(K, f"city-{case}", source_id=case)
            try:
                mem.write(claim, LWW, op_id=f"op-{case}")
                reported = 1
            except OutcomeUnknown:  # the server is up: the lookup always succeeds here
                raise
            except StoreError:
                reported = 0
            store.statement_hook = None
            assert fired, case
            assert _stored(store, case) == reported, (case, statements[index])
            outcomes[case] = reported
            again = mem.write(claim, LWW, op_id=f"op-{case}")  # the retry: stored once
            assert _stored(store, case) == 1, case
            assert again.claim_id is not None
    finally:
        admin.close()
    assert set(outcomes.values()) == {0, 1}  # both outcomes were met
    assert outcomes[f"s{len(statements) - 1}-after"] == 1  # killed after COMMIT: committed
    assert outcomes[f"s{len(statements) - 1}-before"] == 0  # killed before COMMIT: not
    print(f"{len(outcomes)} kill points over {len(statements)} statements: {outcomes}")
    with Memory(pg_store(store.schema)) as reopened:
        assert reopened.verify().ok
        assert reopened.open_report is None or reopened.open_report.ok
        sources = [e.version.source_id for e in reopened.events() if e.version is not None]
        assert sorted(sources) == sorted(["first", "probe", *outcomes])  # each exactly once


def test_a_retried_op_id_returns_the_first_decision(
    pg_store: Callable[..., PostgresStore],
) -> None:
    """No failure at all: the same op id twice is one write, and the same decision."""
    mem = Memory(pg_store(), clock=_ticking())
    first = mem.write(Claim(K, "Lisbon", source_id="a"), LWW, op_id="op-1")
    second = mem.write(Claim(K, "Lisbon", source_id="a"), LWW, op_id="op-1")
    assert second == first and len(mem.events()) == len(Memory(mem._store).events())
    assert sum(1 for e in mem.events() if e.version is not None) == 1


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_op_ids_on_the_local_stores(backend: str, tmp_path: Any) -> None:
    url = "memory://" if backend == "memory" else f"sqlite:///{tmp_path / 'o.db'}"
    with Memory.open(url, clock=_ticking()) as mem:
        first = mem.write(Claim(K, "Lisbon", source_id="a"), LWW, op_id="op-1")
        second = mem.write(Claim(K, "Lisbon", source_id="a"), LWW, op_id="op-1")
        assert second == first
        assert sum(1 for e in mem.events() if e.version is not None) == 1
        with pytest.raises(Exception, match="op_id"):
            mem.write(Claim(K, "Lisbon", source_id="a"), LWW, op_id="")
