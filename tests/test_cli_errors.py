"""The command line a researcher expects (issue 19), case by case: every bad input is one line
on stderr naming the option or file and a non-zero exit, never a traceback; results go to
--out or a fresh folder; JSON keeps numbers; exit codes as docs/cli.md lists them.

Each table row is (argv, expected exit code, fragment of stderr). Files named by a `@name`
placeholder are made in the test's temporary folder by `_files`. Most cases run in-process
(`toki.cli.main`); `SUBPROCESS` runs a few in a real interpreter to see that no traceback
reaches the terminal.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.cli import EXIT_CODES, main

ROOT = Path(__file__).resolve().parents[1]


def _witness() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (ROOT / "verdict_matrix" / "witnesses" / "langgraph-store-N3.json").read_text()
    )
    return data


def _files(tmp: Path) -> dict[str, str]:
    """Every input file the cases name, by placeholder."""
    header = '{"format": "toki-history", "version": 1}\n'
    begin = '{"type": "op", "txn": 1, "kind": "begin", "at": 1}\n'
    made = {
        "random": (tmp / "random.bin", bytes(range(128, 256)) * 4),
        "values5": (tmp / "v.jsonl", header + '{"type": "recoverable", "key": "a", "values": 5}\n'),
        "beliefs": (tmp / "b.jsonl", header + '{"type": "final", "beliefs": [1, 2]}\n'),
        "txnlist": (
            tmp / "t.jsonl",
            header + '{"type": "op", "txn": [1], "kind": "begin", "at": 1}\n',
        ),
        "version": (
            tmp / "ver.jsonl",
            header
            + begin
            + '{"type": "op", "txn": 1, "kind": "read", "key": "a", "version": "x", "at": 2}\n',
        ),
        "history": (tmp / "h.jsonl", header + begin),
        "witness": (tmp / "w.json", json.dumps(_witness(), indent=2)),
        "witness99": (tmp / "w99.json", json.dumps({**_witness(), "version": 99}, indent=2)),
        "witnessbad": (tmp / "wbad.json", json.dumps({**_witness(), "isolation": "sideways"})),
        "notjson": (tmp / "n.json", "{not json"),
        "nomarkers": (tmp / "doc.md", "# a doc without the grid markers\n"),
    }
    out = {}
    for name, (path, content) in made.items():
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        out[name] = str(path)
    out["dir"] = str(tmp)
    out["missing"] = str(tmp / "nonexistent.jsonl")
    return out


CASES: list[tuple[list[str], int, str]] = [
    # --------------------------------------------------------------- histories (toki check)
    (["check", "@missing"], 2, "cannot be read"),
    (["check", "@random"], 2, "cannot be read"),
    (["check", "@dir"], 2, "Is a directory"),
    (["check", "@values5"], 2, "line 2: recoverable needs string 'key' and list 'values'"),
    (["check", "@beliefs"], 2, "line 2: final needs 'beliefs', an object"),
    (["check", "@txnlist"], 2, "op 'txn' must be a string or an integer"),
    (["check", "@version"], 2, "op 'version' must be an integer or null"),
    (["check", "@witness"], 2, "is a witness file, not a history (use toki replay"),
    (["check", "@witness", "--format", "toki"], 2, "is a witness file"),
    # ------------------------------------------------------------------- witnesses (replay)
    (["replay", "@random"], 2, "is not a text file, so not a witness"),
    (["replay", "@history"], 2, "is a history file, not a witness (use toki check"),
    (["replay", "@witness99"], 2, "unsupported version 99"),
    (["replay", "@witnessbad"], 2, "malformed witness"),
    (["replay", "@notjson"], 2, "is not JSON"),
    (["replay", "@missing"], 2, "cannot read"),
    # ------------------------------------------------------------- outputs checked first
    (
        ["calibrate", "--p", "0.5", "--runs", "5", "--out", "/proc/x"],
        2,
        "--out: cannot write into /proc/x",
    ),
    (["explore", "--history-out", "@dir"], 2, "--history-out: "),
    (
        ["matrix", "--executor", "dask", "--address", "tcp://127.0.0.1:1"],
        2,
        "no Dask scheduler answers",
    ),
    (["matrix", "--address", "tcp://127.0.0.1:1"], 2, "add --executor dask"),
    (["matrix", "--executor", "dask", "--address", "http://x"], 2, "use tcp://host:port"),
    # ----------------------------------------------------------------------- pg-grid
    (["pg-grid", "--writers", "200"], 2, "--writers: 200 > 64"),
    (["pg-grid", "--writers", "2,x"], 2, "--writers: cannot read"),
    (["pg-grid", "--writers", "0"], 2, "--writers: 0 is not a positive count"),
    (["pg-grid", "--reps", "0"], 2, "--reps: 0 is not a positive count"),
    (["pg-grid", "--levels", "RU"], 2, "PostgreSQL has no read_uncommitted"),
    (["pg-grid", "--levels", "sideways"], 2, "--levels: unknown level 'sideways'"),
    (["pg-grid", "--operators", "XYZ"], 2, "--operators"),
    (["pg-grid", "--doc", "@nomarkers"], 2, "has no <!-- pg-grid:begin -->"),
    (["pg-grid", "--doc", "@missing"], 2, "--doc: cannot read"),
    (["pg-grid", "--dsn", "postgresql://postgres@127.0.0.1:1/test"], 2, "--dsn: cannot connect"),
    # ------------------------------------------------------------------------ locomo
    (["locomo", "baseline", "-k", "0"], 2, "-k: 0 is not a positive count"),
    (["locomo", "baseline", "--limit", "-1"], 2, "--limit: -1 is not a positive count"),
    (["locomo", "baseline", "--categories", "9"], 2, "--categories: [9] is not a category"),
    (["locomo", "baseline", "--categories", "x"], 2, "--categories: cannot read"),
    (["locomo", "ablate", "--resamples", "0"], 2, "--resamples: 0 is not a positive count"),
    (["locomo", "ablate", "-k", "-3"], 2, "-k: -3 is not a positive count"),
    # ------------------------------------------------------------- explore and relay numbers
    (["explore", "--budget", "0"], 2, "--budget: 0 is not a positive count"),
    (["explore", "--budget", "-5"], 2, "--budget: -5 is not a positive count"),
    (["relay", "--budget", "0"], 2, "--budget: 0 is not a positive count"),
    (["relay", "--crashes", "-1"], 2, "--crashes: -1 is not at least 0"),
    (["relay", "--levels", "sideways"], 2, "--levels: unknown level 'sideways'"),
    (["relay", "--rows", "4"], 2, "use 1 to 3"),
    (["explore", "--p", "1.5"], 2, "--p: 1.5 is not a probability in [0, 1]"),
    (["explore", "--p", "nan"], 2, "--p: nan is not a probability"),
    (
        ["explore", "--strategy", "bounded", "--preemptions", "-1"],
        2,
        "--preemptions: -1 is not at least 0",
    ),
    (["explore", "--strategy", "pct", "--depth", "0"], 2, "--depth: 0 is not a positive count"),
    (["explore", "--faults", "duplicate:9"], 2, "'duplicate:9': the workload has 2 agent(s)"),
    (["explore", "--faults", "meteor"], 2, "'meteor' is not a fault"),
    (["explore", "--faults", "duplicate:x"], 2, "'duplicate:x' is not a fault"),
    (["explore", "--workload", "manager", "--agents", "3"], 2, "--agents would be ignored"),
    (
        ["explore", "--workload", "manager", "--claims", "1", "--keys", "2"],
        2,
        "--claims/--keys would be ignored",
    ),
    (["explore", "--agents", "0"], 2, "--agents: 0 is not a positive count"),
    (["explore", "--isolation", "sideways"], 2, "unknown level 'sideways'"),
    (["explore", "--system", "nosuch"], 2, "invalid choice: 'nosuch'"),
    (["explore", "--workload", "nosuch"], 2, "invalid choice: 'nosuch'"),
]


def _run(
    argv: list[str], files: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    argv = [files[a[1:]] if a.startswith("@") else a for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors, --help and --version
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(("argv", "code", "fragment"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_input_is_one_line_and_a_nonzero_exit(
    argv: list[str],
    code: int,
    fragment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be written outside the test's folder
    got, _, err = _run(argv, _files(tmp_path), capsys)
    assert got == code, err
    assert fragment in err, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    if fragment.startswith("invalid choice"):  # argparse prints its usage first
        assert lines[0].startswith("usage:") and fragment in lines[-1], err
    else:
        assert len(lines) == 1, err
    assert not (tmp_path / "toki-out").exists() or not any((tmp_path / "toki-out").iterdir())


def test_pg_grid_writers_beyond_the_servers_free_connections(
    pg_dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    import toki.cli_input

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('max_connections')::int").fetchone()
    assert row is not None
    monkeypatch.setattr(toki.cli_input, "MAX_PG_WRITERS", 10 * row[0])
    assert main(["pg-grid", "--dsn", pg_dsn, "--writers", str(row[0])]) == 2
    err = capsys.readouterr().err
    assert f"{row[0]} writers need {row[0] + 2} connections; the server has" in err


# ------------------------------------------------------------------ no traceback, for real

SUBPROCESS: list[tuple[list[str], int, str]] = [
    (["check", "@random"], 2, "cannot be read"),
    (["replay", "@random"], 2, "not a text file"),
    (["locomo", "ablate", "--resamples", "0"], 2, "--resamples"),
    (["explore", "--faults", "duplicate:9"], 2, "the workload has 2 agent(s)"),
]


@pytest.mark.parametrize(
    ("argv", "code", "fragment"), SUBPROCESS, ids=[" ".join(c[0]) for c in SUBPROCESS]
)
def test_no_traceback_reaches_the_terminal(
    argv: list[str], code: int, fragment: str, tmp_path: Path
) -> None:
    files = _files(tmp_path)
    argv = [files[a[1:]] if a.startswith("@") else a for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TOKI_TRACEBACK", None)
    proc = subprocess.run(
        [sys.executable, "-m", "toki.cli", *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert proc.returncode == code, proc.stderr
    assert fragment in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


BUG = (
    "import sys, toki.cli as c, toki.cli.simulate as s; s._cmd_demo = lambda a: {}['boom']; "
    "sys.exit(c.main(sys.argv[1:]))"
)


@pytest.mark.parametrize("switch", ["", "env", "flag"])
def test_an_unexpected_exception_is_one_line_and_exit_4(switch: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TOKI_TRACEBACK", None)
    if switch == "env":
        env["TOKI_TRACEBACK"] = "1"
    argv = ["--traceback", "demo"] if switch == "flag" else ["demo"]
    proc = subprocess.run(
        [sys.executable, "-c", BUG, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    if switch:
        assert (
            proc.returncode == 1
            and "Traceback" in proc.stderr
            and "KeyError: 'boom'" in proc.stderr
        )
    else:
        assert proc.returncode == 4, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            "toki demo: internal error: KeyError: 'boom' (a bug in toki: rerun with --traceback "
            "or TOKI_TRACEBACK=1 and report it)"
        ]


def test_an_os_error_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import toki.cli.simulate

    def full(_: Any) -> int:
        raise OSError(28, "No space left on device", "out/matrix.csv")

    monkeypatch.setattr(toki.cli.simulate, "_cmd_demo", full)
    assert main(["demo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["toki demo: error: [Errno 28] No space left on device: 'out/matrix.csv'"]


def test_reproduce_refuses_an_unknown_part() -> None:
    proc = subprocess.run(
        [sys.executable, "scripts/reproduce.py", "--only", "proofs,nosuch"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown part(s) nosuch" in proc.stderr and "matrix" in proc.stderr
    assert "== proofs" not in proc.stdout  # nothing ran


# ------------------------------------------------------------------ help, version, exit codes


def test_bare_toki_prints_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: toki") and "explore" in out and "Exit status" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from toki import __version__

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out.strip() == f"toki {__version__}"


def _parsers() -> list[tuple[str, Any]]:
    """Every (sub)command's argparse parser, the delegated ones included."""
    import argparse

    from toki.cli import _build_parser
    from toki.locomo.cli import build_parser as locomo_parser
    from toki.real.cli import build_parser as real_parser

    found: list[tuple[str, Any]] = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, p in action.choices.items():
                    walk(f"{name} {sub}", p)

    walk("toki", _build_parser())
    walk("toki real", real_parser())
    walk("toki locomo", locomo_parser())
    return found


