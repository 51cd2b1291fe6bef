"""Thread pools and background threads of synchronous libraries as units of their agent.

`install(controller)` patches, for code running inside a synchronous agent only (everything
else keeps the standard library's behaviour):

* `ThreadPoolExecutor.submit`: the function runs in a unit of the submitting agent
  (`Controller.spawn`), which starts once no unit of the agent runs and the pool has a free
  worker (`max_workers`, first submitted first); a future cancelled before its unit starts
  never runs, as in the real pool. `shutdown(wait=True)` (and so a `with` block's exit)
  blocks until the pool's units have finished; `cancel_futures` cancels the ones not started.
* `threading.Thread.start`: the thread is a unit of the agent that starts it (LangMem's
  reflection worker); `join` blocks until it has finished.
* waits: `Future.result` / `exception`, `concurrent.futures.wait` / `as_completed` (done
  futures yielded in the order they were given, not a set's), `queue.Queue.get` (blocking,
  with its timeout in virtual seconds).

Blocking goes through `Controller.block`, so an agent whose units wait for each other counts
as parked while the unit it waits for runs, and which unit runs next is a function of the
schedule (`tasks:<n>` explores the orders of parked units). `VirtualTime` is a `time` module
for a library's background loop: `sleep` is a timed block, `time()` reads virtual seconds.

Inside an asynchronous agent (its executor threads are units already, see the controller)
a submission still runs inline in the submitting thread.

`inline(controller)` is the earlier behaviour, kept for comparison (the systems whose env
sets `TOKI_REAL_POOLS=inline`): `submit` runs the function at once in the agent's thread.
"""

from __future__ import annotations

import concurrent.futures
import concurrent.futures._base as futures_base
import os
import queue
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from .controller import Controller

__all__ = ["VirtualTime", "inline", "install", "install_from_env"]

_INSTALLED: dict[str, Controller] = {}


def install_from_env(controller: Controller) -> None:
    """Pools as units, or inline when the system's environment says `TOKI_REAL_POOLS=inline`."""
    if os.environ.get("TOKI_REAL_POOLS") == "inline":
        inline(controller)
    else:
        install(controller)


def inline(controller: Controller) -> None:
    """Inside an agent, ThreadPoolExecutor.submit runs the function at once in the agent's
    thread and returns a finished future (the agent stays one thread; order is fixed)."""
    if "inline" in _INSTALLED:
        return
    _INSTALLED["inline"] = controller
    original = concurrent.futures.ThreadPoolExecutor.submit

    def submit(self: Any, fn: Any, /, *args: Any, **kw: Any) -> Any:
        if controller.agent() is None:
            return original(self, fn, *args, **kw)
        return _run_inline(fn, args, kw)

    concurrent.futures.ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]


