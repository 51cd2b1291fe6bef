"""Shared pieces of the system models: transactions with retry, sequences, belief entries.

The models read like the systems they describe: a vector store or a JSON file has no
transactions, so each of its calls is one autocommit statement (`txn` around one step); a
database transaction groups several. A store refusal (serialization failure, deadlock) makes
the whole transaction retry, as a driver with a retry decorator would.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from toki.sim.program import Abort, Agent, Begin, Commit, Read, Select, Step, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import AgentContext, Beliefs, SimJudge, SystemModel, run_serially

__all__ = [
    "GAVE_UP",
    "append",
    "belief_entry",
    "claims_of",
    "next_seq",
    "replay_serially",
    "rows_of",
    "stmt",
    "txn",
]

T = TypeVar("T")
GAVE_UP = "gave-up"
MAX_RETRIES = 8
State = Mapping[Hashable, Any]


class _Retry(Exception):
    """The store refused a statement: the transaction is gone, start it again."""


def stmt(step: Step) -> Agent:
    """Yield one statement; a refusal (the failure object sent back) aborts the transaction."""
    result = yield step
    if isinstance(result, Exception):
        raise _Retry
    return result


def txn(body: Callable[[], Agent], retries: int = MAX_RETRIES) -> Agent:
    """Run `body` (a generator function of statements) in a transaction, retrying it whole
    when the store refuses a statement or the commit; returns the body's value or GAVE_UP."""
    for _ in range(retries):
        yield Begin()
        try:
            out = yield from body()
        except _Retry:
            yield Abort()
            continue
        result = yield Commit()
        if not isinstance(result, Exception):
            return out
    return GAVE_UP


def one(step: Step) -> Agent:
    """One autocommit statement (a call to a store that has no transactions)."""

    def body() -> Agent:
        return (yield from stmt(step))

    return (yield from txn(body))


def select(kind: str, key: str, name: str = "") -> Agent:
    """An autocommit predicate read of the ("kind", key, …) rows: {row key: value}."""
    rows = yield from one(Select(lambda k, v: k[:2] == (kind, key), name=name or f"{kind} {key}"))
    return dict(rows) if isinstance(rows, Mapping) else {}


def next_seq(name: str) -> Agent:
    """Take the next number of sequence `name` (a BIGSERIAL / autoincrement / wall clock)
    inside the caller's transaction: lock, read, bump — one row lock, as UPDATE … RETURNING
    takes, without a predicate scan (which would make every write a scheduling conflict)."""
    yield from stmt(Write(("seqlock", name), "held"))
    n = int((yield from stmt(Read(("seq", name)))) or 0) + 1
    yield from stmt(Write(("seq", name), n))
    return n


def append(table: str, row: Any) -> Agent:
    """Insert `row` as the next numbered row of `table` in a transaction of its own (an
    INSERT into a serial-keyed table); returns its number."""

    def body() -> Agent:
        n = yield from next_seq(table)
        yield from stmt(Write((table, n), row))
        return n

    return (yield from txn(body))


def rows_of(state: State, kind: str, key: str | None = None) -> list[tuple[Any, Any]]:
    """Rows ("kind", key, ...) of a state (all keys when key is None), in a stable order."""
    out = [
        (k, v)
        for k, v in state.items()
        if isinstance(k, tuple) and k and k[0] == kind and (key is None or k[1] == key)
    ]
    return sorted(out, key=lambda kv: repr(kv[0]))


def belief_entry(values: Iterable[str], **extra: Any) -> dict[str, Any]:
    """What a reader is served for a key: `value` when every live memory agrees, None when
    several contradicting memories coexist (the reader gets all of them); `live` lists them
    with multiplicity, so duplicates show."""
    vals = sorted(str(v) for v in values)
    distinct = sorted(set(vals))
    return {"value": distinct[0] if len(distinct) == 1 else None, "live": vals, **extra}


def claims_of(rows: Iterable[Any]) -> list[SimClaim]:
    return [SimClaim.from_json(r) for r in rows]


def replay_serially(
    system: SystemModel, claims: Sequence[SimClaim], judge: SimJudge
) -> dict[Hashable, Any]:
    """Re-ingest `claims` one after another through the model's own write path (a recovery
    that calls the LLM again: `judge` is the recovery's, unpinned judge)."""
    if not claims:
        return dict(system.initial(Workload("recover", ((),))))
    workload = Workload("recover", (tuple(claims),))
    return dict(run_serially(system, workload, tuple(claims), judge))


def seq_rows(names: Iterable[str]) -> dict[Hashable, Any]:
    return {("seq", n): 0 for n in names}


def run_inbox(
    inbox: Sequence[SimClaim], ctx: AgentContext, one_claim: Callable[[SimClaim], Agent]
) -> Agent:
    """The agent loop: process each claim of the inbox in order; outcomes in a tuple."""
    done = []
    for claim in inbox:
        done.append((yield from one_claim(claim)))
    return tuple(done)


def beliefs_by_key(keys: Iterable[str], values: Callable[[str], Iterable[str]]) -> Beliefs:
    return {k: belief_entry(values(k)) for k in keys}
