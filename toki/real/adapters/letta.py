"""The host half of the Letta adapter: agents sharing one core-memory block.

The LLM gate point shows the block as the agent loaded it at step start; the host answers
as the model (`toki.systems.letta`) decides, with the same question text: no line of the key
-> `core_memory_append` of "<key> is <value>"; a line with the same value -> no tool call;
otherwise the judge picks keep / replace ("letta agent: <key>: block says ..., user says
...") and replace is `core_memory_replace` of the first line of the key. Readers are served
the block's lines (two lines of one key contradict). Letta keeps no history of a block's
values, so the recoverable values are the block's; recovery is the block row itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.real.adapter import Beliefs, Picker
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry

__all__ = ["LettaHost", "block_lines"]


def block_lines(value: Any) -> list[tuple[str, str]]:
    """The "<key> is <value>" lines of a block's text, in order."""
    out = []
    for line in str(value or "").splitlines():
        key, sep, val = line.partition(" is ")
        if sep:
            out.append((key.strip(), val.strip()))
    return out


@dataclass(frozen=True, slots=True)
class LettaHost:
    def config(self, workload: Workload) -> dict[str, Any]:
        return {"agents": len(workload.inboxes)}

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        if point.kind != "llm":
            return None
        detail = point.detail if isinstance(point.detail, Mapping) else {}
        claim = detail.get("claim") or {}
        key, value = str(claim.get("key", "")), str(claim.get("value", ""))
        mine = [v for k, v in block_lines(detail.get("block")) if k == key]
        if value in mine:
            return None
        if not mine:
            return {"name": "core_memory_append", "args": {"content": f"{key} is {value}"}}
        question = f"letta agent: {key}: block says {mine[0]!r}, user says {value!r}"
        if judge.pick(question, ["keep", "replace"]) == "keep":
            return None
        return {
            "name": "core_memory_replace",
            "args": {"old_content": f"{key} is {mine[0]}", "new_content": f"{key} is {value}"},
        }

    def _values(self, observation: Mapping[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        block = observation.get("block") or {}
        for key, value in block_lines(block.get("value")):
            out.setdefault(key, []).append(value)
        return out

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        values = self._values(observation)
        return {k: belief_entry(values.get(k, [])) for k in keys}

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        """No record of edits to replay: the block row is what survives a restart."""
        return self.beliefs(observation, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        return set(self._values(observation).get(key, []))

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        return claim.value in self.recoverable(observation, claim.key)
