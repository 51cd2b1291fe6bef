"""Parsing: synthetic edge cases, and the real file's counts against NOTICE.md."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest

from toki.errors import ChecksumMismatch, DataError, DataNotFound
from toki.locomo import (
    Category,
    LocomoDataset,
    load_locomo,
    locate_locomo,
    parse_evidence,
    parse_locomo,
    parse_session_datetime,
)
from toki.locomo.data import Problem, parse_event_date


def _write(tmp_path: Path, raw: Any, name: str = "locomo10.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(raw), encoding="utf-8")
    return p


# ---------------------------------------------------------------- dates


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1:56 pm on 8 May, 2023", datetime(2023, 5, 8, 13, 56, tzinfo=UTC)),
        ("12:09 am on 1 January, 2020", datetime(2020, 1, 1, 0, 9, tzinfo=UTC)),
        ("12:30 pm on 31 December, 2019", datetime(2019, 12, 31, 12, 30, tzinfo=UTC)),
        ("9:05 AM on 3 march, 2021", datetime(2021, 3, 3, 9, 5, tzinfo=UTC)),
    ],
)
def test_session_datetime_is_aware_utc(raw: str, expected: datetime) -> None:
    got = parse_session_datetime(raw)
    assert got == expected
    assert got.tzinfo is UTC


@pytest.mark.parametrize(
    "raw", ["", "13:00 pm on 1 May, 2023", "1:00 pm on 1 Mayo, 2023", "1:00 on 1 May, 2023"]
)
def test_session_datetime_rejects_garbage(raw: str) -> None:
    with pytest.raises(ValueError):
        parse_session_datetime(raw)


def test_event_date() -> None:
    assert parse_event_date("8 May, 2023") == date(2023, 5, 8)
    with pytest.raises(ValueError):
        parse_event_date("May 8 2023")


# ---------------------------------------------------------------- synthetic structure


def test_synthetic_structure(synthetic: list[dict[str, Any]]) -> None:
    ds = parse_locomo(synthetic)
    (c,) = ds.conversations
    assert (c.sample_id, c.speaker_a, c.speaker_b) == ("syn-1", "Ada", "Bo")
    # session_3_date_time has no turns: two sessions, not three
    assert [s.index for s in c.sessions] == [1, 2]
    s2 = c.sessions[1]
    assert s2.date_time == datetime(2021, 12, 12, 23, 40, tzinfo=UTC)
    assert s2.date_time_raw == "11:40 pm on 12 December, 2021"
    assert s2.summary == "Bo has moved."
    assert [t.dia_id for t in c.turns()] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    kite = c.turn("D1:2")
    assert kite is not None
    assert kite.blip_caption == "a photo of a kite"
    assert kite.img_url == ("http://example.invalid/k.jpg",)
    assert kite.query == "red kite"
    plain = c.turn("D1:1")
    assert plain is not None and plain.blip_caption is None
    assert c.turn("D7:7") is None

    obs = {(o.session, o.speaker): o for o in c.observations}
    assert len(c.observations) == 3
    assert obs[(1, "Ada")].evidence == ("D1:1",)
    assert obs[(1, "Bo")].evidence == ("D1:2", "D1:1")  # comma-joined string, repaired
    assert obs[(2, "Bo")].evidence == ("D2:1",)  # list form

    assert [(e.session, e.speaker, e.date) for e in c.events] == [
        (1, "Ada", date(2021, 3, 3)),
        (2, "Bo", date(2021, 12, 12)),
    ]


def test_synthetic_qa(synthetic: list[dict[str, Any]]) -> None:
    (c,) = parse_locomo(synthetic).conversations
    q = c.qa
    assert [x.category for x in q] == [
        Category.SINGLE_HOP,
        Category.TEMPORAL,
        Category.MULTI_HOP,
        Category.OPEN_DOMAIN,
        Category.SINGLE_HOP,
        Category.ADVERSARIAL,
    ]
    assert q[2].answer == "2021"  # a JSON number becomes its string, as upstream's str()
    assert q[5].answer is None and q[5].adversarial_answer == "Rex"
    assert q[0].evidence == ("D1:1",)
    assert q[1].evidence == ("D2:1", "D1:2")
    assert q[1].evidence_raw == ("D2:1; D1:2",)
    assert q[2].evidence == ()
    assert q[3].evidence == ()
    assert q[4].evidence == ("D2:2", "D1:1")
    assert q[5].evidence == ("D2:1",)


def test_synthetic_problems(synthetic: list[dict[str, Any]]) -> None:
    ds = parse_locomo(synthetic)
    by = Counter((p.source, p.kind) for p in ds.problems)
    assert by == {
        ("qa", "malformed_evidence"): 3,  # "D2:1; D1:2", "D", "D:2:2 D1:01"
        ("qa", "missing_turn"): 3,  # D1:01 (→ D1:1), D9:9, D2:01 (→ D2:1)
        ("qa", "empty_evidence"): 1,
        ("observation", "malformed_evidence"): 1,  # "D1:2, D1:1"
    }
    d9 = [p for p in ds.problems if p.raw == "D9:9"]
    assert d9 == [Problem("syn-1", "qa", "qa[5]", "missing_turn", "D9:9", d9[0].detail, ())]
    bare = ds.problems_of("malformed_evidence", "qa")
    assert {p.raw: p.recovered for p in bare} == {
        "D2:1; D1:2": ("D2:1", "D1:2"),
        "D": (),
        "D:2:2 D1:01": ("D2:2", "D1:1"),
    }


def test_bad_session_date_is_reported_not_fatal(synthetic: list[dict[str, Any]]) -> None:
    synthetic[0]["conversation"]["session_2_date_time"] = "sometime in winter"
    del synthetic[0]["conversation"]["session_1_date_time"]
    ds = parse_locomo(synthetic)
    assert [s.date_time for s in ds.conversations[0].sessions] == [None, None]
    assert [p.location for p in ds.problems_of("bad_date")] == [
        "session_1_date_time",
        "session_2_date_time",
    ]


def test_parse_evidence_standalone() -> None:
    turns = {"D1:1": 1, "D1:2": 2, "D3:10": 3}
    problems: list[Problem] = []
    got = parse_evidence(["D1:2", "D3:10 D1:1", "D1:2", "X"], turns, problems=problems)
    assert got == ("D1:2", "D3:10", "D1:1")  # deduplicated, order kept
    assert [p.kind for p in problems] == ["malformed_evidence", "malformed_evidence"]
    assert parse_evidence("D1:1", turns) == ("D1:1",)


@pytest.mark.parametrize(
    "raw",
    [
        {"not": "a list"},
        [{"sample_id": "x"}],
        [{"conversation": {}, "qa": [{"question": "q", "category": 9}]}],
    ],
)
def test_structural_errors_raise_data_error(raw: Any) -> None:
    with pytest.raises(DataError):
        parse_locomo(raw)


# ---------------------------------------------------------------- locating and loading


def test_load_explicit_path_and_sha(tmp_path: Path, synthetic: list[dict[str, Any]]) -> None:
    p = _write(tmp_path, synthetic)
    ds = load_locomo(p)
    assert ds.path == p.resolve() or ds.path == p
    assert len(ds.conversations) == 1
    assert ds.sha256 is not None and len(ds.sha256) == 64
    assert not ds.is_reference_copy()
    with pytest.raises(ChecksumMismatch):
        load_locomo(p, verify=True)
    # a directory holding locomo10.json is accepted too
    assert len(load_locomo(tmp_path).conversations) == 1


def test_resolution_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synthetic: list[dict[str, Any]]
) -> None:
    dirs = {n: tmp_path / n for n in ("explicit", "env", "xdg/toki", "proj", "shared/data/locomo")}
    for d in dirs.values():
        d.mkdir(parents=True)
    explicit = _write(dirs["explicit"], synthetic)
    env = _write(dirs["env"], synthetic)
    cached = _write(dirs["xdg/toki"], synthetic)
    sibling = _write(dirs["shared/data/locomo"], synthetic)  # = <cwd>/../shared/data/locomo
    monkeypatch.chdir(dirs["proj"])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TOKI_LOCOMO", str(env))

    assert locate_locomo(explicit) == explicit
    assert locate_locomo() == env
    monkeypatch.delenv("TOKI_LOCOMO")
    assert locate_locomo() == sibling.resolve()
    sibling.unlink()
    # then ../shared beside the package's own checkout (pretend it lives in <tmp>/co/repo)
    import toki.locomo.data as data

    monkeypatch.setattr(data, "__file__", str(tmp_path / "co/repo/toki/locomo/data.py"))
    (tmp_path / "co/shared/data/locomo").mkdir(parents=True)
    checkout_sibling = _write(tmp_path / "co/shared/data/locomo", synthetic)
    assert locate_locomo() == checkout_sibling.resolve()
    checkout_sibling.unlink()
    assert locate_locomo() == cached.resolve()


def test_missing_file_error_names_places_and_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKI_LOCOMO", str(tmp_path / "nope.json"))
    with pytest.raises(DataNotFound, match="TOKI_LOCOMO") as e:
        load_locomo()
    assert "toki locomo fetch" in str(e.value)
    with pytest.raises(DataNotFound, match="nope2"):
        load_locomo(tmp_path / "nope2.json")


def test_nothing_found_lists_candidates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import toki.locomo.data as data

    monkeypatch.delenv("TOKI_LOCOMO", raising=False)
    fake = [tmp_path / "x" / "locomo10.json", tmp_path / "y" / "locomo10.json"]
    monkeypatch.setattr(data, "candidate_paths", lambda: fake)
    with pytest.raises(DataNotFound) as e:
        load_locomo()
    msg = str(e.value)
    assert all(str(p) in msg for p in fake)
    assert "toki locomo fetch" in msg


# ---------------------------------------------------------------- the real file


def test_real_counts_match_notice(real_dataset: LocomoDataset) -> None:
    ds = real_dataset
    assert len(ds.conversations) == 10
    assert sum(len(c.sessions) for c in ds.conversations) == 272
    assert sum(1 for c in ds.conversations for _ in c.turns()) == 5882
    qs = [q for _, q in ds.questions()]
    assert len(qs) == 1986
    assert Counter(int(q.category) for q in qs) == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    assert sum(1 for q in qs if q.category != Category.ADVERSARIAL and q.answer is not None) == 1540
    assert all(q.answer is not None for q in qs if q.category != Category.ADVERSARIAL)
    assert len(ds.problems_of("malformed_evidence", "qa")) == 6
    assert len(ds.problems_of("missing_turn", "qa")) == 3
    assert len(ds.problems_of("empty_evidence", "qa")) == 4


def test_real_file_invariants(real_dataset: LocomoDataset) -> None:
    ds = real_dataset
    assert ds.is_reference_copy()
    conv26 = ds.conversation("conv-26")
    assert len(conv26.sessions) == 19  # NOTICE: count sessions from session_N, not dates
    for c in ds.conversations:
        assert [s.index for s in c.sessions] == list(range(1, len(c.sessions) + 1))
        for s in c.sessions:
            assert s.date_time is not None and s.date_time.tzinfo is UTC
            assert all(t.dia_id.startswith(f"D{s.index}:") for t in s.turns)
        # every id that survives parsing names a real turn
        for q in c.qa:
            assert all(c.turn(e) is not None for e in q.evidence)
        for o in c.observations:
            assert all(c.turn(e) is not None for e in o.evidence)
    assert not ds.problems_of("bad_date")
