"""fetch_locomo / verify_sha256 without the network: file:// URLs to local files only."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from toki.errors import ChecksumMismatch, DataError
from toki.locomo import LOCOMO_SHA256, LOCOMO_URL, LocomoDataset, fetch_locomo, verify_sha256
from toki.locomo.data import sha256_of

PAYLOAD = b'[{"sample_id": "tiny", "conversation": {}}]\n'


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "upstream" / "locomo10.json"
    src.parent.mkdir()
    src.write_bytes(PAYLOAD)
    return src


def test_url_pins_commit_and_sha_is_notice_value() -> None:
    assert LOCOMO_URL == (
        "https://raw.githubusercontent.com/snap-research/locomo/cbfbc1d/data/locomo10.json"
    )
    assert LOCOMO_SHA256 == "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"


def test_verify_sha256(tmp_path: Path) -> None:
    src = _source(tmp_path)
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    assert sha256_of(src) == digest
    assert verify_sha256(src, digest)
    assert verify_sha256(src, digest.upper())
    assert not verify_sha256(src)  # not the pinned LoCoMo file


def test_fetch_good(tmp_path: Path) -> None:
    src = _source(tmp_path)
    digest = hashlib.sha256(PAYLOAD).hexdigest()
    dest = tmp_path / "cache" / "locomo10.json"
    got = fetch_locomo(dest, url=src.as_uri(), expected_sha256=digest)
    assert got == dest
    assert dest.read_bytes() == PAYLOAD
    assert sorted(p.name for p in dest.parent.iterdir()) == ["locomo10.json"]  # no .part left


def test_fetch_default_dest_is_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _source(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    got = fetch_locomo(url=src.as_uri(), expected_sha256=hashlib.sha256(PAYLOAD).hexdigest())
    assert got == tmp_path / "xdg" / "toki" / "locomo10.json"
    assert got.read_bytes() == PAYLOAD


def test_fetch_mismatch_refuses_and_deletes(tmp_path: Path) -> None:
    src = _source(tmp_path)
    dest_dir = tmp_path / "cache"
    with pytest.raises(ChecksumMismatch, match="sha256"):
        fetch_locomo(dest_dir / "locomo10.json", url=src.as_uri())  # pinned sha: mismatch
    assert list(dest_dir.iterdir()) == []


def test_fetch_mismatch_does_not_clobber_existing_file(tmp_path: Path) -> None:
    src = _source(tmp_path)
    dest = tmp_path / "locomo10.json"
    dest.write_bytes(b"old")
    with pytest.raises(ChecksumMismatch):
        fetch_locomo(dest, url=src.as_uri(), expected_sha256="0" * 64)
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locomo10.json", "upstream"]


def test_fetch_keeps_valid_copy_without_downloading(tmp_path: Path) -> None:
    dest = tmp_path / "locomo10.json"
    dest.write_bytes(PAYLOAD)
    missing = (tmp_path / "does-not-exist.json").as_uri()
    got = fetch_locomo(dest, url=missing, expected_sha256=hashlib.sha256(PAYLOAD).hexdigest())
    assert got == dest


def test_fetch_unreachable_is_data_error(tmp_path: Path) -> None:
    missing = (tmp_path / "does-not-exist.json").as_uri()
    with pytest.raises(DataError, match="could not download"):
        fetch_locomo(tmp_path / "out" / "locomo10.json", url=missing)
    assert list((tmp_path / "out").iterdir()) == []


def test_fetch_real_file_via_file_url(tmp_path: Path, real_dataset: LocomoDataset) -> None:
    """The pinned sha256 accepts the real file (read from its local copy, not the network)."""
    assert real_dataset.path is not None
    got = fetch_locomo(tmp_path, url=real_dataset.path.as_uri())  # a directory: file goes inside
    assert got == tmp_path / "locomo10.json"
    assert verify_sha256(got)
    got.unlink()  # never leave a copy of the CC BY-NC file around
