"""The flat baseline on an invented conversation with hand-known answers, and on the real file."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Any

import pytest

from toki.locomo import (
    NOT_MENTIONED,
    Hit,
    LocomoDataset,
    answer_questions,
    build_flat_chunks,
    parse_locomo,
    run_flat_baseline,
    summarize,
)


def _dataset() -> LocomoDataset:
    sample: dict[str, Any] = {
        "sample_id": "flat",
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Bo",
            "session_1_date_time": "10:00 am on 3 March, 2021",
            "session_1": [
                {"speaker": "Bo", "dia_id": "D1:1", "text": "My dog is called Rex."},
                {
                    "speaker": "Ada",
                    "dia_id": "D1:2",
                    "text": "I visited Rome today!",
                    "blip_caption": "a photo of a fountain",
                },
            ],
        },
        "observation": {
            "session_1_observation": {
                "Bo": [["Bo's dog is called Rex.", "D1:1"]],
                "Ada": [["Ada visited Rome.", "D1:2"]],
            }
        },
        "event_summary": {
            "events_session_1": {"Ada": ["Ada tours Italy."], "Bo": [], "date": "3 March, 2021"}
        },
        "qa": [
            {
                "question": "What is Bo's dog called?",
                "answer": "Rex",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "When did Ada visit Rome?",
                "answer": "3 March 2021",
                "evidence": ["D1:2"],
                "category": 2,
            },
            {
                "question": "Which dog and city did Bo and Ada mention?",
                "answer": "Rex, Rome",
                "evidence": ["D1:1", "D1:2"],
                "category": 1,
            },
            {
                "question": "What is Ada's cat called?",
                "adversarial_answer": "Tom",
                "evidence": [],
                "category": 5,
            },
        ],
    }
    return parse_locomo([sample])


def test_build_flat_chunks() -> None:
    (c,) = _dataset().conversations
    chunks = build_flat_chunks(c)
    assert [ch.id for ch in chunks] == ["flat/obs/0", "flat/obs/1", "flat/event/0"]
    assert chunks[0].text == "Bo's dog is called Rex."
    assert chunks[0].metadata == {
        "kind": "observation",
        "sample_id": "flat",
        "session": 1,
        "speaker": "Bo",
        "date": date(2021, 3, 3),
        "evidence": ("D1:1",),
    }
    assert chunks[2].metadata["evidence"] == ()
    with_turns = build_flat_chunks(c, observations=False, events=False, turns=True)
    assert [ch.id for ch in with_turns] == ["flat/D1:1", "flat/D1:2"]
    assert with_turns[1].text == (
        "Ada: I visited Rome today! [shares a photo: a photo of a fountain]"
    )
    assert with_turns[1].metadata["evidence"] == ("D1:2",)


def test_answers_and_scores_on_known_questions() -> None:
    results = answer_questions(_dataset(), k=1, categories=(1, 2, 4, 5))
    by_q = {r.qa_index: r for r in results}
    # "What is Bo's dog called?": top chunk obs/0; bo, dog, called are question words → "Rex"
    assert (by_q[0].prediction, by_q[0].score, by_q[0].recall) == ("Rex", 1.0, 1.0)
    assert by_q[0].retrieved == ("flat/obs/0",)
    # temporal: the session date of the top chunk, rendered like the gold answers
    assert (by_q[1].prediction, by_q[1].score, by_q[1].recall) == ("3 March 2021", 1.0, 1.0)
    # multi-hop: tokens dog, citi, bo, ada, mention; obs/0 shares bo+dog and ranks first, so
    # k=1 covers one of the two evidence turns
    assert by_q[2].retrieved == ("flat/obs/0",)
    assert by_q[2].recall == 0.5
    # adversarial: tokens ada, cat, call. "call" (df 1) outweighs "ada" (df 2), so obs/0 is the
    # top hit; it supports 1/3 < 0.5 of the question → abstain → upstream's rule gives 1
    assert by_q[3].retrieved == ("flat/obs/0",)
    assert (by_q[3].prediction, by_q[3].score) == (NOT_MENTIONED, 1.0)
    rows = summarize(results, k=1)
    assert [r["category"] for r in rows] == [1, 2, 4, 5]
    assert rows[1] == {"category": 2, "name": "temporal", "n": 1, "f1_mean": 1.0, "recall@1": 1.0}


def test_custom_answerer_and_filters() -> None:
    class Fixed:
        def answer(
            self, question: str, retrieved: Sequence[Hit], category: int | None = None
        ) -> str:
            return "Rome, Rex" if category == 1 else NOT_MENTIONED

    rows = run_flat_baseline(_dataset(), k=2, categories=(1, 4), answerer=Fixed())
    # category 1: both gold parts found (order irrelevant) → 1.0. With k=2 the second hit is
    # obs/1 ("ada visit rome"), tied with event/0 ("ada tour itali") and earlier in order, so
    # both evidence turns are covered. Category 4: "Not mentioned…" against "Rex" → 0.
    assert rows == [
        {"category": 1, "name": "multi_hop", "n": 1, "f1_mean": 1.0, "recall@2": 1.0},
        {"category": 4, "name": "single_hop", "n": 1, "f1_mean": 0.0, "recall@2": 1.0},
    ]
    assert len(answer_questions(_dataset(), categories=(1, 2, 4, 5), limit=3)) == 3
    assert answer_questions(_dataset(), categories=(3,)) == []
    turned = answer_questions(_dataset(), k=5, categories=(4,), include_turns=True)
    assert "flat/D1:1" in turned[0].retrieved


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        answer_questions(_dataset(), k=0)
    with pytest.raises(ValueError):
        answer_questions(_dataset(), categories=(9,))


def test_real_baseline_shape(real_dataset: LocomoDataset) -> None:
    rows = run_flat_baseline(real_dataset, k=5)
    assert [(r["category"], r["n"]) for r in rows] == [(1, 282), (2, 321), (3, 96), (4, 841)]
    for r in rows:
        assert 0.0 <= r["f1_mean"] <= 1.0
        assert 0.0 <= r["recall@5"] <= 1.0
    assert run_flat_baseline(real_dataset, k=5, limit=150) == run_flat_baseline(
        real_dataset, k=5, limit=150
    )
