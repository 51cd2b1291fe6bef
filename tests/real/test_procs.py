"""Free-running deployments (toki/real/procs.py): real OS processes on one SQLite file.

The interleaving is the operating system's, so these tests assert only what must hold under
every interleaving: for toki's store, the checks pass; for mem0 1.0.11, whose FAISS store
loads its files once and saves them whole on every write, processes that all loaded before
any wrote leave at most one process's memories in the files. The checker itself is tested
on doctored logs (it must report a dropped acknowledged write)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.real.cli import main
from toki.real.procs import Logged, check_attempts, run_mem0, run_toki_sqlite
from toki.real.procs_toki import plan_writes
from toki.store.sqlite import SQLiteStore

from .conftest import require


def _attempts_and_log(outcomes: list[bool]) -> tuple[list[dict[str, str]], list[Logged]]:
    """One attempt per outcome (True: acknowledged, and logged; False: failed, not logged)."""
    attempts: list[dict[str, str]] = []
    logged = []
    for i, ok in enumerate(outcomes):
        sid = f"p0-w{i}-a0"
        if ok:
            attempts.append({"source_id": sid, "version_id": f"v-{i}"})
            logged.append(Logged(f"v-{i}", sid))
        else:
            attempts.append({"source_id": sid, "error": "StoreBusy: nothing was written"})
    return attempts, logged


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.booleans(), min_size=1, max_size=12), st.data())
def test_the_checker_names_exactly_what_a_doctored_log_changed(
    outcomes: list[bool], data: st.DataObject
) -> None:
    attempts, logged = _attempts_and_log(outcomes)
    assert not any(check_attempts(attempts, logged).values())
    acked = [i for i, ok in enumerate(outcomes) if ok]
    failed = [i for i, ok in enumerate(outcomes) if not ok]
    if acked:  # drop one acknowledged write from the log: reported lost, nothing else
        gone = data.draw(st.sampled_from(acked))
        problems = check_attempts(attempts, [e for e in logged if e.version_id != f"v-{gone}"])
        assert [p.split(":")[0] for p in problems["lost"]] == [f"p0-w{gone}-a0"]
        assert not problems["failed_but_logged"] and not problems["unclaimed"]
        assert not problems["duplicated"]
    if failed:  # a write reported failed is in the log after all
        bad = data.draw(st.sampled_from(failed))
        problems = check_attempts(attempts, [*logged, Logged("v-x", f"p0-w{bad}-a0")])
        assert [p.split(":")[0] for p in problems["failed_but_logged"]] == [f"p0-w{bad}-a0"]
        assert not problems["lost"] and not problems["unclaimed"]
    problems = check_attempts(attempts, [*logged, Logged("v-y", "nobody")])
    assert problems["unclaimed"] == ["nobody: logged as v-y, written by no attempt"]
    if acked:  # one write's source id under a second version
        twice = data.draw(st.sampled_from(acked))
        problems = check_attempts(attempts, [*logged, Logged("v-z", f"p0-w{twice}-a0")])
        assert problems["duplicated"] == [f"p0-w{twice}-a0: logged as v-{twice} and as v-z"]


def test_an_acknowledged_id_logged_under_another_version_is_lost() -> None:
    attempts = [{"source_id": "p0-w0-a0", "version_id": "v-1"}]
    assert check_attempts(attempts, [Logged("v-2", "p0-w0-a0")])["lost"] == [
        "p0-w0-a0: acknowledged as v-1, logged as v-2"
    ]


def test_the_workload_is_a_function_of_the_seed() -> None:
    a = plan_writes(7, 1, 20, 2, 2, 0.5)
    assert a == plan_writes(7, 1, 20, 2, 2, 0.5)
    assert {n.split(":")[0] for n in a} <= {"shared", "p1"}
    assert a != plan_writes(8, 1, 20, 2, 2, 0.5)
    assert all(n.startswith("p1:") for n in plan_writes(7, 1, 5, 0, 3, 0.5))
    assert all(n.startswith("shared:") for n in plan_writes(7, 1, 5, 2, 3, 1.0))


@pytest.mark.slow
def test_three_processes_on_one_toki_store_lose_nothing(tmp_path: Path) -> None:
    """3 processes x 15 writes, a zero busy timeout so that they meet the lock (StoreBusy,
    retried), each writing a checkpoint after every 4 of its writes: every check passes, and the checker, given the log with one acknowledged
    write dropped, reports exactly that write."""
    seed = 0
    print(f"seed={seed}")
    report = run_toki_sqlite(
        3, 15, seed=seed, busy_timeout=0.0, checkpoint_every=4, out=tmp_path / "run"
    )
    assert report["problems"] == {
        "lost": [],
        "failed_but_logged": [],
        "unclaimed": [],
        "duplicated": [],
        "private_order": [],
        "replay": [],
        "verify": [],
        "visibility": [],
    }, report
    assert report["ok"] and report["acknowledged"] == 45
    raised = report["store_raised"]
    assert report["attempts"] == 45 + raised["busy_write"] + raised["other_errors"]
    assert raised["given_up"] == 0 and raised["other_errors"] == 0
    # checkpoints written while the others wrote: the checkpointed open used one
    assert "refused" not in report["opened_from"]
    assert report["opened_from"].startswith("checkpoint at seq") == (raised["checkpoints"] > 0)

    store = SQLiteStore(report["store"], existing=True)
    events, _ = store.load_log()
    store.close()
    logged = [Logged(e.version.id, e.version.source_id) for e in events if e.version is not None]
    attempts = [
        {"source_id": e.source_id, "version_id": e.version_id} for e in logged
    ]  # the log as acknowledged
    victim = logged[len(logged) // 2]
    problems = check_attempts(attempts, [e for e in logged if e != victim])
    assert problems["lost"] == [
        f"{victim.source_id}: acknowledged as {victim.version_id} but not in the log"
    ]


def test_procs_cli_refuses_bad_input_before_making_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    for bad in (["--processes", "0"], ["--writes", "0"], ["--repetitions", "2"]):
        assert main(["procs", "toki-sqlite", *bad, "--out", str(out)]) == 2
        assert "toki real procs: error: --" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_procs_cli_json(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toki.cli",
            "real",
            "procs",
            "toki-sqlite",
            "--processes",
            "2",
            "--writes",
            "5",
            "--json",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["ok"] and data["acknowledged"] == 10
    assert Path(data["store"]).parent == out


@pytest.mark.real
@pytest.mark.slow
def test_mem0_processes_keep_at_most_one_process_memories(tmp_path: Path) -> None:
    """Each process loads the (empty) files before any writes (the barrier) and saves its
    whole index on every add, so the files keep one process's memories: at least
    (N - 1) x adds of the acknowledged memories are lost, while the history database keeps a
    row for every one of them."""
    require("mem0-1.0.11")
    n, adds = 3, 4
    report = run_mem0(n, adds, seed=0, out=tmp_path / "mem0")
    run = report["runs"][0]
    print(json.dumps(run, indent=1))
    assert run["acknowledged"] == n * adds and run["error_count"] == 0
    assert run["stored"] <= adds and run["lost"] >= (n - 1) * adds
    assert run["lost"] == run["acknowledged"] - run["stored"] or run["index_docstore_mismatch"]
    assert run["history_rows"] == n * adds
    assert run["history_without_memory"] == run["lost"]
    assert not report["ok"] and report["runs_with_loss"] == 1


@pytest.mark.real
@pytest.mark.slow
def test_mem0_process_per_request_accounts_for_every_add(tmp_path: Path) -> None:
    """Each add loads the files first, so what is lost depends on the interleaving; what
    holds under any: every add is either acknowledged or raised to its caller, every
    acknowledged memory has its history row (the history database loses nothing), and the
    lost ones are exactly the acknowledged ids the files lack."""
    require("mem0-1.0.11")
    n, adds = 2, 6
    report = run_mem0(n, adds, seed=0, reload=True, out=tmp_path / "mem0")
    run = report["runs"][0]
    print(json.dumps(run, indent=1))
    assert run["acknowledged"] + run["error_count"] == n * adds
    assert all("Collection not initialized" in e for e in run["errors"])
    assert run["locked_errors"] == 0 and run["locked_logged_only"] == 0
    assert run["history_rows"] == run["acknowledged"]
    assert run["memories_without_history"] == 0
    assert run["history_without_memory"] == run["lost"]
    assert sum(int(v) for v in run["lost_by_process"].values()) == run["lost"]
