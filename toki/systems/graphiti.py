"""Zep Graphiti (getzep/graphiti HEAD 993e081a): `Graphiti.add_episode` as steps.

Rows (SimStore keys):
- ("ep", n): an EpisodicNode {claim (raw content), valid_at (= reference_time), edges};
  n is its creation order;
- ("edge", key, eid): an EntityEdge {value, valid_at, invalid_at, expired, episodes};
- ("seq", "ep"): the creation order of episodes (created_at, wall clock).

Write path (graphiti_core/graphiti.py `add_episode`, ~L980): a read transaction fetches the
candidate edges (`EntityEdge.get_between_nodes` + hybrid search, no `expired_at` filter);
`resolve_extracted_edge` (utils/maintenance/edge_operations.py ~L623) reuses an exact
normalized-fact match, else asks the LLM (`prompts/dedupe_edges.py` `resolve_edge`) which
candidates are contradicted — a scheduling point; the deterministic valid-time rule
(`resolve_edge_contradictions`, ~L538) then picks the loser; one write transaction
(`add_nodes_and_edges_bulk`, `SET e = $edge_data`: full property replacement from what
was read) saves the episode, the new edge and the invalidated edges.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Local, Select, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import (
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
from toki.systems.base import AgentContext, Beliefs, SimJudge, SystemModel

__all__ = ["GraphitiModel", "contradicted", "judge_edges", "resolve_edges", "save_episode"]

State = Mapping[Hashable, Any]


def judge_edges(
    prompt: str, c: SimClaim, candidates: Sequence[tuple[str, Mapping[str, Any]]], judge: SimJudge
) -> Agent:
    """Ask the LLM (a `Local` step) only when no candidate already states the claim's value;
    returns the ids of the edges it says the claim contradicts."""
    if not candidates or any(e["value"] == c.value for _, e in candidates):
        return set()
    yield Local("judge", f"{prompt}: {c.key}={c.value}")
    return contradicted(prompt, c.key, c.value, candidates, judge)


def save_episode(
    c: SimClaim,
    ref: Any,
    n: int,
    candidates: Sequence[tuple[str, Mapping[str, Any]]],
    flagged: set[str],
) -> Agent:
    """Inside the caller's transaction: episode n, the new edge and the invalidated ones."""
    new, saves = resolve_edges(c.value, ref, n, candidates, flagged)
    episode = {"claim": c.to_json(), "valid_at": ref, "edges": sorted(saves)}
    yield from stmt(Write(("ep", n), episode))
    if new is not None:
        yield from stmt(Write(("edge", c.key, f"e{n}"), new))
    for eid, edge in sorted(saves.items()):
        yield from stmt(Write(("edge", c.key, eid), edge))


def contradicted(
    prompt: str,
    key: str,
    value: str,
    candidates: Sequence[tuple[str, Mapping[str, Any]]],
    ctx_judge: SimJudge,
) -> set[str]:
    """The LLM verdict: which candidate edges (by id) the new fact contradicts. One question
    per candidate value, so the same facts get the same answer within a run (pinned judge)
    and possibly another at recovery (fresh seed)."""
    out = set()
    for eid, edge in candidates:
        if edge["value"] != value:
            question = f"{prompt}: {key}: does {value!r} contradict {edge['value']!r}?"
            if ctx_judge.pick(question, ["no", "yes"]) == "yes":
                out.add(eid)
    return out


def resolve_edges(
    value: str,
    valid_at: int,
    n: int,
    candidates: Sequence[tuple[str, Mapping[str, Any]]],
    flagged: set[str],
) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """(the new edge or None when a duplicate was reused, the edges to save by id).

    Fast path: an edge with the same fact is reused (episode appended). Otherwise the
    valid-time rule: a contradicted edge valid *after* the new one invalidates the new edge;
    one valid *before* it is invalidated at the new valid_at (a second invalidation
    overwrites invalid_at); equal or equal-time edges both stay valid."""
    for eid, edge in candidates:
        if edge["value"] == value:
            return None, {eid: {**edge, "episodes": [*edge["episodes"], n]}}
    new: dict[str, Any] = {
        "value": value,
        "valid_at": valid_at,
        "invalid_at": None,
        "expired": False,
        "episodes": [n],
    }
    saves: dict[str, dict[str, Any]] = {}
    for eid, edge in candidates:
        if eid not in flagged:
            continue
        if edge["valid_at"] > valid_at:
            if new["invalid_at"] is None or edge["valid_at"] < new["invalid_at"]:
                new = {**new, "invalid_at": edge["valid_at"], "expired": True}
        elif edge["valid_at"] < valid_at:
            saves[eid] = {**edge, "invalid_at": valid_at, "expired": True}
    return new, saves


