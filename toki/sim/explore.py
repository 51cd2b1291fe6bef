"""Exploration strategies over the schedules of a `Program`, and the records they produce.

Every strategy yields `Run` records: the schedule (the list of choices taken), the final store
state hash, the store's history and each agent's outcome. `explore` drives a strategy under a
budget and summarises; `iter_runs` hands the runs to a checker one at a time; any `Run` can be
re-run exactly with `replay_schedule`.

Strategies (the engine in `toki.sim.engine` knows nothing about them):

* `RandomStrategy(seed)`: a seeded random walk (uniform over the enabled choices);
* `PCTStrategy(seed, depth)`: probabilistic concurrency testing (Burckhardt et al. 2010);
* `BoundedDFS(preemption_bound)`: exhaustive depth-first search, optionally with a CHESS-style
  preemption bound (Musuvathi & Qadeer 2007); `None` = every schedule;
* `DPOR()` (in `toki.sim.dpor`): optimal DPOR with wakeup trees and sleep sets.

Mazurkiewicz trace classes (`trace_class`) use the same `dependent` relation as DPOR.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from toki.errors import InvalidInput, ScheduleError
from toki.sim.engine import Choice, Execution, choice_key
from toki.sim.program import Footprint, Program, dependent
from toki.sim.store import Op

__all__ = [
    "BoundedDFS",
    "Choice",
    "ExploreResult",
    "PCTStrategy",
    "RandomStrategy",
    "Run",
    "Stats",
    "Strategy",
    "canonical_schedule",
    "count_trace_classes",
    "explore",
    "history_hash",
    "iter_runs",
    "replay_schedule",
    "trace_class",
    "trace_classes",
]


@dataclass(frozen=True, slots=True)
class Run:
    """One complete run: everything needed to check it and to replay it.

    `schedule` lists the choices in order: an agent index, `"crash:<i>"` or a fault name.
    `state` is the final committed state as sorted (key, value) pairs; `state_hash` its
    sha256 (`SimStore.state_hash`). `footprints` is recorded when the strategy tracks them
    (DPOR always does) and is what `trace_class` needs.
    """

    program: str
    strategy: str
    seeds: tuple[int, ...]
    schedule: tuple[Choice, ...]
    state_hash: str
    state: tuple[tuple[Any, Any], ...]
    outcomes: tuple[Any, ...]
    history: tuple[Op, ...] = field(repr=False)
    deadlock: bool = False
    truncated: bool = False
    footprints: tuple[Footprint, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def steps(self) -> int:
        return len(self.schedule)

    @property
    def final(self) -> tuple[str, str]:
        """(state hash, outcomes): what two equivalent schedules must agree on."""
        return (self.state_hash, repr(self.outcomes))


def record(
    ex: Execution,
    strategy: str,
    seeds: tuple[int, ...] = (),
    footprints: Sequence[Footprint] | None = None,
) -> Run:
    """The `Run` of a finished execution."""
    store = ex.store
    snap = store.snapshot()
    fps = footprints if footprints is not None else (ex.fps if ex.track else None)
    return Run(
        program=ex.program.name,
        strategy=strategy,
        seeds=seeds,
        schedule=ex.schedule(),
        state_hash=store.state_hash(),
        state=tuple(sorted(snap.items(), key=lambda kv: repr(kv[0]))),
        outcomes=ex.outcomes(),
        history=store.history(),
        deadlock=ex.deadlocked(),
        truncated=ex.truncated,
        footprints=tuple(fps) if fps is not None else None,
    )


class Stats:
    """Mutable counters a strategy fills while it runs (steps include replayed prefixes)."""

    __slots__ = ("exhausted", "notes", "steps")

    def __init__(self) -> None:
        self.steps = 0
        self.exhausted = False  # the strategy enumerated its whole space
        self.notes: dict[str, int] = {}

    def note(self, name: str, by: int = 1) -> None:
        self.notes[name] = self.notes.get(name, 0) + by


class Strategy(Protocol):
    """Anything that turns a program into a stream of runs."""

    @property
    def name(self) -> str: ...

    def runs(self, program: Program, stats: Stats) -> Iterator[Run]: ...


# ---------------------------------------------------------------------------- strategies


def _seed(seed: int, index: int) -> int:
    """A per-run seed derived from the strategy seed (no global randomness)."""
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True, slots=True)
class RandomStrategy:
    """A seeded random walk: each run picks uniformly among the enabled choices.

    All runs draw from one `random.Random(seed)` stream, so run i is determined by the seed
    and i (recorded as `Run.seeds`); its schedule replays it on its own.
    """

    seed: int = 0
    track: bool = False

    @property
    def name(self) -> str:
        return f"random(seed={self.seed})"

    def runs(self, program: Program, stats: Stats) -> Iterator[Run]:
        draw = random.Random(self.seed).random
        index = 0
        while True:
            ex = Execution(program, track=self.track)
            while en := ex.enabled():
                ex.step(en[int(draw() * len(en))] if len(en) > 1 else en[0])
            stats.steps += ex.steps
            yield record(ex, self.name, (self.seed, index))
            index += 1


@dataclass(frozen=True, slots=True)
class PCTStrategy:
    """Probabilistic concurrency testing (Burckhardt, Kothari, Musuvathi, Nagarakatte 2010).

    Each run gives every process (agent, crash choice, fault) a random distinct priority
    ≥ depth and picks d−1 change points uniformly in [1, k]; it always runs the
    highest-priority enabled process, and at the i-th change point the process about to run
    drops to priority d−i. A bug of depth d is found with probability ≥ 1/(n·k^(d−1)).
    `steps` is k; None estimates it from the longest run so far (starting at 2 × agents).
    """

    seed: int = 0
    depth: int = 3
    steps: int | None = None
    track: bool = False

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise InvalidInput("depth", f"{self.depth} < 1", "PCT depth d counts from 1")

    @property
    def name(self) -> str:
        return f"pct(seed={self.seed},d={self.depth})"

    def runs(self, program: Program, stats: Stats) -> Iterator[Run]:
        index = 0
        k = self.steps or 0
        d = self.depth
        while True:
            rng = random.Random(_seed(self.seed, index))
            ex = Execution(program, track=self.track)
            if k <= 0:
                k = 2 * max(ex.n, 1)
            npids = 2 * ex.n + len(ex.faults)
            prio = list(range(d, d + npids))
            rng.shuffle(prio)
            points = rng.sample(range(1, k + 1), min(d - 1, k))
            change = {step: d - 1 - i for i, step in enumerate(sorted(points))}
            s = 0
            while en := ex.enabled():
                s += 1
                best = max(en, key=prio.__getitem__)
                low = change.get(s)
                if low is not None:
                    prio[best] = low
                    best = max(en, key=prio.__getitem__)
                ex.step(best)
            if self.steps is None:
                k = max(k, s)
            stats.steps += ex.steps
            yield record(ex, self.name, (self.seed, index))
            index += 1


@dataclass(frozen=True, slots=True)
class BoundedDFS:
    """Stateless depth-first search over schedules (each schedule re-run from scratch).

    With `preemption_bound=b` only schedules with at most b preemptions are explored (CHESS):
    a preemption is switching from an agent that could have continued to another agent.
    Crash and fault choices are never counted as preemptions. None explores every schedule.
    """

    preemption_bound: int | None = None
    track: bool = False

    @property
    def name(self) -> str:
        if self.preemption_bound is None:
            return "exhaustive"
        return f"dfs(pb={self.preemption_bound})"

    def runs(self, program: Program, stats: Stats) -> Iterator[Run]:
        bound = self.preemption_bound
        path: list[int] = []
        todo: list[list[int]] = []
        ctx: list[tuple[int, int, bool]] = []  # (last agent, preemptions, last was enabled)
        while True:
            ex = Execution(program, track=self.track)
            n = ex.n
            for pid in path:
                ex.step(pid)
            last, count = -1, 0
            if path:
                last, count = _after(ctx[-1], path[-1], n)
            while en := ex.enabled():
                en = list(en)  # ours to reorder (the engine's list is cached)
                flag = last >= 0 and last in en
                if bound is not None and flag and count >= bound:
                    en = [p for p in en if p == last or p >= n]
                if flag:
                    en.remove(last)
                    en.insert(0, last)
                ctx.append((last, count, flag))
                todo.append(en[1:])
                path.append(en[0])
                ex.step(en[0])
                last, count = _after(ctx[-1], en[0], n)
            stats.steps += ex.steps
            yield record(ex, self.name)
            while todo and not todo[-1]:
                todo.pop()
                path.pop()
                ctx.pop()
            if not todo:
                stats.exhausted = True
                return
            path[-1] = todo[-1].pop(0)


def _after(ctx: tuple[int, int, bool], pid: int, n: int) -> tuple[int, int]:
    last, count, flag = ctx
    if pid >= n:
        return last, count
    return pid, count + (1 if flag and pid != last else 0)


# ---------------------------------------------------------------------------- driving


@dataclass(frozen=True, slots=True)
class ExploreResult:
    """A summary of one exploration. `elapsed` is the only wall-clock (non-deterministic)
    field and takes no part in comparisons."""

    program: str
    strategy: str
    schedules: int
    states: frozenset[str]
    finals: frozenset[tuple[str, str]]
    steps: int
    complete: bool
    deadlocks: int
    truncated: int
    notes: tuple[tuple[str, int], ...]
    runs: tuple[Run, ...] = field(repr=False)
    elapsed: float = field(default=0.0, compare=False)

    @property
    def distinct_states(self) -> int:
        return len(self.states)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.elapsed if self.elapsed > 0 else 0.0


def iter_runs(program: Program, strategy: Strategy, budget: int | None = None) -> Iterator[Run]:
    """The strategy's runs, at most `budget` of them (checkers iterate this)."""
    for count, run in enumerate(strategy.runs(program, Stats()), 1):
        yield run
        if budget is not None and count >= budget:
            return


