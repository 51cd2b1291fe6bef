"""The host half of the Cognee adapter (cognee 1.6.5: `add` + `cognify`, local stores).

The stub LLM's graph extraction is exact, as in the model (`toki.systems.cognee`): the
chunk "<subject>:<predicate> is <value>" gives two entities, the subject and the value, and
one edge subject -<predicate>-> value. Cognee's other structured call (the chunk summary) is
answered by the worker with the chunk's text. No judge is asked: cognify has no
contradiction decision on this path (1.6.5 removed `cognify(functional_relationships=...)`;
its successor, `improve(review_conflicts=True)`, is a separate call the agents do not make).

Readers are served the entity relationships of the graph: a key's values are the targets of
its subject's <predicate> edges (two edges of one key contradict). Recovery is re-running
cognify over the stored data items, in the order cognee lists the dataset's data (the host
runs the real code serially over them, `replay_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.real.adapter import Beliefs, Picker, claims_in_stored_order, replayed_beliefs
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry

__all__ = ["CogneeHost", "extraction"]


def extraction(key: str, value: str) -> dict[str, Any]:
    """The KnowledgeGraph the stub LLM extracts from '<key> is <value>'."""
    subject, _, predicate = key.partition(":")
    subject, predicate = subject or "user", predicate or "value"
    text = f"{key} is {value}"

    def node(name: str) -> dict[str, str]:
        return {"id": name, "name": name, "type": "Entity", "description": name}

    return {
        "summary": text,
        "description": text,
        "nodes": [node(subject), node(value)],
        "edges": [
            {
                "source_node_id": subject,
                "target_node_id": value,
                "relationship_name": predicate,
                "description": text,
            }
        ],
    }


@dataclass(frozen=True, slots=True)
class CogneeHost:
    def config(self, workload: Workload) -> dict[str, Any]:
        values = {c.value for inbox in workload.inboxes for c in inbox}
        return {"values": sorted(values)}

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        if point.name != "llm.KnowledgeGraph":
            return None  # the summary: the worker answers with the chunk's text
        detail = point.detail if isinstance(point.detail, Mapping) else {}
        claim = detail.get("claim") or {}
        return extraction(str(claim.get("key", "")), str(claim.get("value", "")))

    @staticmethod
    def _values(observation: Mapping[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for edge in observation.get("edges") or []:
            out.setdefault(str(edge.get("key")), []).append(str(edge.get("value")))
        return out

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        values = self._values(observation)
        return {k: belief_entry(values.get(k, [])) for k in keys}

    def replay_inputs(
        self, observation: Mapping[str, Any], workload: Workload
    ) -> list[SimClaim] | None:
        """The stored data items as the workload's claims, in cognee's order."""
        return claims_in_stored_order(
            workload,
            observation.get("data") or [],
            lambda c, item: f"{c.key} is {c.value}" == item.get("text"),
        )

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        return replayed_beliefs(self.beliefs, recovered, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        """Every edge's value (the model's: nothing of the graph is deleted)."""
        return set(self._values(observation).get(key, []))

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        text = f"{claim.key} is {claim.value}"
        return any(d.get("text") == text for d in observation.get("data") or []) or (
            claim.value in self.recoverable(observation, claim.key)
        )