def edges_of(found: Mapping[Any, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    return sorted(((str(k[2]), v) for k, v in found.items()), key=lambda kv: kv[0])


class GraphitiModel(SystemModel):
    """Graphiti's `add_episode` called directly by concurrent callers (its docstring asks
    callers to add episodes sequentially; the library has no lock)."""

    name: ClassVar[str] = "graphiti"
    title: ClassVar[str] = "Graphiti"
    release: ClassVar[str] = "getzep/graphiti HEAD 993e081a (2026-08-20)"
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED  # Neo4j's transactions
    prompt: ClassVar[str] = "graphiti dedupe_edges.resolve_edge"
    sources: ClassVar[tuple[str, ...]] = (
        "graphiti_core/graphiti.py@993e081a: Graphiti.add_episode (~L980), "
        "retrieve_episodes, _process_episode_data, remove_episode (~L1765)",
        "graphiti_core/utils/maintenance/edge_operations.py@993e081a: "
        "resolve_extracted_edges (~L325), resolve_extracted_edge (~L623), "
        "resolve_edge_contradictions (~L538), _extract_edge_timestamps",
        "graphiti_core/prompts/dedupe_edges.py@993e081a: resolve_edge",
        "graphiti_core/utils/bulk_utils.py@993e081a: add_nodes_and_edges_bulk (one execute_write)",
        "graphiti_core/models/edges/edge_db_queries.py@993e081a: SET e = $edge_data",
        "graphiti_core/llm_client/config.py@993e081a: DEFAULT_TEMPERATURE = 1; "
        "llm_client/cache.py: cache off by default",
        "../shared/research/systems.md §2",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "the LLM flags contradicted candidates; a valid-time rule picks the "
        "loser (equal or missing valid_at: both stay valid)",
        "old values kept": "yes: contradicted edges stay with invalid_at/expired_at; edge "
        "records are fully replaced on save (a second invalidation overwrites invalid_at); "
        "no invalidated_by pointer",
        "decision logged with inputs": "no: the verdict, prompt and model are not stored "
        "(temperature 1, no seed, LLM cache off by default)",
        "concurrency control": "none in the library between candidate read and write; one "
        "write transaction per episode (Neo4j, read committed)",
        "idempotency on retry": "none: a re-added episode is a new EpisodicNode; edges dedup "
        "by exact fact match or the LLM",
        "recovery": "re-ingest the stored episodes (raw content kept) through add_episode: "
        "the LLM is asked again, with no pinned seed",
        "judge sees": "edges between the same nodes plus a group-wide hybrid search on the "
        "fact (invalidated edges included: no expired_at filter)",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "node extraction/dedup and edge extraction are exact: one entity pair and one edge "
        "per claim; the LLM timestamp extraction gives valid_at = the claim's start",
        "retrieve_episodes context and entity-node summaries are not modelled",
        "expired_at (wall clock) is a flag; the MCP server's per-group queue is not modelled",
    )

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return seq_rows(("ep",))

    def reference_time(self, c: SimClaim) -> Agent:
        """The caller's reference_time: the claim's valid start (Graphiti takes it as given)."""
        return c.start
        yield  # pragma: no cover - makes this a generator

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return run_inbox(inbox, ctx, lambda c: self._episode(c, ctx))

    def _episode(self, c: SimClaim, ctx: AgentContext) -> Agent:
        ref = yield from self.reference_time(c)
        found = yield from one(Select(lambda k, v: k[:2] == ("edge", c.key), name="candidates"))
        candidates = edges_of({} if isinstance(found, str) else found)
        flagged = yield from judge_edges(self.prompt, c, candidates, ctx.judge)

        def write() -> Agent:
            n = yield from next_seq("ep")
            yield from save_episode(c, ref, n, candidates, flagged)
            return "ok"

        return (yield from txn(write))

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        """Facts valid now: edges without invalid_at (a caller that filters; search itself
        returns invalidated edges too)."""
        return {
            k: belief_entry(
                e["value"] for _, e in rows_of(state, "edge", k) if e["invalid_at"] is None
            )
            for k in keys
        }

    def stored_inputs(self, state: State) -> list[SimClaim]:
        episodes = sorted(rows_of(state, "ep"), key=lambda kv: kv[0][1])
        return claims_of(e["claim"] for _, e in episodes)

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """Re-add every stored episode, in creation order, with a fresh LLM (`judge`)."""
        return self.beliefs(replay_serially(self, self.stored_inputs(state), judge), keys)

    def recoverable(self, state: State, key: str) -> set[str]:
        """Every edge's fact, valid or invalidated (raw episode text would need the LLM)."""
        return {str(e["value"]) for _, e in rows_of(state, "edge", key)}
