"""The `toki` command: demo output is computed, JSON is machine-readable, errors are clean."""

from __future__ import annotations

import json

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
    capsys: pytest.CaptureFixture[str],
) -> None:
    from toki.check.relay import relay_verdict
    from toki.isolation import Isolation
    from toki.sim import replay_schedule
    from toki.sim.relay import SEED_OUTBOX, relay_program

    assert main(["relay", "--rows", "1", "--levels", "ru,rc", "--json"]) == 0
    ru, rc = json.loads(capsys.readouterr().out)
    assert (ru["level"], rc["level"]) == ("read_uncommitted", "read_committed")
    assert ru["complete"] and rc["complete"]
    assert ru["flagged"] == ru["phantom_rows"] > 0 and ru["lost_rows"] == 0
    assert rc["flagged"] == 0 and rc["shortest_flagged"] is None
    prog = relay_program(SEED_OUTBOX[:1], level=Isolation.READ_UNCOMMITTED, crash_budget=1)
    run = replay_schedule(prog, ru["shortest_flagged"])
    assert relay_verdict(dict(run.state)).details["phantom_rows"] == [0]


def test_relay_exit_code_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    planted = ["relay", "--rows", "2", "--levels", "rc", "--no-writer", "--on-failure", "skip"]
    assert main([*planted, "--quiet"]) == 0
    assert "lose or invent history (lost" in capsys.readouterr().out
    assert main([*planted, "--quiet", "--fail-on-flagged"]) == 1
    capsys.readouterr()
    assert main(["relay", "--rows", "4"]) == 2
    assert "use 1 to 3" in capsys.readouterr().err
