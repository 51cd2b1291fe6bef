"""Judges: who decides a semantic contradiction, and the keyed log that makes them replayable.

A judge answers a `JudgeQuestion` with a `Verdict`. An LLM at non-zero temperature is not a
function of its input: `StochasticJudge(p)` models that by drawing fresh randomness on every
call. The fix is not a better judge but a keyed log: the verdict is appended as a DECISION
event under (fact key, θ) before the operator commits, where θ = (prompt hash, seed, model,
temperature, tool-output hash); re-adjudication consults the log and never calls the judge.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from toki.canonical import canonical_json, digest
from toki.errors import TokiError
from toki.log import Event, EventKind
from toki.model import FactKey, FactVersion

__all__ = [
    "EqualityJudge",
    "Judge",
    "JudgeKey",
    "JudgeLog",
    "JudgeQuestion",
    "MalformedVerdict",
    "PreferNewestJudge",
    "PreferSourceJudge",
    "StochasticJudge",
    "Verdict",
    "judge_key",
    "validate_verdict",
]

TASKS = ("pick", "score", "contradicts")


class MalformedVerdict(TokiError):
    """A judge returned something that does not answer the question it was asked."""


@dataclass(frozen=True, slots=True)
class JudgeQuestion:
    """What a judge is asked. task: 'pick' a winner, 'score' each candidate, or say whether
    the last candidate 'contradicts' the others. Candidates are what the judge sees."""

    key: FactKey
    task: str
    candidates: tuple[FactVersion, ...]

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise MalformedVerdict(f"task: unknown judge task {self.task!r} (use one of {TASKS})")
        if not self.candidates:
            raise MalformedVerdict("candidates: a judge question needs at least one candidate")

    @property
    def context_hash(self) -> str:
        """The tool-output hash: what the judge saw (ids and payloads of the candidates)."""
        return digest(canonical_json([self.task, sorted(c.id for c in self.candidates)]))


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judge's answer: a winner id, a contradiction flag, or per-candidate scores."""

    winner: str | None = None
    contradicts: bool | None = None
    scores: tuple[tuple[str, float], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "winner": self.winner,
            "contradicts": self.contradicts,
            "scores": [[k, v] for k, v in self.scores],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(
            data.get("winner"),
            data.get("contradicts"),
            tuple((str(k), float(v)) for k, v in data.get("scores", ())),
        )

    def score_of(self, version_id: str) -> float | None:
        for k, v in self.scores:
            if k == version_id:
                return v
        return None


@runtime_checkable
class Judge(Protocol):
    """Anything that answers JudgeQuestions; θ is built from these attributes."""

    name: str
    model: str
    prompt: str
    temperature: float
    seed: int | None

    def judge(self, question: JudgeQuestion) -> Verdict: ...


@dataclass(frozen=True, slots=True)
class JudgeKey:
    """θ = (prompt hash, seed, model, temperature, tool-output hash)."""

    prompt_hash: str
    seed: int | None
    model: str
    temperature: float
    tool_output_hash: str

    def to_json(self) -> dict[str, Any]:
        return {
            "prompt_hash": self.prompt_hash,
            "seed": self.seed,
            "model": self.model,
            "temperature": self.temperature,
            "tool_output_hash": self.tool_output_hash,
        }

    @property
    def digest(self) -> str:
        return digest(canonical_json(self.to_json()))


def judge_key(judge: Judge, question: JudgeQuestion) -> JudgeKey:
    return JudgeKey(
        prompt_hash=digest(judge.prompt + "\x00" + question.task),
        seed=judge.seed,
        model=judge.model,
        temperature=float(judge.temperature),
        tool_output_hash=question.context_hash,
    )


def validate_verdict(question: JudgeQuestion, verdict: object) -> Verdict:
    """Refuse a verdict that does not answer the question (nothing is written then)."""
    if not isinstance(verdict, Verdict):
        raise MalformedVerdict(f"verdict: expected a Verdict, got {type(verdict).__name__}")
    ids = {c.id for c in question.candidates}
    if question.task == "pick" and verdict.winner not in ids:
        raise MalformedVerdict(
            f"verdict.winner: {verdict.winner!r} is not one of the candidates {sorted(ids)}"
        )
    if question.task == "contradicts" and not isinstance(verdict.contradicts, bool):
        raise MalformedVerdict("verdict.contradicts: a 'contradicts' question needs True/False")
    if question.task == "score":
        seen = {k for k, _ in verdict.scores}
        if seen != ids:
            raise MalformedVerdict(
                f"verdict.scores: must score exactly the candidates {sorted(ids)}, "
                f"got {sorted(seen)}"
            )
        for k, v in verdict.scores:
            if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise MalformedVerdict(f"verdict.scores[{k}]: {v!r} is not a finite weight >= 0")
    return verdict


# -- deterministic judges ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreferNewestJudge:
    """Picks (and scores highest) the candidate recorded last: a rule, not a model."""

    name: str = "prefer-newest"
    model: str = "rule"
    prompt: str = "prefer the most recently recorded candidate"
    temperature: float = 0.0
    seed: int | None = 0

    def judge(self, question: JudgeQuestion) -> Verdict:
        best = max(question.candidates, key=lambda c: (c.recorded_at, c.id))
        return _answer(question, best.id)


@dataclass(frozen=True, slots=True)
class PreferSourceJudge:
    """Picks the candidate whose source comes first in `order` (unknown sources last)."""

    order: tuple[str, ...]
    name: str = "prefer-source"
    model: str = "rule"
    prompt: str = "prefer trusted sources"
    temperature: float = 0.0
    seed: int | None = 0

    def judge(self, question: JudgeQuestion) -> Verdict:
        rank = {s: i for i, s in enumerate(self.order)}
        best = min(
            question.candidates,
            key=lambda c: (rank.get(c.source_id, len(rank)), -_ts(c), c.id),
        )
        return _answer(question, best.id)


@dataclass(frozen=True, slots=True)
class EqualityJudge:
    """Says two values contradict exactly when their canonical JSON differs."""

    name: str = "equality"
    model: str = "rule"
    prompt: str = "values contradict when they differ"
    temperature: float = 0.0
    seed: int | None = 0

    def judge(self, question: JudgeQuestion) -> Verdict:
        *others, last = question.candidates
        if question.task == "contradicts":
            return Verdict(contradicts=any(o.value_json != last.value_json for o in others))
        return _answer(question, last.id)


@dataclass(slots=True)
class StochasticJudge:
    """Votes for the challenger (the last candidate) with probability p, fresh randomness on
    every call: the model of an LLM judge at non-zero temperature with no pinned seed.

    `seed` seeds the judge's own random stream (so an experiment is reproducible), but it is
    not a decoder seed: two calls on the same question may disagree.
    """

    p: float
    stream_seed: int | None = None
    name: str = "stochastic"
    model: str = "stochastic-llm"
    prompt: str = "which of these facts holds?"
    temperature: float = 1.0
    seed: int | None = None
    calls: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.p <= 1.0:
            raise ValueError(f"p: {self.p} is not a probability in [0, 1]")
        self._rng = random.Random(self.stream_seed)

    def judge(self, question: JudgeQuestion) -> Verdict:
        self.calls += 1
        *others, challenger = question.candidates
        if question.task == "contradicts":
            return Verdict(contradicts=any(o.value_json != challenger.value_json for o in others))
        if not others:
            return _answer(question, challenger.id)
        pick = challenger if self._rng.random() < self.p else self._rng.choice(others)
        return _answer(question, pick.id)


def _ts(version: FactVersion) -> float:
    return version.recorded_at.timestamp()


def _answer(question: JudgeQuestion, winner: str) -> Verdict:
    if question.task == "score":
        return Verdict(
            scores=tuple((c.id, 1.0 if c.id == winner else 0.0) for c in question.candidates)
        )
    if question.task == "contradicts":
        return Verdict(contradicts=True)
    return Verdict(winner=winner)


# -- the keyed log -------------------------------------------------------------------------


class JudgeLog:
    """Verdicts keyed by (fact key, θ digest), as recorded in DECISION events."""

    __slots__ = ("_verdicts",)

    def __init__(self) -> None:
        self._verdicts: dict[tuple[FactKey, str], Verdict] = {}

    def __len__(self) -> int:
        return len(self._verdicts)

    def get(self, key: FactKey, theta: JudgeKey) -> Verdict | None:
        return self.verdict_of(key, theta.digest)

    def verdict_of(self, key: FactKey, theta_digest: str) -> Verdict | None:
        """The verdict logged for `key` under the θ with this digest (as a DECISION names it)."""
        return self._verdicts.get((key, theta_digest))

    def put(self, key: FactKey, theta: JudgeKey, verdict: Verdict) -> None:
        self.put_digest(key, theta.digest, verdict)

    def put_digest(self, key: FactKey, theta_digest: str, verdict: Verdict) -> None:
        """First verdict wins: a logged answer is never replaced."""
        self._verdicts.setdefault((key, theta_digest), verdict)

    def copy(self) -> JudgeLog:
        other = type(self).__new__(type(self))
        other._verdicts = dict(self._verdicts)
        return other

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> JudgeLog:
        log = cls()
        for e in sorted(events, key=lambda e: e.seq):
            logged = logged_verdict(e.body) if e.kind is EventKind.DECISION else None
            if logged is not None:
                log.put_digest(e.key, *logged)
        return log


def logged_verdict(body: Mapping[str, Any]) -> tuple[str, Verdict] | None:
    """(θ digest, verdict) a judge DECISION event's body records; None for any other body."""
    if body.get("decision") != "judge":
        return None
    return str(body["theta_digest"]), Verdict.from_json(body["verdict"])


def candidates_of(incumbents: Sequence[FactVersion], claim: FactVersion) -> tuple[FactVersion, ...]:
    """A canonical candidate order: incumbents by (recorded_at, id), the challenger last."""
    return (*sorted(incumbents, key=lambda v: (v.recorded_at, v.id)), claim)
