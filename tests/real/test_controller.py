"""The worker's gate-point controller, in process: one agent at a time, deterministic
order, a clear error when an agent blocks outside a gate point, crashed agents abandoned."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from toki.real.inenv.controller import Controller, GateTimeout


def _agent(ctl: Controller, name: str, log: list[str], steps: int) -> object:
    def body() -> str:
        for i in range(steps):
            log.append(f"{name}{i}")  # runs between gate points
            ctl.gate("test", f"{name}.gate{i}", None, [], [("shared", None)])
        log.append(f"{name}-end")
        return name

    return body


def test_only_the_released_agent_runs_and_the_order_is_the_schedule() -> None:
    schedule = [1, 0, 0, 1, 1, 0]
    logs = []
    for _ in range(15):  # the same schedule gives the same interleaving every time
        ctl = Controller(timeout=10)
        ctl.reset(0)
        log: list[str] = []
        states = [ctl.start(i, _agent(ctl, "ab"[i], log, 3)) for i in (0, 1)]  # type: ignore[arg-type]
        assert [s["state"] for s in states] == ["parked", "parked"]
        assert log == ["a0", "b0"]
        for agent in schedule:
            before = len(log)
            state = ctl.release(agent)
            # exactly one agent moved: everything logged since the release is its own
            assert all(entry[0] == "ab"[agent] for entry in log[before:])
            if state["state"] == "done":
                assert state["outcome"] == "ab"[agent]
        logs.append(tuple(log))
    assert len(set(logs)) == 1
    assert logs[0] == ("a0", "b0", "b1", "a1", "a2", "b2", "b-end", "a-end")


def test_a_parked_point_reports_agent_claim_and_footprint() -> None:
    ctl = Controller(timeout=10)
    ctl.reset(0)

    def body() -> None:
        ctl.begin_claim(2)
        ctl.gate("vector", "vector.insert", {"ids": ["x"]}, [], [("vec:c", "x")])

    state = ctl.start(3, body)
    point = state["point"]
    assert point["agent"] == 3 and point["claim"] == 2 and point["name"] == "vector.insert"
    assert point["writes"] == [["vec:c", "x"]] and point["reads"] == []
    assert ctl.release(3) == {"state": "done", "outcome": None}
    assert ctl.executed[-1]["name"] == "vector.insert"


def test_outside_an_agent_gates_pass_through() -> None:
    ctl = Controller(timeout=1)
    assert ctl.gate("test", "x", None) is None  # the server thread: no agent, no stop


def test_an_agent_blocked_outside_a_gate_point_is_an_error_not_a_hang() -> None:
    ctl = Controller(timeout=0.5)
    ctl.reset(0)
    lock = threading.Lock()

    def holder() -> None:
        with lock:
            ctl.gate("test", "inside-the-lock")

    def waiter() -> None:
        ctl.gate("test", "before-the-lock")
        with lock:  # held by the parked holder: not a gate point
            pass

    ctl.start(0, holder)
    ctl.start(1, waiter)
    with pytest.raises(GateTimeout, match="make that lock a gate point"):
        ctl.release(1)
    ctl.reset(1)  # wakes the holder with Abandoned; the waiter then gets the lock and ends


def test_a_gate_timeout_names_where_the_stuck_agent_awaits() -> None:
    """An agent that runs its own event loop (cognee's adapter) and awaits a lock a parked
    agent holds: the error names the coroutines it is stuck in, down the await chain."""
    ctl = Controller(timeout=0.5)
    ctl.reset(0)
    stuck: dict[str, Any] = {}

    def holder() -> None:
        ctl.gate("test", "inside-the-lock")

    async def take_the_dataset_lock() -> None:
        stuck["loop"] = asyncio.get_running_loop()
        stuck["future"] = stuck["loop"].create_future()
        await stuck["future"]  # a lock's waiter on this loop: the holder never wakes it

    async def pipeline() -> None:
        await take_the_dataset_lock()

    def waiter() -> None:
        ctl.gate("test", "before-the-lock")
        asyncio.run(pipeline())

    ctl.start(0, holder)
    ctl.start(1, waiter)
    with pytest.raises(GateTimeout) as info:
        ctl.release(1)
    message = str(info.value)
    stuck["loop"].call_soon_threadsafe(stuck["future"].set_result, None)
    ctl.reset(1)
    assert "its thread is at" in message and " waiter" in message, message
    assert " take_the_dataset_lock <- " in message, message
    assert message.endswith(" pipeline"), message


def test_a_crashed_agent_never_runs_again_and_is_joined_on_reset() -> None:
    ctl = Controller(timeout=10)
    ctl.reset(0)
    after: list[str] = []

    def body() -> None:
        ctl.gate("test", "first")
        after.append("ran past the crash")

    ctl.start(0, body)
    assert ctl.crash(0) is True
    assert ctl.crash(0) is False  # nothing parked any more
    with pytest.raises(RuntimeError, match="not parked"):
        ctl.release(0)
    ctl.reset(1)
    assert after == []
    assert not any(t.is_alive() for t in threading.enumerate() if t.name == "toki-agent-0")


def test_an_exception_in_the_library_is_the_agents_outcome() -> None:
    ctl = Controller(timeout=10)
    ctl.reset(0)

    def body() -> None:
        ctl.gate("test", "g")
        raise ValueError("boom")

    ctl.start(0, body)
    assert ctl.release(0) == {"state": "done", "outcome": {"error": "ValueError: boom"}}


# ---------------------------------------------------------------------------- async agents


def _async_agent(ctl: Controller, log: list[str]) -> object:
    """Two sibling tasks per agent (a gather), each parking twice; the main task parks
    before and after the gather."""

    async def child(name: str) -> str:
        for i in range(2):
            log.append(f"{name}{i}")
            await ctl.agate("test", f"{name}.gate{i}", None, [("shared", name)], [])
        return name

    async def body() -> list[str]:
        import asyncio

        await ctl.agate("test", "main.before", None, [], [("shared", "main")])
        got = await asyncio.gather(child("x"), child("y"))
        await ctl.agate("test", "main.after", None, [], [("shared", "main")])
        return list(got)

    return body


def test_an_async_agent_parks_several_tasks_and_the_host_picks_which_runs() -> None:
    """The unit is (agent, task): after the gather both children are parked at once, by
    creation number; releasing task 2 first runs only task 2; same choices, same run."""
    runs = []
    for _ in range(5):
        ctl = Controller(timeout=10)
        ctl.reset(0)
        log: list[str] = []
        state = ctl.start(0, _async_agent(ctl, log), is_async=True)  # type: ignore[arg-type]
        assert state["point"]["name"] == "main.before" and state["point"]["task"] == 0
        state = ctl.release(0)
        parked = [(p["task"], p["name"]) for p in state["parked"]]
        assert parked == [(1, "x.gate0"), (2, "y.gate0")]
        assert state["point"]["task"] == 1  # the oldest is offered first
        before = len(log)
        state = ctl.release(0, task=2)
        assert log[before:] == ["y1"]  # only the released task moved
        assert [(p["task"], p["name"]) for p in state["parked"]] == [(1, "x.gate0"), (2, "y.gate1")]
        for task in (2, 1, 1):
            state = ctl.release(0, task=task)
        assert state["point"]["name"] == "main.after"
        assert ctl.release(0) == {"state": "done", "outcome": ["x", "y"]}
        runs.append((tuple(log), tuple((p["task"], p["name"]) for p in ctl.executed)))
    assert len(set(runs)) == 1


def test_a_crashed_async_agent_is_abandoned_with_all_its_tasks() -> None:
    ctl = Controller(timeout=10)
    ctl.reset(0)
    log: list[str] = []
    ctl.start(0, _async_agent(ctl, log), is_async=True)  # type: ignore[arg-type]
    state = ctl.release(0)
    assert len(state["parked"]) == 2
    assert ctl.crash(0) is True
    assert ctl.crash(0) is False  # nothing of it is parked any more
    ctl.reset(1)  # wakes both tasks with Abandoned and joins the agent's thread
    assert not any(t.is_alive() for t in threading.enumerate() if t.name == "toki-agent-0")


# ---------------------------------------------------------------------------- injected faults


def test_an_injected_failure_is_raised_at_the_gate_point_instead_of_the_call() -> None:
    """`release(..., fail=exc)`: the call after the gate never runs; the library sees `exc`
    where the call would have raised it, and handles it its own way."""
    ctl = Controller(timeout=10)
    ctl.reset(0)
    calls: list[str] = []

    def body() -> str:
        try:
            ctl.gate("history", "history.add", None, [], [("history", "m1")])
            calls.append("write")
        except OSError as exc:
            return f"handled {type(exc).__name__}"
        return "written"

    ctl.start(0, body)
    state = ctl.release(0, fail=ConnectionResetError("reset"))
    assert state == {"state": "done", "outcome": "handled ConnectionResetError"}
    assert calls == []
    assert ctl.executed[-1]["failed"] == "ConnectionResetError: reset"


def test_an_injected_failure_reaches_an_async_task_only() -> None:
    ctl = Controller(timeout=10)
    ctl.reset(0)
    log: list[str] = []

    async def body() -> list[str]:
        import asyncio

        async def child(name: str) -> str:
            try:
                await ctl.agate("test", f"{name}.write", None, [], [("shared", name)])
            except TimeoutError:
                return f"{name} failed"
            log.append(name)
            return f"{name} ok"

        return list(await asyncio.gather(child("x"), child("y")))

    state = ctl.start(0, body, is_async=True)
    assert [p["task"] for p in state["parked"]] == [1, 2]
    ctl.release(0, task=2, fail=TimeoutError("timed out"))
    assert ctl.release(0, task=1) == {"state": "done", "outcome": ["x ok", "y failed"]}
    assert log == ["x"]


def test_kill_abandons_every_agent_and_restart_keeps_clock_and_ids() -> None:
    ctl = Controller(timeout=10)
    ctl.reset(7)
    ran: list[int] = []

    def body(i: int) -> object:
        def run() -> None:
            ctl.gate("test", "g")
            ran.append(i)

        return run

    ctl.start(0, body(0))
    ctl.start(1, body(1))
    ctl.clock_ticks, ctl.ids = 5, {"agent-0": 3}
    assert ctl.kill() == [0, 1]
    ctl.restart()
    assert ran == []  # nothing ran past the death
    assert (ctl.seed, ctl.clock_ticks, ctl.ids) == (7, 5, {"agent-0": 3})
    assert not any(t.is_alive() for t in threading.enumerate() if t.name.startswith("toki-agent"))


def test_threads_of_an_async_agent_are_units_of_their_own() -> None:
    """`asyncio.to_thread` and `run_in_executor` run in threads numbered with the tasks; a
    gate point in such a thread parks it like a task, and releasing it runs only it: the
    same choices give the same run."""
    runs = []
    for _ in range(5):
        ctl = Controller(timeout=10)
        ctl.reset(0)
        log: list[str] = []

        def blocking(name: str, ctl: Controller = ctl, log: list[str] = log) -> str:
            for i in range(2):
                ctl.gate("test", f"{name}.io{i}", None, [], [("shared", name)])
                log.append(f"{name}{i}")
            return name

        async def body() -> list[str]:
            import asyncio

            loop = asyncio.get_running_loop()
            got = await asyncio.gather(
                asyncio.to_thread(blocking, "t"), loop.run_in_executor(None, blocking, "e")
            )
            return list(got)

        state = ctl.start(0, body, is_async=True)
        # the executor's thread is unit 1; gather wraps to_thread in task 2, whose thread
        # runs in that task's context: it is unit 2 (the task waits for it)
        parked = sorted((p["task"], p["name"]) for p in state["parked"])
        assert parked == [(1, "e.io0"), (2, "t.io0")]
        state = ctl.release(0, task=2)
        assert log == ["t0"]  # only the released thread ran
        for task in (1, 1, 2):
            state = ctl.release(0, task=task)
        assert state == {"state": "done", "outcome": ["t", "e"]}
        assert log == ["t0", "e0", "e1", "t1"]
        runs.append(tuple((p["task"], p["name"]) for p in ctl.executed))
        ctl.reset(1)
    assert len(set(runs)) == 1


def test_an_agent_crashed_by_unwinding_knows_it_and_its_gates_raise() -> None:
    """Cognee's adapter lets go of its modelled lock without a gate point while a crashed
    agent unwinds (`unwinding`): a gate point reached then raises at once."""
    ctl = Controller(timeout=5)
    ctl.reset(0)
    seen: list[object] = []

    def body() -> None:
        seen.append(ctl.unwinding())
        try:
            ctl.gate("test", "parked")
        finally:
            seen.append(ctl.unwinding())
            try:
                ctl.gate("test", "while-unwinding")
            except BaseException as exc:  # Abandoned, a BaseException
                seen.append(type(exc).__name__)

    assert ctl.start(0, body)["state"] == "parked"
    assert ctl.unwinding() is False  # the host is no agent
    assert ctl.crash(0, unwind=True) is True  # returns once the thread has ended
    assert seen == [False, True, "Abandoned"]
    ctl.reset(1)


def test_a_unit_thread_that_ends_after_its_run_was_reset_counts_in_no_later_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CI witness (stop 47, tests/real/test_units.py): an executor thread hands its result to
    the loop, the agent finishes, the host resets, and only then does the thread uncount
    itself. Counted into the next run, the next run's agent 0 looked busy forever
    (GateTimeout after 60 s). Here the thread is held between the two steps on purpose."""
    import concurrent.futures

    from toki.real.inenv import controller as controller_module

    class SlowFuture(concurrent.futures.Future[Any]):
        def set_result(self, result: Any) -> None:
            super().set_result(result)
            threading.Event().wait(0.3)  # the host finishes the run and resets meanwhile

    monkeypatch.setattr(controller_module.concurrent.futures, "Future", SlowFuture)
    ctl = Controller(timeout=5)
    ctl.reset(0)

    async def quick() -> int:
        return await asyncio.to_thread(lambda: 1)

    assert ctl.start(0, quick, is_async=True) == {"state": "done", "outcome": 1}
    ctl.reset(1)

    async def parks() -> Any:
        return await asyncio.to_thread(ctl.gate, "test", "io", None, [], [("doc", "*")])

    state = ctl.start(0, parks, is_async=True)  # the stale count made this a GateTimeout
    assert state["state"] == "parked" and state["point"]["name"] == "io"
    assert ctl.release(0) == {"state": "done", "outcome": None}
    ctl.reset(2)
