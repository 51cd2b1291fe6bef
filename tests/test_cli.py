"""The `toki` command: demo output is computed, JSON is machine-readable, errors are clean."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toki.cli import main


def test_demo_json_tells_the_two_clock_story(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--json"]) == 0
    story = json.loads(capsys.readouterr().out)
    answers = [(q["kind"], q["value"]) for q in story["questions"]]
    assert answers == [
        ("value", "Berlin"),  # now
        ("value", "Lisbon"),  # 20 July as known on 1 August
        ("value", "Berlin"),  # 20 July as known now
        ("value", "Lisbon"),  # March
        ("unknown", None),  # before anything held
    ]
    assert any("superseded at" in line for line in story["history"])


def test_demo_text_labels_every_date(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "valid from" in out and "recorded at" in out and "superseded at" in out


def test_locomo_is_delegated(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["locomo", "--help"])
    assert info.value.code == 0
    assert "fetch" in capsys.readouterr().out


def test_relay_reports_per_level_and_a_replayable_shortest_witness(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from toki.check.relay import relay_verdict
    from toki.isolation import Isolation
    from toki.sim import replay_schedule
    from toki.sim.relay import SEED_OUTBOX, relay_program

    assert (
        main(["relay", "--rows", "1", "--levels", "ru,rc", "--json", "--out", str(tmp_path)]) == 0
    )
    ru, rc = json.loads(capsys.readouterr().out)
    assert (ru["level"], rc["level"]) == ("read_uncommitted", "read_committed")
    assert ru["complete"] and rc["complete"]
    assert ru["flagged"] == ru["phantom_rows"] > 0 and ru["lost_rows"] == 0
    assert rc["flagged"] == 0 and rc["shortest_flagged"] is None
    prog = relay_program(SEED_OUTBOX[:1], level=Isolation.READ_UNCOMMITTED, crash_budget=1)
    run = replay_schedule(prog, ru["shortest_flagged"])
    assert relay_verdict(dict(run.state)).details["phantom_rows"] == [0]
    # the shortest schedule is saved as a witness that toki replay re-runs
    assert rc["witness_file"] is None
    with open(ru["witness_file"]) as fh:
        saved = json.load(fh)
    assert saved["format"] == "toki-relay-witness" and saved["schedule"] == ru["shortest_flagged"]
    assert main(["replay", ru["witness_file"], "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["reproduced"] and replayed["verdict"]["details"]["phantom_rows"] == [0]
    # an edited witness (the schedule no longer fits the program) is one line, exit 2
    other = tmp_path / "edited.json"
    other.write_text(json.dumps({**saved, "level": "read_committed"}))
    assert main(["replay", str(other)]) == 2
    err = capsys.readouterr().err
    assert "is not enabled at this point" in err and err.count("\n") == 1


def test_relay_exit_code_and_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    planted = ["relay", "--rows", "2", "--levels", "rc", "--no-writer", "--on-failure", "skip"]
    planted += ["--out", str(tmp_path)]
    assert main([*planted, "--quiet"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = lines[0].split()
    assert head[:5] == ["level", "schedules", "search", "lose", "or"] and "lost" in head
    row = lines[2].split()
    assert row[0] == "read_committed" and row[2] == "complete"
    assert int(row[3]) == int(row[4]) > 0  # every flagged schedule lost a row
    assert row[-1] == str(tmp_path / "relay-read_committed.json")
    assert main([*planted, "--quiet", "--fail-on-flagged"]) == 1
    capsys.readouterr()
    assert main(["relay", "--rows", "4"]) == 2
    assert "use 1 to 3" in capsys.readouterr().err


# --------------------------------------------------------------------------- toki check (Elle)

STRONG_SI = """{:process 0, :index 0, :type :invoke, :value [[:append :x 1]]}
{:process 0, :index 1, :type :ok, :value [[:append :x 1]]}
{:process 1, :index 2, :type :invoke, :value [[:append :x 2]]}
{:process 1, :index 3, :type :ok, :value [[:append :x 2]]}
{:process 2, :index 4, :type :invoke, :value [[:r :x nil]]}
{:process 2, :index 5, :type :ok, :value [[:r :x [1]]]}
"""


def test_check_reads_elle_edn_and_json_and_exits_by_verdict(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    edn = Path(tmp_path) / "h.edn"
    edn.write_text(STRONG_SI)
    assert main(["check", str(edn)]) == 1
    out = capsys.readouterr().out
    assert "elle-edn, list-append, 3 transactions" in out
    assert "valid? false" in out and "G-single-item-realtime #0" in out
    assert "T3 completed (index 3) before T5 began (index 4) → realtime" in out
    assert main(["check", str(edn), "--consistency-model", "serializable"]) == 0
    assert "valid? true" in capsys.readouterr().out
    js = Path(tmp_path) / "h.txt"  # no telling suffix: detected from the content
    js.write_text(
        '[{"index":0,"process":0,"type":"invoke","value":[["r","x",null]]},\n'
        ' {"index":1,"process":0,"type":"ok","value":[["r","x",[]]]}]\n'
    )
    assert main(["check", str(js), "--json"]) == 3  # empty graph: unknown
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "elle-json" and report["valid?"] == "unknown"
    assert report["anomaly-types"] == ["empty-transaction-graph"]
    assert main(["check", str(js), "--workload", "list-append", "--format", "elle-json"]) == 3


def test_check_options_reach_the_register_inference(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    h = Path(tmp_path) / "wfr.edn"
    h.write_text(
        "{:index 0 :process 0 :type :ok :value [[:r :y 1] [:w :x 1] [:w :y 2]]}\n"
        "{:index 1 :process 0 :type :ok :value [[:r :x 1] [:r :y 1]]}\n"
    )
    assert main(["check", str(h), "--consistency-model", "serializable"]) == 0
    capsys.readouterr()
    assert (
        main(["check", str(h), "--consistency-model", "serializable", "--wfr-keys", "--json"]) == 1
    )
    report = json.loads(capsys.readouterr().out)
    assert report["anomaly-types"] == ["G-single-item"]
    assert report["options"]["wfr-keys"] is True
    assert "garbage-read" in report["notes"]


@pytest.mark.parametrize(
    ("text", "args", "message"),
    [
        ("{:type :ok :process 0 :value [[:r :x [1 2]]}\n", [], "h.edn line 1: invalid EDN"),
        (
            "{:type :ok :process 0 :value [[:w :x 1]]}\n",
            ["--consistency-model", "nope"],
            "unknown model 'nope'",
        ),
        (
            "{:type :ok :process 0 :value [[:w :x 1]]}\n",
            ["--workload", "list-append"],
            "the history is rw-register",
        ),
    ],
)
def test_check_bad_input_is_one_line_and_exit_2(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], text: str, args: list[str], message: str
) -> None:
    from pathlib import Path

    h = Path(tmp_path) / "h.edn"
    h.write_text(text)
    assert main(["check", str(h), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("toki check: error:") and message in err and "\n" not in err
    assert main(["check", str(Path(tmp_path) / "missing.edn")]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_check_toki_history_exits_1_when_a_check_finds_an_anomaly(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from pathlib import Path

    from toki.history import write_history

    ops = [
        {"type": "op", "txn": "t1", "kind": "begin", "at": 1},
        {"type": "op", "txn": "t1", "kind": "write", "key": "a", "value": "Bob", "at": 2},
        {"type": "op", "txn": "t1", "kind": "commit", "at": 3},
        {"type": "op", "txn": "t2", "kind": "begin", "at": 4},
        {
            "type": "op",
            "txn": "t2",
            "kind": "read",
            "key": "a",
            "value": "Bob",
            "version": 2,
            "at": 5,
        },
        {"type": "op", "txn": "t2", "kind": "commit", "at": 6},
    ]
    clean = write_history(Path(tmp_path) / "clean.jsonl", {"system": "mine"}, ops)
    erased = write_history(
        Path(tmp_path) / "erased.jsonl",
        {"system": "mine"},
        [
            *ops,
            {"type": "belief", "at": 3, "key": "a", "value": "Bob"},
            {"type": "recoverable", "key": "a", "values": ["Carol"]},
        ],
    )
    assert main(["check", str(clean), "--consistency-model", "serializable", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid?"] is True
    assert main(["check", str(erased)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["check", "result", "details"]
    assert ["N3", "anomaly", "erased", "a=Bob"] in [line.split() for line in lines]
    assert lines[-1] == "valid? false"
