"""Checks of the `toki` command line, run before any work starts.

A bad number, an unwritable output folder or an unreachable server is reported as one
`InvalidInput` line (exit 2) before the run, not as a traceback after it. Results go to a
folder the user names with `--out`, or to a fresh folder under the current one: a command
never overwrites committed results by default (`make reproduce` passes explicit paths).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from toki.errors import InvalidInput
from toki.isolation import Isolation

__all__ = [
    "OUT_ROOT",
    "at_least",
    "check_dask_address",
    "check_pg_room",
    "fresh_out_dir",
    "out_dir",
    "parse_faults",
    "parse_ints",
    "parse_levels",
    "probability",
    "remove_if_left_empty",
    "writable_file",
]

#: Where results go when --out is not given: ./toki-out/<command>-<UTC time>.
OUT_ROOT = Path("toki-out")
#: Writers `toki pg-grid` allows whatever the server says (one connection per writer).
MAX_PG_WRITERS = 64


def at_least(field: str, value: int, low: int, fix: str = "") -> int:
    """`value` unless it is below `low`."""
    if value < low:
        what = "a positive count" if low == 1 else f"at least {low}"
        raise InvalidInput(field, f"{value} is not {what}", fix)
    return value


def probability(field: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise InvalidInput(field, f"{value} is not a probability in [0, 1]")
    return value


def parse_ints(field: str, text: str, low: int = 1) -> list[int]:
    """A comma-separated list of integers, each at least `low`, at least one."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidInput(field, f"cannot read {text!r}", "e.g. 2,4,8") from None
    if not values:
        raise InvalidInput(field, "is empty", "e.g. 2,4,8")
    for v in values:
        at_least(field, v, low)
    return values


def parse_levels(field: str, text: str) -> list[Isolation]:
    """Comma-separated isolation levels in any spelling `Isolation.parse` reads, in order,
    without repeats."""
    levels: list[Isolation] = []
    for part in text.split(","):
        if not part.strip():
            continue
        try:
            level = Isolation.parse(part)
        except InvalidInput as exc:
            raise InvalidInput(field, exc.problem, exc.fix) from None
        if level not in levels:
            levels.append(level)
    if not levels:
        raise InvalidInput(field, "names no isolation level", "e.g. RC,SI,serializable")
    return levels


def parse_faults(field: str, text: str | None, agents: int) -> list[str]:
    """`duplicate:<agent>` (an agent of the workload) and `clock-rollback:<ticks>`."""
    out: list[str] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        kind, _, arg = part.partition(":")
        fix = f"use duplicate:<agent 0 to {agents - 1}> or clock-rollback:<ticks>"
        if kind not in ("duplicate", "clock-rollback") or not (arg or "0").isdigit():
            raise InvalidInput(field, f"{part!r} is not a fault", fix)
        if kind == "duplicate" and int(arg or 0) >= agents:
            raise InvalidInput(field, f"{part!r}: the workload has {agents} agent(s)", fix)
        out.append(part)
    return out


def _probe(folder: Path, field: str) -> Path:
    """Create `folder` and prove a file can be written there."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".toki-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise InvalidInput(
            field, f"cannot write into {folder}: {exc.strerror or exc}", "name a writable folder"
        ) from None
    return folder


def fresh_out_dir(command: str, root: Path = OUT_ROOT) -> Path:
    """A new folder root/<command>-<UTC time>[-n], created (never an existing one)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    _probe(root, "--out")
    for n in range(1, 1000):
        folder = root / (f"{command}-{stamp}" + ("" if n == 1 else f"-{n}"))
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise InvalidInput("--out", f"cannot create {folder}: {exc.strerror}") from None
        return folder
    raise InvalidInput("--out", f"too many runs of {command} this second under {root}")


def out_dir(requested: str | None, command: str, field: str = "--out") -> Path:
    """The folder a command writes its results into: `requested` (created, checked
    writable; `field` is the option that named it), or a fresh one under ./toki-out."""
    if requested is None:
        return fresh_out_dir(command)
    if requested == "":
        raise InvalidInput(field, "is empty", "name a folder")
    if Path(requested).exists() and not Path(requested).is_dir():
        raise InvalidInput(field, f"{requested} is a file, not a folder", "name a folder")
    return _probe(Path(requested), field)


@contextmanager
def remove_if_left_empty(folder: Path, existed: bool) -> Iterator[Path]:
    """Run a command's work; if it fails and leaves the output folder it created holding
    nothing but empty folders, remove it (a failed run leaves no empty --out behind)."""
    try:
        yield folder
    except BaseException:
        if not existed and folder.is_dir() and not any(p.is_file() for p in folder.rglob("*")):
            shutil.rmtree(folder, ignore_errors=True)
        raise


def writable_file(field: str, path: str) -> Path:
    """A file path whose folder exists or can be made, and is not a folder itself."""
    p = Path(path)
    if p.is_dir():
        raise InvalidInput(field, f"{path} is a folder", "name a file")
    _probe(p.parent, field)
    return p


def check_dask_address(address: str, timeout: float = 3.0) -> None:
    """Fail fast when no Dask scheduler listens at tcp://host:port (the client itself
    would retry for 30 s and raise OSError)."""
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    fix = "start one with `dask scheduler`, or drop --address for a local cluster"
    if parts.scheme not in ("tcp", "tls") or not parts.hostname:
        raise InvalidInput("--address", f"cannot read {address!r}", "use tcp://host:port")
    try:
        port = parts.port or 8786
    except ValueError:
        raise InvalidInput("--address", f"bad port in {address!r}", "use tcp://host:port") from None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise InvalidInput(
            "--address", f"no Dask scheduler answers at {address} ({why})", fix
        ) from None


def check_pg_room(dsn: str, writers: Sequence[int]) -> None:
    """Refuse a writer count the server cannot hold: a run opens one connection per
    writer's transaction plus two of its own; `MAX_PG_WRITERS` bounds it anyway."""
    import psycopg

    from toki.store.postgres import mask_dsn

    most = max(writers)
    if most > MAX_PG_WRITERS:
        raise InvalidInput("--writers", f"{most} > {MAX_PG_WRITERS}", "use fewer writers")
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT current_setting('max_connections')::int"
                " - current_setting('superuser_reserved_connections')::int"
                " - (SELECT count(*) FROM pg_stat_activity)::int"
            ).fetchone()
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidInput("--dsn", f"cannot connect to {mask_dsn(dsn)}: {first}") from None
    free = int(row[0]) if row else 0
    if most + 2 > free:
        raise InvalidInput(
            "--writers",
            f"{most} writers need {most + 2} connections; the server has {max(free, 0)} free",
            "use fewer writers or raise the server's max_connections",
        )
