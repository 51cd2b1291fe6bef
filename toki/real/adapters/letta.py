"""The host half of the Letta adapter: agents sharing one core-memory block.

The LLM gate point shows the block as the agent loaded it at step start; the host answers
as the model (`toki.systems.letta`) decides, with the same question text: no line of the key
-> `core_memory_append` of "<key> is <value>"; a line with the same value -> no tool call;
otherwise the judge picks keep / replace ("letta agent: <key>: block says ..., user says
...") and replace is `core_memory_replace` of the first line of the key. Readers are served
the block's lines (two lines of one key contradict).

Letta keeps no history of a block's values, but each step persists its messages (the tool
call with its arguments, the tool's return with its status) and a provider trace (the
system prompt as compiled, the block as loaded), as the model row (`toki.systems.letta`)
counts them: the recoverable values are the block's, the tool arguments' and the traced
blocks'. Letta has no recovery of its own; the one the model row names is the application's:
re-apply the successful tool calls in message order to the empty block, with the core
executor's string semantics (`replay_tools`).

A program (family "letta": archival inserts, searches, decisions; `archival-decide`) is
checked by N2 alone: the block's final lines against every serial order of its steps (a
`decide` is one step, its search and its write); a decision computed from a search that
missed an insert committed before the decision wrote can end in a block no serial order
gives (when the inserting agent also set the block in between).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from toki.real.adapter import Beliefs, Picker
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry

__all__ = ["LettaHost", "block_lines", "replay_tools"]


def block_lines(value: Any) -> list[tuple[str, str]]:
    """The "<key> is <value>" lines of a block's text, in order."""
    out = []
    for line in str(value or "").splitlines():
        key, sep, val = line.partition(" is ")
        if sep:
            out.append((key.strip(), val.strip()))
    return out


def _tool_values(call: Mapping[str, Any]) -> list[tuple[str, str]]:
    args = call.get("args") or {}
    texts = [args.get(k) for k in ("content", "old_content", "new_content")]
    return [kv for t in texts if t for kv in block_lines(t)]


def replay_tools(calls: Sequence[Mapping[str, Any]], initial: str = "") -> str:
    """The block rebuilt from the recorded tool calls, in order, as LettaCoreToolExecutor
    applies them: append is `value + "\\n" + content`; replace is `str.replace` when the old
    content is in the value (else the tool fails and the block stays). Calls whose recorded
    return is not "success" (a refused update) changed nothing and are skipped."""
    value = initial
    for call in calls:
        args = call.get("args") or {}
        if call.get("status") != "success":
            continue
        if call.get("name") == "core_memory_append":
            value = value + "\n" + str(args.get("content"))
        elif call.get("name") == "core_memory_replace":
            old, new = str(args.get("old_content")), str(args.get("new_content"))
            if old in value:
                value = value.replace(old, new)
    return value


@dataclass(frozen=True, slots=True)
class LettaHost:
    # N2 over a program (family "letta"): the block's final lines against every serial
    # order of the same steps (a `decide` is one step: its search and its write)
    program_checks: ClassVar[tuple[str, ...]] = ("N2",)

    def config(self, workload: Workload) -> dict[str, Any]:
        out: dict[str, Any] = {"agents": len(workload.inboxes)}
        if getattr(workload, "family", None) == "letta":
            out["archive"] = True  # one archival memory the agents share
        return out

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
        """The block's values of each key; after a program (whose keys are its steps'
        texts, not the block's keys) the values of every key the block holds."""
        values = self._values(observation)
        if "steps" in observation:
            keys = sorted(values)
        return {k: belief_entry(values.get(k, [])) for k in keys}

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        """The model row's recovery on the real record: the tool calls re-applied (no judge)."""
        rebuilt = replay_tools(observation.get("tool_calls") or [])
        return self.beliefs({"block": {"value": rebuilt}}, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        """The block, the tool calls' arguments, the blocks the provider traces hold."""
        out = set(self._values(observation).get(key, []))
        for call in observation.get("tool_calls") or []:
            out.update(v for k, v in _tool_values(call) if k == key)
        for prompt in observation.get("trace_prompts") or []:
            out.update(v for k, v in block_lines(prompt) if k == key)
        return out

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        op = getattr(claim, "op", None)
        if op is not None:  # a program's step a crash interrupted: did it write?
            text = str(claim.arg("text"))  # type: ignore[attr-defined]
            if op == "insert":
                return text in (observation.get("passages") or [])
            if op == "remember":
                block = (observation.get("block") or {}).get("value")
                return tuple(x.strip() for x in text.split(" is ", 1)) in block_lines(block)
            return False  # a decide's write is not told apart from the block's others
        return claim.value in self.recoverable(observation, claim.key)
