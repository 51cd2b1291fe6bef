"""Scoring rules of snap-research/locomo task_eval/evaluation.py, checked on hand-worked cases."""

from __future__ import annotations

import pytest

from toki.errors import InvalidInput
from toki.locomo import (
    QA,
    Category,
    adversarial_score,
    evidence_recall_at_k,
    exact_match,
    multi_answer_f1,
    normalize_answer,
    score_answer,
    score_qa,
    token_f1,
)
from toki.locomo.metrics import answer_tokens


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Cat, and a Dog!", "cat dog"),  # commas, case, punctuation, a/an/the/and
        ("1,000 dollars", "1000 dollars"),  # commas vanish before anything else
        ("Theater  then\tAnna", "theater then anna"),  # only whole words are dropped
        ("an apple-pie", "applepie"),  # punctuation is deleted, not replaced by space
        ("Caroline\u2019s", "caroline\u2019s"),  # string.punctuation is ASCII only
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_answer_tokens_are_porter_stemmed() -> None:
    # nltk Porter (NLTK_EXTENSIONS): running→run, mountains→mountain, hiking→hike, dying→die
    assert answer_tokens("Running the mountains, hiking and dying") == [
        "run",
        "mountain",
        "hike",
        "die",
    ]


def test_token_f1_hand_computed() -> None:
    assert token_f1("painting a sunset", "a sunset painting") == 1.0
    # pred tokens: she went hike in mountain (5); gold: hike (1); P=1/5 R=1 → F1=1/3
    assert token_f1("She went hiking in the mountains", "hiking") == pytest.approx(1 / 3)
    # repeated tokens count once per match: P=1/2, R=1 → 2/3
    assert token_f1("cat cat", "cat") == pytest.approx(2 / 3)
    # stemming makes "runs" and "running" the same token
    assert token_f1("runs", "running") == 1.0
    assert token_f1("Oslo", "Bergen") == 0.0
    assert token_f1("", "Oslo") == 0.0
    assert token_f1("the", "a") == 0.0  # both normalise to nothing: upstream returns 0


def test_multi_answer_f1_hand_computed() -> None:
    # gold parts yoga, meditation, walks: best per gold part 1, 1, 0 → 2/3
    assert multi_answer_f1("yoga, meditation", "yoga, meditation, walks") == pytest.approx(2 / 3)
    # one unsplit prediction against two gold parts: each part F1 = 2·(1/2)·1/(3/2) = 2/3
    assert multi_answer_f1("yoga meditation", "yoga, meditation") == pytest.approx(2 / 3)
    # order does not matter; extra predicted parts only matter through the max
    assert multi_answer_f1("walks, tea, yoga", "yoga, walks") == 1.0


def test_exact_match_is_set_equality_without_stemming() -> None:
    assert exact_match("the cat sat", "Sat, cat.")
    assert not exact_match("cats", "cat")


def test_adversarial_rule() -> None:
    assert adversarial_score("Not mentioned in the conversation") == 1.0
    assert adversarial_score("It is NOT MENTIONED anywhere.") == 1.0
    assert adversarial_score("No information available.") == 1.0
    assert adversarial_score("Rex") == 0.0
    assert adversarial_score("not mention") == 0.0  # the exact substrings only


def test_score_answer_per_category() -> None:
    # category 3 keeps only the gold part before the first ';'
    assert score_answer("Oslo", "Oslo; Norway", 3) == 1.0
    assert score_answer("Oslo", "Oslo; Norway", 4) == pytest.approx(2 / 3)  # P=1, R=1/2
    # category 1 splits on ','; category 4 does not
    assert score_answer("yoga", "yoga, walks", 1) == pytest.approx(0.5)  # (1 + 0)/2
    assert score_answer("yoga", "yoga, walks", 4) == pytest.approx(2 / 3)  # P=1, R=1/2
    assert score_answer("7 May, 2023", "7 May 2023", 2) == 1.0
    assert score_answer("Not mentioned in the conversation", None, 5) == 1.0
    assert score_answer("Rex", "Rex", 5) == 0.0  # the gold text is irrelevant for category 5
    with pytest.raises(InvalidInput, match="answer"):
        score_answer("x", None, 4)
    with pytest.raises(ValueError):
        score_answer("x", "x", 7)


def test_score_qa_uses_the_question_category() -> None:
    qa = QA(0, "Where?", "Oslo; Norway", Category.OPEN_DOMAIN, (), ())
    assert score_qa("Oslo", qa) == 1.0


def test_evidence_recall_at_k() -> None:
    retrieved = [("D1:1",), ("D2:3", "D2:4"), "D5:5"]
    assert evidence_recall_at_k(retrieved, ["D2:4", "D5:5"], 2) == 0.5
    assert evidence_recall_at_k(retrieved, ["D2:4", "D5:5"], 3) == 1.0
    assert evidence_recall_at_k(retrieved, ["D2:4", "D5:5"], 1) == 0.0
    assert evidence_recall_at_k([], ["D1:1"], 5) == 0.0
    # counted per evidence entry, as upstream: 2 of 3 entries are covered
    assert evidence_recall_at_k(["D1:1"], ["D1:1", "D1:1", "D2:2"], 1) == pytest.approx(2 / 3)
    assert evidence_recall_at_k(retrieved, [], 3) == 1.0  # upstream scores no-evidence as 1
    with pytest.raises(InvalidInput):
        evidence_recall_at_k(retrieved, ["D1:1"], 0)
