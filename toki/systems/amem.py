"""A-MEM (agiresearch/A-mem ceffb860): `add_note` → `process_memory`.

Rows: ("note", n) a `MemoryNote` {key, value, context} in the in-process `memories` dict
(n = insertion order); ("seq", "note").

Write path (agentic_memory/memory_system.py, ../shared/research/systems.md §6): the
evolution LLM gets the top-5 Chroma neighbours and returns `should_evolve` with
`update_neighbor` actions; those are applied to `list(self.memories.values())[i]` for the
*rank positions* i returned by `find_related_memories` — the first k notes ever inserted,
not the neighbours (a bug found by reading). Note content is never revised: a contradicting
note coexists. Everything lives in a Python dict and an ephemeral `chromadb.Client`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Local, Select, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import append, belief_entry, one, rows_of, run_inbox, seq_rows
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["AMemModel"]

State = Mapping[Hashable, Any]
TOP_K = 5


class AMemModel(SystemModel):
    name: ClassVar[str] = "a-mem"
    version: ClassVar[str] = "ceffb860"
    # a Python dict and an ephemeral Chroma client: nothing survives a restart
    records: ClassVar[Records] = Records(inputs=False, decisions=False, durable_state=False)
    capacities: ClassVar[Mapping[str, int]] = {"evolution neighbours top_k": TOP_K}
    title: ClassVar[str] = "A-MEM"
    release: ClassVar[str] = "agiresearch/A-mem HEAD ceffb860 (2025-12-12)"
    isolation: ClassVar[Isolation] = Isolation.READ_UNCOMMITTED  # a Python dict, no txns
    sources: ClassVar[tuple[str, ...]] = (
        "agentic_memory/memory_system.py@ceffb860: add_note, "
        "process_memory, find_related_memories (rank indices), consolidate_memories "
        "(every evo_threshold), chromadb.Client (ephemeral)",
        "../shared/research/systems.md §6 (A-MEM)",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "nobody for content (notes coexist); the evolution LLM rewrites "
        "neighbours' context/tags",
        "old values kept": "content yes (never revised); context/tags overwritten in place; "
        "evolution_history never appended to",
        "decision logged with inputs": "no",
        "concurrency control": "none (in-process dict; no locks): read uncommitted",
        "idempotency on retry": "none: a retry adds a duplicate note",
        "recovery": "nothing durable: the dict and the ephemeral Chroma client are lost on "
        "restart, so a rebuild starts empty",
        "judge sees": "the top-5 Chroma neighbours of the new note",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "neighbours = the notes of the same key; the evolution verdict: evolve with "
        "probability p; update_neighbor writes context 'related: <new value>' to the first "
        "k inserted notes (the index bug)",
        "tags, links, keywords, strengthen and consolidate_memories are not modelled",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return seq_rows(("note",))

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return run_inbox(inbox, ctx, lambda c: self._add_note(c, ctx))

    def _add_note(self, c: SimClaim, ctx: AgentContext) -> Agent:
        everything = yield from one(Select(lambda k, v: k[0] == "note", name="memories"))
        notes = (
            sorted(dict(everything).items(), key=lambda kv: kv[0][1])
            if isinstance(everything, Mapping)
            else []
        )
        neighbours = [v for _, v in notes if v["key"] == c.key][:TOP_K]
        if neighbours:
            known = sorted({v["value"] for v in neighbours})
            question = f"a-mem evolution: {c.key}: {known} + {c.value!r}"
            yield Local("judge", question)
            if ctx.judge.pick(question, ["no", "yes"]) == "yes":
                for k, v in notes[: len(neighbours)]:  # rank positions applied to insertion order
                    yield from one(Write(k, {**v, "context": f"related: {c.value}"}))

        yield from append("note", {"key": c.key, "value": c.value, "context": ""})
        return "ok"

    def _notes(self, state: State, key: str) -> list[Mapping[str, Any]]:
        return [v for _, v in rows_of(state, "note") if v["key"] == key]

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {
            k: belief_entry(
                (n["value"] for n in self._notes(state, k)),
                contexts=sorted(n["context"] for n in self._notes(state, k)),
            )
            for k in keys
        }

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """A restart rebuilds from nothing: no durable store."""
        return self.beliefs({}, keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        return {str(n["value"]) for n in self._notes(state, key)}
