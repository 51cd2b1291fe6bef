"""Gate points as explorer steps.

A gate point is a wrapped call at a library boundary (LLM, vector store, history database,
graph or SQL statement, clock). The worker reports each one as the agent parks there, with a
footprint: the shared resources the call, and the agent's own code up to its next gate point,
may read and write. Executing the explorer step that stands for it releases the call.

Resources are (family, key) pairs, key "*" meaning every key of the family. They become
`toki.sim` resources ("real:" + family, key) on a `Local` step (key "*" -> `ALL`), so the
explorer's `dependent` relation, and with it DPOR, apply unchanged. A point of kind "lock"
is different: it becomes a lock on the simulated store (`lock_steps`), so an agent that would
wait for a lock another parked agent holds is disabled instead of hanging the worker. A
release publishes what was written under the lock, so its point declares that footprint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toki.sim.program import ALL, Begin, Commit, Local, Resource, Step, Write

__all__ = ["GatePoint", "as_local", "lock_steps", "resources"]


@dataclass(frozen=True, slots=True)
class GatePoint:
    """One parked call, as the worker reported it."""

    agent: int
    kind: str
    name: str
    detail: Any = field(default=None, compare=False)
    reads: tuple[tuple[str, Any], ...] = ()
    writes: tuple[tuple[str, Any], ...] = ()
    claim: int | None = None  # index of the inbox claim the agent is working on
    task: int = 0  # the agent's task (async libraries: creation number; 0: its main task)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GatePoint:
        def pairs(rows: Iterable[Sequence[Any]]) -> tuple[tuple[str, Any], ...]:
            return tuple((str(r[0]), _key(r[1])) for r in rows)

        return cls(
            int(data["agent"]),
            str(data["kind"]),
            str(data["name"]),
            data.get("detail"),
            pairs(data.get("reads", ())),
            pairs(data.get("writes", ())),
            None if data.get("claim") is None else int(data["claim"]),
            int(data.get("task") or 0),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "kind": self.kind,
            "name": self.name,
            "detail": self.detail,
            "reads": [list(r) for r in self.reads],
            "writes": [list(w) for w in self.writes],
            "claim": self.claim,
            "task": self.task,
        }


def _key(key: Any) -> Any:
    return tuple(_key(k) for k in key) if isinstance(key, list) else key


def resources(pairs: Iterable[tuple[str, Any]]) -> frozenset[Resource]:
    """Worker resources as explorer resources."""
    return frozenset((f"real:{fam}", ALL if key == "*" else key) for fam, key in pairs)


def as_local(point: GatePoint) -> Local:
    """The explorer step of a gate point: a `Local` with the point's declared footprint
    (the point itself is the step's detail)."""
    return Local(point.name, point, resources(point.reads), resources(point.writes))


def is_release(point: GatePoint) -> bool:
    return isinstance(point.detail, Mapping) and point.detail.get("op") == "release"


def lock_steps(point: GatePoint) -> list[Step]:
    """A lock gate point as steps on the simulated store: acquiring is a transaction that
    writes the lock's row (it waits while another transaction holds it); releasing commits
    that transaction, one step after the step that runs the real release and carries the
    point's footprint (what the release publishes): see `toki.real.driver.real_program`."""
    detail = point.detail if isinstance(point.detail, Mapping) else {}
    name = str(detail.get("lock", "lock"))
    if is_release(point):
        return [as_local(point), Commit()]
    return [Begin(), Write(("real:lock", name), point)]  # the row's value names the point