def _run_inline(fn: Any, args: Any, kw: Any) -> concurrent.futures.Future[Any]:
    """Run `fn` now in the calling thread; a finished future with its result or error."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    try:
        future.set_result(fn(*args, **kw))
    except Exception as exc:
        future.set_exception(exc)
    return future


def install(controller: Controller) -> None:
    """Thread pools, threads and their waits inside synchronous agents become units."""
    if "units" in _INSTALLED:
        return
    _INSTALLED["units"] = controller
    ctl = controller
    pool = concurrent.futures.ThreadPoolExecutor
    submit0, shutdown0 = pool.submit, pool.shutdown
    result0, exception0 = concurrent.futures.Future.result, concurrent.futures.Future.exception
    wait0, as_completed0 = futures_base.wait, futures_base.as_completed
    start0, join0 = threading.Thread.start, threading.Thread.join
    get0 = queue.Queue.get

    def submit(self: Any, fn: Any, /, *args: Any, **kw: Any) -> Any:
        if not ctl.in_units():
            if ctl.agent() is not None:  # a thread of an asynchronous agent: inline, as before
                return _run_inline(fn, args, kw)
            return submit0(self, fn, *args, **kw)
        if getattr(self, "_shutdown", False):
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        units = self.__dict__.setdefault("_toki_units", [])  # (future, started) in order
        entry = [future, False]
        units.append(entry)
        limit = int(getattr(self, "_max_workers", 1) or 1)

        def ready() -> bool:  # a free worker, and no earlier submission still waiting
            active = sum(1 for f, s in units if s and not f.done())
            queued = [e for e in units if not e[1] and not e[0].cancelled()]
            return bool(future.cancelled() or (active < limit and queued[:1] == [entry]))

        def run() -> None:
            entry[1] = True
            if not future.set_running_or_notify_cancel():
                return  # cancelled before a worker took it
            try:
                out = fn(*args, **kw)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(out)

        ctl.spawn(run, ready)
        return future

    def shutdown(self: Any, wait: bool = True, *, cancel_futures: bool = False) -> None:
        units = self.__dict__.get("_toki_units")
        if units and ctl.in_units():
            self._shutdown = True
            if cancel_futures:
                for f, started in units:
                    if not started:
                        f.cancel()
            if wait:
                ctl.block(lambda: all(f.done() for f, _ in units))
        shutdown0(self, wait=wait, cancel_futures=cancel_futures)

    def result(self: Any, timeout: float | None = None) -> Any:
        if ctl.in_units() and not self.done():
            ctl.block(self.done, timeout)
            timeout = 0
        return result0(self, timeout)

    def exception(self: Any, timeout: float | None = None) -> Any:
        if ctl.in_units() and not self.done():
            ctl.block(self.done, timeout)
            timeout = 0
        return exception0(self, timeout)

    def wait(
        fs: Iterable[Any], timeout: float | None = None, return_when: str = "ALL_COMPLETED"
    ) -> Any:
        fs = list(fs)
        if ctl.in_units():

            def ready() -> bool:
                done = [f for f in fs if f.done()]
                if return_when == "FIRST_COMPLETED":
                    return bool(done) or not fs
                if return_when == "FIRST_EXCEPTION" and any(
                    not f.cancelled() and f.exception() is not None for f in done
                ):
                    return True
                return len(done) == len(fs)

            ctl.block(ready, timeout)
            timeout = 0
        return wait0(fs, timeout, return_when)

    def as_completed(fs: Iterable[Any], timeout: float | None = None) -> Iterator[Any]:
        if not ctl.in_units():
            yield from as_completed0(fs, timeout)
            return
        pending = list(dict.fromkeys(fs))
        while pending:
            if not ctl.block(lambda: any(f.done() for f in pending), timeout):
                raise TimeoutError(f"{len(pending)} (of the given) futures unfinished")
            for f in [f for f in pending if f.done()]:
                pending.remove(f)
                yield f

    def start(self: Any) -> None:
        if not ctl.in_units() or getattr(self, "_toki_unit", False):
            return start0(self)
        self._toki_unit = True
        self._toki_done = False
        run = self.run

        def body() -> None:
            try:
                run()
            finally:
                self._toki_done = True

        def launch(unit_main: Any) -> None:
            self.run = unit_main
            start0(self)

        ctl.spawn(body, start=launch)
        return None

    def join(self: Any, timeout: float | None = None) -> None:
        unit = ctl.in_units() and getattr(self, "_toki_unit", False) and not self._toki_done
        if unit and not ctl.block(lambda: bool(self._toki_done), timeout):
            return  # timed out, as join(timeout) does: the thread still runs
        join0(self, timeout)

    def get(self: Any, block: bool = True, timeout: float | None = None) -> Any:
        if block and ctl.in_units():
            if not ctl.block(lambda: self._qsize() > 0, timeout):
                raise queue.Empty
            return get0(self, False)
        return get0(self, block, timeout)

    pool.submit = submit  # type: ignore[method-assign]
    pool.shutdown = shutdown  # type: ignore[method-assign]
    concurrent.futures.Future.result = result  # type: ignore[method-assign]
    concurrent.futures.Future.exception = exception  # type: ignore[method-assign]
    futures_base.wait = wait
    concurrent.futures.wait = wait
    futures_base.as_completed = as_completed
    concurrent.futures.as_completed = as_completed
    threading.Thread.start = start  # type: ignore[method-assign]
    threading.Thread.join = join  # type: ignore[method-assign]
    queue.Queue.get = get  # type: ignore[method-assign]


class VirtualTime:
    """A `time` module for a library's background loop under the controller: `time()` reads
    virtual seconds (a millisecond more at each read, so two reads never tie), `sleep(s)` is
    a timed block that wakes when the agent idles (`Controller.block`)."""

    EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z, as the gated clock starts

    def __init__(self, controller: Controller) -> None:
        self.controller = controller

    def time(self) -> float:
        self.controller.vclock += 0.001
        return self.EPOCH + self.controller.vclock

    def monotonic(self) -> float:
        return self.time()

    def sleep(self, seconds: float) -> None:
        if self.controller.in_units():
            self.controller.block(lambda: False, seconds)
        else:
            self.controller.vclock += max(0.0, seconds)
