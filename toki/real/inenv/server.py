"""The worker: serve the line-JSON protocol on stdin/stdout for one adapter.

One request per line, one response per line, in order. A request is an object with "op";
a response has "ok" (and "error", "error_type" when false) and "network": the connection
attempts the guard refused since the previous response. Operations:

  hello                          -> library, version, python, protocol
  open {seed, config}            -> a fresh library instance (the previous run is discarded)
  start {agent, inbox}           -> the agent's state: parked at a point, or done
  step {agent, reply, task?}     -> release the parked call (reply: e.g. the LLM's answer);
                                    for an async agent, of its task `task` (default: oldest)
  step {..., fail: kind}         -> the call is not made: an injected error is raised there
  crash {agent}                  -> abandon the agent where it is parked
  kill {tear}                    -> the process dies: every agent abandoned; with tear, the
                                    last write of a durable file reaches disk only in part;
                                    "handover" is what the next process is started with (the
                                    host then kills this one with SIGKILL)
  resume {handover}              -> (in a new worker) take over a dead worker's run: the
                                    clock and id streams, the record of what readers were
                                    served, the adapter's configuration; nothing is opened
  reopen                         -> the library opens its own files (restart); "failed" says
                                    why they do not open, if they do not
  probe {queries}                -> what the library answers to searches (after a restart)
  observe                        -> the library's state through its own API and records
  recover {config}               -> what the library's own recovery rebuilds (if it has one)
  close                          -> end the worker

Agent state: {"state": "parked", "point": {agent, kind, name, detail, reads, writes, task},
"parked": [every parked point of the agent, by task number]} or
{"state": "done", "outcome": ...}. After a step whose point writes shared state the adapter's
`snapshot()` is recorded (what a reader would be served at that moment: N3 needs it).

A restart is two processes: `kill` in the dying worker returns the handover, the host
kills that worker and starts a new one, `resume` gives it the handover and `reopen` opens
the library there. The handover carries no state of the library: the controller's clock and
id streams (a restarted service neither rewinds time nor re-draws ids: the run stays a
function of the schedule), the host's records (the timeline, points released), the dead
worker's scratch folder (removed at the next `open` or `close`) and what the adapter's
`HANDOVER` names: the attributes holding the configuration a restarted process is started
with (file paths, a DSN) and the adapter's own records of the run (its step log), never a
library object. An adapter that can restart has `reopen` and `HANDOVER` (and `resumed()`
where the new process needs more than those attributes before `reopen`).

The library's own prints go to stderr: the protocol owns the real stdout.
"""

from __future__ import annotations

import atexit
import faulthandler
import importlib
import json
import os
import shutil
import sys
import time
from typing import Any

from . import faults, guard

PROTOCOL = 1

__all__ = ["PROTOCOL", "main"]


def _writes_shared(point: dict[str, Any]) -> bool:
    return any(w[0] != "clock" for w in point.get("writes", ())) or point.get("kind") == "lock"


