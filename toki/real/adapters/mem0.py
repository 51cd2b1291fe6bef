"""The host half of the mem0 adapters (mem0ai 1.0.11: LLM judge; mem0ai 2.x: add-only).

The stub LLM answers exactly as the models in `toki.systems.mem0` decide, from the same
judge and with the same question text, so a real row and its model row draw the same
verdicts: extraction returns the claim as one fact ("<key> is <value>"); 1.0.11's decision
returns NONE when the value is already stored and otherwise asks the judge to pick among
NONE/ADD/DELETE/UPDATE (UPDATE rewrites the first retrieved memory of the key and deletes the
others; DELETE deletes them all and adds the new fact); 2.x's additive extraction asks the
judge whether to phrase the fact as a transition ("<key> changed from X to <value>") when a
contradicting memory was retrieved. Memories of other keys are left alone (NONE).

Readers and recovery are the model's too: a memory's text names its key and value; 2.x
readers take a transition as superseding the memories of its old value (`_entry`); recovery
re-applies each memory's history as `Memory.history(id)` lists it (mem0 has no recovery of
its own, and its history is the only record of its decisions).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.real.adapter import Beliefs, Picker
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry
from toki.systems.mem0 import _current, _entry

__all__ = ["Mem0Host", "parse", "subject", "text_of"]

EVENTS = ["NONE", "ADD", "DELETE", "UPDATE"]


def subject(key: str) -> str:
    """The mem0 user a workload key belongs to ('alice:manager' -> 'alice')."""
    return key.split(":", 1)[0] or "user"


def text_of(key: str, value: str) -> str:
    return f"{key} is {value}"


def parse(text: Any) -> tuple[str, str, str | None] | None:
    """(key, value, old value) from a memory text, or None for a text of another shape."""
    if not isinstance(text, str):
        return None
    if " changed from " in text and " to " in text:
        key, _, rest = text.partition(" changed from ")
        old, _, value = rest.rpartition(" to ")
        return key, value, old
    key, sep, value = text.partition(" is ")
    return (key, value, None) if sep else None


def _same_key(existing: Iterable[Mapping[str, Any]], key: str) -> list[tuple[str, str, str]]:
    """(temp id, text, value) of the retrieved memories of `key`, in retrieval order."""
    out = []
    for e in existing:
        got = parse(e.get("text"))
        if got is not None and got[0] == key:
            out.append((str(e.get("id")), str(e.get("text")), got[1]))
    return out


@dataclass(frozen=True, slots=True)
class Mem0Host:
    """`major` 1: the ADD/UPDATE/DELETE/NONE judge; 2: the add-only pipeline."""

    major: int

    def config(self, workload: Workload) -> dict[str, Any]:
        scopes = getattr(workload, "scopes", None)  # an OpProgram names its users itself
        if scopes is not None:
            return {"users": sorted(scopes)}
        return {"users": sorted({subject(k) for k in workload.keys})}

    # -- the LLM -------------------------------------------------------------------------

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        if point.kind != "llm":
            return None
        detail = point.detail if isinstance(point.detail, Mapping) else {}
        claim = detail.get("claim") or {}
        key, value = str(claim.get("key", "")), str(claim.get("value", ""))
        if point.name == "llm.extract":
            return json.dumps({"facts": [text_of(key, value)]})
        if point.name == "llm.decide":
            return json.dumps({"memory": self._decide(key, value, detail, judge)})
        if point.name == "llm.additive":
            return json.dumps(
                {
                    "memory": [
                        {"text": self._phrase(key, value, detail, judge), "attributed_to": "user"}
                    ]
                }
            )
        return "{}"

    @staticmethod
    def _decide(
        key: str, value: str, detail: Mapping[str, Any], judge: Picker
    ) -> list[dict[str, Any]]:
        fact = text_of(key, value)
        olds = _same_key(detail.get("existing") or [], key)
        new = {"id": str(len(detail.get("existing") or [])), "text": fact, "event": "ADD"}
        if not olds:
            return [new]
        if any(v == value for _, _, v in olds):
            return [{"id": i, "text": t, "event": "NONE"} for i, t, _ in olds]
        question = (
            f"mem0 update memory: {key}: existing {sorted({v for _, _, v in olds})} "
            f"vs new {value!r}"
        )
        event = judge.pick(question, EVENTS)
        if event == "UPDATE":
            first, *rest = olds
            return [
                {"id": first[0], "text": fact, "event": "UPDATE", "old_memory": first[1]},
                *({"id": i, "text": t, "event": "DELETE"} for i, t, _ in rest),
            ]
        if event == "DELETE":
            return [*({"id": i, "text": t, "event": "DELETE"} for i, t, _ in olds), new]
        if event == "ADD":
            return [new]
        return [{"id": i, "text": t, "event": "NONE"} for i, t, _ in olds]

    @staticmethod
    def _phrase(key: str, value: str, detail: Mapping[str, Any], judge: Picker) -> str:
        found = [f for f in detail.get("found") or [] if parse(f.get("text"))]
        points = _points((f["text"], f.get("created_at")) for f in found)
        current = _current(points.get(key, []))
        others = sorted({v for v in current if v != value})
        question = f"mem0 additive extraction: {key}: existing {others} vs new {value!r}"
        if others and judge.pick(question, ["fact", "transition"]) == "transition":
            return f"{key} changed from {others[0]} to {value}"
        return text_of(key, value)

    # -- what the library holds -----------------------------------------------------------

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        memories = observation.get("memories") or []
        points = _points((m.get("text"), m.get("created_at")) for m in memories)
        return {k: self._entry(points.get(k, [])) for k in keys}

    def _entry(self, points: list[dict[str, Any]]) -> dict[str, Any]:
        if self.major >= 2:
            return _entry(points)
        return belief_entry(str(p["value"]) for p in points)

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        """Re-apply each memory's history as `Memory.history(id)` returns it (mem0's own
        order: created_at, then updated_at): ADD and UPDATE set the text, DELETE removes it.
        No LLM is asked. Memories are ordered by the time their first row was written."""
        first: dict[str, str] = {}
        for row in observation.get("history") or []:
            first.setdefault(str(row.get("memory_id")), str(row.get("created_at")))
        live: list[tuple[str, str]] = []
        for mid, rows in (observation.get("history_api") or {}).items():
            text: str | None = None
            for row in rows:
                text = None if row.get("event") == "DELETE" else row.get("new", text)
            if text is not None:
                live.append((str(text), first.get(str(mid), "")))
        points = _points(live)
        return {k: self._entry(points.get(k, [])) for k in keys}

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        texts = [m.get("text") for m in observation.get("memories") or []]
        for row in observation.get("history") or []:
            texts += [row.get("old"), row.get("new")]
        out: set[str] = set()
        for text in texts:
            got = parse(text)
            if got is not None and got[0] == key:
                out.add(got[1])
                if got[2] is not None:
                    out.add(got[2])
        return out

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        texts = [m.get("text") for m in observation.get("memories") or []]
        texts += [row.get("new") for row in observation.get("history") or []]
        return any(
            (got := parse(t)) is not None and got[:2] == (claim.key, claim.value) for t in texts
        )


def _points(rows: Iterable[tuple[Any, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Memories per key as the model's points {value, from, n}; n orders them by creation."""
    ordered = sorted(
        ((str(t), str(c)) for t, c in rows if parse(t) is not None), key=lambda tc: (tc[1], tc[0])
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for n, (text, _) in enumerate(ordered, 1):
        got = parse(text)
        assert got is not None
        out.setdefault(got[0], []).append({"value": got[1], "from": got[2], "n": n})
    return out