def test_every_option_has_help_and_the_named_choices_are_listed() -> None:
    import argparse

    from toki.sim.workload import SCENARIOS
    from toki.systems.registry import SYSTEMS

    missing = [
        f"{name} {'/'.join(a.option_strings) or a.dest}"
        for name, parser in _parsers()
        for a in parser._actions
        if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)
        and not a.help
        and a.dest not in ("command", "cmd")
    ]
    assert missing == [], missing
    explore = dict(_parsers())["toki explore"].format_help()
    flat = " ".join(explore.split())
    for name in [*SYSTEMS, *SCENARIOS, "dpor", "random", "pct", "bounded", "exhaustive"]:
        assert name in flat, name


def test_exit_codes_are_documented_in_one_place() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    for code in EXIT_CODES:
        assert f"| {code} |" in doc, code


# ------------------------------------------------------------------ one spelling of levels


@pytest.mark.parametrize(
    ("text", "grid"),
    [
        ("serializable", "SER"),
        ("SER", "SER"),
        ("SI", "RR"),
        ("snapshot", "RR"),
        ("rr", "RR"),
        ("repeatable read", "RR"),
        ("RC", "RC"),
        ("read-committed", "RC"),
        ("READ_COMMITTED", "RC"),
    ],
)
def test_pg_grid_reads_every_spelling_explore_and_relay_read(text: str, grid: str) -> None:
    from toki.cli import _pg_level
    from toki.cli_input import parse_levels
    from toki.isolation import Isolation

    (level,) = parse_levels("--levels", text)
    assert level is Isolation.parse(text)  # the one parser every command uses
    assert _pg_level(level) == grid


