"""Virtual environments per system, created from lock files kept in the repository.

mem0ai 1.x and 2.x cannot share one environment, and neither should share toki's. Each
system with a lock file (`toki/real/locks/<system>.txt`: the exact versions of every
package, as `pip freeze` wrote them) gets its own environment in a cache directory outside
the checkout, keyed by the hash of the lock file and the Python version, so a changed lock
makes a new environment and an unchanged one is reused:

    $TOKI_REAL_CACHE (default ~/.cache/toki/real)/<system>-<hash>/venv

The environment is ready once `ready.json` exists (written last, after the library imported
at its pinned version); a half-made one is removed and made again. A file lock serialises
two setups of the same environment. Systems without a lock file run in toki's own
interpreter (toki's own Memory).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toki.real.errors import EnvironmentMissing, SetupFailed

__all__ = ["LOCKS", "SetupReport", "cache_root", "env_dir", "lock_digest", "python_for", "setup"]

LOCKS = Path(__file__).parent / "locks"
PIP_TIMEOUT = 1800


@dataclass(frozen=True, slots=True)
class SetupReport:
    system: str
    path: str
    created: bool  # False: the cached environment was reused
    seconds: float
    packages: int

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "path": self.path,
            "created": self.created,
            "seconds": round(self.seconds, 3),
            "packages": self.packages,
        }


def cache_root() -> Path:
    configured = os.environ.get("TOKI_REAL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "toki" / "real"


def lock_file(lock: str) -> Path:
    return LOCKS / lock


def lock_digest(lock: str) -> str:
    """sha256 of the lock file and the interpreter's major.minor (first 16 hex digits)."""
    h = hashlib.sha256(lock_file(lock).read_bytes())
    h.update(f"\0python{sys.version_info[0]}.{sys.version_info[1]}".encode())
    return h.hexdigest()[:16]


def env_dir(system: str, lock: str) -> Path:
    return cache_root() / f"{system}-{lock_digest(lock)}"


def _ready(path: Path) -> bool:
    return (path / "ready.json").is_file() and (path / "venv" / "bin" / "python").exists()


def python_for(system: str, lock: str | None) -> str:
    """The interpreter that runs the system: its environment's, or toki's own."""
    if lock is None:
        return sys.executable
    path = env_dir(system, lock)
    if not _ready(path):
        raise EnvironmentMissing(system, str(path))
    return str(path / "venv" / "bin" / "python")


def _run(cmd: list[str], what: str) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=PIP_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SetupFailed(f"{what}: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-12:])
        raise SetupFailed(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def setup(
    system: str,
    lock: str | None,
    *,
    check: Callable[[str], None] | None = None,
    force: bool = False,
) -> SetupReport:
    """Create the system's environment from its lock file unless a ready one is cached.
    `check(python)` verifies the result (e.g. the library imports at its pinned version);
    raises SetupFailed with pip's own reason when anything fails."""
    t0 = time.perf_counter()
    if lock is None:
        return SetupReport(system, sys.executable, False, 0.0, 0)
    if not lock_file(lock).is_file():
        raise SetupFailed(f"system {system!r}: no lock file {lock_file(lock)}")
    path = env_dir(system, lock)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if _ready(path) and not force:
            meta = json.loads((path / "ready.json").read_text())
            return SetupReport(
                system, str(path), False, time.perf_counter() - t0, int(meta.get("packages", 0))
            )
        shutil.rmtree(path, ignore_errors=True)
        venv = path / "venv"
        _run([sys.executable, "-m", "venv", str(venv)], f"creating the virtualenv {venv}")
        python = str(venv / "bin" / "python")
        _run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--no-deps",
                "--disable-pip-version-check",
                "--no-input",
                "-q",
                "-r",
                str(lock_file(lock)),
            ],
            f"installing {lock_file(lock).name} into {venv}",
        )
        if check is not None:
            check(python)
        packages = sum(
            1
            for line in lock_file(lock).read_text().splitlines()
            if line.strip() and not line.startswith("#")
        )
        seconds = time.perf_counter() - t0
        (path / "ready.json").write_text(
            json.dumps(
                {
                    "system": system,
                    "lock": lock,
                    "digest": lock_digest(lock),
                    "packages": packages,
                    "seconds": round(seconds, 1),
                },
                indent=2,
            )
            + "\n"
        )
    return SetupReport(system, str(path), True, seconds, packages)
