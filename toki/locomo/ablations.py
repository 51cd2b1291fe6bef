"""LoCoMo ablations: typed layer vs flat, audit rows vs overwrite, and the four operators.

Everything is deterministic: the extraction is rule-based, retrieval is BM25 with fixed tie
order, answers are extractive, and the statistics are seeded. The numbers therefore measure
the memory layer inside a retrieval-and-extraction pipeline, not an LLM agent; see
docs/locomo.md for how they relate to the TOKI paper's.

Rows (plain dicts, `pandas.DataFrame(rows)` makes a frame) have `ablation`, `kind`
("score" or "comparison"), `variant`, `category` (1-5 or "all"), `slice`, `metric`, `n`,
`score`, `ci_low`, `ci_high`, `ci_method`; comparison rows add `baseline`, `n10`, `n01`,
`mcnemar_p`, `power_mcnemar`, `power_mean` (their `score` is the mean difference
variant - baseline and the interval is the paired-bootstrap interval of that difference).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toki.algebra import AWAIT, EWM, LWW, RULE, Operator
from toki.errors import InvalidInput
from toki.experiments.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_mean_ci,
    compare_paired,
    wilson_interval,
)
from toki.locomo.answer import Answerer
from toki.locomo.data import LocomoDataset
from toki.locomo.flat import QAResult, answer_one, answer_questions
from toki.locomo.metrics import normalize_answer
from toki.locomo.typed import (
    Extractor,
    TypedAnswerer,
    TypedMemory,
    TypedRetriever,
    build_typed_memory,
)
from toki.model import FactKey
from toki.time import BoundSource

__all__ = [
    "ABLATIONS",
    "OPERATOR_VARIANTS",
    "AsOfQuestion",
    "OverwriteMemory",
    "ablate_audit_rows",
    "ablate_operator",
    "ablate_typed_layer",
    "as_of_questions",
    "comparison_row",
    "gold_as_of",
    "run_ablations",
    "score_rows",
    "superseded_evidence",
    "typed_answers",
]

SEED = DEFAULT_SEED
ANSWERABLE = (1, 2, 3, 4)
OPERATOR_VARIANTS: Mapping[str, Operator] = {"LWW": LWW, "EWM": EWM, "AWAIT": AWAIT, "RULE": RULE}
SLICES = ("superseded", "control_single", "control_latest")


# -- rows ---------------------------------------------------------------------------------


def score_rows(
    ablation: str,
    variant: str,
    slice_: str,
    category: int | str,
    scores: Sequence[float],
    *,
    binary: bool,
    metric: str,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> dict[str, Any]:
    """One score row: the mean with a Wilson interval (binary scores) or a seeded percentile
    bootstrap interval (continuous scores such as token F1)."""
    if binary:
        ci = wilson_interval(int(sum(scores)), len(scores))
        method = "wilson"
    else:
        ci = bootstrap_mean_ci(scores, seed=seed, resamples=resamples)
        method = "bootstrap"
    return {
        "ablation": ablation,
        "kind": "score",
        "variant": variant,
        "category": category,
        "slice": slice_,
        "metric": metric,
        "n": len(scores),
        "score": ci.estimate,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "ci_method": method,
    }


def comparison_row(
    ablation: str,
    variant: str,
    baseline: str,
    slice_: str,
    category: int | str,
    a: Sequence[float],
    b: Sequence[float],
    *,
    metric: str,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> dict[str, Any]:
    """variant - baseline on the same items: paired bootstrap interval of the difference,
    exact McNemar on correct/incorrect (score >= 0.5), achieved power of both tests."""
    c = compare_paired(a, b, seed=seed, resamples=resamples)
    return {
        "ablation": ablation,
        "kind": "comparison",
        "variant": variant,
        "baseline": baseline,
        "category": category,
        "slice": slice_,
        "metric": f"{metric} difference",
        "n": c.n,
        "score": c.diff.estimate,
        "ci_low": c.diff.low,
        "ci_high": c.diff.high,
        "ci_method": "paired bootstrap",
        "n10": c.n10,
        "n01": c.n01,
        "mcnemar_p": c.mcnemar_p,
        "power_mcnemar": c.power_mcnemar,
        "power_mean": c.power_mean,
    }


def _conversations(dataset: LocomoDataset, limit: int | None) -> list[Any]:
    if limit is not None and limit < 1:
        raise InvalidInput("limit", f"must be at least 1 conversation, got {limit}")
    convs = list(dataset.conversations)
    return convs if limit is None else convs[:limit]


# -- (a) typed layer ------------------------------------------------------------------------


def typed_answers(
    dataset: LocomoDataset,
    memories: Sequence[TypedMemory],
    *,
    k: int = 5,
    categories: Iterable[int] = ANSWERABLE,
    answerer: Answerer | None = None,
    overwrite: bool = False,
) -> list[QAResult]:
    """Retrieve from the typed memories (`TypedRetriever`), answer (`TypedAnswerer` unless
    given) and score every selected question of the memories' conversations."""
    cats = {int(c) for c in categories}
    ans = answerer if answerer is not None else TypedAnswerer()
    out: list[QAResult] = []
    for tm in memories:
        conv = dataset.conversation(tm.sample_id)
        retriever = TypedRetriever(tm, overwrite=overwrite)
        out += [
            answer_one(conv.sample_id, q, retriever, ans, k)
            for q in conv.qa
            if int(q.category) in cats
        ]
    return out


