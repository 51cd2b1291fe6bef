"""Deployments of one library beyond "the agents are threads of one instance".

`Processes(host)`: each agent runs its own instance of the library over the same files, as
separate processes of one service would (the worker's config "deployment": "processes";
adapters that support it: mem0). What processes share is then the files, not the objects:
mem0's FAISS store keeps its index and docstore in memory and saves both files whole on
every write, so each write of one process declares a write of the files, and a reader is a
fresh instance that loads them (what a new process would be served). Real OS processes,
free-running and unscheduled, are `toki.real.procs` (`toki real procs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.real.adapter import Beliefs, HostAdapter, Picker
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload

__all__ = ["Processes"]


@dataclass(frozen=True, slots=True)
class Processes:
    """A host adapter whose worker runs one library instance per agent."""

    inner: HostAdapter

    def config(self, workload: Workload) -> dict[str, Any]:
        return {
            **self.inner.config(workload),
            "deployment": "processes",
            "agents": len(workload.inboxes),
        }

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        return self.inner.answer(point, judge)

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        return self.inner.beliefs(observation, keys)

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        return self.inner.recover(observation, keys, judge, recovered)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        return self.inner.recoverable(observation, key)

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        return self.inner.recorded(observation, claim)