def explore(
    program: Program,
    strategy: Strategy,
    *,
    budget: int = 10_000,
    keep_runs: bool = True,
    on_run: Callable[[Run], None] | None = None,
) -> ExploreResult:
    """Run `strategy` on `program` for at most `budget` schedules and summarise.

    `complete` is True when the strategy enumerated its whole space within the budget
    (exhaustive, bounded and DPOR can; random and PCT never do). `on_run` sees every run
    (e.g. a checker), `keep_runs=False` keeps memory flat for long explorations.
    """
    if budget < 1:
        raise InvalidInput("budget", f"{budget} < 1", "explore at least one schedule")
    stats = Stats()
    runs: list[Run] = []
    states: set[str] = set()
    finals: set[tuple[str, str]] = set()
    deadlocks = truncated = count = 0
    start = time.perf_counter()
    gen = strategy.runs(program, stats)
    try:
        for run in gen:
            count += 1
            states.add(run.state_hash)
            finals.add(run.final)
            deadlocks += run.deadlock
            truncated += run.truncated
            if keep_runs:
                runs.append(run)
            if on_run is not None:
                on_run(run)
            if count >= budget:
                break
    finally:
        close = getattr(gen, "close", None)
        if close is not None:
            close()
    elapsed = time.perf_counter() - start
    return ExploreResult(
        program=program.name,
        strategy=strategy.name,
        schedules=count,
        states=frozenset(states),
        finals=frozenset(finals),
        steps=stats.steps,
        complete=stats.exhausted,
        deadlocks=deadlocks,
        truncated=truncated,
        notes=tuple(sorted(stats.notes.items())),
        runs=tuple(runs),
        elapsed=elapsed,
    )


