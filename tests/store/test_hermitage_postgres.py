"""Hermitage on a real PostgreSQL server, beside the simulator, scenario by scenario.

The scenario table is tests/sim/test_hermitage.py's (imported, not copied). Each session is a
real connection (autocommit off, `SET TRANSACTION ISOLATION LEVEL …`) driven by its own
thread, so that a statement can wait on a lock as in Hermitage's narrative. A step counts as
blocked when the server says so (`pg_blocking_pids` of the session's backend is not empty);
the session's later steps queue behind it and the runner carries on, exactly as the
simulator's runner does with WouldBlock. Nothing here depends on timing.

Level pairs: PostgreSQL read committed ↔ SimStore READ_COMMITTED, repeatable read ↔
SNAPSHOT, serializable ↔ SERIALIZABLE. Each test asserts that the server reproduces the
published outcome (values, waits, failures, final state) and that the simulator's run equals
the server's.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest
from psycopg import sql


def _load_hermitage() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "sim" / "test_hermitage.py"
    name = "toki_tests_sim_hermitage"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return module


H = _load_hermitage()
PG_LEVELS = {"RC": "READ COMMITTED", "SI": "REPEATABLE READ", "SER": "SERIALIZABLE"}
_FAILS = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected)
_HANG_GUARD = 60.0  # seconds: fail instead of hanging if the server never settles


# ------------------------------------------------------------------- predicates → SQL


def _where(pred: Callable[[Any, Any], bool]) -> sql.Composable:
    """The scenario's Python predicate as SQL (value_is, value_mod, id_in, ALL)."""
    if pred is H.ALL:
        return sql.SQL("true")
    owner = pred.__qualname__.split(".")[0]
    cells = [c.cell_contents for c in pred.__closure__ or ()]
    if owner == "value_is":
        return sql.SQL("value = {}").format(sql.Literal(cells[0]))
    if owner == "value_mod":
        return sql.SQL("value % {} = 0").format(sql.Literal(cells[0]))
    if owner == "id_in":
        return sql.SQL("id = ANY({})").format(sql.Literal(list(cells[0])))
    raise AssertionError(f"no SQL for predicate {pred.__qualname__}")


def _set(fn: Callable[[Any, Any], Any]) -> sql.Composable:
    owner = fn.__qualname__.split(".")[0]
    (n,) = [c.cell_contents for c in fn.__closure__ or ()]
    if owner == "plus":
        return sql.SQL("value = value + {}").format(sql.Literal(n))
    if owner == "set_to":
        return sql.SQL("value = {}").format(sql.Literal(n))
    raise AssertionError(f"no SQL for update {fn.__qualname__}")


def _statement(step: Any) -> sql.Composed:
    if step.op == "read":
        return sql.SQL("SELECT id, value FROM test WHERE id = {}").format(sql.Literal(step.key))
    if step.op == "write":  # Hermitage updates rows 1 and 2 and inserts rows 3 and 4
        if step.key in H.INITIAL:
            return sql.SQL("UPDATE test SET value = {} WHERE id = {}").format(
                sql.Literal(step.value), sql.Literal(step.key)
            )
        return sql.SQL("INSERT INTO test (id, value) VALUES ({}, {})").format(
            sql.Literal(step.key), sql.Literal(step.value)
        )
    if step.op == "select":
        return sql.SQL("SELECT id, value FROM test WHERE {}").format(_where(step.where))
    if step.op == "update":
        return sql.SQL("UPDATE test SET {} WHERE {} RETURNING id, value").format(
            _set(step.fn), _where(step.where)
        )
    if step.op == "delete_where":
        return sql.SQL("DELETE FROM test WHERE {} RETURNING id, value").format(_where(step.where))
    raise AssertionError(f"unknown op {step.op}")


# ------------------------------------------------------------------- sessions


