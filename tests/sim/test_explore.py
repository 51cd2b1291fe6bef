"""Strategies against an independent brute-force enumeration; replay; bounded and random search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.errors import ScheduleError, SerializationFailure, TokiError, WouldBlock
from toki.isolation import Isolation
from toki.sim import (
    DPOR,
    Begin,
    BoundedDFS,
    Commit,
    PCTStrategy,
    RandomStrategy,
    Read,
    SimStore,
    Write,
    explore,
    history_hash,
    iter_runs,
    program,
    replay_schedule,
)
from toki.sim.examples import DOCTORS, INCREMENTS, Script, even, script_program

RC, RR, SI, SER = (
    Isolation.READ_COMMITTED,
    Isolation.REPEATABLE_READ,
    Isolation.SNAPSHOT,
    Isolation.SERIALIZABLE,
)
Final = tuple[tuple[tuple[Any, Any], ...], tuple[Any, ...]]
# Three agents of one operation each (a predicate read, a write, a read): 1680 interleavings.
THREE: list[Script] = [[("s",)], [("w", "x", 1)], [("r", "x")]]


def final_of(store: SimStore, outcomes: Sequence[Any]) -> Final:
    snap = store.snapshot()
    return (tuple(sorted(snap.items(), key=lambda kv: repr(kv[0]))), tuple(outcomes))


def run_final(run: Any) -> Final:
    return (run.state, run.outcomes)


# ---------------------------------------------------------------------------- the reference
# An interpreter of the scripts written without the engine: it drives a SimStore directly
# and enumerates every interleaving by replaying each prefix from scratch.


class _Ref:
    """One agent of the reference interpreter."""

    def __init__(self, ops: Script) -> None:
        self.ops = ops
        self.pc = -1  # -1: begin next; len(ops): commit next
        self.txn = -1
        self.acc = 0
        self.blocked: frozenset[int] | None = None
        self.outcome: Any = None


def _simulate(
    level: Isolation, initial: dict[Any, Any], scripts: Sequence[Script], choices: Sequence[int]
) -> tuple[list[int], SimStore, list[_Ref]]:
    store = SimStore(level, initial=initial)
    agents = [_Ref(s) for s in scripts]

    def ended(txn: int) -> None:
        for b in agents:
            if b.blocked is not None and txn in b.blocked:
                b.blocked = None

    for c in choices:
        a = agents[c]
        if a.pc == -1:
            a.txn = store.begin()
            a.pc = 0
            continue
        try:
            if a.pc == len(a.ops):
                store.commit(a.txn)
                a.outcome = ("committed", a.acc)
                ended(a.txn)
                continue
            op = a.ops[a.pc]
            if op[0] == "r":
                a.acc += store.read(a.txn, op[1]) or 0
            elif op[0] == "w":
                store.write(a.txn, op[1], a.acc + op[2])
            elif op[0] == "s":
                a.acc += len(store.select(a.txn, even))
            a.blocked = None
            a.pc += 1
        except WouldBlock as wb:
            a.blocked = wb.blockers
        except SerializationFailure:
            a.outcome = ("aborted",)
            ended(a.txn)
    enabled = [i for i, a in enumerate(agents) if a.outcome is None and a.blocked is None]
    return enabled, store, agents


def brute_force_finals(
    level: Isolation, initial: dict[Any, Any], scripts: Sequence[Script]
) -> set[Final]:
    """Every reachable (final state, outcomes), by replaying every interleaving from scratch."""
    finals: set[Final] = set()
    stack: list[list[int]] = [[]]
    while stack:
        prefix = stack.pop()
        enabled, store, agents = _simulate(level, initial, scripts, prefix)
        if not enabled:
            outcomes = [a.outcome if a.outcome is not None else "blocked" for a in agents]
            finals.add(final_of(store, outcomes))
            continue
        stack.extend([*prefix, c] for c in enabled)
    return finals


# ---------------------------------------------------------------------------- tests


CASES = [
    ("increments-rc", RC, {"x": 0}, INCREMENTS),
    ("increments-rr", RR, {"x": 0}, INCREMENTS),
    ("increments-si", SI, {"x": 0}, INCREMENTS),
    ("doctors-si", SI, {"a": 1, "b": 1}, DOCTORS),
    ("doctors-ser", SER, {"a": 1, "b": 1}, DOCTORS),
    ("doctors-rr", RR, {"a": 1, "b": 1}, DOCTORS),
    ("three-rc", RC, {"x": 0, "y": 0}, THREE),
    ("three-ru", Isolation.READ_UNCOMMITTED, {"x": 0, "y": 0}, THREE),
    ("three-rr", RR, {"x": 0, "y": 0}, THREE),
]


@pytest.mark.parametrize(("name", "level", "initial", "scripts"), CASES, ids=[c[0] for c in CASES])
def test_exhaustive_reaches_exactly_the_brute_force_final_states(
    name: str, level: Isolation, initial: dict[str, int], scripts: Any
) -> None:
    prog = script_program(name, level, initial, scripts)
    result = explore(prog, BoundedDFS(), budget=100_000)
    assert result.complete
    assert {run_final(r) for r in result.runs} == brute_force_finals(level, initial, scripts)


def test_the_anomalies_the_levels_admit_show_up_in_the_final_states() -> None:
    """Lost update at READ_COMMITTED but not at REPEATABLE_READ; write skew at SNAPSHOT but
    not at SERIALIZABLE (the final states alone tell)."""

    def finals(level: Isolation, initial: dict[str, int], scripts: Any) -> set[Any]:
        prog = script_program("p", level, initial, scripts)
        return {run_final(r) for r in explore(prog, BoundedDFS()).runs}

    lost = ((("x", 1),), (("committed", 0), ("committed", 0)))  # both committed, one increment
    assert lost in finals(RC, {"x": 0}, INCREMENTS)
    assert lost not in finals(RR, {"x": 0}, INCREMENTS)
    assert lost not in finals(SI, {"x": 0}, INCREMENTS)
    both = (("committed", 2), ("committed", 2))  # both saw two doctors on call
    skew = ((("a", 0), ("b", 0)), both)
    assert skew in finals(SI, {"a": 1, "b": 1}, DOCTORS)
    assert skew not in finals(SER, {"a": 1, "b": 1}, DOCTORS)


def test_repeatable_read_upgrade_deadlock_aborts_exactly_one_victim() -> None:
    prog = script_program("upgrade", RR, {"x": 0}, INCREMENTS)
    runs = explore(prog, BoundedDFS()).runs
    outcomes = {r.outcomes for r in runs}
    assert (("committed", 0), ("aborted",)) in outcomes
    assert (("aborted",), ("committed", 0)) in outcomes
    assert (("aborted",), ("aborted",)) not in outcomes
    victims = [r for r in runs if any("deadlock" in op.note for op in r.history)]
    assert victims  # some interleaving deadlocks and the store picks a victim
    assert not any(r.deadlock for r in runs)  # ... so no run ends with everyone blocked


def test_preemption_bounding_grows_towards_exhaustive() -> None:
    prog = script_program("inc", RC, {"x": 0}, INCREMENTS)
    full = explore(prog, BoundedDFS())
    counts = [explore(prog, BoundedDFS(b)).schedules for b in (0, 1, 2)]
    assert counts[0] == 2  # no preemption: one agent runs to completion, then the other
    assert counts[0] < counts[1] < counts[2] <= full.schedules
    assert explore(prog, BoundedDFS(10)).schedules == full.schedules
    lost = (("x", 1),)
    zero = {r.state for r in explore(prog, BoundedDFS(0)).runs}
    one = {r.state for r in explore(prog, BoundedDFS(1)).runs}
    assert lost not in zero  # a lost update needs one preemption (read, switch, read)
    assert lost in one


def test_seeded_random_walk_reaches_every_final_state_and_is_reproducible() -> None:
    prog = script_program("doctors", SI, {"a": 1, "b": 1}, DOCTORS)
    want = explore(prog, BoundedDFS()).finals
    first = explore(prog, RandomStrategy(seed=7), budget=400)
    again = explore(prog, RandomStrategy(seed=7), budget=400)
    other = explore(prog, RandomStrategy(seed=8), budget=400)
    assert first.finals == want
    assert [r.schedule for r in first.runs] == [r.schedule for r in again.runs]
    assert [r.schedule for r in first.runs] != [r.schedule for r in other.runs]
    assert not first.complete


def test_pct_depth_two_finds_the_lost_update_and_is_reproducible() -> None:
    prog = script_program("inc", RC, {"x": 0}, INCREMENTS)
    runs = explore(prog, PCTStrategy(seed=3, depth=2), budget=100).runs
    assert any(r.state == (("x", 1),) for r in runs)
    depth1 = explore(prog, PCTStrategy(seed=3, depth=1), budget=100).runs
    # depth 1 never changes a priority: every run is serial, so the update is never lost
    assert all(r.state == (("x", 2),) for r in depth1)
    rerun = explore(prog, PCTStrategy(seed=3, depth=2), budget=100).runs
    assert [r.schedule for r in runs] == [r.schedule for r in rerun]
    with pytest.raises(TokiError, match="depth"):
        PCTStrategy(depth=0)


@pytest.mark.parametrize("strategy", [BoundedDFS(), DPOR(), RandomStrategy(5), PCTStrategy(5)])
def test_replay_of_a_recorded_schedule_is_exact(strategy: Any) -> None:
    prog = script_program("doctors", SI, {"a": 1, "b": 1}, DOCTORS)
    for run in iter_runs(prog, strategy, budget=40):
        again = replay_schedule(prog, run.schedule)
        assert again.schedule == run.schedule
        assert again.state_hash == run.state_hash
        assert again.outcomes == run.outcomes
        assert history_hash(again.history) == history_hash(run.history)
        assert [(op.step, op.txn, op.kind, op.key, op.value) for op in again.history] == [
            (op.step, op.txn, op.kind, op.key, op.value) for op in run.history
        ]


def test_replay_refuses_schedules_that_do_not_fit() -> None:
    prog = script_program("inc", RC, {"x": 0}, INCREMENTS)
    run = next(iter_runs(prog, BoundedDFS()))
    with pytest.raises(ScheduleError, match=r"schedule\[0\]: 5 is not a choice"):
        replay_schedule(prog, (5, *run.schedule))
    with pytest.raises(ScheduleError, match="crash:0"):
        replay_schedule(prog, ("crash:0",))
    with pytest.raises(ScheduleError, match="not finished"):
        replay_schedule(prog, run.schedule[:-1])
    # agent 0 finished after its 4 steps: a fifth step of agent 0 is not enabled
    with pytest.raises(ScheduleError, match=r"schedule\[4\]: 0 is not enabled"):
        replay_schedule(prog, (0, 0, 0, 0, 0))
    assert issubclass(ScheduleError, TokiError)


def test_explore_summary_counts_what_it_saw() -> None:
    prog = script_program("inc", RC, {"x": 0}, INCREMENTS)
    seen: list[Any] = []
    result = explore(prog, BoundedDFS(), budget=5, on_run=seen.append, keep_runs=False)
    assert result.schedules == 5 == len(seen)
    assert result.runs == ()
    assert not result.complete  # the budget cut it short
    assert result.steps >= sum(r.steps for r in seen)
    full = explore(prog, BoundedDFS())
    assert full.complete
    assert full.distinct_states == len({r.state_hash for r in full.runs}) == 2
    with pytest.raises(TokiError, match="budget"):
        explore(prog, BoundedDFS(), budget=0)


def test_unbounded_agents_are_explored_with_a_step_cap() -> None:
    """A poller that waits for another agent's write spins for ever in the schedules that
    never run the writer: max_steps truncates them and the runs say so."""

    def poller() -> Any:
        while True:
            yield Begin()
            value = yield Read("x")
            yield Commit()
            if value == 1:
                return "saw it"

    def setter() -> Any:
        yield Begin()
        yield Write("x", 1)
        yield Commit()
        return "set"

    prog = program("poll", RC, {"x": 0}, [poller, setter], max_steps=10)
    result = explore(prog, BoundedDFS(), budget=20_000)
    assert result.complete
    assert result.truncated > 0
    truncated = [r for r in result.runs if r.truncated]
    assert all(r.steps == 10 and r.outcomes[0] == "running" for r in truncated)
    assert any(r.outcomes == ("saw it", "set") for r in result.runs)


@st.composite
def scripted(draw: st.DrawFn) -> tuple[Isolation, dict[str, int], list[Script]]:
    level = draw(st.sampled_from(list(Isolation)))
    n = draw(st.integers(2, 3))
    scripts: list[Script] = []
    for i in range(n):
        script: list[tuple[Any, ...]] = []
        for _ in range(draw(st.integers(1, 2 if n == 2 else 1))):
            kind = draw(st.sampled_from("rwsl"))
            if kind == "r":
                script.append(("r", draw(st.sampled_from("xy"))))
            elif kind == "w":
                script.append(("w", draw(st.sampled_from("xy")), i + 1))
            else:
                script.append((kind,))
        scripts.append(script)
    initial = {"x": 0, "y": 1} if draw(st.booleans()) else {"x": 2}
    return level, initial, scripts


@settings(max_examples=30, deadline=None)
@given(scripted())
def test_exhaustive_matches_brute_force_on_random_scripts(
    case: tuple[Isolation, dict[str, int], list[Script]],
) -> None:
    level, initial, scripts = case
    result = explore(script_program("random", level, initial, scripts), BoundedDFS())
    assert result.complete
    assert {run_final(r) for r in result.runs} == brute_force_finals(level, initial, scripts)
