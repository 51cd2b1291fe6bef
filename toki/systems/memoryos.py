"""MemoryOS (BAI-LAB/MemoryOS 1d717060, memoryos-pypi/): the user-profile rewrite.

Rows: ("page", n) a dialogue page kept in short/mid-term memory (the input); ("profile",)
the user profile {key: value} (one JSON document); ("knowledge", n) a long-term knowledge
entry {key, value} (a deque of maxlen 100: the oldest is evicted); ("seq", …) orders.

Write path (../shared/research/systems.md §6): when a mid-term session is hot
(H_PROFILE_UPDATE_THRESHOLD = 5.0), `memoryos.py` runs `gpt_user_profile_analysis` (given
the existing profile) and knowledge extraction, then `update_user_profile(..., merge=False)`
replaces the whole profile string; knowledge entries are appended to a bounded deque. JSON
files; a `threading.Lock` guards only `json.dump` in `save()`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Delete, Local, Read, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import (
    append,
    belief_entry,
    claims_of,
    next_seq,
    one,
    replay_serially,
    rows_of,
    run_inbox,
    seq_rows,
    stmt,
    txn,
)
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["MemoryOSModel"]

State = Mapping[Hashable, Any]
PROFILE = ("profile",)


class MemoryOSModel(SystemModel):
    name: ClassVar[str] = "memoryos"
    version: ClassVar[str] = "1d717060"
    records: ClassVar[Records] = Records(inputs=True, decisions=False)
    title: ClassVar[str] = "MemoryOS"
    release: ClassVar[str] = "BAI-LAB/MemoryOS HEAD 1d717060 (memoryos-pypi, 2026-04-28)"
    isolation: ClassVar[Isolation] = Isolation.READ_UNCOMMITTED  # JSON files, no txns
    sources: ClassVar[tuple[str, ...]] = (
        "memoryos-pypi/memoryos.py@1d717060: profile/knowledge update on heat > "
        "H_PROFILE_UPDATE_THRESHOLD (ThreadPoolExecutor), gpt_user_profile_analysis",
        "memoryos-pypi/long_term.py@1d717060: update_user_profile(merge=False), knowledge "
        "deque(maxlen=100), save() under threading.Lock",
        "memoryos-pypi/mid_term.py@1d717060: evict_lfu (max_capacity=2000)",
        "../shared/research/systems.md §6 (MemoryOS)",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "the profile-analysis LLM rewrites the whole profile",
        "old values kept": "no in the profile (replaced whole); knowledge entries until the "
        "deque evicts them (oldest first, maxlen 100)",
        "decision logged with inputs": "no",
        "concurrency control": "a lock around json.dump only; the read → LLM → write cycle is "
        "unguarded (read uncommitted: files, no transactions)",
        "idempotency on retry": "none",
        "recovery": "re-run the profile analysis over the stored pages with the LLM again",
        "judge sees": "the existing profile and the hot session's pages",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "every claim triggers the profile update (the heat threshold is not modelled)",
        "the analysis verdict on a contradicting profile entry: the new value with "
        "probability p; knowledge extraction appends the claim exactly",
        "mid-term LFU eviction and short-term deque(maxlen=10) not modelled (pages kept)",
    )

    def __init__(self, knowledge_capacity: int = 100) -> None:
        self.capacity = knowledge_capacity

    @property
    def capacities(self) -> Mapping[str, int]:  # type: ignore[override]
        """The long-term knowledge deque (maxlen 100 in long_term.py)."""
        return {"knowledge deque": self.capacity}

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {PROFILE: {}, **seq_rows(("page", "knowledge"))}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return run_inbox(inbox, ctx, lambda c: self._turn(c, ctx))

    def _turn(self, c: SimClaim, ctx: AgentContext) -> Agent:
        yield from append("page", c.to_json())
        profile = yield from one(Read(PROFILE))
        profile = dict(profile) if isinstance(profile, Mapping) else {}
        old = profile.get(c.key)
        value = c.value
        if old is not None and old != c.value:
            question = f"memoryos profile analysis: {c.key}: profile {old!r}, session {c.value!r}"
            yield Local("judge", question)
            value = ctx.judge.pick(question, [old, c.value])
        else:
            yield Local("judge", c.cid)
        yield from one(Write(PROFILE, {**profile, c.key: value}))  # merge=False: whole rewrite

        def knowledge() -> Agent:
            n = yield from next_seq("knowledge")
            yield from stmt(Write(("knowledge", n), {"key": c.key, "value": c.value}))
            if n > self.capacity:
                yield from stmt(Delete(("knowledge", n - self.capacity)))
            return n

        yield from txn(knowledge)
        return "ok"

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        profile = state.get(PROFILE) or {}
        return {k: belief_entry([profile[k]] if k in profile else []) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """Re-derive the profile from the stored pages, in order, asking the LLM again."""
        pages = sorted(rows_of(state, "page"), key=lambda kv: kv[0][1])
        rebuilt = replay_serially(self, claims_of(v for _, v in pages), judge)
        return self.beliefs(rebuilt, keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        profile = state.get(PROFILE) or {}
        out = {str(profile[key])} if key in profile else set()
        out.update(str(v["value"]) for _, v in rows_of(state, "knowledge") if v["key"] == key)
        return out
