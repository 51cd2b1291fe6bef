"""The engine's contract: results sent to agents, misuse errors, crashes, faults, footprints."""

from __future__ import annotations

from typing import Any

import pytest

from toki.errors import Deadlock, ProgramError, SerializationFailure
from toki.isolation import Isolation
from toki.sim import (
    ALL,
    CRASHED,
    Abort,
    Begin,
    BoundedDFS,
    Commit,
    Crash,
    Execution,
    Fault,
    Footprint,
    Local,
    Program,
    Read,
    Select,
    SimStore,
    World,
    Write,
    dependent,
    explore,
    program,
    replay_schedule,
)
from toki.sim.engine import choice_key

RU, RC, RR, SI, SER = (
    Isolation.READ_UNCOMMITTED,
    Isolation.READ_COMMITTED,
    Isolation.REPEATABLE_READ,
    Isolation.SNAPSHOT,
    Isolation.SERIALIZABLE,
)


def run(prog: Program, choices: list[Any]) -> Execution:
    ex = Execution(prog, track=True)
    for c in choices:
        pid = ex.pid(c)
        assert pid is not None and pid in ex.enabled(), (c, ex.enabled())
        ex.step(pid)
    return ex


# ---------------------------------------------------------------------------- results


def test_agents_receive_values_rows_in_canonical_order_and_failures_as_values() -> None:
    seen: list[Any] = []

    def reader() -> Any:
        yield Begin()
        seen.append((yield Read("b")))
        seen.append((yield Read("nope")))
        seen.append((yield Select(lambda k, v: v > 0, "positive")))
        seen.append((yield Commit()))
        return "read"

    def inserter() -> Any:  # commits new keys in the order z, a
        yield Begin()
        yield Write("z", 1)
        yield Write("a", 2)
        yield Commit()
        return "wrote"

    prog = program("p", RC, {"b": 5}, [reader, inserter])
    ex = run(prog, [1, 1, 1, 1, 0, 0, 0, 0, 0])
    assert seen == [5, None, {"a": 2, "b": 5, "z": 1}, None]
    assert list(seen[2]) == ["a", "b", "z"]  # sorted, not the store's first-commit order
    assert ex.outcomes() == ("read", "wrote")


def test_after_a_failure_statements_and_commit_get_the_same_failure() -> None:
    """As in PostgreSQL, a transaction the store aborted refuses everything until it ends."""
    got: list[Any] = []

    def loser() -> Any:
        yield Begin()
        yield Read("x")
        got.append((yield Write("x", 10)))  # first-updater-wins: fails
        got.append((yield Read("x")))
        got.append((yield Commit()))
        got.append((yield Abort()))  # harmless
        return "done"

    def winner() -> Any:
        yield Begin()
        yield Write("x", 1)
        yield Commit()
        return "won"

    prog = program("p", SI, {"x": 0}, [loser, winner])
    ex = run(prog, [0, 0, 1, 1, 1, 0, 0, 0, 0])
    assert isinstance(got[0], SerializationFailure)
    assert got[1] is got[0] and got[2] is got[0]
    assert got[3] is None
    assert ex.store.snapshot() == {"x": 1}
    assert ex.outcomes() == ("done", "won")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("read_outside", "outside a transaction"),
        ("not_a_step", "not a Step"),
        ("open_at_return", "still open"),
        ("begin_twice", "still open"),
        ("raises", "raised"),
    ],
)
def test_agent_misuse_is_a_program_error_with_the_schedule(body: str, message: str) -> None:
    def agent() -> Any:
        if body == "read_outside":
            yield Read("x")
        elif body == "not_a_step":
            yield "read x"
        elif body == "open_at_return":
            yield Begin()
            return "oops"
        elif body == "begin_twice":
            yield Begin()
            yield Begin()
        else:
            yield Local()
            raise RuntimeError("agent bug")
        return None

    prog = program("p", RC, {"x": 0}, [agent])
    with pytest.raises(ProgramError, match=message) as info:
        explore(prog, BoundedDFS())
    assert "schedule so far" in str(info.value) or body == "not_a_step"


