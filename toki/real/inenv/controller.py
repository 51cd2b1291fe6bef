"""Gate points: park the calling agent at a library boundary, report it, wait for the host.

Every agent runs in a thread of its own; the host releases exactly one parked agent at a time
and waits (`_wait`) until that agent parks at its next gate point or finishes, so only one
agent ever runs: the run is a function of the schedule. Releasing and moving on is not
enough (the research notes saw one run in four diverge that way).

`CURRENT` names the agent of the running code (a context variable, so it follows the agent
into `asyncio.to_thread` and into thread pools that copy contexts); code outside any agent
(building the instance, observing it) passes every gate without stopping. A crashed agent is
abandoned where it is parked; when the run is discarded its thread is woken with `Abandoned`
(a BaseException, so the library's `except Exception` handlers let it through) and joined.
An agent of an in-process deployment can instead be crashed by unwinding (`crash(...,
unwind=True)`): `Abandoned` is raised at its gate point at once, so its `with` blocks and
`finally` clauses run (the locks it holds are released, as when a thread of a live process
dies of an exception), and the host waits for its thread to end.

Asynchronous libraries (`agate`, `start(..., is_async=True)`): the unit is (agent, task). The
agent's thread runs an event loop; a coroutine that reaches `agate` parks (awaits a future)
while the loop goes on running the agent's other tasks, so one agent can have several
coroutines parked at once. The agent counts as parked when its loop is quiescent (nothing
ready to run: every task is parked at a gate point or waiting for another task); the host
then releases one (agent, task) and waits for quiescence again. Tasks are numbered in the
order the agent's loop created them (a task factory), so task numbers are a function of the
schedule too.

Threads of an asynchronous agent are units too: the agent's loop has a default executor of
its own (`_UnitExecutor`), so `asyncio.to_thread` and `loop.run_in_executor(None, ...)` run
their function in a thread that carries the agent in its context: a `run_in_executor`
thread takes the next unit number (tasks and threads share one counter); a `to_thread`
thread runs in the context of the task that awaits it, so it is that task's unit. A gate
point in such a thread parks it like a task. The agent counts as parked only when no
thread of it is running (`_busy`): a released thread runs until it parks again or its
function returns (and the loop has taken the result), so one unit still runs at a time.

Threads of a synchronous agent are units too (`spawn`, used by `toki.real.inenv.pools` for
`ThreadPoolExecutor.submit` and `threading.Thread.start` inside an agent): the agent's own
thread is unit 0, each spawned thread the next unit number. `_busy` counts the agent's
running threads; a unit that would block (a future's result, `wait`, a join, a queue) calls
`block(ready)` instead and stops counting. Whenever no unit of the agent runs (a unit parked,
blocked or returned: `_settle`), the lowest-numbered blocked unit whose condition now holds is
woken and runs; a spawned unit starts the same way. Only when nothing holds and nothing is
parked does time pass: the blocked unit with the earliest timeout (virtual seconds,
`vclock`) is woken as timed out. So one unit runs at a time, which one is a function of
the schedule, and the agent counts as parked (or finished) only when none runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import sys
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import Any

__all__ = ["CURRENT", "Abandoned", "Controller", "GateTimeout"]

CURRENT: ContextVar[int | None] = ContextVar("toki_real_agent", default=None)
_GENERATION: ContextVar[int] = ContextVar("toki_real_generation", default=-1)
_CLAIM: ContextVar[int | None] = ContextVar("toki_real_claim_index", default=None)
_TASK: ContextVar[int] = ContextVar("toki_real_task", default=0)
_WHERE_FRAMES = 12  # frames of a stuck agent's stack a GateTimeout names


class Abandoned(BaseException):
    """Raised inside a parked thread whose run was discarded (never seen by the host)."""


class GateTimeout(RuntimeError):
    """A released agent neither reached a gate point nor finished in time."""


class _Waiter:
    """A blocked unit of a synchronous agent: woken when `ready()` holds (or, with a
    deadline, when the agent idles): `timed_out` says which."""

    __slots__ = ("abandon", "deadline", "event", "ready", "timed_out")

    def __init__(self, ready: Callable[[], bool], deadline: float | None) -> None:
        self.ready = ready
        self.deadline = deadline
        self.event = threading.Event()
        self.abandon = False
        self.timed_out = False


class _Slot:
    """One parked call: a thread waiting on `event`, or a coroutine awaiting `future`."""

    __slots__ = ("abandon", "event", "fail", "future", "loop", "point", "reply")

    def __init__(
        self,
        point: dict[str, Any],
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[Any] | None = None,
    ) -> None:
        self.point = point
        self.event = threading.Event()
        self.loop = loop
        self.future = future
        self.reply: Any = None
        self.abandon = False
        self.fail: BaseException | None = None

    def wake(
        self, reply: Any = None, abandon: bool = False, fail: BaseException | None = None
    ) -> None:
        self.reply, self.abandon, self.fail = reply, abandon, fail
        if self.future is None or self.loop is None:
            self.event.set()
            return
        future = self.future

        def settle() -> None:
            if future.done():
                return
            if abandon:
                future.set_exception(Abandoned())
            elif fail is not None:
                future.set_exception(fail)
            else:
                future.set_result(reply)

        with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits any more
            self.loop.call_soon_threadsafe(settle)


def _task_number(point: dict[str, Any]) -> int:
    task = point.get("task")
    return task if isinstance(task, int) else 0


Resource = tuple[str, Any]


class Controller:
    """The gate points of one worker. One run at a time; `reset` starts the next."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._cond = threading.Condition()
        self._slots: dict[int, dict[int, _Slot]] = {}  # agent -> task -> its parked call
        self._quiet: set[int] = set()  # async agents whose loop has nothing ready to run
        self._async: set[int] = set()
        self._watching: set[int] = set()  # async agents with a quiescence check pending
        self._loops: dict[int, asyncio.AbstractEventLoop] = {}  # async agent -> its loop
        self._busy: dict[int, int] = {}  # async agent -> its threads running (not parked)
        self._units: dict[int, int] = {}  # async agent -> units (tasks, threads) created
        self._waiting: dict[int, dict[int, _Waiter]] = {}  # sync agent -> blocked units
        self._ended: dict[int, Any] = {}  # sync agent -> its own thread's result
        self._thread_units: dict[int, int] = {}  # thread ident -> unit (sync agents' threads)
        self._done: dict[int, Any] = {}
        self._threads: list[threading.Thread] = []
        self._dead: list[_Slot] = []
        self._by_agent: dict[int, threading.Thread] = {}
        self._unwinding: set[int] = set()  # agents crashed by unwinding: no gate parks them
        self._generation = 0
        self.seed = 0
        self.clock_ticks = 0
        self.vclock = 0.0  # virtual seconds that timed waits of units have let pass
        self.unit_errors: list[dict[str, Any]] = []  # exceptions that ended a spawned unit
        self.ids: dict[str, int] = {}
        self.executed: list[dict[str, Any]] = []  # released points, in order (the trace)

    # -- inside the library ---------------------------------------------------------------

    def gate(
        self,
        kind: str,
        name: str,
        detail: Any = None,
        reads: Iterable[Resource] = (),
        writes: Iterable[Resource] = (),
    ) -> Any:
        """Park the calling agent here until the host releases it; returns the host's reply
        (e.g. an LLM answer). Outside an agent: returns None at once."""
        agent = CURRENT.get()
        if agent is None:
            return None
        if _GENERATION.get() != self._generation or agent in self._unwinding:
            raise Abandoned()
        point = {
            "agent": agent,
            "claim": _CLAIM.get(),
            "kind": kind,
            "name": name,
            "detail": detail,
            "reads": sorted([list(r) for r in reads], key=repr),
            "writes": sorted([list(w) for w in writes], key=repr),
        }
        unit = self._unit()
        loop = self._loops.get(agent)  # set: a thread of an async agent (a unit of its own)
        if loop is not None or unit:
            point["task"] = unit
        slot = _Slot(point, loop)
        with self._cond:
            if _GENERATION.get() != self._generation:
                raise Abandoned()  # reset since the check above: count in no later run
            self._slots.setdefault(agent, {})[unit] = slot
            self._busy[agent] = self._busy.get(agent, 0) - 1
            if loop is None:
                self._settle(agent)
            self._cond.notify_all()
        if loop is not None:
            self._watch_from_host(agent, loop)
        slot.event.wait()
        if slot.abandon or _GENERATION.get() != self._generation:
            raise Abandoned()
        if slot.fail is not None:
            raise slot.fail  # an injected fault: the boundary call fails instead of running
        return slot.reply

    async def agate(
        self,
        kind: str,
        name: str,
        detail: Any = None,
        reads: Iterable[Resource] = (),
        writes: Iterable[Resource] = (),
    ) -> Any:
        """`gate` for a coroutine: park this task (the agent's loop runs its other tasks)
        until the host releases it; returns the host's reply. Outside an agent: None."""
        agent = CURRENT.get()
        if agent is None:
            return None
        if _GENERATION.get() != self._generation:
            raise Abandoned()
        loop = asyncio.get_running_loop()
        task = _TASK.get()
        point = {
            "agent": agent,
            "claim": _CLAIM.get(),
            "task": task,
            "kind": kind,
            "name": name,
            "detail": detail,
            "reads": sorted([list(r) for r in reads], key=repr),
            "writes": sorted([list(w) for w in writes], key=repr),
        }
        future: asyncio.Future[Any] = loop.create_future()
        slot = _Slot(point, loop, future)
        with self._cond:
            if _GENERATION.get() != self._generation:
                raise Abandoned()  # reset since the check above: park in no later run
            self._slots.setdefault(agent, {})[task] = slot
        self._watch(agent, loop)
        reply = await future
        if _GENERATION.get() != self._generation:
            raise Abandoned()
        return reply

    def _watch(self, agent: int, loop: asyncio.AbstractEventLoop) -> None:
        """Tell the host once the agent's loop has nothing ready to run (quiescent)."""
        generation = self._generation
        if agent in self._watching:
            return  # one watcher per agent: two would keep seeing each other as ready work
        self._watching.add(agent)

        def check() -> None:
            if generation != self._generation:
                self._watching.discard(agent)
                return
            if getattr(loop, "_ready", None):  # other callbacks first (CPython's ready queue)
                loop.call_soon(check)
                return
            self._watching.discard(agent)
            if self._busy.get(agent):
                return  # a thread of the agent runs: it re-checks when it parks or returns
            with self._cond:
                self._quiet.add(agent)
                self._cond.notify_all()

        loop.call_soon(check)

    def agent(self) -> int | None:
        return CURRENT.get()

    def unwinding(self) -> bool:
        """The calling agent was crashed by unwinding (its gate points raise `Abandoned`)."""
        return CURRENT.get() in self._unwinding

    def _unit(self) -> int:
        """The calling unit: a thread of a synchronous agent by its thread (a pool that runs
        functions in a context copied at submission, as langchain's, carries the submitter's
        `_TASK`), else the context's (asyncio tasks share their loop's thread)."""
        if CURRENT.get() in self._async:  # an async agent's threads carry their task's context
            return _TASK.get()
        return self._thread_units.get(threading.get_ident(), _TASK.get())

    def begin_claim(self, index: int) -> None:
        """The calling agent starts the index-th claim of its inbox (named in its points)."""
        _CLAIM.set(index)

    # -- the host's side ----------------------------------------------------------------------

    def start(
        self, agent: int, body: Callable[[], Any], *, is_async: bool = False
    ) -> dict[str, Any]:
        """Start `body` as agent `agent` (with `is_async`, `body()` returns a coroutine that
        runs on the agent's own event loop, its tasks numbered by creation); returns when
        the agent parks or finishes."""
        generation = self._generation
        if is_async:
            self._async.add(agent)
        else:
            with self._cond:
                self._busy[agent] = 1  # the agent's own thread, unit 0

        def run() -> None:
            CURRENT.set(agent)
            _GENERATION.set(generation)
            _TASK.set(0)
            if not is_async:
                self._thread_units[threading.get_ident()] = 0
            try:
                outcome = self._run_loop(agent, body) if is_async else body()
                result: Any = {"state": "done", "outcome": outcome}
            except Abandoned:
                return
            except BaseException as exc:  # the library raised out of the agent's call
                result = {"state": "done", "outcome": {"error": f"{type(exc).__name__}: {exc}"}}
            finally:  # a later thread may get this ident: it must not inherit unit 0
                self._thread_units.pop(threading.get_ident(), None)
            with self._cond:
                if generation != self._generation:
                    return
                if is_async:
                    self._done[agent] = result
                else:  # done once none of its units runs or is parked (`_parked`)
                    self._ended[agent] = result
                    self._busy[agent] = self._busy.get(agent, 0) - 1
                    self._settle(agent)
                self._cond.notify_all()

        thread = threading.Thread(target=run, name=f"toki-agent-{agent}", daemon=True)
        self._threads.append(thread)
        self._by_agent[agent] = thread
        thread.start()
        return self._wait(agent)

    def release(
        self,
        agent: int,
        reply: Any = None,
        task: int | None = None,
        fail: BaseException | None = None,
    ) -> dict[str, Any]:
        """Let agent `agent` run the call it (its task `task`, default: its oldest parked
        task) is parked at; returns at its next gate or end. With `fail`, the call is not
        made: `fail` is raised at the gate point instead (an injected fault: the store call
        failed), and the library handles it as it would the real failure."""
        with self._cond:
            parked = self._slots.get(agent) or {}
            if task is None and parked:
                task = min(parked)
            slot = parked.pop(task, None) if task is not None else None
            if slot is None:
                raise RuntimeError(f"agent {agent} task {task} is not parked at a gate point")
            if not parked:
                self._slots.pop(agent, None)
            self._quiet.discard(agent)
        failed = {} if fail is None else {"failed": f"{type(fail).__name__}: {fail}"}
        self.executed.append({**slot.point, **failed})
        if slot.future is None:  # a thread (of a sync agent, or an async one's unit): it runs
            with self._cond:
                self._busy[agent] = self._busy.get(agent, 0) + 1
        slot.wake(reply, fail=fail)
        if slot.loop is not None:
            self._watch_from_host(agent, slot.loop)
        return self._wait(agent)

    def _watch_from_host(self, agent: int, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._watch, agent, loop)

    def crash(self, agent: int, *, unwind: bool = False) -> bool:
        """Abandon agent `agent` (every task of it) where it is parked; False when it had
        already finished. With `unwind` (threads only), raise `Abandoned` at its gate point
        and wait until its thread has ended."""
        with self._cond:
            slots = self._slots.pop(agent, None)
            self._quiet.discard(agent)
            if slots and unwind:
                self._unwinding.add(agent)
        if not slots:
            return False
        if not unwind:
            self._dead.extend(slots.values())
            return True
        if agent in self._async:
            raise RuntimeError("crash by unwinding is for thread agents, not async ones")
        for slot in slots.values():
            slot.wake(abandon=True)
        thread = self._by_agent.get(agent)
        if thread is not None:
            thread.join(timeout=self.timeout)
            if thread.is_alive():
                raise GateTimeout(
                    f"agent {agent} did not end within {self.timeout:g} s of being crashed "
                    "by unwinding: it is blocked on something a parked agent holds"
                )
        return True

    def kill(self) -> list[int]:
        """The process dies: every agent is abandoned where it is parked (none runs again);
        returns the agents that were still running."""
        with self._cond:
            agents = sorted(self._slots)
        for agent in agents:
            self.crash(agent)
        return agents

    def restart(self) -> None:
        """A fresh process after a death: discard the agents (as `reset`), but the clock and
        the id streams go on (a restarted service neither rewinds time nor re-draws ids)."""
        ticks, ids, seed, vclock = self.clock_ticks, dict(self.ids), self.seed, self.vclock
        self.reset(seed)
        self.clock_ticks, self.ids, self.vclock = ticks, ids, vclock

    def reset(self, seed: int) -> None:
        """Discard the run: wake every parked or abandoned thread with `Abandoned`, join them,
        and start counting clock ticks and ids afresh."""
        with self._cond:
            self._generation += 1
            slots = [s for parked in self._slots.values() for s in parked.values()]
            slots += self._dead
            waiters = [w for blocked in self._waiting.values() for w in blocked.values()]
            self._waiting.clear()
            self._ended.clear()
            self._thread_units.clear()
            self._slots.clear()
            self._quiet.clear()
            self._async.clear()
            self._watching.clear()
            self._loops.clear()
            self._busy.clear()
            self._units.clear()
            self._done.clear()
            self._dead = []
            self._unwinding.clear()
            self._by_agent.clear()
        for slot in slots:
            slot.wake(abandon=True)
        for waiter in waiters:
            waiter.abandon = True
            waiter.event.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout)
        self._threads = [t for t in self._threads if t.is_alive()]
        self.seed = seed
        self.clock_ticks = 0
        self.vclock = 0.0
        self.unit_errors = []
        self.ids = {}
        self.executed = []

    def _wait(self, agent: int) -> dict[str, Any]:
        with self._cond:
            ok = self._cond.wait_for(lambda: self._parked(agent), timeout=self.timeout)
            if not ok:
                raise GateTimeout(
                    f"agent {agent} neither reached a gate point nor finished within "
                    f"{self.timeout:g} s: it is probably blocked on something another, parked "
                    "agent holds (a lock): make that lock a gate point of the adapter"
                    f"{self._where(agent)}"
                )
            if agent in self._done:
                result: dict[str, Any] = self._done[agent]
                return result
            if agent not in self._slots:
                waiting = self._waiting.get(agent) or {}
                blocked = {u: getattr(w.ready, "__qualname__", "?") for u, w in waiting.items()}
                raise GateTimeout(
                    f"agent {agent}: every unit is blocked (unit: what it waits for: "
                    f"{dict(sorted(blocked.items()))}) and none is parked"
                )
            parked = sorted(self._slots[agent].items())
            return {
                "state": "parked",
                "point": parked[0][1].point,
                "parked": [slot.point for _, slot in parked],
            }

    def _where(self, agent: int) -> str:
        """Where the agent's own thread is now (its innermost frames): what it waits on."""
        thread = self._by_agent.get(agent)
        frame = sys._current_frames().get(thread.ident) if thread and thread.ident else None
        if frame is None:
            return ""
        def fmt(frames: Any) -> str:
            return " <- ".join(
                f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames)
            )

        out = "; its thread is at " + fmt(traceback.extract_stack(frame)[-_WHERE_FRAMES:])
        loop = next(
            (
                f.f_locals["self"]
                for f, _ in traceback.walk_stack(frame)
                if isinstance(f.f_locals.get("self"), asyncio.AbstractEventLoop)
            ),
            None,
        )
        if loop is not None:  # an idle event loop: where its tasks await
            with contextlib.suppress(RuntimeError):  # the loop changed under us
                for task in list(asyncio.all_tasks(loop)):
                    stack = traceback.StackSummary.extract(_awaiting(task.get_coro()))
                    out += f"; task {task.get_name()} awaits at {fmt(stack[-_WHERE_FRAMES:])}"
        return out

    def _next_unit(self, agent: int) -> int:
        """The next unit number of an async agent (tasks and threads, by creation)."""
        with self._cond:
            self._units[agent] = self._units.get(agent, 0) + 1
            return self._units[agent]

    def _run_loop(self, agent: int, body: Callable[[], Awaitable[Any]]) -> Any:
        """Run an async agent's body on a loop of its own whose units carry their creation
        number (`_TASK`): 0 is the body itself; tasks (a task factory) and executor threads
        (`_UnitExecutor`) number on from 1."""

        async def main() -> Any:
            loop = asyncio.get_running_loop()
            _TASK.set(0)

            def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
                context = kw.pop("context", None) or contextvars.copy_context()
                context.run(_TASK.set, self._next_unit(agent))
                return asyncio.Task(coro, loop=loop, context=context, **kw)

            loop.set_task_factory(factory)
            loop.set_default_executor(_UnitExecutor(self, agent))
            with self._cond:
                self._loops[agent] = loop
            return await body()

        return asyncio.run(main())

    def _parked(self, agent: int) -> bool:
        if agent in self._done:
            return True
        if agent in self._async:
            return (
                agent in self._quiet and bool(self._slots.get(agent)) and not self._busy.get(agent)
            )
        if self._busy.get(agent):
            return False
        if agent in self._ended and not self._slots.get(agent):
            # finished: units still blocked stay so (nobody waits for them any more)
            self._done[agent] = self._ended.pop(agent)
        return True  # parked, finished, or stuck (`_wait` says which)

    # -- units of synchronous agents -------------------------------------------------------

    def in_units(self) -> bool:
        """The caller is a thread of a synchronous agent of the current run."""
        agent = CURRENT.get()
        return (
            agent is not None and agent not in self._async and _GENERATION.get() == self._generation
        )

    def spawn(
        self,
        target: Callable[[], Any],
        ready: Callable[[], bool] | None = None,
        start: Callable[[Callable[[], None]], None] | None = None,
    ) -> int:
        """Make `target` the next unit of the calling (synchronous) agent; it starts once
        no unit of the agent runs and `ready()` holds (a free worker of its pool). `start`
        runs the given function in a new thread (default: a daemon thread of the
        controller's). Returns the unit number."""
        agent = CURRENT.get()
        assert agent is not None
        generation = self._generation
        unit = self._next_unit(agent)
        waiter = _Waiter(ready or (lambda: True), None)
        context = contextvars.copy_context()
        context.run(_TASK.set, unit)

        def run() -> None:
            waiter.event.wait()
            if waiter.abandon or generation != self._generation:
                return
            ident = threading.get_ident()
            self._thread_units[ident] = unit
            try:
                context.run(target)
            except Abandoned:
                return
            except BaseException as exc:  # nobody catches it: recorded, as threading would print it
                with self._cond:
                    self.unit_errors.append(
                        {"agent": agent, "task": unit, "error": f"{type(exc).__name__}: {exc}"}
                    )
            finally:  # a later thread may get this ident: it must not inherit the unit
                self._thread_units.pop(ident, None)
            with self._cond:
                if generation != self._generation:
                    return
                self._busy[agent] = self._busy.get(agent, 0) - 1
                self._settle(agent)
                self._cond.notify_all()

        with self._cond:
            self._waiting.setdefault(agent, {})[unit] = waiter
        if start is None:
            thread = threading.Thread(target=run, name=f"toki-agent-{agent}-unit", daemon=True)
            thread._toki_unit = True  # type: ignore[attr-defined]  # a unit already
            self._threads.append(thread)
            thread.start()
        else:
            start(run)
        return unit

    def block(self, ready: Callable[[], bool], timeout: float | None = None) -> bool:
        """Called by a unit of a synchronous agent instead of blocking: stop counting as
        running until `ready()` holds (True) or, with `timeout` (virtual seconds), until the
        agent has nothing else to do and this is the earliest deadline (False)."""
        agent, unit = CURRENT.get(), self._unit()
        assert agent is not None
        with self._cond:
            if _GENERATION.get() != self._generation:
                raise Abandoned()
            if ready():
                return True
            deadline = None if timeout is None else self.vclock + max(0.0, timeout)
            waiter = _Waiter(ready, deadline)
            self._waiting.setdefault(agent, {})[unit] = waiter
            self._busy[agent] = self._busy.get(agent, 0) - 1
            self._settle(agent)
            self._cond.notify_all()
        waiter.event.wait()
        if waiter.abandon or _GENERATION.get() != self._generation:
            raise Abandoned()
        return not waiter.timed_out

    def _settle(self, agent: int) -> None:
        """(Holding the lock.) If no unit of the agent runs, wake one blocked unit: the
        lowest-numbered whose condition holds; else, when none is parked and the agent's
        own thread has not ended, the earliest deadline (time passes only when idle)."""
        if self._busy.get(agent, 0) > 0:
            return
        waiting = self._waiting.get(agent) or {}
        chosen = next((u for u in sorted(waiting) if waiting[u].ready()), None)
        if chosen is None and not self._slots.get(agent) and agent not in self._ended:
            timed = [(w.deadline, u) for u, w in waiting.items() if w.deadline is not None]
            if timed:
                deadline, chosen = min(timed)
                waiting[chosen].timed_out = True
                self.vclock = max(self.vclock, deadline)
        if chosen is None:
            return
        waiter = waiting.pop(chosen)
        self._busy[agent] = 1
        waiter.event.set()


