"""The host half of the Graphiti adapter (graphiti-core 0.31.x on Kuzu).

The stub LLM answers as the model in `toki.systems.graphiti` decides, from the same judge
and with the same question text, so the real row and the model row draw the same verdicts:

* entity and edge extraction are exact: one entity for the key's subject, one for the value,
  one edge "<key> is <value>" valid from the claim's start (the model's simplification);
* node dedup names the existing node with the same name (entity identity is exact);
* entity summaries (the prompts Graphiti asks when a summary is rebuilt from episodes, e.g.
  by `remove_episode` for the entities that survive) state the facts "<key> is <value>" of
  the episodes shown whose subject or value is the entity, one per line;
* `dedupe_edges.resolve_edge`: the candidates that state the claim's value are duplicates and
  nothing is contradicted; otherwise each candidate of the same key with another value is
  asked about ("graphiti dedupe_edges.resolve_edge: <key>: does <new> contradict <old>?",
  no / yes), and the ones the judge says yes to are `contradicted_facts`. Graphiti then
  picks the loser by valid time (`resolve_edge_contradictions`), in the real code.

Readers are the model's: a fact is believed while its edge has no `invalid_at`. Recovery is
Graphiti's documented one: re-ingest the stored episodes (`retrieve_episodes`, the library's
order) through `add_episode` with a fresh judge (`replay_inputs`: the host runs the real code
serially over them).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from toki.real.adapter import Beliefs, Picker, claims_in_stored_order, replayed_beliefs
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry

__all__ = ["PROMPT", "GraphitiHost"]

PROMPT = "graphiti dedupe_edges.resolve_edge"  # the model's question prefix
FACT = re.compile(r"([\w.-]+:[\w.-]+) is ([^\n]+?)\s*$", re.MULTILINE)  # "<key> is <value>"
BASE = datetime(2026, 1, 1, tzinfo=UTC)  # toki/real/inenv/stubs.py BASE


def fact_of(key: str, value: str) -> str:
    return f"{key} is {value}"


def parse_fact(text: Any) -> tuple[str, str] | None:
    if not isinstance(text, str):
        return None
    key, sep, value = text.partition(" is ")
    return (key, value) if sep else None


def _names(claim: Mapping[str, Any]) -> tuple[str, str, str]:
    key = str(claim.get("key", ""))
    subject, _, predicate = key.partition(":")
    return subject or "user", str(claim.get("value", "")), predicate or "value"


def _iso_day(claim: Mapping[str, Any]) -> str:
    return (BASE + timedelta(days=int(claim.get("start") or 0))).isoformat()


@dataclass(frozen=True, slots=True)
class GraphitiHost:
    def config(self, workload: Workload) -> dict[str, Any]:
        scopes = getattr(workload, "scopes", None)  # an OpProgram names its groups
        return {} if scopes is None else {"groups": sorted(scopes)}

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        if point.kind != "llm":
            return None
        detail = point.detail if isinstance(point.detail, Mapping) else {}
        claim = detail.get("claim") or {}
        prompt = str(detail.get("prompt", ""))
        subject, value, predicate = _names(claim)
        if prompt.startswith("extract_nodes.extract_") and "summar" not in prompt:
            return {
                "extracted_entities": [
                    {"name": subject, "entity_type_id": 0},
                    {"name": value, "entity_type_id": 0},
                ]
            }
        if prompt == "dedupe_nodes.nodes":
            existing = {str(n.get("name")): n.get("candidate_id") for n in detail["existing"]}
            return {
                "entity_resolutions": [
                    {
                        "id": n.get("id"),
                        "name": n.get("name"),
                        "duplicate_candidate_id": existing.get(str(n.get("name")), -1),
                    }
                    for n in detail.get("extracted") or []
                ]
            }
        edge = {
            "source_entity_name": subject,
            "target_entity_name": value,
            "relation_type": predicate.upper().replace("-", "_"),
            "fact": fact_of(str(claim.get("key")), value),
        }
        if prompt == "extract_edges.edge":
            return {"edges": [{**edge, "valid_at": _iso_day(claim), "invalid_at": None}]}
        if prompt.startswith("extract_nodes_and_edges."):  # add_episode_bulk's combined one
            return {
                "extracted_entities": [
                    {"name": subject, "entity_type_id": 0},
                    {"name": value, "entity_type_id": 0},
                ],
                "edges": [{**edge, "episode_indices": [0]}],
            }
        if prompt == "dedupe_edges.resolve_edge":
            return self._resolve(detail, judge)
        if "summar" in prompt:  # a summary states the episodes' facts about the entity
            facts = FACT.findall(str(detail.get("episode_content", "")))
            return {
                "summaries": [
                    {
                        "name": name,
                        "summary": "\n".join(
                            f"{k} is {v}" for k, v in facts if name in (k.partition(":")[0], v)
                        ),
                    }
                    for name in detail.get("entities") or []
                ]
            }
        return None  # a prompt the model does not have: the worker answers it empty

    @staticmethod
    def _resolve(detail: Mapping[str, Any], judge: Picker) -> dict[str, Any]:
        new = parse_fact(detail.get("new_edge"))
        existing = list(detail.get("existing_edges") or [])
        candidates = existing + list(detail.get("invalidation_candidates") or [])
        if new is None:
            return {"duplicate_facts": [], "contradicted_facts": []}
        key, value = new
        same_key: list[tuple[Any, str]] = []
        for c in candidates:
            fact = parse_fact(c.get("fact"))
            if fact is not None and fact[0] == key:
                same_key.append((c.get("idx"), fact[1]))
        if any(v == value for _, v in same_key):
            dupes = [c.get("idx") for c in existing if parse_fact(c.get("fact")) == new]
            return {"duplicate_facts": dupes, "contradicted_facts": []}
        contradicted = []
        for idx, old in same_key:
            question = f"{PROMPT}: {key}: does {value!r} contradict {old!r}?"
            if judge.pick(question, ["no", "yes"]) == "yes":
                contradicted.append(idx)
        return {"duplicate_facts": [], "contradicted_facts": contradicted}

    # -- what the library holds -----------------------------------------------------------

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        """Facts valid now: edges without invalid_at (the model's reader)."""
        valid: dict[str, list[str]] = {}
        for edge in observation.get("edges") or []:
            fact = parse_fact(edge.get("fact"))
            if fact is not None and edge.get("invalid_at") is None:
                valid.setdefault(fact[0], []).append(fact[1])
        return {k: belief_entry(valid.get(k, [])) for k in keys}

    def replay_inputs(
        self, observation: Mapping[str, Any], workload: Workload
    ) -> list[SimClaim] | None:
        """The stored episodes as the workload's claims, in the order Graphiti lists them
        (None for a program of operations: its steps are no claims to re-ingest)."""
        if getattr(workload, "family", None) is not None:
            return None
        return claims_in_stored_order(
            workload,
            observation.get("episodes") or [],
            lambda c, episode: (
                fact_of(c.key, c.value) == episode.get("content")
                and _iso_day({"start": c.start}) == episode.get("valid_at")
            ),
        )

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        return replayed_beliefs(self.beliefs, recovered, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        """Every edge's fact, valid or invalidated (the model's; episode text would need the
        LLM to be read as a fact)."""
        out = set()
        for edge in observation.get("edges") or []:
            fact = parse_fact(edge.get("fact"))
            if fact is not None and fact[0] == key:
                out.add(fact[1])
        return out

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        body = fact_of(claim.key, claim.value)
        return any(e.get("content") == body for e in observation.get("episodes") or []) or any(
            e.get("fact") == body for e in observation.get("edges") or []
        )
