"""LoCoMo scoring, reproduced rule for rule from the benchmark's own evaluation script.

Source: snap-research/locomo, `task_eval/evaluation.py` (read at commit 92286325):
`normalize_answer`, `f1_score`, `f1`, `exact_match_score` and the per-category branch of
`eval_question_answering`, including its evidence-recall computation. Numbers produced here
are therefore comparable with numbers produced by that script; where upstream behaviour is
odd (e.g. "and" is dropped as if it were an article) it is kept on purpose and noted.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache, lru_cache
from typing import Protocol

from toki.errors import InvalidInput
from toki.locomo.data import QA, Category

NOT_MENTIONED_MARKERS = ("no information available", "not mentioned")
_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


class _Stemmer(Protocol):
    def stem(self, word: str) -> str: ...


@cache
def _porter() -> _Stemmer:
    # Imported lazily: nltk takes about a second to import and only scoring needs it.
    from nltk.stem import PorterStemmer  # type: ignore[import-untyped]

    stemmer: _Stemmer = PorterStemmer()  # default mode NLTK_EXTENSIONS, as upstream
    return stemmer


@lru_cache(maxsize=65536)
def porter_stem(word: str) -> str:
    """nltk's PorterStemmer().stem(word): the stemmer upstream's F1 applies to every token."""
    return _porter().stem(word)


def normalize_answer(s: str) -> str:
    """Upstream `normalize_answer`: drop ',', lowercase, drop ASCII punctuation, drop the
    words a/an/the/and, collapse whitespace.

    The order matters and is upstream's: commas go first (so "1,000" becomes "1000"), and
    `string.punctuation` is ASCII only, so curly quotes survive.
    """
    s = s.replace(",", "")
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def answer_tokens(s: str) -> list[str]:
    """Normalised, Porter-stemmed tokens, as upstream `f1_score` compares them."""
    return [porter_stem(w) for w in normalize_answer(s).split()]


def token_f1(prediction: str, ground_truth: str) -> float:
    """Upstream `f1_score`: bag-of-stemmed-tokens F1 between prediction and gold answer."""
    pred = answer_tokens(prediction)
    gold = answer_tokens(ground_truth)
    num_same = sum((Counter(pred) & Counter(gold)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred)
    recall = num_same / len(gold)
    return (2 * precision * recall) / (precision + recall)


def multi_answer_f1(prediction: str, ground_truth: str) -> float:
    """Upstream `f1` (multi-hop, category 1): split both on ',' and average, over the gold
    parts, the best `token_f1` any predicted part achieves against that gold part."""
    preds = [p.strip() for p in prediction.split(",")]
    golds = [g.strip() for g in ground_truth.split(",")]
    return sum(max(token_f1(p, g) for p in preds) for g in golds) / len(golds)


def exact_match(prediction: str, ground_truth: str) -> bool:
    """Upstream `exact_match_score`: equal *sets* of normalised (unstemmed) words."""
    return set(normalize_answer(prediction).split()) == set(normalize_answer(ground_truth).split())


def adversarial_score(prediction: str) -> float:
    """Category 5: 1.0 when the prediction says "not mentioned" or "no information
    available" (case-insensitive substring), else 0.0 — upstream's rule; the gold
    `adversarial_answer` is not used."""
    low = prediction.lower()
    return 1.0 if any(m in low for m in NOT_MENTIONED_MARKERS) else 0.0


def score_answer(prediction: str, answer: str | None, category: int) -> float:
    """Score one prediction with upstream's per-category rule (`eval_question_answering`).

    1 multi-hop → `multi_answer_f1`; 2 temporal and 4 single-hop → `token_f1`; 3 open-domain →
    `token_f1` against only the part of the gold answer before the first ';';
    5 adversarial → `adversarial_score`.
    """
    cat = Category(category)
    if cat is Category.ADVERSARIAL:
        return adversarial_score(prediction)
    if answer is None:
        raise InvalidInput("answer", f"category {int(cat)} needs a gold answer, got None")
    if cat is Category.OPEN_DOMAIN:
        answer = answer.split(";")[0].strip()
    if cat is Category.MULTI_HOP:
        return multi_answer_f1(prediction, answer)
    return token_f1(prediction, answer)


def score_qa(prediction: str, qa: QA) -> float:
    """`score_answer` for a parsed question."""
    return score_answer(prediction, qa.answer, qa.category)


def evidence_recall_at_k(
    retrieved_ids: Sequence[str | Iterable[str]], evidence_ids: Sequence[str], k: int
) -> float:
    """Fraction of the gold evidence ids found among the first k retrieved items.

    Each retrieved item is one id or the ids it covers (an observation cites one or more
    turns). Counted per evidence entry as upstream does (`recall_acc` in
    `eval_question_answering`), and, as upstream, a question without evidence scores 1.0.
    """
    if k < 1:
        raise InvalidInput("k", f"must be at least 1, got {k}")
    if not evidence_ids:
        return 1.0
    seen: set[str] = set()
    for item in retrieved_ids[:k]:
        if isinstance(item, str):
            seen.add(item)
        else:
            seen.update(item)
    return sum(1 for e in evidence_ids if e in seen) / len(evidence_ids)