# ------------------------------------------------------------------ outputs


def test_results_go_to_a_fresh_folder_under_the_current_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toki.cli_input import fresh_out_dir

    monkeypatch.chdir(tmp_path)
    argv = ["calibrate", "--p", "0.5", "--runs", "10", "--logged-runs", "2", "--workers", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    (folder,) = (tmp_path / "toki-out").iterdir()
    assert folder.name.startswith("calibrate-") and (folder / "calibration.csv").is_file()
    assert f"wrote {Path('toki-out') / folder.name / 'calibration.csv'}" in out
    a, b = fresh_out_dir("x", tmp_path / "o"), fresh_out_dir("x", tmp_path / "o")
    assert a != b and a.is_dir() and b.is_dir()  # never an existing folder


def test_pg_grid_writes_only_into_out_and_keeps_numbers(
    pg_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = ROOT / "docs" / "postgres.md"
    before = doc.read_text()
    argv = ["pg-grid", "--dsn", pg_dsn, "--operators", "LWW", "--levels", "read committed"]
    argv += ["--writers", "2", "--reps", "1", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["csv"] == str(tmp_path / "pg_grid.csv") and data["doc"] is None
    assert doc.read_text() == before
    for r in data["rows"]:
        assert r["level"] == "RC" and isinstance(r["server_rate"], float)
        assert isinstance(r["sim_aborts_per_run"], float) and isinstance(r["server_found"], int)
    from toki.experiments.pg_grid import read_csv

    on_disk = read_csv(tmp_path / "pg_grid.csv")
    assert [float(r["server_rate"]) for r in on_disk] == [r["server_rate"] for r in data["rows"]]


@settings(derandomize=True, max_examples=200, database=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_json_output_is_strict_json_and_keeps_every_finite_number(data: Any) -> None:
    from toki.cli_output import json_safe

    text = json.dumps(json_safe(data), allow_nan=False)  # raises on NaN or infinity

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and not math.isfinite(a):
            return b is None
        if isinstance(a, list | tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        return bool(a == b) and type(a) is type(b)

    assert same(data, json.loads(text))


def test_table_has_a_header_and_aligned_columns() -> None:
    from toki.cli_output import table

    text = table(["name", "n"], [["a", 1], ["longer", None], ["c", 0.5]])
    lines = text.splitlines()
    assert lines[0].split() == ["name", "n"] and set(lines[1].replace(" ", "")) == {"-"}
    assert [line.split() for line in lines[2:]] == [["a", "1"], ["longer", "-"], ["c", "0.5"]]
    starts = {re.search(r"\s{2}\S", line).end() for line in [lines[0], *lines[2:]]}  # type: ignore[union-attr]
    assert len(starts) == 1  # the second column starts at one place on every line


# ------------------------------------------------------------------ histories out of the simulator


@pytest.mark.parametrize(
    ("system", "workload", "anomaly"),
    [
        ("langgraph-store", "manager", "N3"),
        ("toki", "manager", None),
        ("mem0-2.x", "manager", None),
    ],
)
def test_explore_history_out_round_trips_through_toki_check(
    system: str,
    workload: str,
    anomaly: str | None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from toki.history import read_history
    from toki.systems.registry import get_system

    path = tmp_path / "run.jsonl"
    argv = ["explore", "--system", system, "--workload", workload, "--check", "--quiet"]
    explored = main([*argv, "--history-out", str(path), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["history_file"] == str(path)
    assert explored == (1 if any(data["anomalies"].values()) else 0)
    history = read_history(path)  # the documented format, validated
    assert history.header["system"] == get_system(system).name and history.ops
    checked = main(["check", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    found = sorted(n for n, c in report["checks"].items() if c.get("found") is True)
    if anomaly is None:
        assert explored == 0 and checked == 0 and found == []
    else:
        assert explored == 1 and checked == 1 and anomaly in found
        # the file holds the run of the shortest witness: replaying it shows the same anomaly
        assert len(history.header["schedule"]) == data["witnesses"][anomaly]["steps"]


def test_explore_plain_output_is_tables(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explore", "--system", "langgraph-store", "--workload", "manager", "--check", "--quiet"]
    assert main(argv) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["system", "isolation", "workload"]
    assert lines[2].split()[:3] == ["langgraph-store", "read_committed", "manager"]
    assert "complete" in lines[2].split()
    rows = {line.split()[0]: line.split() for line in lines[4:] if line.strip()}
    assert rows["anomaly"][:3] == ["anomaly", "runs", "found"]
    assert rows["N3"][1] == rows["N3"][2] != "0" and rows["N2"][1] == "0"


def test_bounded_search_does_not_claim_more_than_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explore", "--system", "toki", "--agents", "2", "--claims", "1", "--json"]
    assert main([*argv, "--strategy", "bounded", "--preemptions", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["search"] == "complete within 0 preemption(s)"
    assert main([*argv, "--strategy", "random", "--budget", "3"]) == 0
    assert json.loads(capsys.readouterr().out)["search"] == "sampled (random)"
    assert main([*argv, "--strategy", "dpor", "--budget", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["search"] == "budget reached (incomplete)"