def _flat_answers(
    dataset: LocomoDataset, sample_ids: Sequence[str], k: int, categories: Iterable[int]
) -> list[QAResult]:
    subset = LocomoDataset(
        tuple(dataset.conversation(s) for s in sample_ids),
        dataset.problems,
        dataset.path,
        dataset.sha256,
    )
    return answer_questions(subset, k=k, categories=categories)


def ablate_typed_layer(
    dataset: LocomoDataset,
    *,
    limit: int | None = None,
    k: int = 5,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
    memories: Sequence[TypedMemory] | None = None,
    extractor: Extractor | None = None,
) -> list[dict[str, Any]]:
    """(a) Typed vs flat memory on the answerable questions (categories 1-4), per category
    and over all, with the same BM25, the same extractive answering and upstream's scoring.
    `limit` keeps the first N conversations."""
    convs = _conversations(dataset, limit)
    mems = (
        list(memories)
        if memories is not None
        else [build_typed_memory(c, extractor=extractor) for c in convs]
    )
    typed = typed_answers(dataset, mems, k=k)
    flat = _flat_answers(dataset, [m.sample_id for m in mems], k, ANSWERABLE)
    t_by = {(r.sample_id, r.qa_index): r for r in typed}
    pairs = [(t_by[(f.sample_id, f.qa_index)], f) for f in flat]
    rows: list[dict[str, Any]] = []
    groups: list[tuple[int | str, list[tuple[QAResult, QAResult]]]] = [
        (c, [p for p in pairs if p[1].category == c]) for c in ANSWERABLE
    ]
    groups.append(("all", pairs))
    for cat, ps in groups:
        if not ps:
            continue
        ts, fs = [p[0].score for p in ps], [p[1].score for p in ps]
        for variant, xs in (("typed", ts), ("flat", fs)):
            rows.append(
                score_rows(
                    "typed_layer",
                    variant,
                    "answerable",
                    cat,
                    xs,
                    binary=False,
                    metric="f1",
                    seed=seed,
                    resamples=resamples,
                )
            )
        rows.append(
            comparison_row(
                "typed_layer",
                "typed",
                "flat",
                "answerable",
                cat,
                ts,
                fs,
                metric="f1",
                seed=seed,
                resamples=resamples,
            )
        )
    return rows


