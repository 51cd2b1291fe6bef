"""MIRIX (Mirix-AI/MIRIX `main` 51f3342d): a message's path to the semantic memory table.

Rows: ("sem", key, id) a `semantic_memory` row {value} (id: a random short id).

Write path (../shared/research/mirix_zep.md §1): `QueueWorker._consume_loop` →
`server.send_messages` → the meta memory agent (`Agent.step`): `_extract_topics_from_messages`
(an LLM call), `build_system_prompt_with_memories` (BM25 retrieval over live rows), the meta
LLM's `trigger_memory_update` (memory_tools.py ~L954) fans out to sub-agents; the semantic
sub-agent's LLM chooses a tool: `semantic_memory_insert` (skips only exactly equal items,
listed first: check-then-insert) or `semantic_memory_update(old_ids, new_items)` (~L685:
`delete_semantic_item_by_id` = hard delete per id, then insert with a new id). Each manager
call opens and commits its own session. Then `_handle_ai_response` clears the agent's
messages and hard-deletes detached ones (CLEAR_HISTORY_AFTER_MEMORY_UPDATE = true), so no
durable trace of the input or the verdict remains.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Delete, Local, Select, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry, one, rows_of, run_inbox
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["MirixModel"]

State = Mapping[Hashable, Any]


def _items(key: str) -> Agent:
    rows = yield from one(Select(lambda k, v: k[:2] == ("sem", key), name=f"bm25 {key}"))
    return {} if isinstance(rows, str) else dict(rows)


class MirixModel(SystemModel):
    """MIRIX's semantic-memory write path, run by writers that bypass the per-user queue."""

    name: ClassVar[str] = "mirix"
    version: ClassVar[str] = "51f3342d"
    # input and tool-call messages are hard-deleted after each update; the default queue is
    # in memory; the semantic rows are durable (Postgres): the rule abstains from N1 and RD
    records: ClassVar[Records] = Records(inputs=False, decisions=False)
    title: ClassVar[str] = "MIRIX"
    release: ClassVar[str] = "Mirix-AI/MIRIX main 51f3342d ('add auto-dream', 2026-06-20)"
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED  # PostgreSQL default
    sources: ClassVar[tuple[str, ...]] = (
        "mirix/functions/function_sets/memory_tools.py@51f3342d: trigger_memory_update "
        "(~L954, asyncio.gather ~L1187), semantic_memory_update (~L685), "
        "semantic_memory_insert (exact-equality skip)",
        "mirix/services/semantic_memory_manager.py@51f3342d: delete_semantic_item_by_id "
        "(~L1014, hard_delete)",
        "mirix/orm/sqlalchemy_base.py@51f3342d: create_with_redis / hard_delete (own session "
        "and commit per call, ~L406-L460, ~L631-L690)",
        "mirix/agent/agent.py@51f3342d: Agent.step (~L1492), build_system_prompt_with_memories "
        "(~L1731, BM25), _handle_ai_response (~L1250-L1455, CLEAR_HISTORY_AFTER_MEMORY_UPDATE)",
        "mirix/services/message_manager.py@51f3342d: delete_detached_messages_for_agent (~L519)",
        "mirix/queue/worker.py@51f3342d: QueueWorker._consume_loop (~L301); "
        "mirix/schemas/llm_config.py: temperature 0.7, no seed",
        "../shared/research/mirix_zep.md §1",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "the semantic sub-agent's LLM, by tool choice (insert / update / none)",
        "old values kept": "no: update = hard delete + insert with a new id; no history table, "
        "no supersedes link; `last_modify` keeps only the last operation",
        "decision logged with inputs": "no: Step rows hold model and token counts; the tool "
        "calls and input messages are hard-deleted after a successful update",
        "concurrency control": "none on memory rows (each manager call its own session, read "
        "committed); per-user queue ordering is bypassed by add_sync, auto_dream, REST edits "
        "and extra replicas — the concurrent writers modelled here",
        "idempotency on retry": "none (no dedup key); only the exact-equality insert check",
        "recovery": "none: nothing durable to rebuild from (messages hard-deleted, in-memory "
        "queue by default); `recover` returns the stored rows as they are",
        "judge sees": "BM25-retrieved items with their ids, from the live table",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "only the semantic sub-agent (core blocks, episodic and the other tables not "
        "modelled; no cross-type invariant exists in MIRIX either)",
        "topic extraction, meta routing and extraction are exact: one semantic item per claim",
        "the sub-agent's verdict: update (probability p) else insert or no-op",
        "message persistence then deletion (net effect: nothing kept) is not stepped",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        counter = iter(range(1_000_000))
        return run_inbox(inbox, ctx, lambda c: self._message(c, ctx, counter))

    def _message(self, c: SimClaim, ctx: AgentContext, counter: Any) -> Agent:
        yield Local("topics", c.cid)  # _extract_topics_from_messages
        found = yield from _items(c.key)  # BM25 retrieval into the system prompt
        olds = sorted((str(k[2]), v["value"]) for k, v in found.items())
        yield Local("meta", c.cid)  # meta agent: trigger_memory_update
        tool = "insert"
        if olds and all(v != c.value for _, v in olds):
            known = sorted({v for _, v in olds})
            question = f"mirix semantic agent: {c.key}: {known} vs {c.value!r}"
            yield Local("judge", question)
            tool = ctx.judge.pick(question, ["insert", "none", "update"])
        if tool == "none":
            return "none"
        new_id = f"{ctx.index}.{next(counter)}"
        if tool == "update":
            for old_id, _ in olds:  # delete_semantic_item_by_id: own session each
                yield from one(Delete(("sem", c.key, old_id)))
            yield from one(Write(("sem", c.key, new_id), {"value": c.value}))
            return "update"
        listed = yield from _items(c.key)  # semantic_memory_insert: list, skip exact equals
        if any(v["value"] == c.value for v in listed.values()):
            return "skip"
        yield from one(Write(("sem", c.key, new_id), {"value": c.value}))
        return "insert"

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {k: belief_entry(v["value"] for _, v in rows_of(state, "sem", k)) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """No recovery procedure exists (N1 and RD abstain): the stored rows as they are."""
        return self.beliefs(state, keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        return {str(v["value"]) for _, v in rows_of(state, "sem", key)}
