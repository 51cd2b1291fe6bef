"""Small example programs: the explorer's tests and `benchmarks/bench_sim.py` share them.

A *script* is what one agent does inside one transaction, as data, so that a test can also run
it through an independent interpreter: ("r", key) reads and adds the value to the agent's
accumulator, ("w", key, delta) writes accumulator + delta, ("s",) adds the number of rows
with an even value (a predicate read), ("l",) is a local step (an LLM judging). The agent
begins, runs the script, commits, and returns ("committed", accumulator); on a serialization
failure it aborts and retries up to `retries` times, then returns ("aborted",).

`BENCHMARKS` are the fixed programs whose schedule counts `bench_sim` reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

from toki.errors import InvalidInput, SerializationFailure
from toki.isolation import Isolation
from toki.sim.program import (
    Abort,
    Agent,
    Begin,
    Commit,
    Crash,
    Fault,
    Local,
    Program,
    Read,
    Select,
    World,
    Write,
    program,
)
from toki.sim.store import SimStore

__all__ = [
    "BENCHMARKS",
    "DOCTORS",
    "INCREMENTS",
    "JUDGES",
    "Script",
    "even",
    "inbox_program",
    "script_agent",
    "script_program",
]

Script: TypeAlias = Sequence[tuple[Any, ...]]

RC, RR, SI, SER = (
    Isolation.READ_COMMITTED,
    Isolation.REPEATABLE_READ,
    Isolation.SNAPSHOT,
    Isolation.SERIALIZABLE,
)


def even(key: Any, value: Any) -> bool:
    """The predicate of ("s",): rows whose value is an even int."""
    return isinstance(value, int) and value % 2 == 0


def script_agent(
    ops: Script, *, retries: int = 0, survive_crash: bool = False
) -> Callable[[], Agent]:
    """The script as an agent. With `survive_crash`, a crash restarts the transaction."""
    for op in ops:
        if not op or op[0] not in ("r", "w", "s", "l"):
            raise InvalidInput("ops", f"unknown operation {op!r}", "use r, w, s or l")

    def attempt() -> Agent:
        """One transaction: returns the accumulator, or None after a serialization failure."""
        yield Begin()
        acc = 0
        for op in ops:
            if op[0] == "r":
                value = yield Read(op[1])
                if isinstance(value, SerializationFailure):
                    yield Abort()
                    return None
                acc += value if isinstance(value, int) else 0
            elif op[0] == "w":
                if (yield Write(op[1], acc + op[2])) is not None:
                    yield Abort()
                    return None
            elif op[0] == "s":
                rows = yield Select(even, "even")
                if isinstance(rows, SerializationFailure):
                    yield Abort()
                    return None
                acc += len(rows)
            else:
                yield Local()
        if (yield Commit()) is not None:
            return None
        return acc

    def agent() -> Agent:
        failures = 0
        while True:
            try:
                acc = yield from attempt()
            except Crash:
                if not survive_crash:
                    raise
                continue
            if acc is not None:
                return ("committed", acc)
            failures += 1
            if failures > retries:
                return ("aborted",)

    return agent


def script_program(
    name: str,
    level: Isolation,
    initial: Mapping[Any, Any],
    scripts: Sequence[Script],
    *,
    retries: int = 0,
    survive_crash: bool = False,
    crash_budget: int = 0,
    max_steps: int = 10_000,
) -> Program:
    """A program of one scripted agent per script."""
    agents = [script_agent(s, retries=retries, survive_crash=survive_crash) for s in scripts]
    return program(name, level, initial, agents, crash_budget=crash_budget, max_steps=max_steps)


def inbox_program(
    name: str, level: Isolation, claims: Sequence[tuple[str, int]], *, judge: bool = True
) -> Program:
    """Two agents that apply the claims of their own inbox (key, value) with "newest wins"
    (agent 0 gets the first claim, agent 1 the rest), plus a fault that re-delivers agent 0's
    claim (duplicate delivery). `judge` adds a local step between read and write."""
    if not claims:
        raise InvalidInput("claims", "no claims", "give at least one (key, value) claim")

    def build() -> World:
        inboxes: list[list[tuple[str, int]]] = [list(claims[:1]), list(claims[1:])]

        def worker(me: int) -> Callable[[], Agent]:
            def agent() -> Agent:
                applied = 0
                while inboxes[me]:
                    key, value = inboxes[me].pop(0)
                    yield Begin()
                    current = yield Read(key)
                    if judge:
                        yield Local("judge", (key, value))
                    if isinstance(current, int) and current >= value:
                        yield Abort()
                        continue
                    if (yield Write(key, value)) is None and (yield Commit()) is None:
                        applied += 1
                    else:
                        yield Abort()
                return applied

            return agent

        def duplicate() -> None:
            inboxes[0].append(claims[0])

        return World(
            SimStore(level, initial={}),
            (worker(0)(), worker(1)()),
            (Fault("duplicate", duplicate, affects=frozenset({0})),),
        )

    return Program(name, build)


# Two read-modify-write increments of x (lost update below REPEATABLE_READ).
INCREMENTS: list[Script] = [[("r", "x"), ("w", "x", 1)], [("r", "x"), ("w", "x", 1)]]
# Two doctors on call: each reads both and takes itself off call (write skew at SNAPSHOT).
DOCTORS: list[Script] = [
    [("r", "a"), ("r", "b"), ("w", "a", -2)],
    [("r", "a"), ("r", "b"), ("w", "b", -2)],
]
# Three agents, one judging between its read and its write.
JUDGES: list[Script] = [
    [("r", "x"), ("l",), ("w", "x", 1)],
    [("r", "y"), ("w", "y", 1)],
    [("r", "x"), ("w", "y", 5)],
]
_JUDGED_INCREMENTS: list[Script] = [[("r", "x"), ("l",), ("w", "x", 1)]] * 2
_DISJOINT: list[Script] = [[("r", k), ("w", k, 1)] for k in ("x", "y", "z")]
_SUPERSEDE: list[Script] = [
    [("r", "lead"), ("l",), ("w", "lead", 1)],
    [("r", "lead"), ("w", "lead", 2)],
    [("r", "city"), ("w", "city", 3)],
]

BENCHMARKS: dict[str, Callable[[], Program]] = {
    "increments-rc": lambda: script_program("increments-rc", RC, {"x": 0}, _JUDGED_INCREMENTS),
    "doctors-si": lambda: script_program("doctors-si", SI, {"a": 1, "b": 1}, DOCTORS),
    "doctors-ser": lambda: script_program("doctors-ser", SER, {"a": 1, "b": 1}, DOCTORS),
    "upgrade-rr": lambda: script_program("upgrade-rr", RR, {"x": 0}, _JUDGED_INCREMENTS),
    "disjoint-rc": lambda: script_program("disjoint-rc", RC, {"x": 0, "y": 0, "z": 0}, _DISJOINT),
    "supersede-si": lambda: script_program(
        "supersede-si", SI, {"lead": 0, "city": 0}, _SUPERSEDE, retries=1
    ),
    "judges-rc": lambda: script_program("judges-rc", RC, {"x": 0, "y": 0}, JUDGES),
    "crash-rc": lambda: script_program(
        "crash-rc", RC, {"x": 0}, INCREMENTS, survive_crash=True, crash_budget=1
    ),
    "inbox-fault-rc": lambda: inbox_program("inbox-fault-rc", RC, [("lead", 2), ("lead", 1)]),
    # the same shapes at SERIALIZABLE, where DPOR uses the SSI groups (docs/exploration.md)
    "increments-ser": lambda: script_program("increments-ser", SER, {"x": 0}, _JUDGED_INCREMENTS),
    "judges-ser": lambda: script_program("judges-ser", SER, {"x": 0, "y": 0}, JUDGES),
    "disjoint-ser": lambda: script_program(
        "disjoint-ser", SER, {"x": 0, "y": 0, "z": 0}, _DISJOINT
    ),
    "crash-ser": lambda: script_program(
        "crash-ser", SER, {"x": 0}, INCREMENTS, survive_crash=True, crash_budget=1
    ),
}
