"""The flat baseline: untyped memory chunks, BM25, extractive answers, upstream scoring.

"Flat" means what an untyped memory store holds: the benchmark's observations and event
summaries (and optionally the raw turns) as plain text, each tagged only with the date of
the session it came from and the turns it cites. No subject, no valid-time interval, no
fact type, no supersession: this is the control the typed-memory ablations compare with.
Retrieval is per conversation (each conversation is one user's memory).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from toki.errors import InvalidInput
from toki.locomo.answer import Answerer, ExtractiveAnswerer
from toki.locomo.data import QA, Category, Conversation, LocomoDataset
from toki.locomo.metrics import evidence_recall_at_k, score_qa
from toki.locomo.retrieval import BM25Retriever, Chunk, Retriever, Tokenizer, hit_evidence


def build_flat_chunks(
    conversation: Conversation,
    *,
    observations: bool = True,
    events: bool = True,
    turns: bool = False,
) -> list[Chunk]:
    """Chunks for one conversation, in file order, with metadata
    `kind`, `sample_id`, `session`, `speaker`, `date` (a `datetime.date`) and `evidence`
    (the turn ids an item cites: observations their evidence, turns themselves, events none).

    A raw turn's text is "Speaker: text", plus "[shares a photo: caption]" for image turns,
    because that is all a flat store sees of an utterance.
    """
    sid = conversation.sample_id
    session_dates: dict[int, date | None] = {
        s.index: (s.date_time.date() if s.date_time is not None else None)
        for s in conversation.sessions
    }
    out: list[Chunk] = []

    def meta(
        kind: str, session: int, speaker: str, d: date | None, ev: tuple[str, ...]
    ) -> dict[str, Any]:
        return {
            "kind": kind,
            "sample_id": sid,
            "session": session,
            "speaker": speaker,
            "date": d,
            "evidence": ev,
        }

    if observations:
        for i, o in enumerate(conversation.observations):
            out.append(
                Chunk(
                    f"{sid}/obs/{i}",
                    o.text,
                    meta(
                        "observation",
                        o.session,
                        o.speaker,
                        session_dates.get(o.session),
                        o.evidence,
                    ),
                )
            )
    if events:
        for i, e in enumerate(conversation.events):
            d = e.date if e.date is not None else session_dates.get(e.session)
            out.append(
                Chunk(f"{sid}/event/{i}", e.text, meta("event", e.session, e.speaker, d, ()))
            )
    if turns:
        for t in conversation.turns():
            text = f"{t.speaker}: {t.text}"
            if t.blip_caption:
                text += f" [shares a photo: {t.blip_caption}]"
            out.append(
                Chunk(
                    f"{sid}/{t.dia_id}",
                    text,
                    meta("turn", t.session, t.speaker, session_dates.get(t.session), (t.dia_id,)),
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class QAResult:
    """One scored question: what was retrieved, answered and scored; `judged` is an answer
    judge's verdict (True correct, False wrong, None not judged or no verdict)."""

    sample_id: str
    qa_index: int
    category: int
    question: str
    gold: str | None
    prediction: str
    score: float
    recall: float
    retrieved: tuple[str, ...]
    judged: bool | None = None


def answer_one(sample_id: str, q: QA, retriever: Retriever, answerer: Answerer, k: int) -> QAResult:
    """Retrieve k hits for one question, answer from them, and score answer and retrieval."""
    hits = retriever.retrieve(q.question, k)
    prediction = answerer.answer(q.question, hits, int(q.category))
    return QAResult(
        sample_id=sample_id,
        qa_index=q.index,
        category=int(q.category),
        question=q.question,
        gold=q.answer,
        prediction=prediction,
        score=score_qa(prediction, q),
        recall=evidence_recall_at_k(hit_evidence(hits), q.evidence, k),
        retrieved=tuple(h.chunk.id for h in hits),
    )


def answer_questions(
    dataset: LocomoDataset,
    *,
    k: int = 5,
    categories: Iterable[int] = (1, 2, 3, 4),
    limit: int | None = None,
    include_turns: bool = False,
    answerer: Answerer | None = None,
    tokenizer: Tokenizer | None = None,
) -> list[QAResult]:
    """Retrieve, answer and score every selected question (file order; `limit` caps the
    total number of questions, counted after the category filter)."""
    if k < 1:
        raise InvalidInput("k", f"must be at least 1, got {k}")
    if limit is not None and limit < 0:
        raise InvalidInput("limit", f"must be non-negative, got {limit}")
    cats = {int(Category(c)) for c in categories}
    ans = answerer if answerer is not None else ExtractiveAnswerer()
    tok = tokenizer if tokenizer is not None else Tokenizer(stem=True)
    results: list[QAResult] = []
    for conv in dataset.conversations:
        selected = [q for q in conv.qa if int(q.category) in cats]
        if limit is not None:
            selected = selected[: max(0, limit - len(results))]
        if not selected:
            continue
        retriever: Retriever = BM25Retriever(
            build_flat_chunks(conv, turns=include_turns), tokenizer=tok
        )
        results += [answer_one(conv.sample_id, q, retriever, ans, k) for q in selected]
    return results


def summarize(results: Sequence[QAResult], k: int) -> list[dict[str, Any]]:
    """One row per category present: `category`, `n`, `f1_mean`, `recall@k` (means)."""
    by_cat: dict[int, list[QAResult]] = defaultdict(list)
    for r in results:
        by_cat[r.category].append(r)
    rows: list[dict[str, Any]] = []
    for cat in sorted(by_cat):
        rs = by_cat[cat]
        rows.append(
            {
                "category": cat,
                "name": Category(cat).name.lower(),
                "n": len(rs),
                "f1_mean": sum(r.score for r in rs) / len(rs),
                f"recall@{k}": sum(r.recall for r in rs) / len(rs),
            }
        )
    return rows


def run_flat_baseline(
    dataset: LocomoDataset,
    k: int = 5,
    categories: Iterable[int] = (1, 2, 3, 4),
    limit: int | None = None,
    *,
    include_turns: bool = False,
    answerer: Answerer | None = None,
) -> list[dict[str, Any]]:
    """Per-category rows (see `summarize`) of the flat baseline; `pandas.DataFrame(rows)`
    turns them into a frame. For category 5 the score is upstream's adversarial rule."""
    results = answer_questions(
        dataset,
        k=k,
        categories=categories,
        limit=limit,
        include_turns=include_turns,
        answerer=answerer,
    )
    return summarize(results, k)
