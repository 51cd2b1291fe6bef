"""The program model of the explorer: agents are generators of steps, a program builds them.

An agent is a Python generator that yields `Step` values; the engine (`toki.sim.engine`)
executes each step against a `SimStore` and sends the result back into the generator. Every
yielded step is a scheduling point, so the interleavings the explorer can produce are exactly
the interleavings of yielded steps. A `Program` is a factory: `build()` returns a fresh store,
fresh agent generators and the program's fault choices, so any schedule can be re-run from
scratch and reproduces the same run (agents must be deterministic and must not share state
with the world outside what `build` creates).

What the engine sends back into the agent after each step:

* `Begin`, `Write`, `Delete`, `Commit`, `Abort`, `Local`: None;
* `Read`: the value (None when the key does not exist);
* `Select`, `UpdateWhere`, `DeleteWhere`: a dict of the rows, keys in a canonical order;
* any statement or a commit the store refuses: the `SerializationFailure` (or `Deadlock`)
  object itself, not raised. The transaction is gone; as in PostgreSQL, every further
  statement and the `Commit()` of that transaction receive the same failure without touching
  the store, and an `Abort()` is a harmless no-op. The agent decides to retry (yield `Begin()`
  again) or to give up.

A crash is thrown into the generator as `Crash` after the engine rolled back the agent's open
transaction; an agent that does not catch it is finished with outcome `CRASHED`. Transaction
ids never reach agents, so schedules that differ only in the order of independent steps give
the same agent behaviour (see `Footprint`).

Footprints and `dependent` (the independence relation that DPOR relies on) live here too,
because they are part of the model: `docs/exploration.md` argues why the relation is sound.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, NamedTuple, TypeAlias

from toki.errors import InvalidInput
from toki.isolation import Isolation
from toki.sim.store import Predicate, SimStore, Updater

__all__ = [
    "ALL",
    "CRASHED",
    "Abort",
    "Agent",
    "Begin",
    "Commit",
    "Crash",
    "Delete",
    "DeleteWhere",
    "Fault",
    "Footprint",
    "Local",
    "Program",
    "Read",
    "Resource",
    "Select",
    "Step",
    "UpdateWhere",
    "World",
    "Write",
    "covers",
    "dependent",
    "program",
]


# ---------------------------------------------------------------------------- steps


@dataclass(frozen=True, slots=True)
class Begin:
    """Start a transaction. The engine keeps its id; the agent never sees it."""


@dataclass(frozen=True, slots=True)
class Read:
    """Read one key in the open transaction."""

    key: Hashable


@dataclass(frozen=True, slots=True)
class Select:
    """A predicate read: `where(key, value)` over every live row; `name` labels it in traces."""

    where: Predicate
    name: str = ""


@dataclass(frozen=True, slots=True)
class Write:
    """Insert or update one key (None is not storable: use `Delete`)."""

    key: Hashable
    value: Any


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete one key (a blind write of a tombstone)."""

    key: Hashable


@dataclass(frozen=True, slots=True)
class UpdateWhere:
    """`UPDATE ... SET value = fn(key, value) WHERE where(key, value)`."""

    where: Predicate
    fn: Updater
    name: str = ""


@dataclass(frozen=True, slots=True)
class DeleteWhere:
    """`DELETE ... WHERE where(key, value)`."""

    where: Predicate
    name: str = ""


@dataclass(frozen=True, slots=True)
class Commit:
    """Commit the open transaction (at SERIALIZABLE the store may refuse)."""


@dataclass(frozen=True, slots=True)
class Abort:
    """Roll back the open transaction; a no-op when the store already aborted it."""


@dataclass(frozen=True, slots=True)
class Local:
    """A pure local step (e.g. an LLM judging two claims): touches no shared state, but it is
    a scheduling point, so other agents can run while this agent "thinks".

    `reads` and `writes` declare shared resources the step touches outside the simulated
    store (a real library's gate point, `toki.real`): they join the step's footprint, so
    DPOR orders it against every step that touches them. Empty for a pure local step."""

    name: str = "judge"
    detail: Any = None
    reads: frozenset[Resource] = frozenset()
    writes: frozenset[Resource] = frozenset()


Step: TypeAlias = (
    Begin | Read | Select | Write | Delete | UpdateWhere | DeleteWhere | Commit | Abort | Local
)
Agent: TypeAlias = Generator[Step, Any, Any]
"""An agent: yields steps, receives results, returns its outcome (any value with a stable repr)."""


