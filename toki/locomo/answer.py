"""Answering a question from retrieved memory items.

`Answerer` is the seam where an LLM plugs in. `ExtractiveAnswerer` is the deterministic
stand-in used by the baselines: no model, no randomness, so an ablation's differences come
from the memory layer and retrieval alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Protocol, runtime_checkable

from toki.errors import InvalidInput
from toki.locomo.data import Category
from toki.locomo.retrieval import Chunk, Hit, Tokenizer

NOT_MENTIONED = "Not mentioned in the conversation"

# Metadata keys an item may carry a time under, most specific first: a valid-time interval's
# start (typed memory) beats the date the item was recorded in (session date).
DATE_KEYS = ("valid_from", "date", "session_date")

_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_WHEN = re.compile(r"\bwhen\b", re.I)
_YEAR_Q = re.compile(r"\b(what|which|in which)\s+year\b", re.I)
_MONTH_Q = re.compile(r"\b(what|which|in which)\s+month\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_EDGE_PUNCT = ".,;:!?\"'()[]"


@runtime_checkable
class Answerer(Protocol):
    """Turns a question and its retrieved items (best first) into an answer string.

    `category` is the LoCoMo category when the caller knows it; an answerer may ignore it.
    An LLM answerer implements this one method (see docs/locomo.md).
    """

    def answer(
        self, question: str, retrieved: Sequence[Hit], category: int | None = None
    ) -> str: ...


def render_date(value: date | datetime) -> str:
    """Render as LoCoMo's gold answers do: "7 May 2023" (no zero padding, no weekday)."""
    return f"{value.day} {_MONTH_NAMES[value.month - 1]} {value.year}"


def item_date(chunk: Chunk) -> date | None:
    """The date an item is about: the first of `DATE_KEYS` present in its metadata.

    Accepts a date, a datetime or an ISO 8601 string ("2023-05-08", "2023-05-08T13:56:00Z").
    """
    for key in DATE_KEYS:
        v: Any = chunk.metadata.get(key)
        if v is None:
            continue
        if isinstance(v, datetime):
            return v.date()
        if isinstance(v, date):
            return v
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).date()
            except ValueError:
                continue
    return None


def asks_for_time(question: str, category: int | None = None) -> bool:
    """A temporal question: category 2, or any question containing the word "when"."""
    return category == Category.TEMPORAL or _WHEN.search(question) is not None


@dataclass(frozen=True, slots=True)
class ExtractiveAnswerer:
    """Deterministic answers from the top retrieved item.

    * Temporal questions (`asks_for_time`) get the top item's date (`item_date`) rendered
      like the gold answers; "what/which year" gets the year only, "which month" month and
      year. Without a date it falls through to extraction.
    * Otherwise the sentence of the top item sharing the most distinct question tokens is
      chosen (earliest on ties); with `strip_question_words`, words that already occur in the
      question are removed from it (the answer is what the question does not already say),
      then stop words left at either end.
    * Abstention: for categories in `abstain_categories` (default: adversarial only) the
      answer is `NOT_MENTIONED` when `support` of the top item is below `abstain_threshold`
      (default 0.5: fewer than half of the question's content tokens occur in it), and for
      every category when nothing was retrieved. Note that abstaining by category uses the
      benchmark's label; pass `abstain_categories=None` to abstain on weak support regardless.
    """

    tokenizer: Tokenizer = field(default_factory=lambda: Tokenizer(stem=True))
    abstain_threshold: float = 0.5
    abstain_categories: frozenset[int] | None = frozenset({int(Category.ADVERSARIAL)})
    strip_question_words: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.abstain_threshold <= 1.0:
            raise InvalidInput(
                "abstain_threshold", f"must be in [0, 1], got {self.abstain_threshold}"
            )

    def support(self, question: str, chunk: Chunk) -> float:
        """Fraction of the question's distinct content tokens that occur in the chunk."""
        q = set(self.tokenizer(question))
        if not q:
            return 0.0
        return len(q & set(self.tokenizer(chunk.text))) / len(q)

    def answer(self, question: str, retrieved: Sequence[Hit], category: int | None = None) -> str:
        if not retrieved:
            return NOT_MENTIONED
        top = retrieved[0].chunk
        may_abstain = self.abstain_categories is None or (
            category is not None and int(category) in self.abstain_categories
        )
        if may_abstain and self.support(question, top) < self.abstain_threshold:
            return NOT_MENTIONED
        if asks_for_time(question, category):
            d = item_date(top)
            if d is not None:
                if _YEAR_Q.search(question):
                    return str(d.year)
                if _MONTH_Q.search(question):
                    return f"{_MONTH_NAMES[d.month - 1]} {d.year}"
                return render_date(d)
        sentence = self.best_sentence(question, top.text)
        if self.strip_question_words:
            span = self._strip(question, sentence)
            if span:
                return span
        return sentence

    def best_sentence(self, question: str, text: str) -> str:
        """The sentence of `text` sharing the most distinct tokens with the question."""
        q = set(self.tokenizer(question))
        sentences = [s.strip() for s in _SENTENCE.split(text) if s.strip()] or [text.strip()]
        best, best_overlap = sentences[0], -1
        for s in sentences:
            overlap = len(q & set(self.tokenizer(s)))
            if overlap > best_overlap:
                best, best_overlap = s, overlap
        return best

    def _strip(self, question: str, sentence: str) -> str:
        q = set(self.tokenizer(question))
        kept: list[tuple[str, bool]] = []  # (word, is a content word)
        for word in sentence.split():
            toks = self.tokenizer(word)
            if toks and all(t in q for t in toks):
                continue
            kept.append((word, bool(toks)))
        # Function words left dangling at either end ("to … for") carry no answer.
        while kept and not kept[0][1]:
            kept.pop(0)
        while kept and not kept[-1][1]:
            kept.pop()
        return " ".join(w for w, _ in kept).strip(_EDGE_PUNCT + " ")
