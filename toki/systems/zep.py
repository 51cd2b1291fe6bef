"""Zep Community Edition v1.0.2 (getzep/zep bff3c40a) over its Graphiti service (graphiti
v0.3.21, 6536401c): `POST /sessions/{id}/memory` as steps.

Rows: ("msg", n) the Postgres `messages` row (BIGSERIAL n, client uuid not supplied), the
Graphiti rows of `toki.systems.graphiti` (one group: the user's, which reads use), ("worker",)
the Graphiti service's single `AsyncWorker`, ("seq", "clock") the service's wall clock.

Write path: `PostMemoryHandler` → `memoryDAO.Create` (store/memory_common.go ~L93): one
multi-row INSERT of the messages; then `_initializeProcessingMemory` (store/memory_ce.go
~L59) POSTs them to the Graphiti service `/messages` (server/graph_service/routers/ingest.py
`add_messages`), which stamps `reference_time` with the request's parse time (CE sends no
timestamp) and queues `add_episode` on one FIFO worker per process. The model holds the
worker for a whole episode (the queue's serialisation), taking the clock inside it (FIFO
order = stamping order).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Read, Select, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import (
    append,
    claims_of,
    replay_serially,
    rows_of,
    run_inbox,
    seq_rows,
    stmt,
    txn,
)
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge
from toki.systems.graphiti import GraphitiModel, edges_of, judge_edges, save_episode

__all__ = ["ZepCEModel"]

State = Mapping[Hashable, Any]


class ZepCEModel(GraphitiModel):
    """Zep CE: Postgres message log + Graphiti 0.3.21 service with one FIFO worker."""

    name: ClassVar[str] = "zep"
    version: ClassVar[str] = "bff3c40a"
    records: ClassVar[Records] = Records(inputs=True, decisions=False)
    title: ClassVar[str] = "Zep (Community Edition)"
    release: ClassVar[str] = (
        "Zep CE v1.0.2 (getzep/zep bff3c40a; = legacy/ at 7de18dfa) with zepai/graphiti:0.3 "
        "(graphiti v0.3.21, 6536401c)"
    )
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED  # Postgres and Neo4j defaults
    prompt: ClassVar[str] = "graphiti-0.3.21 get_edge_contradictions"
    sources: ClassVar[tuple[str, ...]] = (
        "legacy/src/api/apihandlers/memory_handlers_common.go@bff3c40a: PostMemoryHandler (~L122)",
        "legacy/src/store/memory_common.go: memoryDAO.Create (~L93); store/message_common.go: "
        "messageDAO.CreateMany (~L68); store/memory_ce.go: _initializeProcessingMemory (~L59)",
        "legacy/src/lib/graphiti/service_ce.go: PutMemory (~L183, episode uuid "
        "'{groupID}-{messageUUID}', no timestamp sent)",
        "graphiti server/graph_service/routers/ingest.py@6536401c: add_messages, AsyncWorker "
        "(one worker task, ~L13-L30); dto/common.py: timestamp = datetime.now",
        "graphiti_core/graphiti.py@6536401c: add_episode (~L255-L470), "
        "resolve_extracted_edges, get_edge_contradictions; llm_client/config.py: "
        "DEFAULT_TEMPERATURE = 0",
        "../shared/research/mirix_zep.md §2",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "Graphiti's LLM flags contradictions; the valid-time rule picks the "
        "loser; valid time = the service's ingestion wall clock",
        "old values kept": "yes for contradictions (invalidated edges); raw messages in "
        "Postgres; hard deletes only via fact/session/user delete (not modelled)",
        "decision logged with inputs": "no (verdicts, prompts and model settings not "
        "persisted; temperature 0, no seed)",
        "concurrency control": "the Graphiti service's single FIFO worker serialises every "
        "add_episode of the process; no lock in CE; Postgres read committed",
        "idempotency on retry": "none without client uuids: a resend inserts new message rows "
        "and new episodes",
        "recovery": "re-ingest the Postgres messages (id order) through Graphiti: the LLM "
        "is asked again and reference_time is the replay's own clock",
        "judge sees": "the same-pair and hybrid-search candidate edges of the user's group",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "only the user group is ingested (CE also ingests the session group as an "
        "independent job; reads use the user group)",
        "one Graphiti replica (with more, nothing orders episodes: see 'graphiti')",
        "the worker never dies on an exception and the queue never loses a job",
        "extraction as in the 'graphiti' model",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {**seq_rows(("ep", "msg", "clock")), ("worker",): "idle"}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return run_inbox(inbox, ctx, lambda c: self._message(c, ctx))

    def _message(self, c: SimClaim, ctx: AgentContext) -> Agent:
        yield from append("msg", c.to_json())

        def job() -> Agent:
            yield from stmt(Write(("worker",), "busy"))  # the single worker takes the job
            ref = yield from _bump("clock")  # reference_time = ingestion wall clock
            found = yield from stmt(
                Select(lambda k, v: k[:2] == ("edge", c.key), name="candidates")
            )
            candidates = edges_of(found)
            flagged = yield from judge_edges(self.prompt, c, candidates, ctx.judge)
            n = yield from _bump("ep")
            yield from save_episode(c, ref, n, candidates, flagged)
            yield from stmt(Write(("worker",), "idle"))
            return "ok"

        return (yield from txn(job))

    def stored_inputs(self, state: State) -> list[SimClaim]:
        messages = sorted(rows_of(state, "msg"), key=lambda kv: kv[0][1])
        return claims_of(m for _, m in messages)

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """Re-send the stored messages, in id order, through the service: new reference
        times (the replay's clock) and a fresh LLM."""
        return self.beliefs(replay_serially(self, self.stored_inputs(state), judge), keys)


def _bump(name: str) -> Agent:
    """A counter the single worker alone touches (its own lock serialises it)."""
    n = int((yield from stmt(Read(("seq", name)))) or 0) + 1
    yield from stmt(Write(("seq", name), n))
    return n
