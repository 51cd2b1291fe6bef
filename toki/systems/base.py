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

A model also declares what the system durably records (`Records`); which checks it abstains
from follows from that declaration by one written rule (`abstentions`), never per cell.
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
from toki.sim.program import Agent, Crash, Fault, Program, World
from toki.sim.store import SimStore
from toki.sim.workload import SimClaim, Workload

__all__ = [
    "ANOMALIES",
    "CRASHED_AT",
    "Beliefs",
    "Records",
    "SimJudge",
    "SystemModel",
    "abstentions",
    "build_program",
    "run_serially",
    "serial_beliefs",
]

ANOMALIES = ("N1", "RD", "N2", "N3")
"""The checks, in display order: N1 replay inconsistency (re-adjudication by a fresh judge),
RD recovery divergence for any other reason, N2 belief-drift skew, N3 audit erasure."""
CRASHED_AT = "crashed"
"""An agent crashed by the scheduler ends with the outcome (CRASHED_AT, claims it had taken
from its inbox): the last of them may have been half-written."""
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
    calls: list[int] | None = field(default=None, compare=False, repr=False)
    """When a list, calls[0] counts the questions asked (how the checkers see whether a
    recovery consulted the judge at all)."""

    def counting(self) -> SimJudge:
        """The same judge (same answers), counting its calls."""
        return SimJudge(self.p, self.seed, [0])

    @property
    def asked(self) -> int:
        return self.calls[0] if self.calls else 0

    def pick(self, question: str, candidates: Sequence[str]) -> str:
        if self.calls is not None:
            self.calls[0] += 1
        h = hashlib.sha256(canonical_json([self.seed, question, list(candidates)]).encode())
        rng = random.Random(int.from_bytes(h.digest()[:8], "big"))
        if len(candidates) == 1 or rng.random() < self.p:
            return candidates[-1]
        return rng.choice(list(candidates[:-1]))


@dataclass(frozen=True, slots=True)
class AgentContext:
    """What an agent may use besides the store: its index, the judge, shared fault switches,
    and the level the program's store runs at (a model that opens a real `Memory` over the
    simulated store, `toki.systems.toki_lib`, runs its writes at that level)."""

    index: int
    judge: SimJudge
    switches: dict[str, Any] = field(default_factory=dict)
    level: Isolation | None = None


@dataclass(frozen=True, slots=True)
class Records:
    """What a model declares the system durably records: the input of the abstention rule.

    - `inputs`: the claims as received (messages, episodes, pages, data items) survive;
    - `decisions`: each decision's outcome survives (history rows, tool calls, a decision log);
    - `durable_state`: the memory rows themselves survive a restart;
    - `concurrency`: the write path's concurrency control was read from the code (False: the
      notes did not read it, or a concurrent writer of the real system is not modelled).
    """

    inputs: bool = True
    decisions: bool = True
    durable_state: bool = True
    concurrency: bool = True

    def to_json(self) -> dict[str, bool]:
        return {
            "inputs": self.inputs,
            "decisions": self.decisions,
            "durable_state": self.durable_state,
            "concurrency": self.concurrency,
        }


def abstentions(records: Records) -> dict[str, str]:
    """The written rule (docs/verdict-matrix.md, "Abstention"): which checks cannot run on a
    model, and why, from what it declares it records.

    - N1 and RD compare the live state with what the system's own recovery rebuilds from its
      durable records. A system that records neither its inputs nor its decisions but keeps
      its rows reads them back as they are: there is no second state to compare, so both
      abstain. (Recording nothing at all is different: a restart rebuilds an empty memory.)
    - N2 compares the live state with serial executions of the same model; when the
      concurrency control is not known, the model's interleavings would be invented: abstain.
    - N3 asks the final store only: it always runs.
    """
    out: dict[str, str] = {}
    if not records.inputs and not records.decisions and records.durable_state:
        why = (
            "records neither its inputs nor its decisions; its stored rows are read back as "
            "they are, so no recovery rebuilds a second state to compare"
        )
        out["N1"] = out["RD"] = why
    if not records.concurrency:
        out["N2"] = (
            "its write path's concurrency control is not known (not read, or a concurrent "
            "writer is not modelled), so its interleavings would be invented"
        )
    return out


class SystemModel:
    """Base class of the executable models (see the module docstring)."""

    name: ClassVar[str] = "system"
    title: ClassVar[str] = "System"
    release: ClassVar[str] = ""
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED
    sources: ClassVar[tuple[str, ...]] = ()
    encodes: ClassVar[Mapping[str, str]] = {}
    simplifies: ClassVar[tuple[str, ...]] = ()
    records: ClassVar[Records] = Records()
    capacities: ClassVar[Mapping[str, int]] = {}
    """Documented capacity limits the model encodes (name -> entries); the verdict matrix
    runs a workload that crosses each (`toki.sim.workload.capacity`)."""
    version: ClassVar[str] = ""  # the short revision or release modelled (matrix row identity)

    @property
    def abstains(self) -> Mapping[str, str]:
        """anomaly -> why the check cannot run on this model (`abstentions(records)`)."""
        return abstentions(self.records)

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
            "records": self.records.to_json(),
            "capacities": dict(self.capacities),
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
    the agent's first claim at the end of its inbox. With `crash_budget`, a crashed agent
    ends with the outcome (CRASHED_AT, claims taken from its inbox)."""
    chosen = level if level is not None else system.isolation
    the_judge = judge or SimJudge()
    initial = system.initial(workload)

    def build() -> World:
        inboxes = [list(inbox) for inbox in workload.inboxes]
        switches: dict[str, Any] = {}
        views = [_Inbox(inbox) for inbox in inboxes]
        agents = tuple(
            _survive(system.agent(view, AgentContext(i, the_judge, switches, chosen)), view)
            for i, view in enumerate(views)
        )
        faults = tuple(_fault(name, inboxes, switches) for name in workload.faults)
        return World(store_factory(chosen, initial=initial), agents, faults)

    name = f"{system.name}/{workload.name}/{chosen.value}"
    return Program(name, build, crash_budget, max_steps)


class _Inbox(Sequence[SimClaim]):
    """A live view of one agent's inbox (faults may append to it during a run); `taken`
    counts the claims the agent's loop has taken from it."""

    def __init__(self, items: list[SimClaim]) -> None:
        self._items = items
        self.taken = 0

    def __getitem__(self, i: int) -> SimClaim:  # type: ignore[override]
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self):  # type: ignore[no-untyped-def]
        i = 0
        while i < len(self._items):  # sees claims appended by a fault while iterating
            self.taken = i + 1
            yield self._items[i]
            i += 1


def _survive(agent: Agent, inbox: _Inbox) -> Agent:
    """Run the model's agent; a crash ends it with (CRASHED_AT, claims taken) instead of the
    bare CRASHED outcome, so that N2 knows which claims it had started."""
    try:
        return (yield from agent)
    except Crash:
        return (CRASHED_AT, inbox.taken)


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