@dataclass
class Session:
    """One Hermitage terminal: a connection and a thread that runs its statements."""

    conn: psycopg.Connection[Any]
    level: str
    pid: int = 0
    began: bool = False
    pending: Future[Any] | None = None
    pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1))

    def submit(self, step: Any) -> None:
        self.pending = self.pool.submit(self._run, step)

    def _run(self, step: Any) -> Any:
        if step.op in ("commit", "abort"):
            self.began = False
            self.conn.commit() if step.op == "commit" else self.conn.rollback()
            return None
        with self.conn.cursor() as cur:
            if not self.began:
                cur.execute(
                    sql.SQL("SET TRANSACTION ISOLATION LEVEL {}").format(sql.SQL(self.level))
                )
                self.began = True
            cur.execute(_statement(step))
            if step.op == "write":
                return None
            rows = dict(cur.fetchall())
            return rows.get(step.key) if step.op == "read" else rows


class Server:
    """The sessions of one scenario run, and an observer connection that sees lock waits."""

    def __init__(self, dsn: str, schema: str, level: str) -> None:
        self.dsn, self.schema, self.level = dsn, schema, level
        self.observer = psycopg.connect(dsn, autocommit=True)
        self.sessions: dict[str, Session] = {}

    def session(self, name: str) -> Session:
        if name not in self.sessions:
            conn = psycopg.connect(self.dsn, autocommit=False)
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
            conn.execute("SET lock_timeout = '60s'")  # a hang guard only
            conn.commit()
            self.sessions[name] = Session(conn, PG_LEVELS[self.level], conn.info.backend_pid)
        return self.sessions[name]

    def settle(self, s: Session) -> str:
        """Wait until the session's statement finished or the server says it waits on a lock."""
        assert s.pending is not None
        deadline = time.monotonic() + _HANG_GUARD
        while time.monotonic() < deadline:
            if s.pending.done():
                return "done"
            (blockers,) = self.observer.execute(
                "SELECT pg_blocking_pids(%s)", (s.pid,)
            ).fetchone() or ([],)
            if blockers:
                return "blocked"
            time.sleep(0.002)
        raise AssertionError(f"session {s.pid} neither finished nor waited on a lock")

    def final(self) -> dict[int, int]:
        rows = self.observer.execute(
            sql.SQL("SELECT id, value FROM {}.test ORDER BY id").format(sql.Identifier(self.schema))
        ).fetchall()
        return dict(rows)

    def close(self) -> None:
        for s in self.sessions.values():
            s.pool.shutdown(wait=True)
            s.conn.close()
        self.observer.close()


# ------------------------------------------------------------------- the runner


def run_on_server(scenario: Any, level: str, dsn: str, schema: str) -> Any:
    """Play the scenario on PostgreSQL as Hermitage's narrative (and H.run) does."""
    server = Server(dsn, schema, level)
    with server.observer.transaction():
        server.observer.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        server.observer.execute("DROP TABLE IF EXISTS test")
        server.observer.execute("CREATE TABLE test (id int PRIMARY KEY, value int)")
        server.observer.execute(
            "INSERT INTO test SELECT * FROM unnest(%s::int[], %s::int[])",
            (list(H.INITIAL), list(H.INITIAL.values())),
        )
    out = H.Outcome({}, set(), set(), {})
    waiting: dict[str, list[int]] = {}
    failed_sessions: set[str] = set()
    try:

        def attempt(i: int, resume: bool = False) -> str:
            step = scenario.steps[i]
            s = server.session(step.txn)
            if not resume:
                s.submit(step)
            if server.settle(s) == "blocked":
                out.blocked.add(i)
                return "blocked"
            assert s.pending is not None
            try:
                result = s.pending.result()
            except _FAILS:
                s.conn.rollback()  # Hermitage types `abort`; locks are released
                out.failed.add(i)
                failed_sessions.add(step.txn)
                return "finished"
            if step.op in H._RETURNS:
                out.values[i] = result
            return "finished" if step.op in H._FINISHES else "done"

        def drain() -> None:
            moved = True
            while moved:
                moved = False
                for name in list(waiting):
                    queue = waiting[name]
                    resume = True  # the head was submitted already and is waiting
                    while queue and name not in failed_sessions:
                        if attempt(queue[0], resume) == "blocked":
                            break
                        queue.pop(0)
                        resume = False
                        moved = True
                    if not queue or name in failed_sessions:
                        del waiting[name]

        for i, step in enumerate(scenario.steps):
            if step.txn in failed_sessions:
                continue
            if step.txn in waiting:
                waiting[step.txn].append(i)
                continue
            result = attempt(i)
            if result == "blocked":
                waiting[step.txn] = [i]
            elif result == "finished":
                drain()
        drain()
        assert not waiting, f"sessions still waiting at the end: {sorted(waiting)}"
        out.final = server.final()
    finally:
        server.close()
    return out


