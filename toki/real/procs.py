"""Free-running deployments: several OS processes on one SQLite file, and checks on what
they leave.

`toki/real/deploy.py` models processes as instances in one worker, so that the explorer can
choose every interleaving of their file writes; what that cannot show are effects between
real processes (SQLite's lock waits and busy timeouts, writes made without a gate point,
page-cache visibility). Here the processes are real and nothing schedules them: one gate
controller cannot park several processes deterministically, so the operating system
interleaves them and a run is not reproducible; only each process's workload is a fixed
function of the seed. A file barrier makes them start writing together, so they contend.

* `run_toki_sqlite`: N processes (`toki.real.procs_toki`) open one toki SQLite store and
  assert / supersede facts on shared and private keys, retrying `StoreBusy`. Checks: every
  acknowledged write is in the log under the version id it was acknowledged with; no attempt
  reported failed is in the log; nothing is in it that no attempt wrote, or twice; each private
  key ends at its process's last write; `verify` (chain, projection against the log) passes;
  a full replay and the checkpointed open give one state hash, and every process, caught up
  after all have written, sees that same state.
* `run_mem0`: N processes (`inenv.mem0_procs`, in mem0's environment) each build their own
  mem0 `Memory` over the same FAISS files and history database and `add` concurrently;
  checks: acknowledged memories missing from the files a fresh process loads (FAISS saves
  its index and docstore whole on every write: the last save wins), history rows against
  memories, the index against the docstore, and "database is locked" surfaced to a caller.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toki.errors import InvalidInput
from toki.real.errors import WorkerError

__all__ = [
    "Logged",
    "check_attempts",
    "run_mem0",
    "run_processes",
    "run_toki_sqlite",
]

READY_TIMEOUT = 300.0
"""Seconds the host waits for all processes to reach a barrier (mem0's import is slow on a
loaded machine); a process that exits first fails the run at once, with its log."""


@dataclass(frozen=True, slots=True)
class Logged:
    """A version as the log holds it: its id and the source id its write carried."""

    version_id: str
    source_id: str


def check_attempts(
    attempts: Sequence[Mapping[str, Any]], logged: Sequence[Logged]
) -> dict[str, list[str]]:
    """What the processes said against what the log holds (a pure function: tests doctor
    either side). `attempts`: one per try, with `source_id` and either `version_id` (the
    store acknowledged it) or `error` (the store reported it failed). Returns the problems
    by check, each a sentence naming the attempt: `lost` (acknowledged, not in the log, or
    in it under another id), `failed_but_logged` (reported failed, yet in the log),
    `unclaimed` (in the log, written by no attempt), `duplicated` (one attempt's source id
    under several versions)."""
    by_source: dict[str, str] = {}
    duplicated = []
    for entry in logged:
        first = by_source.setdefault(entry.source_id, entry.version_id)
        if first != entry.version_id:
            duplicated.append(f"{entry.source_id}: logged as {first} and as {entry.version_id}")
    lost, failed_but_logged = [], []
    for a in attempts:
        sid = str(a["source_id"])
        got = by_source.get(sid)
        if "version_id" in a:
            if got is None:
                lost.append(f"{sid}: acknowledged as {a['version_id']} but not in the log")
            elif got != a["version_id"]:
                lost.append(f"{sid}: acknowledged as {a['version_id']}, logged as {got}")
        elif got is not None:
            failed_but_logged.append(
                f"{sid}: reported failed ({a.get('error')}) but logged as {got}"
            )
    tried = {str(a["source_id"]) for a in attempts}
    unclaimed = [
        f"{s}: logged as {v}, written by no attempt" for s, v in by_source.items() if s not in tried
    ]
    return {
        "lost": lost,
        "failed_but_logged": failed_but_logged,
        "unclaimed": unclaimed,
        "duplicated": duplicated,
    }


# -- running N processes behind a file barrier ---------------------------------------------


def run_processes(
    argvs: Sequence[Sequence[str]],
    sync: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = READY_TIMEOUT,
) -> list[dict[str, Any]]:
    """Start one process per argv; when all have touched `ready-<i>` in `sync`, touch `go`;
    when all have touched `done-<i>`, touch `finish`; then wait for them and return each
    one's `report-<i>.json`. A process that exits early or fails raises WorkerError with
    the end of its log."""
    n = len(argvs)
    logs = [sync / f"log-{i}.txt" for i in range(n)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, argv in enumerate(argvs):
            with logs[i].open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        list(argv),
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=None if env is None else dict(env),
                        cwd=None if cwd is None else str(cwd),
                    )
                )
        for phase, release in (("ready", "go"), ("done", "finish")):
            _await(procs, logs, [sync / f"{phase}-{i}" for i in range(n)], timeout, phase)
            (sync / release).touch()
        end = time.monotonic() + timeout
        for i, proc in enumerate(procs):
            code = proc.wait(timeout=max(0.1, end - time.monotonic()))
            if code != 0:
                raise WorkerError(f"process {i} exited with {code}:\n{_tail(logs[i])}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [json.loads((sync / f"report-{i}.json").read_text()) for i in range(n)]


def _await(
    procs: Sequence[subprocess.Popen[bytes]],
    logs: Sequence[Path],
    files: Sequence[Path],
    timeout: float,
    phase: str,
) -> None:
    end = time.monotonic() + timeout
    while not all(f.exists() for f in files):
        for i, proc in enumerate(procs):
            if proc.poll() is not None and not files[i].exists():
                raise WorkerError(
                    f"process {i} exited with {proc.returncode} before '{phase}':\n"
                    + _tail(logs[i])
                )
        if time.monotonic() > end:
            late = [i for i, f in enumerate(files) if not f.exists()]
            raise WorkerError(f"processes {late} did not reach '{phase}' within {timeout:g} s")
        time.sleep(0.002)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _fresh(sync: Path) -> Path:
    """The barrier folder of a new run (a folder holding one already is refused)."""
    if sync.exists():
        raise InvalidInput("--out", f"{sync.parent} already holds a run", "name a new folder")
    sync.mkdir(parents=True)
    return sync


def _positive(name: str, value: int, least: int = 1) -> None:
    if value < least:
        raise InvalidInput(name, f"{value} < {least}")


# -- toki's own SQLite store -----------------------------------------------------------------


def run_toki_sqlite(
    processes: int = 4,
    writes: int = 50,
    *,
    seed: int = 0,
    shared_keys: int = 2,
    private_keys: int = 2,
    share: float = 0.5,
    busy_timeout: float = 30.0,
    checkpoint_every: int = 0,
    out: Path | None = None,
) -> dict[str, Any]:
    """N processes writing one toki SQLite store at once, then the checks (module doc).
    busy_timeout: how long SQLite's busy handler waits for the lock before the store raises
    StoreBusy (a short one makes the processes meet it). checkpoint_every: each process
    also writes a checkpoint after every that many of its writes, while the others write
    (0: only when toki's own policy says one is due). Returns a JSON-ready report whose `ok`
    says whether every check passed."""
    from toki.memory import Memory
    from toki.store.audit import verify_store
    from toki.store.sqlite import SQLiteStore

    _positive("--processes", processes)
    _positive("--writes", writes)
    _positive("--shared-keys", shared_keys, 0)
    _positive("--private-keys", private_keys, 0)
    if shared_keys + private_keys == 0:
        raise InvalidInput("--shared-keys", "no keys to write", "give shared or private keys")
    if not 0.0 <= share <= 1.0:
        raise InvalidInput("--share", f"{share} is not a probability in [0, 1]")
    if busy_timeout < 0:
        raise InvalidInput("--busy-timeout", f"{busy_timeout} < 0")
    _positive("--checkpoint-every", checkpoint_every, 0)
    root = Path(tempfile.mkdtemp(prefix="toki-procs-")) if out is None else out
    sync = _fresh(root / "sync")
    path = root / "store.db"
    Memory(SQLiteStore(path)).close()  # the schema exists before the race (not part of it)
    spec = {
        "path": str(path),
        "sync": str(sync),
        "seed": seed,
        "writes": writes,
        "shared_keys": shared_keys,
        "private_keys": private_keys,
        "share": share,
        "busy_timeout": busy_timeout,
        "checkpoint_every": checkpoint_every,
        "barrier_timeout": READY_TIMEOUT,
    }
    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(spec, sort_keys=True))
    argv = [sys.executable, "-m", "toki.real.procs_toki", str(spec_path)]
    t0 = time.perf_counter()
    reports = run_processes([[*argv, str(i)] for i in range(processes)], sync)
    seconds = time.perf_counter() - t0

    store = SQLiteStore(path, existing=True)
    try:
        verified = verify_store(store)
        events, _ = store.load_log()
    finally:
        store.close()
    logged = [Logged(e.version.id, e.version.source_id) for e in events if e.version is not None]
    attempts = [a for r in reports for a in r["attempts"]]
    problems = check_attempts(attempts, logged)
    # the open every process does (from the checkpoint, if one was written) against a
    # replay of the whole log; both read-only, so the check writes nothing
    checkpointed = Memory(SQLiteStore(path, existing=True))
    opened = checkpointed.open_report
    opened_from = "empty store" if opened is None else opened.opened_from
    hashes = {"checkpoint": checkpointed.state_hash()}
    checkpointed.close()
    replayed = Memory(SQLiteStore(path, existing=True), from_checkpoint=False)
    hashes["full_replay"] = replayed.state_hash()
    private = _private_ends(replayed, reports)
    replayed.close()
    seen = {r["process"]: r["seen"]["state_hash"] for r in reports}
    problems["private_order"] = private
    problems["replay"] = (
        [] if hashes["checkpoint"] == hashes["full_replay"] else [f"state hashes differ: {hashes}"]
    )
    problems["verify"] = [] if verified.ok else [verified.describe()]
    problems["visibility"] = [
        f"process {p} saw {h} after catching up, the store holds {hashes['full_replay']}"
        for p, h in sorted(seen.items())
        if h != hashes["full_replay"]
    ]
    counts = {
        k: sum(r["counts"][k] for r in reports)
        for k in (
            "busy_open",
            "busy_write",
            "busy_checkpoint",
            "other_errors",
            "given_up",
            "checkpoints",
        )
    }
    acknowledged = sum(1 for a in attempts if "version_id" in a)
    return {
        "deployment": "toki-sqlite",
        "processes": processes,
        "writes_per_process": writes,
        "seed": seed,
        "busy_timeout": busy_timeout,
        "shared_keys": shared_keys,
        "private_keys": private_keys,
        "acknowledged": acknowledged,
        "attempts": len(attempts),
        "events": len(events),
        "store_raised": counts,
        "per_process": [
            {
                "process": r["process"],
                **r["counts"],
                "max_call_seconds": round(r["call_seconds"]["max"], 4),
            }
            for r in reports
        ],
        "verify": verified.describe(),
        "state_hash": hashes["full_replay"],
        "opened_from": opened_from,
        "problems": problems,
        "ok": not any(problems.values()),
        "seconds": round(seconds, 2),
        "store": str(path),
    }


def _private_ends(memory: Any, reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each private key's current value is its process's last acknowledged write to it
    (only that process writes it, in program order)."""
    from toki.real.procs_toki import key_of

    last: dict[str, str] = {}
    for r in reports:
        for a in r["attempts"]:
            if "version_id" in a and not str(a["key"]).startswith("shared:"):
                last[str(a["key"])] = str(a["source_id"]).rsplit("-a", 1)[0]
    out = []
    for name, value in sorted(last.items()):
        got = memory.current(key_of(name))
        if not got.is_value or got.value != value:
            out.append(f"{name}: current is {got.kind} {got.value!r}, last write was {value!r}")
    return out


# -- mem0's FAISS files and history database -----------------------------------------------


def run_mem0(
    processes: int = 3,
    adds: int = 10,
    *,
    seed: int = 0,
    repetitions: int = 1,
    system: str = "mem0-1.0.11",
    reload: bool = False,
    out: Path | None = None,
) -> dict[str, Any]:
    """`repetitions` runs of N mem0 processes adding at once over one FAISS path and
    history database (module doc). The workload (which user each add names, its text) is a
    fixed function of the seed; the interleaving is the operating system's.

    reload=False: each process builds its Memory once, before the barrier (long-lived
    workers: each loaded the files while they were empty, so the last saver's memories are
    all that stay). reload=True: each add builds a new Memory first, loading the files as
    they are then (a process per request): a memory is lost only when another process saves
    between this one's load and its save, which the OS interleaving decides."""
    from toki.real.session import worker_env
    from toki.real.systems import get_real_system, worker_python

    _positive("--processes", processes)
    _positive("--writes", adds)
    _positive("--repetitions", repetitions)
    real = get_real_system(system)
    if real.adapter != "mem0" or not real.version.startswith("1."):
        raise InvalidInput("system", f"{system!r}", "use mem0-1.0.11 (the 1.x add pipeline)")
    python = worker_python(real)
    root = Path(tempfile.mkdtemp(prefix="toki-procs-mem0-")) if out is None else out
    runs = []
    for rep in range(repetitions):
        here = root / f"rep-{rep}"
        sync = _fresh(here / "sync")
        home = here / "home"
        home.mkdir()
        spec = {
            "dir": str(here / "data"),
            "sync": str(sync),
            "seed": seed,
            "adds": adds,
            "users": 2,
            "reload": reload,
            "barrier_timeout": READY_TIMEOUT,
        }
        spec_path = here / "spec.json"
        spec_path.write_text(json.dumps(spec, sort_keys=True))
        env = worker_env(str(home), {**real.env, "MEM0_DIR": str(home / "mem0")})
        argv = [python, "-u", "-m", "inenv.mem0_procs", str(spec_path)]
        t0 = time.perf_counter()
        reports = run_processes(
            [[*argv, "add", str(i)] for i in range(processes)], sync, env=env, cwd=home
        )
        seconds = time.perf_counter() - t0
        done = subprocess.run(
            [*argv, "inspect"], env=env, cwd=home, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise WorkerError(f"mem0 inspect failed: {done.stderr.strip()[-2000:]}")
        files = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append({"repetition": rep, **check_mem0(reports, files), "seconds": round(seconds, 2)})
    lost = [r["lost"] for r in runs]
    acked = [r["acknowledged"] for r in runs]
    return {
        "deployment": f"{system}-procs (free-running)",
        "reload": reload,
        "processes": processes,
        "adds_per_process": adds,
        "seed": seed,
        "repetitions": repetitions,
        "runs": runs,
        "lost_total": sum(lost),
        "acknowledged_total": sum(acked),
        "lost_rate": round(sum(lost) / max(1, sum(acked)), 4),
        "runs_with_loss": sum(1 for n in lost if n),
        "locked_surfaced": sum(r["locked_errors"] for r in runs),
        "locked_logged_only": sum(r["locked_logged_only"] for r in runs),
        "index_docstore_mismatches": sum(1 for r in runs if r["index_docstore_mismatch"]),
        "failed_loads_logged": sum(r["failed_loads_logged"] for r in runs),
        "errors_surfaced": sum(r["error_count"] for r in runs),
        "ok": not any(r["problems_found"] for r in runs),
        "out": str(root),
    }


def check_mem0(reports: Sequence[Mapping[str, Any]], files: Mapping[str, Any]) -> dict[str, Any]:
    """One run's processes' reports against the files a fresh process loads. The counts are
    findings, not failures of the harness: `problems_found` is true when any check found
    something (a lost memory, a history row without its memory, an index that disagrees
    with its docstore, an error surfaced to a caller)."""
    acked: dict[str, str] = {}  # memory id -> the text an add was acknowledged with
    errors: list[str] = []
    for r in reports:
        for a in r["adds"]:
            if "error" in a:
                errors.append(str(a["error"]))
            for m in a.get("results", []):
                if m.get("event") == "ADD":
                    acked[str(m["id"])] = str(m.get("memory"))
    stored = set(files["docstore_ids"])
    history_added = {str(h["memory_id"]) for h in files["history"] if h["event"] == "ADD"}
    lost = sorted(set(acked) - stored)
    history_only = sorted(history_added - stored)
    unhistoried = sorted(stored - history_added)
    index_mismatch = (
        files["index_ntotal"] != len(files["index_to_id"]) or set(files["index_to_id"]) != stored
    )
    warnings = [w for r in reports for w in r.get("warnings", [])]
    locked = sum(1 for e in errors if "locked" in e or "busy" in e)
    locked += sum(r.get("locked_at_open", 0) for r in reports)
    logged_locked = sum(1 for w in warnings if "locked" in w or "busy" in w)
    torn = sum(1 for w in warnings if "Failed to load FAISS index" in w)
    unsaved = sum(1 for w in warnings if "Failed to save FAISS index" in w)
    return {
        "acknowledged": len(acked),
        "stored": len(stored),
        "lost": len(lost),
        "lost_by_process": {
            str(r["process"]): sum(
                1
                for a in r["adds"]
                for m in a.get("results", [])
                if m.get("event") == "ADD" and str(m["id"]) not in stored
            )
            for r in reports
        },
        "history_rows": len(files["history"]),
        "history_without_memory": len(history_only),
        "memories_without_history": len(unhistoried),
        "index_ntotal": files["index_ntotal"],
        "index_docstore_mismatch": index_mismatch,
        "errors": errors[:10],
        "error_count": len(errors),
        "locked_errors": locked,
        "locked_logged_only": logged_locked,
        "failed_loads_logged": torn,
        "failed_saves_logged": unsaved,
        "library_warnings": sorted(set(warnings))[:10],
        "problems_found": bool(
            lost or history_only or unhistoried or index_mismatch or errors or logged_locked or torn
        ),
    }
