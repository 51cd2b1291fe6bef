"""Gate points as explorer steps: footprints, the dependency relation, serial orders."""

from __future__ import annotations

from math import factorial

from hypothesis import given
from hypothesis import strategies as st

from toki.isolation import Isolation
from toki.real.driver import serial_orders
from toki.real.gate import GatePoint, as_local, lock_steps, resources
from toki.sim.engine import Execution
from toki.sim.program import ALL, Begin, Commit, Local, Program, World, Write, dependent
from toki.sim.store import SimStore
from toki.sim.workload import SimClaim


def point(agent: int, name: str, reads=(), writes=()) -> GatePoint:  # type: ignore[no-untyped-def]
    return GatePoint.from_json(
        {
            "agent": agent,
            "kind": name.split(".")[0],
            "name": name,
            "reads": [list(r) for r in reads],
            "writes": [list(w) for w in writes],
        }
    )


def footprint(p: GatePoint):  # type: ignore[no-untyped-def]
    """The footprint the engine computes for the gate point's step."""
    step = as_local(p)

    def agent():  # type: ignore[no-untyped-def]
        yield step

    world = World(
        SimStore(Isolation.READ_COMMITTED),
        tuple(agent() if i == p.agent else iter(()) for i in range(p.agent + 1)),
    )
    ex = Execution(Program("fp", lambda: world), track=True)
    ex.step(p.agent)
    return ex.fps[-1]


def test_resources_map_the_wildcard_and_prefix_the_family() -> None:
    assert resources([("vec:c", "*"), ("history", "m1")]) == {
        ("real:vec:c", ALL),
        ("real:history", "m1"),
    }
    assert as_local(point(0, "vector.search", reads=[("vec:c", "*")])).reads == {
        ("real:vec:c", ALL)
    }


def test_dependency_of_gate_points_follows_their_footprints() -> None:
    search = footprint(point(0, "vector.search", reads=[("vec:c", "*")]))
    insert_x = footprint(point(1, "vector.insert", writes=[("vec:c", "x")]))
    get_y = footprint(point(1, "vector.get", reads=[("vec:c", "y")]))
    llm = footprint(point(1, "llm.decide"))
    clock0 = footprint(point(0, "clock.now", [("clock", None)], [("clock", None)]))
    clock1 = footprint(point(1, "clock.now", [("clock", None)], [("clock", None)]))
    assert dependent(search, insert_x)  # a scan sees every insert
    assert not dependent(search, get_y)  # two reads commute
    assert not dependent(
        footprint(point(0, "vector.insert", writes=[("vec:c", "y")])),
        footprint(point(1, "vector.get", reads=[("vec:c", "x")])),
    )
    assert dependent(
        footprint(point(0, "vector.delete", writes=[("vec:c", "x")])),
        footprint(point(1, "vector.get", reads=[("vec:c", "x")])),
    )
    assert not dependent(search, llm)  # an LLM call touches nothing shared
    assert dependent(clock0, clock1)  # who reads the clock first changes both values
    assert dependent(
        llm, footprint(point(1, "vector.search", reads=[("vec:c", "*")]))
    )  # same agent


def test_a_lock_point_is_a_lock_on_the_simulated_store() -> None:
    acquire = point(0, "store.lock")
    acquire = GatePoint(0, "lock", "store.lock", {"lock": "w", "op": "acquire"})
    release = GatePoint(0, "lock", "store.unlock", {"lock": "w", "op": "release"})
    assert lock_steps(acquire) == [Begin(), Write(("real:lock", "w"), acquire)]
    assert lock_steps(release)[1:] == [Commit()]
    assert lock_steps(release)[0] == as_local(release)
    assert isinstance(as_local(point(0, "llm.x")), Local)


claims = st.lists(st.lists(st.integers(0, 3), max_size=3), min_size=1, max_size=3)


@given(claims)
def test_serial_orders_are_every_merge_that_keeps_each_agents_order(sizes: list[list[int]]) -> None:
    seqs = [
        [SimClaim("k:v", f"a{a}c{i}v{v}") for i, v in enumerate(vals)]
        for a, vals in enumerate(sizes)
    ]
    orders = serial_orders(seqs, 10**6)
    assert orders is not None
    n = sum(len(s) for s in seqs)
    expected = factorial(n)
    for s in seqs:
        expected //= factorial(len(s))
    assert len(orders) == expected == len(set(orders))
    for order in orders:
        assert sorted(order, key=repr) == sorted([c for s in seqs for c in s], key=repr)
        for s in seqs:  # each agent's claims appear in its own order
            assert [c for c in order if c in s] == s


def test_too_many_orders_is_undecided_not_sampled() -> None:
    seqs = [[SimClaim("k:v", f"{a}.{i}") for i in range(3)] for a in range(3)]
    assert serial_orders(seqs, 100) is None  # 9!/(3!3!3!) = 1680
    assert len(serial_orders(seqs, 1680) or []) == 1680
