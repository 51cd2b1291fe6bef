"""The adapter protocol: what toki needs to know to drive one library at one version.

An adapter has two halves. The worker half (`toki/real/inenv/<adapter>.py`, class `Adapter`)
runs inside the library's own environment: it builds a fresh instance per run, wraps the
library's boundary calls as gate points with footprints, runs an agent's inbox through the
library's public write API, and reports what the library holds through its own read API and
durable record. The host half (`HostAdapter`, here) runs in toki: it answers LLM gate points
from the workload's judge and turns the worker's observations into the belief states,
recoveries and recoverable values that the anomaly checks compare. `RealSystem` ties the two
to a lock file and to the model row the real row stands beside.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload

__all__ = [
    "Beliefs",
    "HostAdapter",
    "Picker",
    "RealSystem",
    "ScriptedJudge",
    "claims_in_stored_order",
    "replayed_beliefs",
]

Beliefs = dict[str, Any]


def claims_in_stored_order(
    workload: Workload, stored: Iterable[Any], matches: Callable[[SimClaim, Any], bool]
) -> list[SimClaim]:
    """The workload's claims in the order the library stored them (each claim used once):
    what a recovery that re-applies the stored inputs replays."""
    pool = [c for inbox in workload.inboxes for c in inbox]
    out = []
    for item in stored:
        claim = next((c for c in pool if matches(c, item)), None)
        if claim is not None:
            out.append(claim)
            pool.remove(claim)
    return out


def replayed_beliefs(
    beliefs: Callable[[Mapping[str, Any], Sequence[str]], Beliefs],
    recovered: Any,
    keys: Sequence[str],
) -> Beliefs:
    """The beliefs of a recovery's replayed observation, or a failed recovery per key when
    the worker replayed nothing."""
    if not isinstance(recovered, Mapping) or "replayed" not in recovered:
        return {k: {"value": None, "live": [], "recovery_failed": "no replay"} for k in keys}
    return beliefs(recovered["replayed"], keys)


class Picker(Protocol):
    """A judge as the models use it (`toki.systems.base.SimJudge`): picks one candidate
    answer to a question; `p` and `seed` name it in reports and witnesses."""

    @property
    def p(self) -> float: ...

    @property
    def seed(self) -> int: ...

    def pick(self, question: str, candidates: Sequence[str]) -> str: ...


@dataclass(frozen=True, slots=True)
class ScriptedJudge:
    """Answers from a script: the first (substring of the question, answer) that matches and
    is among the candidates, else `default` if it is one, else the challenger (the last).
    For targeted schedules ("both agents decide DELETE+ADD")."""

    script: tuple[tuple[str, str], ...] = ()
    default: str | None = None
    p: float = 1.0
    seed: int = 0

    def pick(self, question: str, candidates: Sequence[str]) -> str:
        for needle, answer in self.script:
            if needle in question and answer in candidates:
                return answer
        if self.default is not None and self.default in candidates:
            return self.default
        return candidates[-1]


class HostAdapter(Protocol):
    """The host's half of an adapter (see the module docstring)."""

    def config(self, workload: Workload) -> dict[str, Any]:
        """What the worker's `open` needs beyond the seed (e.g. the users to observe)."""
        ...

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        """The reply that releases `point` (an LLM's response text), None for most points."""
        ...

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        """What a reader is served per key: {"value": v or None, "live": [...]}. Called on
        the final observation and on every timeline snapshot."""
        ...

    def recover(
        self,
        observation: Mapping[str, Any],
        keys: Sequence[str],
        judge: Picker,
        recovered: Any,
    ) -> Beliefs:
        """The library's recovery from its durable record (`recovered`: what the worker's
        `recover` returned, None when the library has no recovery of its own)."""
        ...

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        """Every value of `key` the library can still produce (current, history, audit)."""
        ...

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        """The claim left a trace in the library's state (counts as committed for N2)."""
        ...


@dataclass(frozen=True, slots=True)
class RealSystem:
    """One library at one version, as `toki real` drives it."""

    name: str
    title: str
    library: str  # the distribution whose version is pinned
    version: str
    module: str  # what `import` loads (checked when the environment is made)
    adapter: str  # module of toki/real/inenv
    host: HostAdapter = field(compare=False)
    lock: str | None = None  # lock file in toki/real/locks; None: toki's own interpreter
    env: Mapping[str, str] = field(default_factory=dict)
    model: str | None = None  # the model row this real row stands beside
    intercepted: tuple[str, ...] = ()
    simplified: tuple[str, ...] = ()
    crashes: str = "an agent abandoned between two gate points, the library's state as left"
    venv: str | None = None  # the environment it shares (by name); None: its own
    exhaustible: bool = True  # False: the matrix samples (DPOR cannot finish, or not in budget)

    @property
    def env_name(self) -> str:
        """The name of its environment (systems with one lock file share one)."""
        return self.venv or self.name

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "library": self.library,
            "version": self.version,
            "lock": self.lock,
            "model": self.model,
            "intercepted": list(self.intercepted),
            "simplified": list(self.simplified),
            "crashes": self.crashes,
        }
