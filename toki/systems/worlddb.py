"""WorldDB, the TOKI paper's content-addressed, judge-free comparator.

Rows: ("fact", h) = the claim, keyed by the hash of its content (key, value, valid start).

No code was read (../shared/research/toki.md: the paper only characterises it: "a
content-addressed engine that avoids all three anomalies only by having no judge"). The
model is that characterisation made executable: a write inserts the fact under its content
hash (a duplicate is the same row), nothing compares facts, so contradicting facts coexist
unresolved and a reader gets all of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.canonical import canonical_json, digest
from toki.isolation import Isolation
from toki.sim.program import Agent, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry, one, rows_of, run_inbox
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["WorldDBModel", "content_hash"]

State = Mapping[Hashable, Any]


def content_hash(c: SimClaim) -> str:
    return digest(canonical_json({"key": c.key, "value": c.value, "start": c.start}))


class WorldDBModel(SystemModel):
    name: ClassVar[str] = "worlddb"
    uses_judge: ClassVar[bool] = False  # no LLM on this write path (the matrix checks it)
    version: ClassVar[str] = "paper"
    records: ClassVar[Records] = Records(inputs=True, decisions=False)
    title: ClassVar[str] = "WorldDB"
    release: ClassVar[str] = "as characterised in the TOKI paper (arXiv 2606.06240); no code read"
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED
    sources: ClassVar[tuple[str, ...]] = (
        "../shared/research/toki.md: the paper's verdict matrix (WorldDB: content-addressed, "
        "judge-free, no anomaly only by having no judge)",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "nobody: no semantic resolution; contradicting facts coexist",
        "old values kept": "yes: facts are immutable rows keyed by content hash",
        "decision logged with inputs": "no decision exists to log",
        "concurrency control": "none needed: blind idempotent inserts (modelled at read "
        "committed; the real level is not documented in the notes)",
        "idempotency on retry": "yes: the same content is the same key",
        "recovery": "read the fact rows (they are the log)",
        "judge sees": "no judge",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "the whole engine is a content-addressed insert; its query language, indexing and "
        "any deletion API are unknown and not modelled",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        def put(c: SimClaim) -> Agent:
            return (yield from one(Write(("fact", content_hash(c)), c.to_json())))

        return run_inbox(inbox, ctx, put)

    def _values(self, state: State, key: str) -> list[str]:
        return [str(v["value"]) for _, v in rows_of(state, "fact") if v["key"] == key]

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        """Every fact of the key (value None when they contradict: nothing resolves them)."""
        return {k: belief_entry(sorted(set(self._values(state, k)))) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """The rows are the log: rebuilding re-reads them (no judge to ask)."""
        facts = {k: v for k, v in state.items() if isinstance(k, tuple) and k[0] == "fact"}
        rebuilt: dict[Hashable, Any] = {
            ("fact", content_hash(SimClaim.from_json(v))): v for v in facts.values()
        }
        return self.beliefs(rebuilt, keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        return set(self._values(state, key))