def test_faults_must_have_unique_unreserved_names() -> None:
    def agent() -> Any:
        yield Local()

    def build(names: list[str]) -> Program:
        return Program(
            "p",
            lambda: World(SimStore(RC), (agent(),), tuple(Fault(n, lambda: None) for n in names)),
        )

    with pytest.raises(ProgramError, match="share a name"):
        Execution(build(["dup", "dup"]))
    with pytest.raises(ProgramError, match="reserved"):
        Execution(build(["crash:0"]))


def test_choices_have_external_names_and_a_total_order() -> None:
    def agent() -> Any:
        yield Local()

    prog = Program(
        "p",
        lambda: World(SimStore(RC), (agent(), agent()), (Fault("late", lambda: None),)),
        crash_budget=1,
    )
    ex = Execution(prog)
    assert [ex.choice(p) for p in ex.enabled()] == [0, 1, "crash:0", "crash:1", "late"]
    assert [ex.pid(c) for c in (0, 1, "crash:1", "late", 2, "crash:2", "nope", True)] == [
        0,
        1,
        3,
        4,
        None,
        None,
        None,
        None,
    ]
    assert sorted(["late", "crash:1", 1, "crash:0", 0], key=choice_key) == [
        0,
        1,
        "crash:0",
        "crash:1",
        "late",
    ]


# ---------------------------------------------------------------------------- crashes, faults


def test_a_crash_rolls_back_and_an_uncaught_crash_ends_the_agent() -> None:
    def writer() -> Any:
        yield Begin()
        yield Write("x", 1)
        yield Commit()
        return "wrote"

    def waiter() -> Any:
        yield Begin()
        yield Write("x", 2)  # waits for the writer's lock
        yield Commit()
        return "waited"

    prog = program("p", RC, {"x": 0}, [writer, waiter], crash_budget=1)
    ex = run(prog, [0, 0, 1, 1])  # the waiter is now blocked on the writer
    assert ex.enabled() == [0, 2, 3]  # the writer, and both crash choices
    ex.step(ex.pid("crash:0"))  # the writer crashes holding the lock
    assert ex.outcomes()[0] is CRASHED
    # its abort released the waiter; agent 0's crash budget is spent, agent 1's is not
    assert [ex.choice(p) for p in ex.enabled()] == [1, "crash:1"]
    while en := ex.enabled():
        ex.step(en[0])
    assert ex.store.snapshot() == {"x": 2}
    assert ex.outcomes() == (CRASHED, "waited")
    assert ex.schedule()[-1] == "crash:1"  # offered until taken: too late, a no-op
    assert repr(CRASHED) == "CRASHED"


def test_an_agent_can_survive_a_crash_and_retry() -> None:
    def agent() -> Any:
        attempts = 0
        while True:
            try:
                attempts += 1
                yield Begin()
                yield Write("x", attempts)
                yield Commit()
                return "done"
            except Crash:
                continue

    prog = program("p", RC, {"x": 0}, [agent], crash_budget=1)
    ex = run(prog, [0, 0, "crash:0", 0, 0, 0])
    assert ex.outcomes() == ("done",)
    assert ex.store.snapshot() == {"x": 2}
    assert ex.schedule() == (0, 0, "crash:0", 0, 0, 0)
    replayed = replay_schedule(prog, ex.schedule())
    assert replayed.state == (("x", 2),)


def test_faults_fire_exactly_up_to_their_limit() -> None:
    def build() -> World:
        inbox = ["claim"]

        def agent() -> Any:
            handled = 0
            while inbox:
                inbox.pop()
                handled += 1
                yield Local("judge")
            return handled

        def other() -> Any:
            yield Local()
            yield Local()
            return "other"

        dup = Fault("dup", lambda: inbox.append("claim"), limit=2, affects=frozenset({0}))
        return World(SimStore(RC), (agent(), other()), (dup,))

    prog = Program("p", build)
    result = explore(prog, BoundedDFS())
    assert {r.outcomes[0] for r in result.runs} == {1, 2, 3}
    assert all(r.schedule.count("dup") == 2 for r in result.runs)
    # after agent 0 is done the fault is still offered: it arrives too late to matter
    ex = run(prog, [0])
    assert ex.outcomes()[0] == 1
    assert [ex.choice(p) for p in ex.enabled()] == [1, "dup"]