# -- (b) audit rows -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AsOfQuestion:
    """ "What was <subject>'s <predicate> as of session k?" asked at time `at` (the end of
    session k) for both valid and system time, with the gold answer from `gold_as_of`."""

    sample_id: str
    key: FactKey
    session: int
    at: datetime
    gold: str
    slice: str

    @property
    def question(self) -> str:
        return f"As of session {self.session}, what was {self.key.subject}'s '{self.key.fact_key}'?"


def _start(f: Any) -> datetime:
    when = f.claim.when
    return when.start if when.source is BoundSource.EVIDENCE else f.recorded_at  # type: ignore[no-any-return]


def gold_as_of(typed: TypedMemory, key: FactKey, at: datetime) -> str | None:
    """The gold belief about `key` at `at`, computed from the extracted claims alone (not
    from any store): the most recently recorded claim that was recorded by `at` and whose
    valid time had started by `at`. This is recency semantics: the world changed when a
    newer statement says so."""
    best = None
    for f in typed.facts:
        eligible = f.key == key and f.recorded_at <= at and _start(f) <= at
        if eligible and (best is None or f.recorded_at > best.recorded_at):
            best = f
    return None if best is None else best.claim.text


def as_of_questions(typed: TypedMemory) -> list[AsOfQuestion]:
    """The as-of slices of one conversation, from its natural workload (no invented facts):

    * superseded: (key, session k) where the key was stated in session k and a later session
      states a different value for the same key: the evidence of session k was superseded;
    * control_single: keys stated exactly once: nothing was ever superseded;
    * control_latest: keys stated in several sessions, asked as of their last session:
      nothing superseded that evidence afterwards.
    """
    by_key: dict[FactKey, list[Any]] = {}
    for f in typed.facts:
        by_key.setdefault(f.key, []).append(f)
    end_of: dict[int, datetime] = {}
    for f in typed.facts:
        end_of[f.session] = max(end_of.get(f.session, f.recorded_at), f.recorded_at)
    out: list[AsOfQuestion] = []
    for key, facts in by_key.items():
        sessions = sorted({f.session for f in facts})
        for s in sessions:
            at = end_of[s]
            gold = gold_as_of(typed, key, at)
            if gold is None:
                continue
            later = [f for f in facts if f.session > s]
            if len(facts) == 1:
                slice_ = "control_single"
            elif later and any(f.claim.text != gold for f in later):
                slice_ = "superseded"
            elif s == sessions[-1] and len(sessions) > 1:
                slice_ = "control_latest"
            else:
                continue
            out.append(AsOfQuestion(typed.sample_id, key, s, at, gold, slice_))
    return out


class OverwriteMemory:
    """LWW overwrite without audit: one value per key, the last one written; old values are
    gone. It has no valid or system time, so an as-of question gets today's value (what such
    a store serves); this is the audit-erasure (N3) baseline."""

    def __init__(self) -> None:
        self._values: dict[FactKey, str] = {}

    def write(self, key: FactKey, value: str) -> None:
        self._values[key] = value

    def resolve_at(
        self, key: FactKey, valid_at: datetime | None = None, system_as_of: datetime | None = None
    ) -> str | None:
        return self._values.get(key)

    @classmethod
    def from_typed(cls, typed: TypedMemory) -> OverwriteMemory:
        """The same claims in the same (recording) order, each overwriting its key."""
        mem = cls()
        for f in sorted(typed.facts, key=lambda f: f.recorded_at):
            mem.write(f.key, f.claim.text)
        return mem


def _toki_as_of(typed: TypedMemory, q: AsOfQuestion) -> str | None:
    res = typed.memory.resolve_at(q.key, valid_at=q.at, system_as_of=q.at)
    return res.value if res.is_value and isinstance(res.value, str) else None


def _correct(prediction: str | None, gold: str) -> float:
    return float(prediction is not None and normalize_answer(prediction) == normalize_answer(gold))


