"""Cognee (topoteretes/cognee a8f9760b) with `functional_relationships` (the opt-in that
resolves): `cognee.add` then `cognify`, whose `tag_superseded_edges` keeps the most recently
updated edge of a functional relationship.

Rows: ("data", n) an added data item (the input); ("edge", key, value) a graph edge with a
deterministic id (subject, relation, `Entity:<object>`) {value, updated_at, superseded,
superseded_by}; ("seq", "data"), ("seq", "clock") (updated_at is the ingestion wall clock).

Write path (../shared/research/systems.md §6): edges are upserted by deterministic ids
(re-assertion refreshes `updated_at`); `cognee/modules/graph/utils/
temporal_conflict_resolver.py::tag_superseded_edges` tags every other edge of the same
functional relationship `superseded=True` with `superseded_by` and a reason (deterministic
recency: updated_at, ties by position); nothing is deleted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Local, Write
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
    select,
    seq_rows,
    stmt,
    txn,
)
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["CogneeModel"]

State = Mapping[Hashable, Any]


class CogneeModel(SystemModel):
    name: ClassVar[str] = "cognee"
    uses_judge: ClassVar[bool] = False  # no LLM on this write path (the matrix checks it)
    version: ClassVar[str] = "a8f9760b"
    # the notes did not read Cognee's concurrency control: the rule abstains from N2
    records: ClassVar[Records] = Records(inputs=True, decisions=False, concurrency=False)
    title: ClassVar[str] = "Cognee (functional_relationships)"
    release: ClassVar[str] = (
        "topoteretes/cognee HEAD a8f9760b (2026-08-22), cognify(functional_relationships=…)"
    )
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED
    sources: ClassVar[tuple[str, ...]] = (
        "cognee/modules/graph/utils/temporal_conflict_resolver.py@a8f9760b: tag_superseded_edges",
        "cognee/tasks/graph/detect_contradictions.py@a8f9760b (opt-in LLM flagging; not modelled)",
        "../shared/research/systems.md §6 (Cognee)",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "a deterministic recency rule (edge updated_at = ingestion wall clock)",
        "old values kept": "yes: losers are tagged superseded with superseded_by and a "
        "reason; nothing is deleted",
        "decision logged with inputs": "the reason is on the edge; the inputs are the stored "
        "data items",
        "concurrency control": "not read (the notes do not cover it); modelled as "
        "autocommit statements at read committed",
        "idempotency on retry": "edge ids are deterministic: a re-assertion upserts the same "
        "edge and refreshes updated_at (which can flip the winner)",
        "recovery": "re-run cognify over the stored data items, in order: updated_at becomes "
        "the replay's clock",
        "judge sees": "no judge on this path",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "entity/relation extraction is exact: one edge per claim; every predicate is "
        "declared functional",
        "the default (no resolution), the LLM contradiction-detection opt-in and the "
        "record_provenance ledger are not modelled",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return seq_rows(("data", "clock"))

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return run_inbox(inbox, ctx, lambda c: self._ingest(c, ctx))

    def _ingest(self, c: SimClaim, ctx: AgentContext) -> Agent:
        yield from append("data", c.to_json())
        yield Local("extract", c.cid)  # cognify's LLM graph extraction

        def upsert() -> Agent:
            t = yield from next_seq("clock")
            edge = {"value": c.value, "updated_at": t, "superseded": False, "superseded_by": None}
            yield from stmt(Write(("edge", c.key, c.value), edge))
            return t

        yield from txn(upsert)
        edges = yield from select("edge", c.key, "functional edges")
        if not edges:
            return "ok"
        ranked = sorted(edges.items(), key=lambda kv: (kv[1]["updated_at"], repr(kv[0])))
        winner_key, winner = ranked[-1]
        for k, e in ranked[:-1]:
            if not e["superseded"] or e["superseded_by"] != winner["value"]:
                tagged = {**e, "superseded": True, "superseded_by": winner["value"]}
                yield from one(Write(k, tagged))
        if winner["superseded"]:
            yield from one(
                Write(winner_key, {**winner, "superseded": False, "superseded_by": None})
            )
        return "ok"

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {
            k: belief_entry(e["value"] for _, e in rows_of(state, "edge", k) if not e["superseded"])
            for k in keys
        }

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        data = sorted(rows_of(state, "data"), key=lambda kv: kv[0][1])
        return self.beliefs(replay_serially(self, claims_of(v for _, v in data), judge), keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        return {str(e["value"]) for _, e in rows_of(state, "edge", key)}