# ---------------------------------------------------------------------------- footprints


def two_agents(level: Isolation, a: list[Any], b: list[Any], initial: Any = None) -> Program:
    def agent(steps: list[Any]) -> Any:
        def gen() -> Any:
            for step in steps:  # noqa: UP028 - yield from would forward send() to the list
                yield step
            yield Abort()  # a no-op when the steps committed
            return "ok"

        return gen

    return program("p", level, initial or {"x": 0, "y": 0}, [agent(a), agent(b)])


def fp_after(prog: Program, prefix: list[Any], pid: int) -> Footprint:
    """The footprint of `pid`'s next step after `prefix`."""
    return run(prog, [*prefix, pid]).fps[-1]


@pytest.mark.parametrize(
    ("level", "a", "b", "prefix", "expect"),
    [
        # READ_COMMITTED reads see committed data only: an uncommitted write does not matter
        (RC, [Begin(), Read("x")], [Begin(), Write("x", 1)], [0, 1], False),
        # ... but the commit that installs x does
        (RC, [Begin(), Read("x")], [Begin(), Write("x", 1), Commit()], [0, 1, 1], True),
        (RC, [Begin(), Read("y")], [Begin(), Write("x", 1), Commit()], [0, 1, 1], False),
        # READ_UNCOMMITTED reads see the uncommitted write
        (RU, [Begin(), Read("x")], [Begin(), Write("x", 1)], [0, 1], True),
        # REPEATABLE_READ: shared read locks commute, a write conflicts with them
        (RR, [Begin(), Read("x")], [Begin(), Read("x")], [0, 1], False),
        (RR, [Begin(), Read("x")], [Begin(), Write("x", 1)], [0, 1], True),
        # SNAPSHOT: the first statement takes the snapshot, so it conflicts with any commit
        (SI, [Begin(), Read("y")], [Begin(), Write("x", 1), Commit()], [0, 1, 1], True),
        # ... later reads use the fixed snapshot: independent even of a commit of that key
        (
            SI,
            [Begin(), Read("y"), Read("x")],
            [Begin(), Write("x", 1), Commit()],
            [0, 0, 1, 1],
            False,
        ),
        # first-updater-wins: a write conflicts with a commit of its key
        (
            SI,
            [Begin(), Read("y"), Write("x", 2)],
            [Begin(), Write("x", 1), Commit()],
            [0, 0, 1, 1],
            True,
        ),
        # SERIALIZABLE: transactions that cannot share an rw-edge commute (SSI groups)
        (SER, [Begin(), Read("y"), Read("y")], [Begin(), Read("x"), Read("x")], [0, 0, 1, 1], False),
        (SER, [Begin(), Read("y"), Read("y")], [Begin(), Write("x", 1), Commit()], [0, 0, 1, 1], False),
        # ... a read of a key the other transaction wrote may doom it (or fail)
        (SER, [Begin(), Read("y"), Read("x")], [Begin(), Write("x", 1), Read("y")], [0, 0, 1, 1], True),
        # ... a write of a key the other read creates an rw-edge: their groups join
        (SER, [Begin(), Read("x"), Read("y")], [Begin(), Read("y"), Write("x", 1)], [0, 0, 1, 1], True),
        # ... even a read-only commit decides whether a later snapshot is concurrent with it
        (SER, [Begin(), Read("y")], [Begin(), Read("x"), Commit()], [0, 1, 1], True),
        # local steps commute with everything
        (SER, [Begin(), Local()], [Begin(), Write("x", 1), Commit()], [0, 1, 1], False),
        # two first writes of different keys commute; a second write may deadlock: it does not
        (RC, [Begin(), Write("x", 1)], [Begin(), Write("y", 1)], [0, 1], False),
        (
            RC,
            [Begin(), Write("x", 1), Write("z", 1)],
            [Begin(), Write("y", 1), Write("w", 1)],
            [0, 0, 1, 1],
            True,
        ),
    ],
)
def test_dependence_of_next_steps(
    level: Isolation, a: list[Any], b: list[Any], prefix: list[int], expect: bool
) -> None:
    prog = two_agents(level, a, b)
    fa, fb = fp_after(prog, prefix, 0), fp_after(prog, prefix, 1)
    assert dependent(fa, fb) is expect
    assert dependent(fb, fa) is expect


