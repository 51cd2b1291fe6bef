"""The rough edges a new user met (issue #39), one row each: (command, exit code, where the
message goes, a fragment of it). Beside them: the exit-code table of docs/cli.md checked
against every subcommand, the pipe closed early, the matrix config found from anywhere,
and the LLM client that fails fast when nothing listens."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toki.cli import EXIT_CODES, main

ROOT = Path(__file__).resolve().parents[1]
ELLE = ROOT / "tests" / "check" / "elle_data" / "elle-cli"
HEADER = '{"format": "toki-history", "version": 1}\n'


def _files(tmp: Path) -> dict[str, str]:
    made = {
        "header": HEADER,
        "belief": HEADER + '{"type": "belief", "at": 1, "key": "a", "value": 1}\n',
        "binary": bytes(range(128, 256)) * 4,
        # one process writes x=1, writes x=2, then reads x=1 (Elle's cyclic-versions case)
        "cyclic": "["
        + ",".join(
            f'{{"index": {i}, "process": 0, "type": "{t}", "value": [{op}]}}'
            for i, (t, op) in enumerate(
                [
                    ("invoke", '["w", "x", 1]'),
                    ("ok", '["w", "x", 1]'),
                    ("invoke", '["w", "x", 2]'),
                    ("ok", '["w", "x", 2]'),
                    ("invoke", '["r", "x", null]'),
                    ("ok", '["r", "x", 1]'),
                ]
            )
        )
        + "]",
    }
    out = {}
    for name, content in made.items():
        path = tmp / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        out[name] = str(path)
    out["readme"] = str(ROOT / "README.md")
    out["gsingle"] = str(ELLE / "list-append-anomaly-g-single-item.json")
    out["missing"] = str(tmp / "nonexistent.toml")
    out["newdir"] = str(tmp / "new-out")
    out["dir"] = str(tmp)
    out["txt"] = str(tmp / "page.txt")
    return out


# (argv, exit code, "out" or "err", fragment)
ROWS: list[tuple[list[str], int, str, str]] = [
    # nothing checked is not a pass
    (["check", "@header"], 3, "out", "no check could run: nothing was checked (exit 3)"),
    (["check", "@belief"], 3, "out", "valid? unknown"),
    (["check", "@header", "--json"], 3, "out", '"valid?": "unknown"'),
    # toki matrix: a config that cannot be read is bad input, before any folder is made
    (["matrix", "--config", "@binary", "--out", "@newdir"], 2, "err", "is not a text (TOML)"),
    (["matrix", "--config", "@missing", "--out", "@newdir"], 2, "err", "--config: cannot read"),
    # exit codes: a usage error of a delegated command is 2 with `error:`
    (["prove", "--only", "isolation_lwww"], 2, "err", "unknown proof 'isolation_lwww'"),
    (["prove", "--k", "0"], 2, "err", "toki prove: error: --k"),
    # Elle's spellings, and "did you mean"
    (["check", "@gsingle", "--consistency-models", "serializable"], 1, "out", "for serializable"),
    (["check", "@gsingle", "--model", "list-append"], 1, "out", "list-append, 3 transactions"),
    (["check", "@gsingle", "-m", "rw-register"], 2, "err", "the history is list-append"),
    (["explore", "--sytem", "toki"], 2, "err", "(did you mean --system?)"),
    (["explor"], 2, "err", "(did you mean explore?)"),
    (["check", "@gsingle", "--consistency-modle", "x"], 2, "err", "did you mean --consistency"),
    (["matrix", "--budget", "smal"], 2, "err", "(did you mean small?)"),
    # ... in the delegated command lines too, reported by the subcommand that was meant
    (["real", "rn"], 2, "err", "(did you mean run?)"),
    (["real", "run", "x", "--budgt", "3"], 2, "err", "real run: error: unrecognized arguments: "),
    (["real", "run", "x", "--budgt", "3"], 2, "err", "--budgt 3 (did you mean --budget?)"),
    (["real", "run", "--sytem", "x"], 2, "err", "(did you mean system? it is positional"),
    (["real", "scenario", "--nmae", "x"], 2, "err", "(did you mean name? it is positional"),
    (["locomo", "infoo"], 2, "err", "(did you mean info?)"),
    (["locomo", "info", "--pth", "x"], 2, "err", "locomo info: error: unrecognized arguments"),
    (["locomo", "ablate", "--ablation", "typd_layer"], 2, "err", "(did you mean typed_layer?)"),
    (["prove", "--onyl", "x"], 2, "err", "toki prove: error: unrecognized arguments: --onyl x"),
    (["prove", "--onyl", "x"], 2, "err", "(did you mean --only?)"),
    (["prove", "--k", "3", "--josn"], 2, "err", "(did you mean --json?)"),
    (["real", "run", "x", "--zzzzz"], 2, "err", "arguments: --zzzzz\n"),  # nothing is close
    # messages
    (["check", "@readme"], 2, "err", "is neither a toki history nor an Elle history"),
    (["check", "@gsingle", "--consistency-model", "serialisable"], 2, "err", "serializable?"),
    (["explore", "--witness-dir", "@readme"], 2, "err", "--witness-dir: "),
    (["locomo", "info", "@missing"], 2, "err", "LoCoMo file not found at the given path"),
    # a key option that contradicts the rest is said to be set aside, not "not used"
    (["check", "@cyclic", "--linearizable-keys"], 1, "out", "linearizable-keys infers contradicts"),
    # toki show: bad input is one line
    (["show", "@missing"], 2, "err", "no such file"),
    (["show", "@dir"], 2, "err", "is a folder"),
    (["show", "@binary"], 2, "err", "is not a text file"),
    (["show", "@gsingle", "--out", "@txt"], 2, "err", "--out: "),
    (["show", "@readme"], 2, "err", "is neither a toki history nor an Elle history"),
    # long runs say what they do
    (["real", "setup", "toki-memory"], 0, "err", "preparing toki-memory"),
]


@pytest.mark.parametrize(
    ("argv", "code", "stream", "fragment"), ROWS, ids=[" ".join(r[0]) for r in ROWS]
)
def test_each_rough_edge(
    argv: list[str],
    code: int,
    stream: str,
    fragment: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    files = _files(tmp_path)
    argv = [files[a[1:]] if a.startswith("@") else a for a in argv]
    try:
        got = main(argv)
    except SystemExit as exc:
        got = int(exc.code or 0)
    out = capsys.readouterr()
    text = out.out if stream == "out" else out.err
    assert got == code, (out.out, out.err)
    assert fragment in text, (out.out, out.err)
    assert "Traceback" not in out.err and "lexpos" not in out.err
    if code == 2:
        assert len(out.err) < 600, out.err  # one line, not a 1 KB list
    assert not Path(files["newdir"]).exists()  # no empty --out folder left behind
    assert not (tmp_path / "toki-out").exists() or not any((tmp_path / "toki-out").iterdir())


# the `python -m` entry points the docs name: (module, argv, the suggestion)
MODULES = [
    ("toki.experiments.agreement", ["--confg", "x.toml"], "(did you mean --config?)"),
    ("toki.locomo.report", ["--dco", "x.md"], "(did you mean --doc?)"),
    ("toki.locomo.cli", ["infoo"], "(did you mean info?)"),
    ("toki.algebra.laws", ["--budgte", "3"], "(did you mean --budget?)"),
    ("proofs.agreement", ["--otu", "x"], "(did you mean --out?)"),
    ("proofs.macros", ["--otu", "x"], "(did you mean --out?)"),
    ("proofs.run", ["--onyl", "x"], "(did you mean --only?)"),
]


@pytest.mark.parametrize(("module", "argv", "hint"), MODULES, ids=[m[0] for m in MODULES])
def test_every_module_entry_point_says_did_you_mean(
    module: str,
    argv: list[str],
    hint: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        importlib.import_module(module).main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert ": error: " in err and err.rstrip().endswith(hint), err
    assert list(tmp_path.iterdir()) == []  # refused before anything ran


def test_every_parser_says_did_you_mean() -> None:
    from tests.test_cli_errors import _parsers
    from toki.cli_parser import TokiParser

    plain = [name for name, parser in _parsers() if not isinstance(parser, TokiParser)]
    assert plain == []


def test_a_pipe_closed_early_is_silent_and_exit_0(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "toki.cli", "demo", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)  # `| head -c 10`
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0 and err == "", err


def test_matrix_finds_its_config_from_any_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from toki.cli.experiments import _matrix_config

    monkeypatch.chdir(tmp_path)  # no verdict_matrix/ here
    assert Path(_matrix_config(None)) == ROOT / "verdict_matrix" / "matrix.toml"


def test_a_failed_matrix_run_leaves_no_empty_out_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import toki.experiments.matrix as matrix

    def fails(*_: Any, out: Path, **__: Any) -> Any:
        (out / "witnesses").mkdir(parents=True)  # what a run makes before it gets far
        raise RuntimeError("the run broke")

    monkeypatch.setattr(matrix, "run_matrix", fails)
    out = tmp_path / "m"
    assert main(["matrix", "--out", str(out), "--quiet"]) == 4
    assert not out.exists()
    existing = tmp_path / "keep"
    existing.mkdir()
    assert main(["matrix", "--out", str(existing), "--quiet"]) == 4
    assert existing.is_dir()  # a folder the user had is never removed
    capsys.readouterr()


def test_the_llm_client_fails_fast_when_nothing_listens() -> None:
    from toki.llm import LLMClient, LLMConfig, LLMUnavailable, Prompt

    with socket.socket() as s:  # a port free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    slept: list[float] = []
    config = LLMConfig(f"http://127.0.0.1:{port}/v1", "m", max_retries=5)
    client = LLMClient(config, sleep=slept.append, environ={})
    prompt = Prompt("p", "you answer", "say $x")
    with pytest.raises(LLMUnavailable, match="connection refused before any answer"):
        client.complete(prompt, {"x": "hi"})
    assert client.stats.requests == 1 and client.stats.retries == 0 and slept == []


def test_pg_grid_prints_its_table_and_its_csv_has_a_header(
    pg_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["pg-grid", "--dsn", pg_dsn, "--operators", "LWW", "--levels", "RC"]
    assert main([*argv, "--writers", "2", "--reps", "1", "--out", str(tmp_path), "--quiet"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| operator | level | writers |") and out[2].startswith("| LWW | RC")
    assert (tmp_path / "pg_grid.csv").read_text().startswith("operator,level,writers,")


def test_the_help_says_what_prove_writes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.strip().startswith("prove")]
    assert "--out" in line and "writes proofs/" not in line


# ------------------------------------------------------------------ one exit-code table


def _table() -> dict[str, set[int]]:
    doc = (ROOT / "docs" / "cli.md").read_text()
    rows = re.findall(r"^\| `toki ([a-z -]+)` \| ([0-9, ]+) \|", doc, re.M)
    return {name: {int(c) for c in codes.split(",")} for name, codes in rows}


def _subcommands() -> list[str]:
    from tests.test_cli_errors import _parsers

    names = [n.removeprefix("toki ") for n, _ in _parsers() if n != "toki"]
    return [n for n in names if n not in ("real", "locomo")]  # their subcommands are listed


def test_every_subcommand_is_in_the_exit_code_table_and_exits_2_on_bad_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = _table()
    missing = sorted(set(_subcommands()) - set(table))
    assert missing == [], f"not in the exit-code table of docs/cli.md: {missing}"
    for name, codes in table.items():
        assert codes <= set(EXIT_CODES) and 0 in codes, name
        try:
            got = main([*name.split(), "--no-such-option"])
        except SystemExit as exc:
            got = int(exc.code or 0)
        err = capsys.readouterr().err
        assert got == 2 and "error:" in err, (name, err)
    assert table["check"] == {0, 1, 3} and table["show"] == {0}
    assert table["explore"] == table["real run"] == {0, 1}  # one meaning of 1 everywhere
    doc = (ROOT / "docs" / "cli.md").read_text()
    for code in EXIT_CODES:
        assert f"| {code} |" in doc, code


def test_an_await_hold_reads_as_the_readme_says() -> None:
    """README: while an AWAIT claim waits, reads answer the last accepted value and
    open_conflicts() lists the held conflict; the challenger is never served."""
    from toki import Claim, FactKey, Memory
    from toki.algebra import AWAIT

    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "reads (`current`, `resolve_at`) keep answering with the last accepted value" in readme
    mem = Memory()
    k = FactKey(tenant="t1", subject="u1", fact_key="city")
    v1 = mem.assert_fact(k, "Lisbon", valid_from="2026-01-01T00:00:00Z", source_id="msg-1")
    held = mem.write(Claim(k, "Porto", "msg-3", valid_from="2026-09-01T00:00:00Z"), AWAIT)
    assert held.action.name == "HOLD"
    assert mem.current(k).value == "Lisbon" and mem.current(k).kind == "value"
    later = mem.resolve_at(k, valid_at="2026-10-01T00:00:00Z")
    assert (later.kind, later.value) == ("value", "Lisbon")
    (pair,) = mem.open_conflicts(k)  # the held conflict: the accepted version and the claim
    assert v1.id in pair


def test_matrix_real_counts_the_real_tasks_in_its_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toki matrix --real` ran for minutes with a counter and no total: the bar's total now
    includes the real tasks, planned before the run (here 3 model + 2 real tasks)."""
    import toki.cli.experiments as cli
    import toki.experiments.matrix as matrix

    def run(*_: Any, on_plan: Any, progress: Any, **__: Any) -> Any:
        on_plan(3)
        for _ in range(5):
            progress(1)
        raise RuntimeError("stop here: the bar is what this test reads")

    monkeypatch.setattr(matrix, "run_matrix", run)
    monkeypatch.setattr(cli, "_real_tasks", lambda config, budget: 2)
    assert main(["matrix", "--real", "--out", str(tmp_path / "m")]) == 4
    err = capsys.readouterr().err
    assert "5/5" in err and "5/3" not in err, err


def test_a_mistyped_real_budget_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m"
    assert main(["matrix", "--real", "--real-budget", "rael", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--real-budget: 'rael' is not a budget" in err and not out.exists()