def _slice_rows(
    ablation: str,
    variants: Mapping[str, Callable[[AsOfQuestion], str | None]],
    questions: Sequence[AsOfQuestion],
    reference: str,
    seed: int,
    resamples: int,
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for slice_ in SLICES:
        qs = [q for q in questions if q.slice == slice_]
        if not qs:
            continue
        scores = {v: [_correct(fn(q), q.gold) for q in qs] for v, fn in variants.items()}
        for v, xs in scores.items():
            rows.append(
                score_rows(
                    ablation,
                    v,
                    slice_,
                    "all",
                    xs,
                    binary=True,
                    metric="accuracy",
                    seed=seed,
                    resamples=resamples,
                )
            )
        for v, xs in scores.items():
            if v != reference:
                rows.append(
                    comparison_row(
                        ablation,
                        reference,
                        v,
                        slice_,
                        "all",
                        scores[reference],
                        xs,
                        metric="accuracy",
                        seed=seed,
                        resamples=resamples,
                    )
                )
    return rows


def ablate_audit_rows(
    dataset: LocomoDataset,
    *,
    limit: int | None = None,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
    memories: Sequence[TypedMemory] | None = None,
) -> list[dict[str, Any]]:
    """(b) TOKI dual-row (history kept; as-of read with `resolve_at(key, at, at)`) vs LWW
    overwrite without audit rows, on the superseded slice and the two control slices."""
    convs = _conversations(dataset, limit)
    mems = list(memories) if memories is not None else [build_typed_memory(c) for c in convs]
    questions: list[AsOfQuestion] = []
    answer: dict[int, tuple[str | None, str | None]] = {}
    for tm in mems:
        over = OverwriteMemory.from_typed(tm)
        for q in as_of_questions(tm):
            answer[len(questions)] = (_toki_as_of(tm, q), over.resolve_at(q.key, q.at, q.at))
            questions.append(q)
    index = {id(q): i for i, q in enumerate(questions)}
    variants: dict[str, Callable[[AsOfQuestion], str | None]] = {
        "dual_row": lambda q: answer[index[id(q)]][0],
        "overwrite": lambda q: answer[index[id(q)]][1],
    }
    rows = _slice_rows("audit_rows", variants, questions, "dual_row", seed, resamples)
    return rows + _qa_superseded_rows(dataset, mems, seed, resamples)


def superseded_evidence(typed: TypedMemory) -> frozenset[str]:
    """Dialogue turns cited by a fact whose key a later session restated with another value."""
    out: set[str] = set()
    for f in typed.facts:
        if any(
            g.key == f.key and g.session > f.session and g.claim.text != f.claim.text
            for g in typed.facts
        ):
            out.update(f.claim.evidence)
    return frozenset(out)


def _qa_superseded_rows(
    dataset: LocomoDataset, mems: Sequence[TypedMemory], seed: int, resamples: int
) -> list[dict[str, Any]]:
    """The LoCoMo questions (categories 1-4) whose gold evidence was later superseded,
    answered from the typed store with history (dual_row: every version retrievable) and
    from an overwrite store (only each key's latest version). Not a control: off this slice
    the variants may still differ, because the overwrite store retrieves from fewer items."""
    dual = typed_answers(dataset, mems)
    over = {(r.sample_id, r.qa_index): r for r in typed_answers(dataset, mems, overwrite=True)}
    gone = {tm.sample_id: superseded_evidence(tm) for tm in mems}
    rows: list[dict[str, Any]] = []
    qa = {(c.sample_id, q.index): q for c in dataset.conversations for q in c.qa}
    pairs = [
        (r, over[(r.sample_id, r.qa_index)])
        for r in dual
        if set(qa[(r.sample_id, r.qa_index)].evidence) & gone[r.sample_id]
    ]
    if not pairs:
        return rows
    a, b = [p[0].score for p in pairs], [p[1].score for p in pairs]
    for v, xs in (("dual_row", a), ("overwrite", b)):
        rows.append(
            score_rows(
                "audit_rows",
                v,
                "qa_superseded",
                "all",
                xs,
                binary=False,
                metric="f1",
                seed=seed,
                resamples=resamples,
            )
        )
    rows.append(
        comparison_row(
            "audit_rows",
            "dual_row",
            "overwrite",
            "qa_superseded",
            "all",
            a,
            b,
            metric="f1",
            seed=seed,
            resamples=resamples,
        )
    )
    return rows


# -- (c) operators --------------------------------------------------------------------------


def ablate_operator(
    dataset: LocomoDataset,
    *,
    limit: int | None = None,
    k: int = 5,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> list[dict[str, Any]]:
    """(c) The same claims written through LWW, EWM, AWAIT (no confirmation ever arrives, so
    a challenger stays PROPOSED) and RULE (newest_valid_time), compared with LWW on the
    as-of slices (the questions come from the LWW build: the slices depend on the claims,
    not on the operator) and on the answerable LoCoMo questions (token F1)."""
    convs = _conversations(dataset, limit)
    builds = {
        name: [build_typed_memory(c, operator=op) for c in convs]
        for name, op in OPERATOR_VARIANTS.items()
    }
    questions: list[AsOfQuestion] = []
    owner: dict[int, int] = {}
    for i, tm in enumerate(builds["LWW"]):
        for q in as_of_questions(tm):
            owner[len(questions)] = i
            questions.append(q)
    index = {id(q): j for j, q in enumerate(questions)}

    def reader(name: str) -> Callable[[AsOfQuestion], str | None]:
        return lambda q: _toki_as_of(builds[name][owner[index[id(q)]]], q)

    variants = {name: reader(name) for name in OPERATOR_VARIANTS}
    rows = _slice_rows("operator", variants, questions, "LWW", seed, resamples)
    qa = {name: typed_answers(dataset, ms, k=k) for name, ms in builds.items()}
    ref = [r.score for r in qa["LWW"]]
    for name, results in qa.items():
        xs = [r.score for r in results]
        rows.append(
            score_rows(
                "operator",
                name,
                "answerable",
                "all",
                xs,
                binary=False,
                metric="f1",
                seed=seed,
                resamples=resamples,
            )
        )
    for name, results in qa.items():
        if name != "LWW":
            rows.append(
                comparison_row(
                    "operator",
                    "LWW",
                    name,
                    "answerable",
                    "all",
                    ref,
                    [r.score for r in results],
                    metric="f1",
                    seed=seed,
                    resamples=resamples,
                )
            )
    return rows


ABLATIONS = ("typed_layer", "audit_rows", "operator")


def run_ablations(
    dataset: LocomoDataset,
    *,
    ablations: Iterable[str] = ABLATIONS,
    limit: int | None = None,
    k: int = 5,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
) -> list[dict[str, Any]]:
    """Run the named ablations (default: all three) and return their rows in order. The
    LWW typed memories are built once and shared by (a) and (b)."""
    names = list(ablations)
    for n in names:
        if n not in ABLATIONS:
            raise InvalidInput("ablation", f"unknown ablation {n!r}", f"use one of {ABLATIONS}")
    convs = _conversations(dataset, limit)
    mems = (
        [build_typed_memory(c) for c in convs] if {"typed_layer", "audit_rows"} & set(names) else []
    )
    rows: list[dict[str, Any]] = []
    for n in names:
        if n == "typed_layer":
            rows += ablate_typed_layer(dataset, k=k, seed=seed, resamples=resamples, memories=mems)
        elif n == "audit_rows":
            rows += ablate_audit_rows(dataset, seed=seed, resamples=resamples, memories=mems)
        else:
            rows += ablate_operator(dataset, limit=limit, k=k, seed=seed, resamples=resamples)
    return rows