class Crash(Exception):
    """Thrown into an agent's generator when the scheduler crashes it between two steps.

    The engine has already rolled back the agent's open transaction. Catch it to model a
    restart (the agent may begin again); let it propagate and the agent ends as `CRASHED`.
    """


class _Crashed:
    """The outcome of an agent that did not survive a crash."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "CRASHED"

    def __reduce__(self) -> str:
        return "CRASHED"


CRASHED: Final = _Crashed()


# ---------------------------------------------------------------------------- programs


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault the scheduler may inject between any two steps, like any other choice.

    `apply` runs with no arguments (close over the world's shared state in `Program.build`);
    it must not call the store (a store-level failure is a crash). It fires exactly `limit`
    times per run: it stays on offer until then, so a firing after the agents it affects
    have finished is the run in which the fault came too late to matter. (Offering it only
    while they run would let an agent's last step disable it, which DPOR cannot reverse.)
    `affects` names the agents whose behaviour it can change (e.g. the owner of the inbox it
    duplicates a claim into); None means all of them. The fault is dependent with every step
    of those agents, which keeps DPOR sound for faults it knows nothing else about.
    """

    name: str
    apply: Callable[[], object]
    limit: int = 1
    affects: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class World:
    """What one `Program.build()` call returns: a fresh store, agents and faults."""

    store: SimStore
    agents: tuple[Agent, ...]
    faults: tuple[Fault, ...] = ()


@dataclass(frozen=True, slots=True)
class Program:
    """A factory of fresh worlds, so that any schedule can be replayed from scratch.

    `crash_budget` is the number of crashes of *each* agent a run contains: agent i's crash
    choice ("crash:i") is offered until it has been taken that many times, and crashing an
    agent that has already finished is a recorded no-op (the crash came too late). A budget
    per agent rather than per run keeps every choice disabled only by itself: with a shared
    budget one agent's crash would disable the others', a race DPOR cannot reverse.
    `max_steps` caps one run; a run that reaches it is marked truncated (agents that retry
    for ever need it).
    """

    name: str
    build: Callable[[], World]
    crash_budget: int = 0
    max_steps: int = 10_000


def program(
    name: str,
    level: Isolation,
    initial: Mapping[Any, Any],
    agents: Sequence[Callable[[], Agent]],
    *,
    faults: Callable[[], Sequence[Fault]] | None = None,
    crash_budget: int = 0,
    max_steps: int = 10_000,
) -> Program:
    """A program from agent functions (zero-argument generator functions) and initial data."""
    if not agents:
        raise InvalidInput("agents", "a program needs at least one agent")
    fns = tuple(agents)
    data = dict(initial)

    def build() -> World:
        return World(
            SimStore(level, initial=data),
            tuple(fn() for fn in fns),
            tuple(faults()) if faults is not None else (),
        )

    return Program(name, build, crash_budget, max_steps)


# ---------------------------------------------------------------------------- footprints


class _All:
    __slots__ = ()

    def __repr__(self) -> str:
        return "ALL"


ALL: Final = _All()
"""The wildcard key: ("data", ALL) is every key's committed data (a snapshot or a scan)."""

Resource: TypeAlias = tuple[str, Any]
"""(family, key). Families: "data" (committed versions of a key), "xlock" (its write lock and
pending value), "slock" (its REPEATABLE_READ read locks), "agent" (an agent's local state and
generator), "waits" (the wait-for graph), "ssi" (all SERIALIZABLE bookkeeping), "crash" (the
crash budget), "fault" (one fault's firing count); `Local` steps may declare others (`toki.real`
uses "real:<family>" for a library's own state)."""


class _Access(NamedTuple):
    items: frozenset[Resource]
    wild: frozenset[str]  # families accessed at every key
    fams: frozenset[str]  # families accessed at all


@lru_cache(maxsize=65536)
def _access(resources: frozenset[Resource]) -> _Access:
    wild = frozenset(f for f, k in resources if k is ALL)
    return _Access(resources, wild, frozenset(f for f, _ in resources))


_NO_ACCESS = _access(frozenset())


def _meet(a: _Access, b: _Access) -> bool:
    if not a.fams or not b.fams:
        return False
    if not a.items.isdisjoint(b.items):
        return True
    return bool(a.wild and not a.wild.isdisjoint(b.fams)) or bool(
        b.wild and not b.wild.isdisjoint(a.fams)
    )


