"""LangMem (langchain-ai/langmem b5dbe4aa): `MemoryStoreManager.ainvoke` over a LangGraph
store, the conversation kept by a LangGraph checkpointer.

Rows: ("thread", n) a conversation message in the thread's checkpoint (the input);
("doc", key, id) a memory item in the store {value}; ("seq", "thread") message order.

Write path (src/langmem/knowledge/extraction.py, ../shared/research/systems.md §4b):
search the store (query_limit=5) → the manager LLM (trustcall extractor with
enable_inserts/updates/deletes; `MemoryStoreManager` defaults enable_deletes=True) emits a
patched doc (same id), a new doc (uuid4) or RemoveDoc → `asyncio.gather(store.aput(...),
store.adelete(...))`: independent calls, no version check since the search.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Delete, Local, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import (
    append,
    belief_entry,
    claims_of,
    one,
    replay_serially,
    rows_of,
    run_inbox,
    select,
    seq_rows,
)
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["LangMemModel"]

State = Mapping[Hashable, Any]


class LangMemModel(SystemModel):
    name: ClassVar[str] = "langmem"
    version: ClassVar[str] = "b5dbe4aa"
    records: ClassVar[Records] = Records(inputs=True, decisions=False)
    capacities: ClassVar[Mapping[str, int]] = {"search query_limit": 5}
    title: ClassVar[str] = "LangMem"
    release: ClassVar[str] = "langchain-ai/langmem HEAD b5dbe4aa (2026-06-19)"
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED  # the Postgres store
    sources: ClassVar[tuple[str, ...]] = (
        "src/langmem/knowledge/extraction.py@b5dbe4aa: MemoryManager.ainvoke "
        "(create_extractor), MemoryStoreManager.ainvoke (~L1006: search, manager, "
        "final_puts/final_deletes, asyncio.gather)",
        "src/langmem/knowledge/tools.py@b5dbe4aa: create_manage_memory_tool (hot path)",
        "src/langmem/reflection.py@b5dbe4aa: ReflectionExecutor (per-thread debounce only)",
        "../shared/research/systems.md §4b",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "the manager LLM: patch the existing doc, remove it and insert, or "
        "insert beside it",
        "old values kept": "no: patches overwrite the same key; RemoveDoc hard-deletes",
        "decision logged with inputs": "no (optional LangSmith tracing only)",
        "concurrency control": "none between search and writes; puts and deletes are "
        "independent calls (read committed); threads of one user are not serialised",
        "idempotency on retry": "none: an insert gets a fresh uuid4",
        "recovery": "re-run the manager over the thread's stored messages (kept by a "
        "LangGraph checkpointer, assumed configured): the LLM is asked again",
        "judge sees": "up to query_limit=5 items found by the search",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "extraction is exact: one doc per claim; search returns the key's docs",
        "the manager's verdict on a contradiction: patch (probability p) else remove+insert "
        "or insert; max_steps=1",
        "the input log assumes the application keeps the thread in a checkpointer (LangMem "
        "itself stores no inputs)",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return seq_rows(("thread",))

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        counter = iter(range(1_000_000))
        return run_inbox(inbox, ctx, lambda c: self._invoke(c, ctx, counter))

    def _invoke(self, c: SimClaim, ctx: AgentContext, counter: Any) -> Agent:
        yield from append("thread", c.to_json())
        found = yield from select("doc", c.key, "search")
        limit = self.capacities["search query_limit"]  # ranked by doc id (a simplification)
        docs = sorted(
            ((str(k[2]), v["value"]) for k, v in found.items()),
            key=lambda d: (len(d[0]), d[0]),
        )[:limit]
        if any(v == c.value for _, v in docs):
            return "none"
        action = "insert"
        if docs:
            question = f"langmem manager: {c.key}: {sorted({v for _, v in docs})} vs {c.value!r}"
            yield Local("judge", question)
            action = ctx.judge.pick(question, ["insert", "remove", "patch"])
        doc = {"value": c.value}
        if action == "patch":
            yield from one(Write(("doc", c.key, docs[0][0]), doc))
            return action
        if action == "remove":
            for doc_id, _ in docs:
                yield from one(Delete(("doc", c.key, doc_id)))
        yield from one(Write(("doc", c.key, f"{ctx.index}.{next(counter)}"), doc))
        return action

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {k: belief_entry(v["value"] for _, v in rows_of(state, "doc", k)) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """Re-run the manager over the stored thread, in order, with a fresh LLM."""
        thread = sorted(rows_of(state, "thread"), key=lambda kv: kv[0][1])
        claims = claims_of(v for _, v in thread)
        return self.beliefs(replay_serially(self, claims, judge), keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        return {str(v["value"]) for _, v in rows_of(state, "doc", key)}
