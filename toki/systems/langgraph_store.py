"""LangGraph's cross-thread `BaseStore` (langchain-ai/langgraph f09cfe8f) under an
application that writes each claim with `store.put`.

Rows: ("item", namespace, key) the `store` table row {value} (PK (prefix, key)).

Write path (../shared/research/systems.md §4a): `PutOp` → the Postgres store's
`INSERT … ON CONFLICT (prefix, key) DO UPDATE SET value = EXCLUDED.value` inside
`conn.transaction()`; `InMemoryStore._apply_put_ops` replaces the Item. No version column, no
CAS, no history, no op log; the application is the decider.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry, one, run_inbox
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["LangGraphStoreModel"]

State = Mapping[Hashable, Any]


class LangGraphStoreModel(SystemModel):
    name: ClassVar[str] = "langgraph-store"
    uses_judge: ClassVar[bool] = False  # no LLM on this write path (the matrix checks it)
    version: ClassVar[str] = "f09cfe8f"
    # no op log and no history: the table is read back as it is (the rule abstains N1/RD)
    records: ClassVar[Records] = Records(inputs=False, decisions=False)
    title: ClassVar[str] = "LangGraph store"
    release: ClassVar[str] = "langchain-ai/langgraph HEAD f09cfe8f (2026-08-20)"
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED  # PostgreSQL default
    sources: ClassVar[tuple[str, ...]] = (
        "libs/checkpoint/langgraph/store/base/__init__.py@f09cfe8f: Item, PutOp, "
        "BaseStore.put/delete",
        "libs/checkpoint-postgres/langgraph/store/postgres/base.py@f09cfe8f: INSERT … ON "
        "CONFLICT (prefix,key) DO UPDATE, _cursor(pipeline=True) in conn.transaction()",
        "libs/checkpoint/langgraph/store/memory/__init__.py@f09cfe8f: "
        "InMemoryStore._apply_put_ops (~L404); store/base/batch.py: _dedupe_ops",
        "../shared/research/systems.md §4a",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "nobody in the store: the application's put wins (blind upsert, LWW)",
        "old values kept": "no: upsert overwrites, delete and the TTL sweep hard-delete",
        "decision logged with inputs": "no op log",
        "concurrency control": "a transaction per batch (read committed); no CAS or version",
        "idempotency on retry": "a re-put of the same value is a no-op in effect",
        "recovery": "none beyond the table itself: the stored rows are the state",
        "judge sees": "no judge",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "the application puts each claim's value under (subject, predicate): one put per "
        "claim, no read-decide-write in the application",
        "TTL sweep, deletes and the checkpointer's per-thread history are not modelled",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        def put(c: SimClaim) -> Agent:
            subject, _, predicate = c.key.partition(":")
            return (yield from one(Write(("item", subject, predicate), {"value": c.value})))

        return run_inbox(inbox, ctx, put)

    def _value(self, state: State, key: str) -> list[str]:
        subject, _, predicate = key.partition(":")
        row = state.get(("item", subject, predicate))
        return [str(row["value"])] if row else []

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {k: belief_entry(self._value(state, k)) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """No log to replay: the table is what survives a restart."""
        items: dict[Hashable, Any] = {
            k: v for k, v in state.items() if isinstance(k, tuple) and k[0] == "item"
        }
        return self.beliefs(items, keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        return set(self._value(state, key))