# ------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def pg_schema(pg_dsn: str) -> Iterator[str]:
    schema = f"toki_test_hermitage_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    yield schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


_lock = threading.Lock()  # one scenario at a time on the shared schema


@pytest.mark.parametrize("level", list(PG_LEVELS))
@pytest.mark.parametrize("scenario", H.SCENARIOS, ids=[s.name for s in H.SCENARIOS])
def test_server_reproduces_hermitage_and_the_simulator_agrees(
    scenario: Any, level: str, pg_dsn: str, pg_schema: str
) -> None:
    with _lock:
        server = run_on_server(scenario, level, pg_dsn, pg_schema)
    want = scenario.expected(level)
    assert server.values == want.values, "server: values returned (step index -> value)"
    assert server.blocked == want.blocked, "server: steps that waited on a lock"
    assert server.failed == want.failed, "server: steps that failed to serialize"
    assert server.final == want.final, "server: final committed state"
    sim = H.run(scenario, H.LEVELS[level])
    assert (sim.values, sim.blocked, sim.failed, sim.final) == (
        server.values,
        server.blocked,
        server.failed,
        server.final,
    ), "simulator and server disagree"


# ------------------------------------------------------------------- docs table


def agreement_table(runs: dict[tuple[str, str], tuple[Any, Any]]) -> str:
    """Markdown: per scenario and PostgreSQL level, the server's outcome and the simulator's."""

    def cell(o: Any) -> str:
        how = [f"waits at step {', '.join(map(str, sorted(o.blocked)))}"] if o.blocked else []
        how += [f"aborts at step {', '.join(map(str, sorted(o.failed)))}"] if o.failed else []
        return f"{'; '.join(how) or 'runs'}; final {dict(sorted(o.final.items()))}"

    lines = [
        "| scenario | level (PostgreSQL ↔ SimStore) | server | simulator | agree |",
        "|---|---|---|---|---|",
    ]
    for s in H.SCENARIOS:
        for level, pg_name in PG_LEVELS.items():
            server, sim = runs[s.name, level]
            same = (server.values, server.blocked, server.failed, server.final) == (
                sim.values,
                sim.blocked,
                sim.failed,
                sim.final,
            )
            lines.append(
                f"| {s.name} | {pg_name} ↔ {H.LEVELS[level].name} | {cell(server)} | "
                f"{cell(sim)} | {'yes' if same else 'NO'} |"
            )
    return "\n".join(lines) + "\n"


def test_docs_agreement_table_is_current(pg_dsn: str, pg_schema: str) -> None:
    """docs/postgres.md carries the table this file generates (run it to refresh:
    `python tests/store/test_hermitage_postgres.py`)."""
    runs = {
        (s.name, level): (
            run_on_server(s, level, pg_dsn, pg_schema),
            H.run(s, H.LEVELS[level]),
        )
        for s in H.SCENARIOS
        for level in PG_LEVELS
    }
    doc = Path(__file__).resolve().parents[2] / "docs" / "postgres.md"
    assert agreement_table(runs) in doc.read_text(encoding="utf-8"), (
        "docs/postgres.md's Hermitage agreement table is stale; paste the output of "
        "`python tests/store/test_hermitage_postgres.py`"
    )


if __name__ == "__main__":  # print the table for docs/postgres.md
    from toki.store.postgres import default_dsn

    dsn = default_dsn()
    schema = f"toki_hermitage_doc_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        print(
            agreement_table(
                {
                    (s.name, level): (
                        run_on_server(s, level, dsn, schema),
                        H.run(s, H.LEVELS[level]),
                    )
                    for s in H.SCENARIOS
                    for level in PG_LEVELS
                }
            ),
            end="",
        )
    finally:
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
