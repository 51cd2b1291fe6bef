"""Letta V1 server (letta-ai/letta 56ba9c25): the agent edits a shared core-memory block.

Rows: ("block", "human") the `Block` row {lines: [[key, value], ...]} (the text, one line per
fact); ("msg", n) a persisted tool-call message {tool, key, old, new}; ("trace", n) the
`provider_trace` row {request: the compiled block lines, response: the tool call};
("seq", "msg") the messages' created_at order.

Write path (../shared/research/systems.md §3): at step start the agent loads
`agent_state.memory`; its LLM calls a tool (`core_memory_append` = value + "\\n" + content;
`core_memory_replace` = Python `str.replace(old, new)` on the in-process value); then
`agent_manager.update_memory_if_changed_async` (~L1747) re-reads the block and, "update the
blocks (LRW)", writes the value computed from the step-start snapshot via
`block_manager.update_block_async` (~L211). `version_id_col` guards only that re-read →
commit window. The step's messages (with the tool arguments) and the provider trace
(request and response, default on) are persisted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Local, Read, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry, next_seq, rows_of, run_inbox, seq_rows, stmt, txn
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["LettaModel"]

State = Mapping[Hashable, Any]
BLOCK = ("block", "human")
Lines = list[list[str]]


def apply_tool(lines: Lines, call: Mapping[str, Any]) -> Lines | None:
    """A tool on a block value: append adds a line; replace is `str.replace` on the text —
    None ("Old content not found") when the old line is absent."""
    if call["tool"] == "core_memory_append":
        return [*lines, [call["key"], call["new"]]]
    old = [call["key"], call["old"]]
    if old not in lines:
        return None
    return [[call["key"], call["new"]] if line == old else line for line in lines]


class LettaModel(SystemModel):
    """Several Letta agents sharing one block (shared/identity blocks): no lock across them."""

    name: ClassVar[str] = "letta"
    version: ClassVar[str] = "56ba9c25"
    records: ClassVar[Records] = Records(inputs=True, decisions=True)
    title: ClassVar[str] = "Letta (MemGPT) V1 server"
    release: ClassVar[str] = (
        "letta-ai/letta 56ba9c25 (= HEAD~1 before the server was archived at 87fd37aa)"
    )
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED  # PostgreSQL default
    sources: ClassVar[tuple[str, ...]] = (
        "letta/services/tool_executor/core_tool_executor.py@56ba9c25: core_memory_append, "
        "core_memory_replace (str.replace), memory_rethink",
        "letta/services/agent_manager.py@56ba9c25: update_memory_if_changed_async (~L1747, "
        "'update the blocks (LRW)')",
        "letta/services/block_manager.py@56ba9c25: update_block_async (~L211), "
        "checkpoint_block_async (~L842, called only from tests)",
        "letta/orm/block.py@56ba9c25: version_id_col; letta/orm/provider_trace.py; "
        "letta/settings.py: track_provider_trace=True",
        "letta/data_sources/redis_client.py@56ba9c25: acquire_conversation_lock (per "
        "conversation, only with Redis)",
        "../shared/research/systems.md §3",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "the agent's LLM, by a tool call (append / replace / nothing)",
        "old values kept": "not in the block (BlockHistory unused); incidentally in the "
        "messages (tool arguments) and provider traces (the compiled block)",
        "decision logged with inputs": "yes in practice: provider_trace stores request and "
        "response; messages store the tool call",
        "concurrency control": "none across agents sharing a block: LWW of a value computed "
        "from the step-start snapshot (read committed)",
        "idempotency on retry": "none (a retried append appends twice; a retried replace "
        "usually fails with 'Old content not found')",
        "recovery": "re-apply the recorded tool calls in message order to an empty block "
        "(str.replace is base-dependent)",
        "judge sees": "the block as loaded at step start",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "one block of 'key: value' lines; the agent's verdict on a contradiction: replace "
        "(probability p) else keep",
        "message and trace persistence is one transaction after the tool runs",
        "git-backed memory (opt-in) and archival passages are not modelled",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {BLOCK: {"lines": []}, **seq_rows(("msg",))}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return run_inbox(inbox, ctx, lambda c: self._step(c, ctx))

    def _step(self, c: SimClaim, ctx: AgentContext) -> Agent:
        def load() -> Agent:
            return (yield from stmt(Read(BLOCK)))

        block = yield from txn(load)
        lines: Lines = [list(x) for x in block["lines"]] if isinstance(block, dict) else []
        mine = [v for k, v in lines if k == c.key]
        if c.value in mine:
            return "none"
        call: dict[str, Any]
        if not mine:
            call = {"tool": "core_memory_append", "key": c.key, "old": None, "new": c.value}
            yield Local("agent", c.cid)
        else:
            question = f"letta agent: {c.key}: block says {mine[0]!r}, user says {c.value!r}"
            yield Local("agent", question)
            if ctx.judge.pick(question, ["keep", "replace"]) == "keep":
                return "keep"
            call = {"tool": "core_memory_replace", "key": c.key, "old": mine[0], "new": c.value}
        new_lines = apply_tool(lines, call)
        if new_lines is None:
            return "error"

        def persist_block() -> Agent:  # update_memory_if_changed: re-read, then LWW
            fresh = yield from stmt(Read(BLOCK))
            if fresh != {"lines": new_lines}:
                yield from stmt(Write(BLOCK, {"lines": new_lines}))
            return "ok"

        yield from txn(persist_block)

        def persist_messages() -> Agent:
            n = yield from next_seq("msg")
            yield from stmt(Write(("msg", n), call))
            yield from stmt(Write(("trace", n), {"request": lines, "response": call}))
            return n

        yield from txn(persist_messages)
        return call["tool"]

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        lines = (state.get(BLOCK) or {"lines": []})["lines"]
        return {k: belief_entry(v for key, v in lines if key == k) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """Re-apply the persisted tool calls in order (no LLM call)."""
        lines: Lines = []
        for _, call in sorted(rows_of(state, "msg"), key=lambda kv: kv[0][1]):
            after = apply_tool(lines, call)
            if after is not None:
                lines = after
        return self.beliefs({BLOCK: {"lines": lines}}, keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        """The block, plus the tool arguments in messages and the blocks in provider traces."""
        out = {v for k, v in (state.get(BLOCK) or {"lines": []})["lines"] if k == key}
        for _, call in rows_of(state, "msg"):
            if call["key"] == key:
                out.update(x for x in (call["old"], call["new"]) if x is not None)
        for _, trace in rows_of(state, "trace"):
            out.update(v for k, v in trace["request"] if k == key)
        return {str(v) for v in out}