def replay_schedule(
    program: Program, schedule: Sequence[Choice], *, track: bool = True, strategy: str = "replay"
) -> Run:
    """Re-run a recorded schedule exactly (same history, same state hash).

    Raises ScheduleError when a choice is unknown to the program, not enabled at its point,
    or when the schedule ends while some choice is still enabled.
    """
    ex = Execution(program, track=track)
    for i, choice in enumerate(schedule):
        pid = ex.pid(choice)
        en = ex.enabled()
        if pid is None:
            raise ScheduleError(
                f"schedule[{i}]: {choice!r} is not a choice of program {program.name!r} "
                f"(choices are agent indices 0..{ex.n - 1}, 'crash:<i>' and fault names)"
            )
        if pid not in en:
            names = [ex.choice(p) for p in en]
            raise ScheduleError(
                f"schedule[{i}]: {choice!r} is not enabled at this point (enabled: {names!r}); "
                "the schedule was recorded on a different program or was edited"
            )
        ex.step(pid)
    rest = ex.enabled()
    if rest:
        names = [ex.choice(p) for p in rest]
        raise ScheduleError(
            f"schedule: ended after {len(schedule)} choices but the run is not finished "
            f"(still enabled: {names!r}); pass the complete recorded schedule"
        )
    return record(ex, strategy)