@dataclass(frozen=True, slots=True)
class Footprint:
    """What one executed step may read and change, for deciding independence.

    Three access modes over resources: `reads`, `shares` (an operation that commutes with
    itself but not with readers, e.g. taking a shared read lock) and `writes`. The engine
    computes a footprint from the step and the agent's own transaction state only (never from
    the step's outcome), as an upper bound over every outcome the step could have: a write
    that might wait includes the wait-for graph when its transaction holds locks, a statement
    that might abort includes the release of its transaction's locks. That is what DPOR needs:
    the footprint of an agent's next step is known before it runs.

    `kind` and `txn` describe the step (`txn` is informational: ids differ between equivalent
    schedules, so it takes no part in comparisons or in `dependent`).
    """

    kind: str
    agent: int | None
    txn: int | None = field(default=None, compare=False)
    reads: frozenset[Resource] = frozenset()
    shares: frozenset[Resource] = frozenset()
    writes: frozenset[Resource] = frozenset()
    _r: _Access = field(default=_NO_ACCESS, init=False, repr=False, compare=False)
    _s: _Access = field(default=_NO_ACCESS, init=False, repr=False, compare=False)
    _w: _Access = field(default=_NO_ACCESS, init=False, repr=False, compare=False)
    _rs: _Access = field(default=_NO_ACCESS, init=False, repr=False, compare=False)
    _any: _Access = field(default=_NO_ACCESS, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        setter = object.__setattr__
        setter(self, "_r", _access(self.reads))
        setter(self, "_s", _access(self.shares))
        setter(self, "_w", _access(self.writes))
        setter(self, "_rs", _access(self.reads | self.shares))
        setter(self, "_any", _access(self.reads | self.shares | self.writes))

    @property
    def keys_read(self) -> frozenset[Any]:
        """Keys whose committed data or lock state the step may observe (ALL = every key)."""
        fams = ("data", "xlock", "slock")
        return frozenset(k for f, k in self.reads | self.shares if f in fams)

    @property
    def keys_written(self) -> frozenset[Any]:
        """Keys whose committed data or lock state the step may change (ALL = every key)."""
        return frozenset(k for f, k in self.writes if f in ("data", "xlock", "slock"))

    @property
    def snapshot(self) -> bool:
        """True when the step fixes or reads a whole snapshot (conflicts with every commit)."""
        return ("data", ALL) in self.reads


def dependent(a: Footprint, b: Footprint) -> bool:
    """True when the order of two steps may matter (conservative: may say yes needlessly).

    Two steps are dependent when they belong to the same agent, or one writes a resource the
    other reads, shares or writes, or one shares a resource the other reads. Independent steps
    commute: run in either order from the same state they see the same values, leave the same
    store state (up to transaction ids, step numbers and commit sequence numbers, which no agent
    observes), and neither enables nor disables the other.
    """
    if a.agent is not None and a.agent == b.agent:
        return True
    return _meet(a._w, b._any) or _meet(b._w, a._rs) or _meet(a._s, b._r) or _meet(b._s, a._r)


def covers(guess: Footprint, actual: Footprint) -> bool:
    """True when every step dependent with `actual` is dependent with `guess` too: the same
    agent, and each access of `actual` is matched by an access of `guess` at least as strong
    (a write covers everything, a share covers a read; (family, ALL) covers the family).

    At SERIALIZABLE a footprint may shrink when a step runs earlier than where it was first
    seen (fewer rw-antidependency groups have been joined); DPOR's wakeup trees keep the
    larger footprint, which is only more conservative (docs/exploration.md)."""
    if guess.agent != actual.agent or guess.kind != actual.kind:
        return False
    strong = (guess._w, _access(guess.writes | guess.shares), guess._any)
    return all(
        _within(resource, acc)
        for resource_set, acc in zip(
            (actual.writes, actual.shares, actual.reads), strong, strict=True
        )
        for resource in resource_set
    )


def _within(resource: Resource, acc: _Access) -> bool:
    return resource in acc.items or resource[0] in acc.wild


def resources(family: str, keys: Iterable[Any]) -> frozenset[Resource]:
    """`{(family, k) for k in keys}`: a helper for building footprints."""
    return frozenset((family, k) for k in keys)