class Worker:
    def __init__(self, adapter_name: str) -> None:
        from . import stubs
        from .controller import Controller

        timeout = float(os.environ.get("TOKI_REAL_GATE_TIMEOUT", "60"))
        self.controller = Controller(timeout)
        stubs.install(self.controller)
        module = importlib.import_module(f".{adapter_name}", __package__)
        self.adapter: Any = module.Adapter(self.controller)
        self.timeline: list[Any] = []
        self.files = faults.FileWatch()
        self.released_before = 0  # points released before the last restart (timeline index)
        self.stale: list[str] = []  # scratch folders of dead workers whose files this one uses

    def _durable(self) -> list[str]:
        files = getattr(self.adapter, "durable_files", None)
        return list(files()) if files is not None else []

    def _drop_stale(self) -> None:
        for path in self.stale:
            shutil.rmtree(path, ignore_errors=True)
        self.stale = []

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        ctl = self.controller
        if op == "hello":
            return {
                "protocol": PROTOCOL,
                "python": sys.version.split()[0],
                **self.adapter.describe(),
                "restartable": all(
                    hasattr(self.adapter, hook) for hook in ("reopen", "HANDOVER")
                ),
                "tearable": hasattr(self.adapter, "durable_files"),
                "is_async": bool(getattr(self.adapter, "is_async", False)),
                "units": bool(
                    getattr(self.adapter, "units", getattr(self.adapter, "is_async", False))
                ),
            }
        if op == "open":
            ctl.reset(int(req.get("seed", 0)))
            self.adapter.open(dict(req.get("config") or {}))
            self._drop_stale()
            self.timeline = []
            self.released_before = 0
            self.files.reset(self._durable())
            return {}
        if op == "start":
            agent = int(req["agent"])
            inbox = list(req.get("inbox") or [])
            return ctl.start(
                agent,
                lambda: self.adapter.agent_main(agent, inbox),
                is_async=bool(getattr(self.adapter, "is_async", False)),
            )
        if op == "step":
            agent = int(req["agent"])
            task = req.get("task")
            fail = faults.make_error(str(req["fail"])) if req.get("fail") else None
            state = ctl.release(
                agent, req.get("reply"), None if task is None else int(task), fail=fail
            )
            self.files.after_step(self._durable())
            point = ctl.executed[-1]
            if _writes_shared(point):
                after = self.released_before + len(ctl.executed) - 1
                self.timeline.append({"after": after, "view": self.adapter.snapshot()})
            return state
        if op == "crash":
            agent = int(req["agent"])
            unwind = bool(getattr(self.adapter, "crash_unwinds", False))
            crashed = ctl.crash(agent, unwind=unwind)
            if crashed:
                self.adapter.on_crash(agent)
            return {"crashed": crashed}
        if op == "kill":
            killed = ctl.kill()
            torn = None
            last = self.files.last() if req.get("tear") else None
            if last is not None:
                torn = faults.tear(last)
            root = getattr(self.adapter, "root", None)
            handed = getattr(self.adapter, "HANDOVER", ())
            handover = {
                "clock": {
                    "seed": ctl.seed,
                    "ticks": ctl.clock_ticks,
                    "ids": dict(ctl.ids),
                    "vclock": ctl.vclock,
                },
                "released": self.released_before + len(ctl.executed),
                "timeline": self.timeline,
                "stale": [*self.stale, *([root] if isinstance(root, str) else [])],
                "adapter": {name: getattr(self.adapter, name) for name in handed},
            }
            return {"killed": killed, "torn": torn, "handover": handover}
        if op == "resume":
            state = dict(req["handover"])
            clock = state["clock"]
            ctl.reset(int(clock["seed"]))
            ctl.clock_ticks = int(clock["ticks"])
            ctl.ids = {str(k): int(v) for k, v in clock["ids"].items()}
            ctl.vclock = float(clock["vclock"])
            self.released_before = int(state["released"])
            self.timeline = list(state["timeline"])
            self.stale = [str(p) for p in state["stale"]]
            for name in self.adapter.HANDOVER:  # the dead worker's, as it handed them over
                setattr(self.adapter, name, state["adapter"][name])
            resumed = getattr(self.adapter, "resumed", None)
            if resumed is not None:
                resumed()
            return {"pid": os.getpid()}
        if op == "reopen":
            self.released_before += len(ctl.executed)
            ctl.restart()
            self.adapter.reopen()
            self.files.reset(self._durable())
            failed = getattr(self.adapter, "unopenable", None)  # why its files do not open
            integrity = getattr(self.adapter, "integrity", None)
            return {
                "view": self.adapter.snapshot(),
                "integrity": integrity() if integrity is not None and not failed else None,
                **({"failed": failed} if failed else {}),
            }
        if op == "probe":
            integrity = getattr(self.adapter, "integrity", None)
            probe = getattr(self.adapter, "probe", None)
            queries = req.get("queries") or []
            return {
                "answers": [probe(str(q["text"]), str(q["scope"])) for q in queries]
                if probe is not None
                else [],
                "integrity": integrity() if integrity is not None else None,
            }
        if op == "observe":
            return {"observation": self.adapter.observe(), "timeline": self.timeline}
        if op == "recover":
            return {"recovered": self.adapter.recover(dict(req.get("config") or {}))}
        if op == "close":
            ctl.reset(0)
            self.adapter.close()
            root = getattr(self.adapter, "root", None)  # the adapter's scratch folder
            if isinstance(root, str):
                shutil.rmtree(root, ignore_errors=True)
            self._drop_stale()
            # what the library does at exit (e.g. flush queued telemetry) happens now, while
            # the guard can still report it
            exit_handlers = getattr(atexit, "_run_exitfuncs", None)
            if exit_handlers is not None:
                exit_handlers()
            return {"closed": True}
        raise ValueError(f"op: unknown operation {op!r}")


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m inenv ADAPTER", file=sys.stderr)
        return 2
    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # anything the library prints goes to stderr
    sys.stdout = sys.stderr
    guard.install()
    faulthandler.enable()  # a library that crashes the interpreter leaves its stack in the log

    def send(resp: dict[str, Any]) -> None:
        resp["network"] = guard.drain()
        out.write(json.dumps(resp, sort_keys=True, default=str) + "\n")
        out.flush()

    try:
        worker = Worker(argv[0])
    except BaseException as exc:  # report why the library could not be loaded, then stop
        send({"ok": False, "error": f"{type(exc).__name__}: {exc}", "error_type": "load"})
        return 1
    send({"ok": True, "ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        t0 = time.perf_counter()
        try:
            req = json.loads(line)
            resp = {"ok": True, **worker.handle(req)}
        except Exception as exc:
            resp = {
                "ok": False,
                "error": f"{type(exc).__name__}: {exc}",
                "error_type": type(exc).__name__,
            }
            req = {}
        resp["seconds"] = round(time.perf_counter() - t0, 6)
        send(resp)
        if req.get("op") == "close":
            break
    return 0
