"""`toki locomo` subcommands (via toki.locomo.cli.main), on synthetic files only."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from toki.locomo import LOCOMO_SHA256
from toki.locomo.cli import main


def test_info_json(
    tmp_path: Path, synthetic: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "locomo10.json"
    p.write_text(json.dumps(synthetic))
    assert main(["info", "--path", str(p), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (info["conversations"], info["sessions"], info["turns"]) == (1, 2, 4)
    assert info["qa_by_category"] == {"1": 1, "2": 1, "3": 1, "4": 2, "5": 1}
    assert info["problems"]["qa:empty_evidence"] == 1
    assert info["reference_copy"] is False


def test_baseline_json(
    tmp_path: Path, synthetic: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "locomo10.json"
    p.write_text(json.dumps(synthetic))
    assert main(["baseline", "--path", str(p), "--json", "-k", "3", "--categories", "4"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["category"], r["n"]) for r in rows] == [(4, 2)]
    assert "recall@3" in rows[0]


def test_fetch_and_missing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "src.json"
    src.write_bytes(b"[]")
    # the pinned sha256 does not match these bytes: refused, exit code 2, message on stderr
    assert main(["fetch", "--dest", str(tmp_path / "out.json"), "--url", src.as_uri()]) == 2
    assert "sha256" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
    assert hashlib.sha256(b"[]").hexdigest() != LOCOMO_SHA256
    assert main(["info", "--path", str(tmp_path / "missing.json")]) == 2
    assert "toki locomo fetch" in capsys.readouterr().err


def test_fetch_json(real_dataset: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = real_dataset.path.resolve()
    assert main(["fetch", "--dest", str(tmp_path), "--url", src.as_uri(), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"path": str(tmp_path / "locomo10.json"), "sha256": LOCOMO_SHA256}
