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
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from typing import Any

__all__ = ["CURRENT", "Abandoned", "Controller", "GateTimeout"]

CURRENT: ContextVar[int | None] = ContextVar("toki_real_agent", default=None)
_GENERATION: ContextVar[int] = ContextVar("toki_real_generation", default=-1)
_CLAIM: ContextVar[int | None] = ContextVar("toki_real_claim_index", default=None)


class Abandoned(BaseException):
    """Raised inside a parked thread whose run was discarded (never seen by the host)."""


class GateTimeout(RuntimeError):
    """A released agent neither reached a gate point nor finished in time."""


class _Slot:
    __slots__ = ("abandon", "event", "point", "reply")

    def __init__(self, point: dict[str, Any]) -> None:
        self.point = point
        self.event = threading.Event()
        self.reply: Any = None
        self.abandon = False


Resource = tuple[str, Any]


class Controller:
    """The gate points of one worker. One run at a time; `reset` starts the next."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._cond = threading.Condition()
        self._slots: dict[int, _Slot] = {}
        self._done: dict[int, Any] = {}
        self._threads: list[threading.Thread] = []
        self._dead: list[_Slot] = []
        self._generation = 0
        self.seed = 0
        self.clock_ticks = 0
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
        if _GENERATION.get() != self._generation:
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
        slot = _Slot(point)
        with self._cond:
            self._slots[agent] = slot
            self._cond.notify_all()
        slot.event.wait()
        if slot.abandon or _GENERATION.get() != self._generation:
            raise Abandoned()
        return slot.reply

    def agent(self) -> int | None:
        return CURRENT.get()

    def begin_claim(self, index: int) -> None:
        """The calling agent starts the index-th claim of its inbox (named in its points)."""
        _CLAIM.set(index)

    # -- the host's side ----------------------------------------------------------------------

    def start(self, agent: int, body: Callable[[], Any]) -> dict[str, Any]:
        """Start `body` as agent `agent`; returns when it parks or finishes."""
        generation = self._generation

        def run() -> None:
            CURRENT.set(agent)
            _GENERATION.set(generation)
            try:
                result: Any = {"state": "done", "outcome": body()}
            except Abandoned:
                return
            except BaseException as exc:  # the library raised out of the agent's call
                result = {"state": "done", "outcome": {"error": f"{type(exc).__name__}: {exc}"}}
            with self._cond:
                if generation == self._generation:
                    self._done[agent] = result
                    self._cond.notify_all()

        thread = threading.Thread(target=run, name=f"toki-agent-{agent}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return self._wait(agent)

    def release(self, agent: int, reply: Any = None) -> dict[str, Any]:
        """Let agent `agent` run the call it is parked at; returns at its next gate or end."""
        with self._cond:
            slot = self._slots.pop(agent, None)
        if slot is None:
            raise RuntimeError(f"agent {agent} is not parked at a gate point")
        self.executed.append(slot.point)
        slot.reply = reply
        slot.event.set()
        return self._wait(agent)

    def crash(self, agent: int) -> bool:
        """Abandon agent `agent` where it is parked; False when it had already finished."""
        with self._cond:
            slot = self._slots.pop(agent, None)
        if slot is None:
            return False
        self._dead.append(slot)
        return True

    def reset(self, seed: int) -> None:
        """Discard the run: wake every parked or abandoned thread with `Abandoned`, join them,
        and start counting clock ticks and ids afresh."""
        with self._cond:
            self._generation += 1
            slots = [*self._slots.values(), *self._dead]
            self._slots.clear()
            self._done.clear()
            self._dead = []
        for slot in slots:
            slot.abandon = True
            slot.event.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout)
        self._threads = [t for t in self._threads if t.is_alive()]
        self.seed = seed
        self.clock_ticks = 0
        self.ids = {}
        self.executed = []

    def _wait(self, agent: int) -> dict[str, Any]:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: agent in self._slots or agent in self._done, timeout=self.timeout
            )
            if not ok:
                raise GateTimeout(
                    f"agent {agent} neither reached a gate point nor finished within "
                    f"{self.timeout:g} s: it is probably blocked on something another, parked "
                    "agent holds (a lock): make that lock a gate point of the adapter"
                )
            if agent in self._slots:
                return {"state": "parked", "point": self._slots[agent].point}
            result: dict[str, Any] = self._done[agent]
            return result
