"""What an executable model of a memory system provides, and how it becomes a program.

A model runs a system's write path as steps on the simulated store (`toki.sim`), so the
scheduler can interleave agents inside the read → judge → write window, and it answers the
three questions the anomaly checkers ask of a finished run:

- `beliefs(state)`: what the live system believes, read from its committed rows;
- `recover(state, judge)`: what the system's own recovery procedure rebuilds from what it
  durably recorded (N1 compares the two);
- `recoverable(state, key)`: every value the final store can still produce for a key, from
  current rows, history or audit rows (N3 asks whether a value once believed is among them).

N2 needs no extra method: it re-runs the same model serially (`serial_beliefs`).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from toki.canonical import canonical_json, digest
from toki.isolation import Isolation
from toki.sim.engine import Execution
from toki.sim.program import Agent, Fault, Program, World
from toki.sim.store import SimStore
from toki.sim.workload import SimClaim, Workload

__all__ = [
    "ANOMALIES",
    "Beliefs",
    "SimJudge",
    "SystemModel",
    "build_program",
    "run_serially",
    "serial_beliefs",
]

ANOMALIES = ("N1", "N2", "N3")
Beliefs = dict[str, Any]
State = Mapping[Hashable, Any]


@dataclass(frozen=True, slots=True)
class SimJudge:
    """A judge for simulated runs: picks one of the candidates, favouring the challenger (the
    last) with probability p. Its answer is a function of (seed, question), so within one run
    the same question gets the same answer (what N2's serial re-runs need); a recovery with
    another seed is a fresh, unpinned judge (what N1 measures)."""

    p: float = 0.5
    seed: int = 0

    def pick(self, question: str, candidates: Sequence[str]) -> str:
        h = hashlib.sha256(canonical_json([self.seed, question, list(candidates)]).encode())
        rng = random.Random(int.from_bytes(h.digest()[:8], "big"))
        if len(candidates) == 1 or rng.random() < self.p:
            return candidates[-1]
        return rng.choice(list(candidates[:-1]))


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What an agent may use besides the store: its index, the judge, shared fault switches."""

    index: int
    judge: SimJudge
    switches: dict[str, Any] = field(default_factory=dict)


class SystemModel:
    """Base class of the executable models (see the module docstring)."""

    name: ClassVar[str] = "system"
    title: ClassVar[str] = "System"
    release: ClassVar[str] = ""
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED
    sources: ClassVar[tuple[str, ...]] = ()
    encodes: ClassVar[Mapping[str, str]] = {}
    simplifies: ClassVar[tuple[str, ...]] = ()
    abstains: ClassVar[Mapping[str, str]] = {}  # anomaly -> why the notes cannot decide it

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return {}

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        raise NotImplementedError

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        raise NotImplementedError

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        raise NotImplementedError

    def recoverable(self, state: State, key: str) -> set[str]:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "release": self.release,
            "isolation": self.isolation.value,
            "sources": list(self.sources),
            "encodes": dict(self.encodes),
            "simplifies": list(self.simplifies),
            "abstains": dict(self.abstains),
        }


def build_program(
    system: SystemModel,
    workload: Workload,
    *,
    level: Isolation | None = None,
    judge: SimJudge | None = None,
    crash_budget: int = 0,
    max_steps: int = 10_000,
    store_factory: Callable[..., SimStore] = SimStore,
) -> Program:
    """A replayable program: fresh store (the model's initial rows), one agent per inbox.
    `store_factory` lets a test substitute a deliberately broken store (tests/mutants).

    The workload's named faults become scheduler choices: `duplicate:<agent>` re-delivers
    the agent's first claim at the end of its inbox."""
    chosen = level if level is not None else system.isolation
    the_judge = judge or SimJudge()
    initial = system.initial(workload)

    def build() -> World:
        inboxes = [list(inbox) for inbox in workload.inboxes]
        switches: dict[str, Any] = {}
        agents = tuple(
            system.agent(_live(inboxes, i), AgentContext(i, the_judge, switches))
            for i in range(len(inboxes))
        )
        faults = tuple(_fault(name, inboxes, switches) for name in workload.faults)
        return World(store_factory(chosen, initial=initial), agents, faults)

    name = f"{system.name}/{workload.name}/{chosen.value}"
    return Program(name, build, crash_budget, max_steps)


class _Inbox(Sequence[SimClaim]):
    """A live view of one agent's inbox (faults may append to it during a run)."""

    def __init__(self, items: list[SimClaim]) -> None:
        self._items = items

    def __getitem__(self, i: int) -> SimClaim:  # type: ignore[override]
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):  # type: ignore[no-untyped-def]
        i = 0
        while i < len(self._items):  # sees claims appended by a fault while iterating
            yield self._items[i]
            i += 1


def _live(inboxes: list[list[SimClaim]], i: int) -> _Inbox:
    return _Inbox(inboxes[i])


def _fault(name: str, inboxes: list[list[SimClaim]], switches: dict[str, Any]) -> Fault:
    kind, _, arg = name.partition(":")
    if kind == "duplicate":
        target = int(arg or 0)

        def apply() -> None:
            if inboxes[target]:
                inboxes[target].append(inboxes[target][0])

        return Fault(name, apply, 1, frozenset({target}))
    if kind == "clock-rollback":

        def roll() -> None:
            switches["clock_offset"] = switches.get("clock_offset", 0) - int(arg or 10)

        return Fault(name, roll, 1, None)
    from toki.errors import InvalidInput

    raise InvalidInput(
        "fault", f"unknown fault {name!r}", "use duplicate:<agent> or clock-rollback:<ticks>"
    )


def run_serially(
    system: SystemModel, workload: Workload, order: Sequence[SimClaim], judge: SimJudge
) -> State:
    """Run the claims one after another in one agent, with no interleaving at all."""
    single = Workload(workload.name, (tuple(order),), ())
    program = build_program(system, single, level=Isolation.SERIALIZABLE, judge=judge)
    ex = Execution(program)
    while True:
        enabled = [pid for pid in ex.enabled() if pid == 0]
        if not enabled:
            break
        ex.step(0)
    return ex.store.snapshot()


def serial_beliefs(
    system: SystemModel,
    workload: Workload,
    claims: Sequence[SimClaim],
    judge: SimJudge,
    *,
    limit: int = 120,
) -> set[str]:
    """The belief states (hashed) of serial executions of the claims, in every order (up to
    `limit` orders; beyond that a fixed-seed sample of `limit` orders — a sample can miss
    the order a run is equivalent to, so `n2_drift` re-checks before it reports)."""
    keys = workload.keys
    orders: Iterable[Sequence[SimClaim]]
    unique = list(dict.fromkeys(claims))
    if _factorial(len(unique)) <= limit:
        orders = itertools.permutations(unique)
    else:
        rng = random.Random(0)
        orders = [rng.sample(unique, len(unique)) for _ in range(limit)]
    out = set()
    for order in orders:
        state = run_serially(system, workload, order, judge)
        out.add(belief_hash(system.beliefs(state, keys)))
    return out


def belief_hash(beliefs: Beliefs) -> str:
    return digest(canonical_json(beliefs))


def _factorial(n: int) -> int:
    out = 1
    for i in range(2, n + 1):
        out *= i
    return out


Builder = Callable[[], SystemModel]