def _awaiting(coro: Any) -> list[tuple[Any, int]]:
    """The frames of a suspended coroutine down the chain of what it awaits (outermost
    first), as (frame, line) pairs: a task's own stack stops at its first frame."""
    out: list[tuple[Any, int]] = []
    while coro is not None and len(out) < 200:
        frame = next(
            (getattr(coro, a) for a in ("cr_frame", "ag_frame", "gi_frame") if hasattr(coro, a)),
            None,
        )
        if frame is not None:
            out.append((frame, frame.f_lineno))
        coro = next(
            (
                getattr(coro, a)
                for a in ("cr_await", "ag_await", "gi_yieldfrom")
                if hasattr(coro, a)
            ),
            None,
        )
    return out


class _UnitExecutor(concurrent.futures.ThreadPoolExecutor):
    """An async agent's default executor: each submitted function runs in a thread of its
    own that is a unit of the agent (the next unit number, the agent in its context), and
    the agent counts as busy from the submission until the function has returned and its
    result is on the loop's ready queue."""

    def __init__(self, controller: Controller, agent: int) -> None:
        super().__init__(max_workers=1)  # never used: asyncio insists on the class
        self.controller = controller
        self.agent = agent

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kw: Any) -> Any:
        ctl, agent, generation = self.controller, self.agent, self.controller._generation
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        context = contextvars.copy_context()
        context.run(_TASK.set, ctl._next_unit(agent))
        loop = ctl._loops.get(agent)
        with ctl._cond:
            ctl._busy[agent] = ctl._busy.get(agent, 0) + 1

        def run() -> None:
            try:
                result = context.run(fn, *args, **kw)
            except BaseException as exc:  # delivered to the awaiting task
                future.set_exception(exc)
            else:
                future.set_result(result)  # queues the result on the loop (thread-safe)
            with ctl._cond:
                if generation != ctl._generation:
                    return  # the agent finished on that result and the run was reset
                ctl._busy[agent] = ctl._busy.get(agent, 0) - 1
                ctl._cond.notify_all()
            if loop is not None:
                ctl._watch_from_host(agent, loop)

        thread = threading.Thread(target=run, name=f"toki-agent-{agent}-unit", daemon=True)
        ctl._threads.append(thread)
        thread.start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # its threads end with their functions; `Controller.reset` joins them
