"""The extractive answerer: dates, sentence choice, question-word stripping, abstention."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime

import pytest

from toki.errors import InvalidInput
from toki.locomo import (
    NOT_MENTIONED,
    Answerer,
    Chunk,
    ExtractiveAnswerer,
    Hit,
    asks_for_time,
    item_date,
    render_date,
)


def _hit(text: str, **meta: object) -> Hit:
    return Hit(Chunk("c", text, dict(meta)), 1.0, 0)


def test_render_date_like_gold_answers() -> None:
    assert render_date(date(2023, 5, 7)) == "7 May 2023"
    assert render_date(datetime(2021, 12, 25, 23, 59, tzinfo=UTC)) == "25 December 2021"


def test_item_date_precedence_and_formats() -> None:
    c = Chunk("c", "t", {"date": date(2023, 5, 8), "valid_from": datetime(2022, 1, 2, tzinfo=UTC)})
    assert item_date(c) == date(2022, 1, 2)  # a valid-time start beats the session date
    assert item_date(Chunk("c", "t", {"date": "2023-05-08T13:56:00Z"})) == date(2023, 5, 8)
    assert item_date(Chunk("c", "t", {"valid_from": "garbage", "date": "2020-02-29"})) == date(
        2020, 2, 29
    )
    assert item_date(Chunk("c", "t", {"session_date": date(2019, 1, 1)})) == date(2019, 1, 1)
    assert item_date(Chunk("c", "t")) is None


def test_asks_for_time() -> None:
    assert asks_for_time("When did Bo move?")
    assert asks_for_time("So, when?")
    assert not asks_for_time("Whenever Bo moves, what does he pack?")
    assert not asks_for_time("What did Bo move?")
    assert asks_for_time("How long has Bo lived in Oslo?", category=2)


def test_temporal_answers_render_item_date() -> None:
    a = ExtractiveAnswerer()
    hit = _hit("Bo moved to Oslo for work.", date=date(2021, 12, 12))
    assert a.answer("When did Bo move to Oslo?", [hit]) == "12 December 2021"
    assert a.answer("In which year did Bo move to Oslo?", [hit], 2) == "2021"
    assert a.answer("Which month did Bo move to Oslo?", [hit], 2) == "December 2021"
    # no date on the item: fall back to extraction. Bo, moved (stem move), Oslo are in the
    # question; "to" and "for" are stop words left at the edges → "work"
    assert a.answer("When did Bo move to Oslo?", [_hit("Bo moved to Oslo for work.")]) == "work"


def test_extraction_picks_best_sentence_and_strips_question_words() -> None:
    text = "I like tea. Ada adopted a grey cat named Pixel. Bye."
    q = "What is the name of Ada's cat?"
    # question tokens (stemmed, no stop words): name, ada, cat; sentence 2 shares all three
    assert ExtractiveAnswerer().answer(q, [_hit(text)], 4) == "adopted a grey Pixel"
    plain = ExtractiveAnswerer(strip_question_words=False)
    assert plain.answer(q, [_hit(text)], 4) == "Ada adopted a grey cat named Pixel."
    # ties go to the earliest sentence
    assert plain.best_sentence("tea?", "Tea is hot. Tea is cold.") == "Tea is hot."
    # if stripping would leave nothing, the sentence is returned whole
    assert ExtractiveAnswerer().answer("Ada's cat?", [_hit("Ada's cat.")], 4) == "Ada's cat."
    # only the top item is used
    second = Hit(Chunk("d", "Pixel the cat belongs to Ada."), 0.5, 1)
    assert plain.answer(q, [_hit("Bye now."), second], 4) == "Bye now."


def test_abstention() -> None:
    a = ExtractiveAnswerer()
    weak = [_hit("Ada adopted a grey cat named Pixel.")]
    q = "What is Bo's dog called?"  # content tokens bo, dog, call: none in the item
    assert a.support(q, weak[0].chunk) == 0.0
    assert a.answer(q, weak, 5) == NOT_MENTIONED
    assert a.answer(q, weak, 4) != NOT_MENTIONED  # only category 5 abstains by default
    assert ExtractiveAnswerer(abstain_categories=None).answer(q, weak, 4) == NOT_MENTIONED
    # support 2/4 = 0.5 is not below the threshold: answer
    q2 = "What colour is Ada's cat hat?"  # colour, ada, cat, hat → ada and cat match
    assert a.support(q2, weak[0].chunk) == 0.5
    assert a.answer(q2, weak, 5) != NOT_MENTIONED
    assert ExtractiveAnswerer(abstain_threshold=0.75).answer(q2, weak, 5) == NOT_MENTIONED
    assert a.answer("anything", [], 4) == NOT_MENTIONED  # nothing retrieved
    with pytest.raises(InvalidInput):
        ExtractiveAnswerer(abstain_threshold=1.5)


def test_answerer_protocol_admits_other_implementations() -> None:
    class Echo:
        def answer(
            self, question: str, retrieved: Sequence[Hit], category: int | None = None
        ) -> str:
            return retrieved[0].chunk.text if retrieved else question

    assert isinstance(Echo(), Answerer)
    assert isinstance(ExtractiveAnswerer(), Answerer)
    assert not isinstance(object(), Answerer)
