"""MemOS (MemTensor/MemOS be68e2fb) with the opt-in reorganizer (`TreeTextMemory` config
`reorganize=True`; default False).

Rows: ("node", id) a memory node {key, value, status, updated_at, merged_to};
("reorg",) the reorganizer's single consumer thread; ("seq", "node") insertion order (also
`updated_at`).

Write path (../shared/research/systems.md §6): an add inserts the node; the reorganizer's
single consumer (`tree_text_memory/organize/reorganizer.py` `handle_add`) calls
`NodeHandler.detect` (embedding similarity ≥ 0.8 + an LLM judge) and `NodeHandler.resolve`
(`organize/handler.py`): the LLM fuses the two statements — both originals get
status="archived" and MERGED_TO edges to the fused node — or answers that it cannot, and
`_hard_update` keeps the newer `updated_at` and `graph_store.delete_node`s the older.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Delete, Local, Select, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry, next_seq, rows_of, run_inbox, seq_rows, stmt, txn
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["MemOSModel"]

State = Mapping[Hashable, Any]


class MemOSModel(SystemModel):
    name: ClassVar[str] = "memos"
    version: ClassVar[str] = "be68e2fb"
    # no input log or decision record (the graph is the state), and the concurrent
    # structure-optimizer thread is not modelled: the rule abstains from N1, RD and N2
    records: ClassVar[Records] = Records(inputs=False, decisions=False, concurrency=False)
    title: ClassVar[str] = "MemOS (reorganize=True)"
    release: ClassVar[str] = "MemTensor/MemOS HEAD be68e2fb (2026-08-20), reorganize opt-in"
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED  # the graph store (Neo4j)
    sources: ClassVar[tuple[str, ...]] = (
        "tree_text_memory/organize/reorganizer.py@be68e2fb: "
        "handle_add (single consumer on a PriorityQueue)",
        "tree_text_memory/organize/handler.py@be68e2fb: "
        "NodeHandler.detect, NodeHandler.resolve, _hard_update (delete_node)",
        "../shared/research/systems.md §6 (MemOS)",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "an LLM: fuse the two statements, or (cannot) the newer updated_at wins",
        "old values kept": "fuse: both archived with MERGED_TO; cannot: the older node is "
        "hard-deleted (a warning log line is the only trace)",
        "decision logged with inputs": "no",
        "concurrency control": "one consumer thread serialises resolutions; adds run beside "
        "it (graph store, read committed)",
        "idempotency on retry": "none: a re-add is a new node",
        "recovery": "none described: the graph is the state (N1 and RD abstain)",
        "judge sees": "the new node and the similar existing node",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "nodes of the same key are 'similar' (≥ 0.8); the LLM verdict: fuse with "
        "probability p; a fused node states the newer value",
        "the concurrent structure-optimizer thread is not modelled",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {**seq_rows(("node",)), ("reorg",): "idle"}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return run_inbox(inbox, ctx, lambda c: self._add(c, ctx))

    def _add(self, c: SimClaim, ctx: AgentContext) -> Agent:
        def insert() -> Agent:
            n = yield from next_seq("node")
            node = {"key": c.key, "value": c.value, "status": "activated", "updated_at": n}
            yield from stmt(Write(("node", f"n{n}"), node))
            return n

        mine = yield from txn(insert)
        if not isinstance(mine, int):
            return "gave-up"
        my_id = ("node", f"n{mine}")

        def reorganize() -> Agent:  # handle_add on the single consumer thread
            yield from stmt(Write(("reorg",), "busy"))
            rows = yield from stmt(Select(lambda k, v: k[0] == "node", name="detect"))
            me = rows.get(my_id)
            if me is None or me["status"] != "activated":
                yield from stmt(Write(("reorg",), "idle"))
                return "gone"
            others = sorted(
                (k, v)
                for k, v in rows.items()
                if k != my_id
                and v["key"] == c.key
                and v["status"] == "activated"
                and v["value"] != me["value"]
            )
            outcome = "none"
            for k, other in others:
                question = f"memos resolve: {c.key}: {other['value']!r} vs {me['value']!r}"
                yield Local("judge", question)
                mine_newer = me["updated_at"] > other["updated_at"]
                newer, older = (me, other) if mine_newer else (other, me)
                newer_id, older_id = (my_id, k) if newer is me else (k, my_id)
                if ctx.judge.pick(question, ["cannot", "fuse"]) == "fuse":
                    n = yield from next_seq("node")
                    fused_id = ("node", f"f{n}")
                    fused = {
                        "key": c.key,
                        "value": newer["value"],
                        "status": "activated",
                        "updated_at": n,
                    }
                    yield from stmt(Write(fused_id, fused))
                    for kid, node in ((newer_id, newer), (older_id, older)):
                        yield from stmt(
                            Write(kid, {**node, "status": "archived", "merged_to": fused_id[1]})
                        )
                    outcome = "fused"
                else:
                    yield from stmt(Delete(older_id))  # _hard_update
                    outcome = "hard-update"
                break
            yield from stmt(Write(("reorg",), "idle"))
            return outcome

        return (yield from txn(reorganize))

    def _nodes(self, state: State, key: str) -> list[Mapping[str, Any]]:
        return [v for _, v in rows_of(state, "node") if v["key"] == key]

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {
            k: belief_entry(n["value"] for n in self._nodes(state, k) if n["status"] == "activated")
            for k in keys
        }

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """No rebuild procedure (N1 and RD abstain): the graph as stored."""
        return self.beliefs(state, keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        return {str(n["value"]) for n in self._nodes(state, key)}
