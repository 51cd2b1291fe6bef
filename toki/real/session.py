"""The host's end of the line-JSON pipe to a worker running the library.

A `Session` starts `python -m inenv ADAPTER` in the system's interpreter with `toki/real` on
PYTHONPATH and a scrubbed environment (no proxies, no API keys, the system's telemetry
switches, a private HOME), then exchanges one JSON object per line each way. Every response
carries the network attempts the guard refused; any at all make the call raise
`NetworkRefused`, naming the library's frame that tried.

`respawn` is a process death and restart: the worker is killed (SIGKILL: no flush, no exit
handler, no `finally`) and a new one is started for the same system, with the same
environment and HOME; nothing of the dead process's memory reaches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from toki.real.errors import NetworkRefused, WorkerError

__all__ = ["Session", "worker_env"]

WORKER_ROOT = Path(__file__).resolve().parent  # contains the `inenv` package
_KEEP = ("PATH", "LANG", "LC_ALL", "SYSTEMROOT", "TMPDIR", "TOKI_REAL_POOLS")


def worker_env(home: str, extra: Mapping[str, str]) -> dict[str, str]:
    """The environment of a process in a library's environment: only the variables in _KEEP
    from ours, the `inenv` package importable, its own HOME, UTC, no bytecode written; then
    `extra` (the system's variables, the caller's)."""
    env = {k: os.environ[k] for k in _KEEP if k in os.environ}
    env.update(
        {
            "PYTHONPATH": str(WORKER_ROOT),
            "HOME": home,
            "TZ": "UTC",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    env.update(extra)
    return env


class Session:
    """One worker process; use as a context manager (or call `close`)."""

    def __init__(
        self,
        system: str,
        python: str,
        adapter: str,
        env: Mapping[str, str] | None = None,
        *,
        gate_timeout: float = 60.0,
    ) -> None:
        self.system = system
        self._home = tempfile.TemporaryDirectory(prefix="toki-real-home-")
        base = worker_env(
            self._home.name,
            {"PYTHONHASHSEED": "0", "TOKI_REAL_GATE_TIMEOUT": str(gate_timeout), **(env or {})},
        )
        self._log: IO[str] = tempfile.NamedTemporaryFile(  # noqa: SIM115 - lives with the session
            "w+", prefix=f"toki-real-{system}-", suffix=".log", delete=False
        )
        self.log_path = self._log.name
        self.keep_log = False  # set when something failed: the log explains it
        self._argv = [python, "-u", "-m", "inenv", adapter]
        self._env = base
        self.start_seconds: list[float] = []  # how long each worker took to be ready
        self._start()

    def _start(self) -> None:
        t0 = time.perf_counter()
        try:
            self._proc = subprocess.Popen(
                self._argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._log,
                env=self._env,
                text=True,
                encoding="utf-8",
                cwd=self._home.name,
            )
        except OSError as exc:
            raise WorkerError(
                f"system {self.system!r}: cannot start {self._argv[0]}: {exc}"
            ) from exc
        ready = self._read()
        if not ready.get("ok"):
            raise WorkerError(
                f"system {self.system!r}: the worker could not load the library: "
                f"{ready.get('error')} (log: {self.log_path})"
            )
        self.info = self.call("hello")
        self.start_seconds.append(time.perf_counter() - t0)

    @property
    def pid(self) -> int:
        """The worker's OS process id (a respawn changes it)."""
        return self._proc.pid

    def respawn(self) -> int:
        """Kill the worker with SIGKILL, as a death is, and start a new one for the same
        system (same interpreter, adapter, environment, HOME and log); returns the new pid.
        The new worker has loaded the library and answered `hello`; it has opened nothing."""
        old = self._proc
        old.kill()
        old.wait()
        for stream in (old.stdin, old.stdout):
            if stream is not None:
                stream.close()
        self._log.write(f"\n--- toki: worker {old.pid} killed (SIGKILL); a new worker starts\n")
        self._log.flush()
        self._start()
        return self._proc.pid

    def _read(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self.keep_log = True
            code = self._proc.poll()
            raise WorkerError(
                f"system {self.system!r}: the worker ended (exit {code}); last log lines:\n"
                + self._tail()
            )
        try:
            data: dict[str, Any] = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkerError(
                f"system {self.system!r}: out-of-protocol line from the worker: {line[:200]!r}"
            ) from exc
        attempts = data.get("network") or []
        if attempts:
            raise NetworkRefused(self.system, list(attempts))
        return data

    def _tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request and return its response; a refused request raises WorkerError."""
        if self._proc.poll() is not None:
            raise WorkerError(f"system {self.system!r}: the worker is not running")
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps({"op": op, **fields}, default=str) + "\n")
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise WorkerError(
                f"system {self.system!r}: the worker went away ({exc}); last log lines:\n"
                + self._tail()
            ) from exc
        data = self._read()
        if not data.get("ok"):
            self.keep_log = True
            raise WorkerError(
                f"system {self.system!r}: {op} failed in the worker: {data.get('error')} "
                f"(log: {self.log_path})"
            )
        return data

    def close(self, *, quiet: bool = False) -> None:
        """End the worker. Network attempts it reports while closing (telemetry flushed at
        exit) raise NetworkRefused unless `quiet` (an error is already on its way)."""
        refused: NetworkRefused | None = None
        if self._proc.poll() is None:
            try:
                self.call("close")
            except NetworkRefused as exc:
                refused = exc
            except WorkerError:
                pass
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()
        self._log.close()
        if not self.keep_log:
            Path(self.log_path).unlink(missing_ok=True)
        self._home.cleanup()
        if refused is not None and not quiet:
            raise refused

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        self.close(quiet=kind is not None)
