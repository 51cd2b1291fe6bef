"""The host half of the LangGraph checkpointer adapter (`toki/real/inenv/langgraph_ckpt.py`).

No LLM: every gate point is released without a reply. A reader is served each thread's
latest checkpoint (the nodes in its `done` channel); the checkpointer keeps every checkpoint,
so what was served stays recoverable. Claims workloads do not apply (a step is `run
{thread}`); the checks of a run are the derived-state classes and the restart checks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.real.adapter import Beliefs, Picker
from toki.real.adapters.langchain import DEFAULT_DSN
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload

__all__ = ["LangGraphCheckpointHost"]


@dataclass(frozen=True, slots=True)
class LangGraphCheckpointHost:
    barrier: bool = False  # the saver's put waits for the writes in flight (a control)

    def config(self, workload: Workload) -> dict[str, Any]:
        config: dict[str, Any] = {"dsn": os.environ.get("TOKI_PG_DSN", DEFAULT_DSN)}
        if self.barrier:
            config["barrier"] = True
        return config

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        return None

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        return {k: {"value": None, "live": []} for k in keys}

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        return self.beliefs(observation, keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        return {
            str(m.get("text"))
            for m in observation.get("memories") or ()
            if str(m.get("user")) == key
        }

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        return str(claim.value) in self.recoverable(observation, str(claim.key))
