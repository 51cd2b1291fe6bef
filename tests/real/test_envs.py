"""Environments from lock files: where they live, when they count as ready, how setup fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toki.real import envs
from toki.real.errors import EnvironmentMissing, SetupFailed
from toki.real.systems import SYSTEMS


def test_every_lock_pins_every_package_and_the_systems_library(tmp_path: Path) -> None:
    for system in SYSTEMS.values():
        if system.lock is None:
            continue
        lines = [
            ln
            for ln in envs.lock_file(system.lock).read_text().splitlines()
            if ln.strip() and not ln.startswith("#")
        ]
        assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", ln) for ln in lines)
        assert f"{system.library}=={system.version}" in lines


def test_the_cache_key_follows_the_lock_contents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(envs, "LOCKS", tmp_path)
    monkeypatch.setenv("TOKI_REAL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "x.txt").write_text("a==1\n")
    first = envs.env_dir("x", "x.txt")
    assert first.parent == tmp_path / "cache" and first.name.startswith("x-")
    (tmp_path / "x.txt").write_text("a==2\n")
    assert envs.env_dir("x", "x.txt") != first
    with pytest.raises(EnvironmentMissing, match="toki real setup x"):
        envs.python_for("x", "x.txt")


@pytest.mark.slow
def test_a_failed_setup_says_why_and_leaves_nothing_ready(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(envs, "LOCKS", tmp_path)
    monkeypatch.setenv("TOKI_REAL_CACHE", str(tmp_path / "cache"))
    (tmp_path / "bad.txt").write_text("this is not a requirement\n")
    with pytest.raises(SetupFailed, match=r"(?i)invalid requirement"):
        envs.setup("bad", "bad.txt")
    with pytest.raises(EnvironmentMissing):
        envs.python_for("bad", "bad.txt")