def test_serializable_commits_two_rw_edges_apart_are_dependent() -> None:
    """T_in -rw-> pivot -rw-> T_out, where T_in and T_out share no key: T_out's commit dooms
    the pivot only while T_in is active, so the two commits do not commute. They share no key
    resource; the SSI group (joined by the pivot's edges) makes them dependent."""

    def agent(steps: list[Any]) -> Any:
        def gen() -> Any:
            results = []
            for step in steps:
                results.append((yield step))
            yield Abort()
            return tuple(type(r).__name__ for r in results)

        return gen

    t_in = [Begin(), Read("x"), Commit()]
    pivot = [Begin(), Write("x", 1), Read("y"), Commit()]
    t_out = [Begin(), Write("y", 1), Commit()]
    prog = program("chain", SER, {"x": 0, "y": 0}, [agent(t_in), agent(pivot), agent(t_out)])
    prefix = [0, 0, 1, 1, 1, 2, 2]  # T_in reads x, the pivot writes x, reads y, T_out writes y
    f_in, f_out = fp_after(prog, prefix, 0), fp_after(prog, prefix, 2)
    assert not f_in.keys_written & f_out.keys_written and not f_in.keys_read & f_out.keys_read
    assert dependent(f_in, f_out)
    out_first = run(prog, [*prefix, 2, 0, 1, 1]).outcomes()
    in_first = run(prog, [*prefix, 0, 2, 1, 1]).outcomes()
    assert out_first[1] != in_first[1]  # the pivot's commit fails in one order only


def test_footprint_fields_describe_the_step() -> None:
    prog = two_agents(SI, [Begin(), Read("x"), Write("y", 1), Commit()], [Local()])
    ex = run(prog, [0, 0, 0, 0])
    begin, first, write, commit = ex.fps
    assert (begin.kind, first.kind, write.kind, commit.kind) == ("begin", "read", "write", "commit")
    assert first.snapshot and not write.snapshot
    assert first.keys_read == frozenset({ALL})
    assert write.keys_read == frozenset({"y"}) and write.keys_written == frozenset({"y"})
    assert commit.keys_written == frozenset({"y"})
    assert commit.txn == write.txn == 1
    same_agent = Footprint("local", 0)
    assert dependent(same_agent, Footprint("local", 0))
    assert not dependent(same_agent, Footprint("local", 1))


def test_a_four_cycle_deadlock_victim_depends_on_the_order_of_two_distant_waits() -> None:
    """Agents i = 0..3 each lock key i, then want key i+1. Agents 0 and 2 wait on different
    keys held by different agents, yet whichever of them waits last closes the cycle and is
    the victim: their steps must be dependent (the wait-for graph resource)."""
    keys = ["k0", "k1", "k2", "k3"]

    def agent(i: int) -> Any:
        def gen() -> Any:
            yield Begin()
            yield Write(keys[i], i)
            r = yield Write(keys[(i + 1) % 4], i)
            if r is not None:
                yield Abort()
                return "victim"
            yield Commit()
            return "ok"

        return gen

    prog = program("cycle", RC, dict.fromkeys(keys, 0), [agent(i) for i in range(4)])
    prefix = [0, 1, 2, 3, 0, 1, 2, 3, 1, 3]  # everyone holds its key; 1 and 3 wait
    fa, fb = fp_after(prog, prefix, 0), fp_after(prog, prefix, 2)
    assert fa.keys_written.isdisjoint(fb.keys_written | fb.keys_read)
    assert dependent(fa, fb)
    first = run(prog, [*prefix, 0, 2])
    second = run(prog, [*prefix, 2, 0])
    assert isinstance(first.agents[2].failed, Deadlock)
    assert isinstance(second.agents[0].failed, Deadlock)