def history_hash(history: Sequence[Op]) -> str:
    """A sha256 of a history that is stable across runs (predicates by qualified name)."""
    digest = hashlib.sha256()
    for op in history:
        pred = "" if op.predicate is None else getattr(op.predicate, "__qualname__", "?")
        digest.update(
            repr(
                (op.step, op.txn, op.kind.value, op.key, op.value, op.writer, op.version, pred,
                 tuple(tuple(s) for s in op.items), op.note)
            ).encode()
        )  # fmt: skip
        digest.update(b"\n")
    return digest.hexdigest()


# ---------------------------------------------------------------------------- trace classes


def canonical_schedule(
    schedule: Sequence[Choice], footprints: Sequence[Footprint]
) -> tuple[Choice, ...]:
    """The representative of the schedule's Mazurkiewicz trace: the lexicographically least
    linearisation of its happens-before order (agents first, by index). Two schedules are
    equivalent (one becomes the other by swapping adjacent independent steps) iff they have
    the same canonical schedule."""
    n = len(schedule)
    if len(footprints) != n:
        raise InvalidInput("footprints", f"{len(footprints)} footprints for {n} steps")
    preds = [0] * n
    for j in range(n):
        fj = footprints[j]
        mask = 0
        for i in range(j - 1, -1, -1):
            if (mask >> i) & 1:
                continue
            if dependent(footprints[i], fj):
                mask |= preds[i] | (1 << i)
        preds[j] = mask
    keys = [choice_key(c) for c in schedule]
    done = 0
    left = list(range(n))
    out: list[Choice] = []
    while left:
        best = -1
        for j in left:
            if preds[j] & ~done == 0 and (best < 0 or keys[j] < keys[best]):
                best = j
        left.remove(best)
        done |= 1 << best
        out.append(schedule[best])
    return tuple(out)


def trace_class(run: Run, program: Program | None = None) -> str:
    """A hash naming the run's Mazurkiewicz trace class (same hash = equivalent schedules).

    Needs the run's footprints; for a run recorded without them, pass the program and the
    schedule is replayed with tracking on.
    """
    fps = run.footprints
    if fps is None:
        if program is None:
            raise InvalidInput(
                "run",
                "was recorded without footprints",
                "pass the program, or explore with track=True",
            )
        fps = replay_schedule(program, run.schedule).footprints
        assert fps is not None
    canon = canonical_schedule(run.schedule, fps)
    return hashlib.sha256(repr(canon).encode()).hexdigest()


def trace_classes(program: Program, *, budget: int = 1_000_000) -> frozenset[str]:
    """Every trace class of the program, by exhaustive enumeration and hashing."""
    out: set[str] = set()
    for run in iter_runs(program, BoundedDFS(None, track=True), budget):
        out.add(trace_class(run))
    return frozenset(out)


def count_trace_classes(program: Program, *, budget: int = 1_000_000) -> int:
    """The number of Mazurkiewicz trace classes (what optimal DPOR explores exactly once)."""
    return len(trace_classes(program, budget=budget))
