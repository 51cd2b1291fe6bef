"""The host halves of the LangGraph store adapters and the LangMem adapter.

LangGraph store: the application puts each claim's value under (subject, predicate), the
model's application (`toki.systems.langgraph_store`); no LLM. A reader is served the item;
the store keeps no history, so recoverable values are the current item's only; recovery is
the table itself (no log to replay).

LangMem: the stub chat model answers as `toki.systems.langmem` decides, from the same judge
and with the same question text: with no memory of the key it inserts one ("Memory"); when
a memory already states the value it calls no tool; otherwise the judge picks insert /
remove / patch ("langmem manager: <key>: [values] vs <new>") and the model answers with an
insert, RemoveDoc of every memory of the key plus an insert, or a PatchDoc of the first
memory (by id) replacing its content. Readers: every memory of the key is live. Recovery:
LangMem keeps no record of its inputs; the application keeps the thread (as the model
assumes a checkpointer does) and recovery re-runs the real manager over it with a fresh
judge (`replay_inputs`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.real.adapter import Beliefs, Picker, replayed_beliefs
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry

__all__ = ["DEFAULT_DSN", "LangGraphStoreHost", "LangMemHost", "parse_text"]

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def _subjects(workload: Workload) -> list[str]:
    return sorted({(k.partition(":")[0] or "user") for k in workload.keys})


def parse_text(text: Any) -> tuple[str, str] | None:
    if not isinstance(text, str):
        return None
    key, sep, value = text.partition(" is ")
    return (key, value) if sep else None


@dataclass(frozen=True, slots=True)
class LangGraphStoreHost:
    backend: str  # "memory" or "postgres"

    def config(self, workload: Workload) -> dict[str, Any]:
        config: dict[str, Any] = {
            "mode": f"store-{self.backend}",
            "subjects": _subjects(workload),
        }
        if self.backend == "postgres":
            config["dsn"] = os.environ.get("TOKI_PG_DSN", DEFAULT_DSN)
        return config

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        return None

    def _values(self, observation: Mapping[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for item in observation.get("items") or []:
            if item.get("value") is not None:
                out.setdefault(f"{item['subject']}:{item['key']}", []).append(str(item["value"]))
        return out

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        values = self._values(observation)
        return {k: belief_entry(values.get(k, [])) for k in keys}

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        """No log to replay: the table is what survives a restart."""
        return self.beliefs(observation, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        return set(self._values(observation).get(key, []))

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        return claim.value in self.recoverable(observation, claim.key)


@dataclass(frozen=True, slots=True)
class LangMemHost:
    mode: str = "langmem"  # or "langmem-reflection": the manager behind ReflectionExecutor

    def config(self, workload: Workload) -> dict[str, Any]:
        scopes = getattr(workload, "scopes", None)  # an OpProgram names its users
        subjects = sorted(scopes) if scopes is not None else _subjects(workload)
        return {"mode": self.mode, "subjects": subjects}

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        """Tool calls for the claim the model is shown; for a whole conversation (the
        reflection executor's payload), for the last value of each key it states."""
        if point.kind != "llm":
            return None
        detail = point.detail if isinstance(point.detail, Mapping) else {}
        claims = detail.get("claims")
        if not isinstance(claims, list):
            return self._answer(detail, detail.get("claim") or {}, judge)
        last = {str(c.get("key")): c for c in claims if isinstance(c, Mapping)}
        calls: list[Any] = []
        for key in last:  # in the order the conversation first names them
            calls += self._answer(detail, last[key], judge)["tool_calls"]
        return {"tool_calls": calls}

    def _answer(self, detail: Mapping[str, Any], claim: Mapping[str, Any], judge: Picker) -> Any:
        key, value = str(claim.get("key", "")), str(claim.get("value", ""))
        tools = list(detail.get("tools") or [])
        text = f"{key} is {value}"
        insert = {"name": "Memory", "args": {"content": text}}
        if "Memory" not in tools:
            return {"tool_calls": []}  # trustcall's repair round: nothing to repair
        docs = sorted(
            (str(d.get("id")), parsed[1])
            for d in detail.get("existing") or []
            if (parsed := parse_text(d.get("content"))) is not None and parsed[0] == key
        )
        if not docs:
            return {"tool_calls": [insert]}
        if any(v == value for _, v in docs):
            return {"tool_calls": []}
        question = f"langmem manager: {key}: {sorted({v for _, v in docs})} vs {value!r}"
        action = judge.pick(question, ["insert", "remove", "patch"])
        if action == "patch" and "PatchDoc" in tools:
            patch = {
                "json_doc_id": docs[0][0],
                "planned_edits": f"replace the content with {text!r}",
                "patches": [{"op": "replace", "path": "/content", "value": text}],
            }
            return {"tool_calls": [{"name": "PatchDoc", "args": patch}]}
        if action == "remove" and "RemoveDoc" in tools:
            removes = [{"name": "RemoveDoc", "args": {"json_doc_id": d}} for d, _ in docs]
            return {"tool_calls": [*removes, insert]}
        return {"tool_calls": [insert]}

    def _values(self, observation: Mapping[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for item in observation.get("items") or []:
            parsed = parse_text(item.get("text"))
            if parsed is not None:
                out.setdefault(parsed[0], []).append(parsed[1])
        return out

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        values = self._values(observation)
        return {k: belief_entry(values.get(k, [])) for k in keys}

    def replay_inputs(
        self, observation: Mapping[str, Any], workload: Workload
    ) -> list[SimClaim] | None:
        """The application's thread (the turns it kept before each invoke), in order
        (None for a program of operations: it keeps no thread)."""
        if getattr(workload, "family", None) is not None:
            return None
        return [SimClaim.from_json(c) for c in observation.get("thread") or []]

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        """Re-run the manager over the kept thread, in order, with a fresh judge (the
        model's recovery; LangMem has none of its own)."""
        return replayed_beliefs(self.beliefs, recovered, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        return set(self._values(observation).get(key, []))

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        return claim.value in self.recoverable(observation, claim.key)
