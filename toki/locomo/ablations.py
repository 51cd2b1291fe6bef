"""LoCoMo ablations: typed layer vs flat, audit rows vs overwrite, and the four operators.

By default everything is deterministic: the extraction is rule-based, retrieval is BM25 with
fixed tie order, answers are extractive, and the statistics are seeded. The numbers then
measure the memory layer inside a retrieval-and-extraction pipeline, not an LLM agent; pass
an LLM `answerer`, `extractor` and `judge` (toki.locomo.llm) to measure it with a model. See
docs/locomo.md for how they relate to the TOKI paper's.

Rows (plain dicts, `pandas.DataFrame(rows)` makes a frame) have `ablation`, `kind`,
`variant`, `category` (1-5 or "all"), `slice`, `metric`, `n`, `score`, `ci_low`, `ci_high`,
`ci_method`. Kinds:

* "score": a mean with its interval;
* "comparison": `score` is the mean difference variant - `baseline` on the same items with
  its paired-bootstrap interval, plus `n10`, `n01`, `mcnemar_p`, `power_mcnemar`,
  `power_mean`; `run_ablations` adds `holm_p` and `family_size` (Holm over every comparison
  of the run);
* "check": a result true by construction (e.g. the as-of read on a slice whose gold is the
  rule it implements): `expected`, `holds` and `why`, no interval and no test.

Metrics: "f1" (LoCoMo's own per-category score), "accuracy" (exact as-of value) and, with a
judge, "llm_judge" (the J score: share judged correct, on the questions every compared
variant got a verdict for; `no_verdict` counts the others).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from toki.algebra import AWAIT, EWM, LWW, RULE, Operator
from toki.errors import InvalidInput
from toki.experiments.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    bootstrap_mean_ci,
    cluster_bootstrap_ci,
    cluster_sign_flip_p,
    compare_paired,
    holm,
    wilson_interval,
)
from toki.locomo.answer import Answerer
from toki.locomo.data import QA, LocomoDataset
from toki.locomo.flat import QAResult, answer_one, answer_questions
from toki.locomo.llm import AnswerJudge
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
    "apply_holm",
    "as_of_questions",
    "check_row",
    "comparison_row",
    "gold_as_of",
    "judge_results",
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
        "ci_level": 1 - ci.alpha,
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
        "ci_level": 1 - c.diff.alpha,
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
    only: Callable[[str, QA], bool] | None = None,
    judge: AnswerJudge | None = None,
) -> list[QAResult]:
    """Retrieve from the typed memories (`TypedRetriever`), answer (`TypedAnswerer` unless
    given) and score every selected question of the memories' conversations (`only(sample
    id, question)` narrows the selection); with a `judge`, each answer is also judged."""
    cats = {int(c) for c in categories}
    ans = answerer if answerer is not None else TypedAnswerer()
    out: list[QAResult] = []
    for tm in memories:
        conv = dataset.conversation(tm.sample_id)
        retriever = TypedRetriever(tm, overwrite=overwrite)
        out += [
            answer_one(conv.sample_id, q, retriever, ans, k)
            for q in conv.qa
            if int(q.category) in cats and (only is None or only(conv.sample_id, q))
        ]
    return judge_results(out, judge)


def judge_results(results: Sequence[QAResult], judge: AnswerJudge | None) -> list[QAResult]:
    """The results with `judged` set by `judge` (unchanged without one)."""
    if judge is None:
        return list(results)
    return [replace(r, judged=judge.grade(r.question, r.gold or "", r.prediction)) for r in results]


def _flat_answers(
    dataset: LocomoDataset,
    sample_ids: Sequence[str],
    k: int,
    categories: Iterable[int],
    answerer: Answerer | None = None,
    judge: AnswerJudge | None = None,
) -> list[QAResult]:
    subset = LocomoDataset(
        tuple(dataset.conversation(s) for s in sample_ids),
        dataset.problems,
        dataset.path,
        dataset.sha256,
    )
    results = answer_questions(subset, k=k, categories=categories, answerer=answerer)
    return judge_results(results, judge)


def _variant_rows(
    ablation: str,
    slice_: str,
    category: int | str,
    results: Mapping[str, Sequence[QAResult]],
    reference: str,
    seed: int,
    resamples: int,
) -> list[dict[str, Any]]:
    """Score rows for every variant and comparisons of `reference` with each other variant,
    on token F1 and, when the answers were judged, on the J score (over the questions every
    variant got a verdict for)."""
    rows: list[dict[str, Any]] = []
    names = list(results)
    n = len(results[reference])
    metrics: list[tuple[str, list[int], bool]] = [("f1", list(range(n)), False)]
    if any(r.judged is not None for rs in results.values() for r in rs):
        both = [i for i in range(n) if all(results[v][i].judged is not None for v in names)]
        metrics.append(("llm_judge", both, True))
    for metric, idx, binary in metrics:
        if not idx:
            continue
        values = {
            v: [float(bool(rs[i].judged)) if binary else rs[i].score for i in idx]
            for v, rs in results.items()
        }
        extra = {"no_verdict": n - len(idx)} if binary else {}
        clusters = [results[reference][i].sample_id for i in idx]
        for v in names:
            rows.append(
                score_rows(ablation, v, slice_, category, values[v], binary=binary,
                           metric=metric, seed=seed, resamples=resamples) | extra
                | conversation_interval(values[v], clusters, seed, resamples)
            )  # fmt: skip
        for v in names:
            if v != reference:
                rows.append(
                    comparison_row(ablation, reference, v, slice_, category, values[reference],
                                   values[v], metric=metric, seed=seed, resamples=resamples)
                    | extra
                    | conversation_test(values[reference], values[v], clusters, seed, resamples)
                )  # fmt: skip
    return rows


def conversation_interval(
    scores: Sequence[float], clusters: Sequence[str], seed: int, resamples: int
) -> dict[str, Any]:
    """The score's interval with the conversation as the unit (cluster bootstrap): the
    questions of one conversation share its memory, so they are not independent."""
    ci = cluster_bootstrap_ci(scores, clusters, seed=seed, resamples=resamples)
    return {
        "ci_unit": "question",
        "conversations": len(set(clusters)),
        "conv_ci_low": ci.low,
        "conv_ci_high": ci.high,
    }


def conversation_test(
    a: Sequence[float], b: Sequence[float], clusters: Sequence[str], seed: int, resamples: int
) -> dict[str, Any]:
    """a − b with the conversation as the unit: a cluster-bootstrap interval of the mean
    difference and an exact sign-flip permutation p over conversations (the primary test;
    McNemar over questions stays as the secondary, question-level one)."""
    diffs = [x - y for x, y in zip(a, b, strict=True)]
    ci = cluster_bootstrap_ci(diffs, clusters, seed=seed, resamples=resamples)
    return {
        "ci_unit": "question",
        "conversations": len(set(clusters)),
        "conv_ci_low": ci.low,
        "conv_ci_high": ci.high,
        "conv_p": cluster_sign_flip_p(diffs, clusters, seed=seed, resamples=resamples),
    }


def check_row(
    ablation: str, variant: str, slice_: str, scores: Sequence[float], expected: float, why: str
) -> dict[str, Any]:
    """A result true by construction, reported as a check: observed vs expected, no test."""
    observed = sum(scores) / len(scores)
    return {
        "ablation": ablation,
        "kind": "check",
        "variant": variant,
        "category": "all",
        "slice": slice_,
        "metric": "accuracy",
        "n": len(scores),
        "score": observed,
        "ci_low": None,
        "ci_high": None,
        "ci_method": None,
        "expected": expected,
        "holds": observed == expected,
        "why": why,
    }


def apply_holm(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Holm-adjust the p of every comparison row as one family (`family_size`): the
    conversation-level permutation p (`holm_p`, the primary test) and the question-level
    McNemar p (`question_holm_p`, secondary); other rows are returned unchanged."""
    idx = [i for i, r in enumerate(rows) if r.get("kind") == "comparison"]
    out = [dict(r) for r in rows]
    if not idx:
        return out
    conv = holm([rows[i].get("conv_p", rows[i]["mcnemar_p"]) for i in idx])
    question = holm([rows[i]["mcnemar_p"] for i in idx])
    for i, p, q in zip(idx, conv, question, strict=True):
        out[i]["holm_p"] = p
        out[i]["question_holm_p"] = q
        out[i]["family_size"] = len(idx)
    return out


def ablate_typed_layer(
    dataset: LocomoDataset,
    *,
    limit: int | None = None,
    k: int = 5,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
    memories: Sequence[TypedMemory] | None = None,
    extractor: Extractor | None = None,
    answerer: Answerer | None = None,
    judge: AnswerJudge | None = None,
) -> list[dict[str, Any]]:
    """(a) Typed vs flat memory on the answerable questions (categories 1-4), per category
    and over all, with the same BM25, the same answering and upstream's scoring. Without an
    `answerer` the typed arm answers with `TypedAnswerer` and the flat arm with
    `ExtractiveAnswerer`; with one, both arms use it. `limit` keeps the first N
    conversations."""
    convs = _conversations(dataset, limit)
    mems = (
        list(memories)
        if memories is not None
        else [build_typed_memory(c, extractor=extractor) for c in convs]
    )
    typed = typed_answers(dataset, mems, k=k, answerer=answerer, judge=judge)
    flat = _flat_answers(dataset, [m.sample_id for m in mems], k, ANSWERABLE, answerer, judge)
    t_by = {(r.sample_id, r.qa_index): r for r in typed}
    pairs = [(t_by[(f.sample_id, f.qa_index)], f) for f in flat]
    rows: list[dict[str, Any]] = []
    groups: list[tuple[int | str, list[tuple[QAResult, QAResult]]]] = [
        (c, [p for p in pairs if p[1].category == c]) for c in ANSWERABLE
    ]
    groups.append(("all", pairs))
    for cat, ps in groups:
        if ps:
            arms = {"typed": [p[0] for p in ps], "flat": [p[1] for p in ps]}
            rows += _variant_rows("typed_layer", "answerable", cat, arms, "typed", seed, resamples)
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


# Why each by-construction result holds (reported as a check, never tested).
WHY_AS_OF = (
    "the gold is the belief recorded by then under recency, which is the rule of the LWW "
    "store it is read from with resolve_at(key, t, t)"
)
WHY_UNCHANGED = "nothing superseded the asked value afterwards: the last value written is the gold"
WHY_SINGLE = "a key stated once: no contradiction, so no operator has anything to decide"


def _slice_rows(
    ablation: str,
    variants: Mapping[str, Callable[[AsOfQuestion], str | None]],
    questions: Sequence[AsOfQuestion],
    by_construction: Callable[[str, str], str | None],
    seed: int,
    resamples: int,
) -> list[dict[str, Any]]:
    """Per as-of slice and variant: a check (expected 1.0) where `by_construction(variant,
    slice)` gives the reason it must hold, else a score with its Wilson interval. No
    comparisons: on these slices the reference is right by construction, so a test against
    it would only restate how the slice was built."""
    rows: list[dict[str, Any]] = []
    for slice_ in SLICES:
        qs = [q for q in questions if q.slice == slice_]
        if not qs:
            continue
        for v, fn in variants.items():
            xs = [_correct(fn(q), q.gold) for q in qs]
            why = by_construction(v, slice_)
            if why is not None:
                rows.append(check_row(ablation, v, slice_, xs, 1.0, why))
            else:
                rows.append(
                    score_rows(ablation, v, slice_, "all", xs, binary=True, metric="accuracy",
                               seed=seed, resamples=resamples)
                    | conversation_interval(xs, [q.sample_id for q in qs], seed, resamples)
                )  # fmt: skip
    return rows


def _audit_by_construction(variant: str, slice_: str) -> str | None:
    if variant == "dual_row":
        return WHY_AS_OF
    return WHY_UNCHANGED if slice_ != "superseded" else None


def ablate_audit_rows(
    dataset: LocomoDataset,
    *,
    limit: int | None = None,
    k: int = 5,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
    memories: Sequence[TypedMemory] | None = None,
    extractor: Extractor | None = None,
    answerer: Answerer | None = None,
    judge: AnswerJudge | None = None,
) -> list[dict[str, Any]]:
    """(b) TOKI dual-row (history kept; as-of read with `resolve_at(key, at, at)`) vs LWW
    overwrite without audit rows. On the as-of slices the dual-row read and the overwrite
    store on the control slices are right by construction (checks); the overwrite store's
    score on the superseded slice is a measurement (it is right only where a later value
    repeated the earlier one). `qa_superseded` compares the two on LoCoMo questions."""
    convs = _conversations(dataset, limit)
    mems = (
        list(memories)
        if memories is not None
        else [build_typed_memory(c, extractor=extractor) for c in convs]
    )
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
    rows = _slice_rows("audit_rows", variants, questions, _audit_by_construction, seed, resamples)
    return rows + _qa_superseded_rows(dataset, mems, k, seed, resamples, answerer, judge)


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
    dataset: LocomoDataset,
    mems: Sequence[TypedMemory],
    k: int,
    seed: int,
    resamples: int,
    answerer: Answerer | None = None,
    judge: AnswerJudge | None = None,
) -> list[dict[str, Any]]:
    """The LoCoMo questions (categories 1-4) whose gold evidence was later superseded,
    answered from the typed store with history (dual_row: every version retrievable) and
    from an overwrite store (only each key's latest version). Not a control: off this slice
    the variants may still differ, because the overwrite store retrieves from fewer items."""
    gone = {tm.sample_id: superseded_evidence(tm) for tm in mems}

    def only(sample_id: str, q: QA) -> bool:
        return bool(set(q.evidence) & gone[sample_id])

    kw: dict[str, Any] = {"k": k, "answerer": answerer, "only": only, "judge": judge}
    dual = typed_answers(dataset, mems, **kw)
    over = typed_answers(dataset, mems, overwrite=True, **kw)
    if not dual:
        return []
    arms = {"dual_row": dual, "overwrite": over}
    return _variant_rows("audit_rows", "qa_superseded", "all", arms, "dual_row", seed, resamples)


# -- (c) operators --------------------------------------------------------------------------


def _operator_by_construction(variant: str, slice_: str) -> str | None:
    if variant == "LWW":
        return WHY_AS_OF
    return WHY_SINGLE if slice_ == "control_single" else None


def ablate_operator(
    dataset: LocomoDataset,
    *,
    limit: int | None = None,
    k: int = 5,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
    extractor: Extractor | None = None,
    answerer: Answerer | None = None,
    judge: AnswerJudge | None = None,
) -> list[dict[str, Any]]:
    """(c) The same claims written through LWW, EWM, AWAIT (no confirmation ever arrives, so
    a challenger stays PROPOSED) and RULE (newest_valid_time). On the as-of slices (the
    questions come from the LWW build: the slices depend on the claims, not on the
    operator) the gold follows recency, LWW's rule: LWW's rows and every operator's on
    keys stated once are checks, the others' scores say how far they depart from recency.
    On the answerable LoCoMo questions each operator is compared with LWW."""
    convs = _conversations(dataset, limit)
    builds = {
        name: [build_typed_memory(c, operator=op, extractor=extractor) for c in convs]
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
    rows = _slice_rows("operator", variants, questions, _operator_by_construction, seed, resamples)
    qa = {
        name: typed_answers(dataset, ms, k=k, answerer=answerer, judge=judge)
        for name, ms in builds.items()
    }
    return rows + _variant_rows("operator", "answerable", "all", qa, "LWW", seed, resamples)


ABLATIONS = ("typed_layer", "audit_rows", "operator")


def run_ablations(
    dataset: LocomoDataset,
    *,
    ablations: Iterable[str] = ABLATIONS,
    limit: int | None = None,
    k: int = 5,
    seed: int = SEED,
    resamples: int = DEFAULT_RESAMPLES,
    extractor: Extractor | None = None,
    answerer: Answerer | None = None,
    judge: AnswerJudge | None = None,
) -> list[dict[str, Any]]:
    """Run the named ablations (default: all three) and return their rows in order, every
    comparison Holm-adjusted as one family (`apply_holm`). The LWW typed memories are built
    once and shared by (a) and (b). `extractor`, `answerer` and `judge` replace the
    rule-based defaults everywhere they apply (e.g. the `toki.locomo.llm` roles)."""
    names = list(ablations)
    for n in names:
        if n not in ABLATIONS:
            raise InvalidInput("ablation", f"unknown ablation {n!r}", f"use one of {ABLATIONS}")
    convs = _conversations(dataset, limit)
    mems = (
        [build_typed_memory(c, extractor=extractor) for c in convs]
        if {"typed_layer", "audit_rows"} & set(names)
        else []
    )
    models: dict[str, Any] = {"answerer": answerer, "judge": judge}
    rows: list[dict[str, Any]] = []
    for n in names:
        if n == "typed_layer":
            rows += ablate_typed_layer(
                dataset, k=k, seed=seed, resamples=resamples, memories=mems, **models
            )
        elif n == "audit_rows":
            rows += ablate_audit_rows(
                dataset, k=k, seed=seed, resamples=resamples, memories=mems, **models
            )
        else:
            rows += ablate_operator(
                dataset, limit=limit, k=k, seed=seed, resamples=resamples, extractor=extractor,
                **models,
            )  # fmt: skip
    return apply_holm(rows)
