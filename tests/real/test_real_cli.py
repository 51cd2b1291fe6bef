"""`toki real` from the shell: run --json, replay, the missing-environment error, setup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toki.errors import InvalidInput
from toki.real.cli import main, parse_faults

pytestmark = pytest.mark.real


def toki(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "toki.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_run_prints_the_promised_json_and_writes_only_into_out(tmp_path: Path) -> None:
    """mem0 1.0.11's lost decision (two ADDs after both read Bob) as the CLI reports it: the
    JSON fields, the witness written into --out only, and its replay on the real code."""
    out = tmp_path / "out"
    done = toki(
        "real",
        "run",
        "mem0-1.0.11",
        "--workload",
        "manager",
        "--strategy",
        "dpor",
        "--budget",
        "50",
        "--seed",
        "0",
        "--check",
        "--json",
        "--out",
        str(out),
    )
    assert done.returncode == 1, done.stderr  # anomalies found: exit 1, as explore --check
    data = json.loads(done.stdout)
    for key in ("system", "version", "schedules", "exhausted", "anomalies", "witnesses"):
        assert key in data
    assert data["system"] == "mem0-1.0.11" and data["exhausted"] is True
    assert set(data["anomalies"]) == {"N1", "RD", "N2", "N3"}
    assert data["anomalies"]["N2"] > 0 and data["witnesses"]["N2"].startswith(str(out))
    assert sorted(p.name for p in out.iterdir()) == ["mem0-1.0.11-N2.json"]
    replay = toki("real", "replay", data["witnesses"]["N2"])
    assert replay.returncode == 0, replay.stderr
    assert "reproduced: True" in replay.stdout and "llm.decide" in replay.stdout


def test_a_missing_environment_is_one_line_naming_the_setup_command(tmp_path: Path) -> None:
    done = toki(
        "real",
        "run",
        "mem0-1.0.11",
        "--workload",
        "manager",
        "--budget",
        "1",
        env={"TOKI_REAL_CACHE": str(tmp_path)},
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "toki real setup mem0-1.0.11" in lines[0], done.stderr


def test_setup_of_a_system_in_tokis_own_interpreter_needs_nothing() -> None:
    assert main(["setup", "toki-sqlite", "--json"]) == 0


def test_faults_and_bad_input_are_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_faults("crash:2") == 2 and parse_faults(None) == 0
    with pytest.raises(InvalidInput, match="crash:<n>"):
        parse_faults("duplicate:0")
    assert main(["run", "no-such-system", "--budget", "1"]) == 2
    assert "unknown real system" in capsys.readouterr().err
    assert main(["run", "toki-memory", "--workload", "nope"]) == 2
    assert "unknown workload" in capsys.readouterr().err
    assert main(["run", "toki-memory", "--workload", "archival-decide", "--budget", "1"]) == 2
    assert "program of letta operations" in capsys.readouterr().err


def test_list_names_every_system_and_its_environment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {s["name"] for s in data["systems"]}
    assert names == {
        "mem0-1.0.11",
        "mem0-1.0.11-async",  # AsyncMemory (issue #32)
        "mem0-1.0.11-procs",  # one instance per agent (issue #32)
        "mem0-2.2.1",
        "toki-memory",
        "toki-sqlite",
        "graphiti-0.31.2",
        "langgraph-store-memory",
        "langgraph-store-postgres",
        "langmem-0.0.30",
        "langmem-0.0.30-reflection",  # ReflectionExecutor's worker thread as a unit (#32)
        "langgraph-checkpoint-postgres",  # the Pregel loop's checkpointer, restarts (#32)
        # the corpus's affected versions and configurations (toki/real/scenarios)
        "mem0-1.0.5",
        "mem0-2.0.12",
        "mem0-2.2.1+entities",
        "mem0-2.2.1+entities-async",
        "mem0-2.0.7+entities-async",
        "langgraph-store-postgres-3.1.0",
        "letta-0.16.8",  # beside the letta model row (issue #33)
        "cognee-1.6.5",  # beside the cognee model row (issue #33)
    }
    shared = {s["name"]: s["environment"] for s in data["systems"]}
    assert shared["langmem-0.0.30"] == shared["langgraph-store-postgres"]  # one environment
    assert shared["langgraph-checkpoint-postgres"] == shared["langgraph-store-postgres"]
    assert shared["mem0-1.0.11-async"] == shared["mem0-1.0.11-procs"] == shared["mem0-1.0.11"]
    assert data["aliases"]["mem0-2.x"] == "mem0-2.2.1"
