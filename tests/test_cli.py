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
