"""The keyed judge log and replay (re-adjudication), for provenance soundness and tightness.

Bounded model: n judge questions (fact key, θ, three candidates). A judge is a function
J(question, call, candidate) → score ≥ 0 of the call number too: a stochastic judge (an LLM at
non-zero temperature, no pinned seed) may answer a second call differently. The decision is
EWM's with a judge: each candidate's score replaces its weight, the value with the highest
score sum wins, ties to the newest candidate. Live: the verdict is stored under (key, θ)
before commit, first verdict wins, and a repeated (key, θ) is answered from the log. Replay:
re-runs each question from its provenance annotation (inputs, θ) reading the log, or (without
the log) asking the judge again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import z3

from toki.formal.encoding import lex_gt

__all__ = ["JudgeRun", "LogVariant"]

KeySort = z3.DeclareSort("FactKey")
ThetaSort = z3.DeclareSort("Theta")
CANDIDATES = 3


@dataclass(frozen=True, slots=True)
class LogVariant:
    """How the run logs and replays; the defaults are toki's write path."""

    keyed_log: bool = True  # replay reads verdicts from the log (False: asks the judge)
    key_theta: bool = True  # the log is keyed by (key, θ) (False: by key only)
    log_before_commit: bool = True  # False: a crash after commit can lose the verdict
    annotate_all_inputs: bool = True  # False: the annotation omits the challenger


class JudgeRun:
    def __init__(self, n: int, variant: LogVariant = LogVariant(), tag: str = "") -> None:
        self.n, self.variant = n, variant
        t = tag
        self.qkey = [z3.Const(f"key{t}_{q}", KeySort) for q in range(n)]
        self.theta = [z3.Const(f"theta{t}_{q}", ThetaSort) for q in range(n)]
        self.judge = z3.Function(
            f"judge{t}", z3.IntSort(), z3.IntSort(), z3.IntSort(), z3.RealSort()
        )
        C = range(CANDIDATES)
        self.value = [[z3.Int(f"val{t}_{q}_{c}") for c in C] for q in range(n)]
        self.stamp = [[z3.Int(f"stamp{t}_{q}_{c}") for c in C] for q in range(n)]
        self.crashed = [z3.Bool(f"crash_before_log{t}_{q}") for q in range(n)]
        self.axioms: list[z3.BoolRef] = []
        for q in range(n):
            self.axioms.append(z3.Distinct(*self.stamp[q]))
            for c in C:
                self.axioms += [
                    self.value[q][c] >= 0,
                    self.value[q][c] < 2,
                    self.judge(q, 0, c) >= 0,
                    self.judge(q, 1, c) >= 0,
                ]
            # θ's tool-output hash covers the candidates: the same θ on the same key means
            # the same question (same candidates)
            for p in range(q):
                same = z3.And(self.qkey[p] == self.qkey[q], self.theta[p] == self.theta[q])
                self.axioms.append(
                    z3.Implies(
                        same,
                        z3.And(
                            *[self.value[p][c] == self.value[q][c] for c in C],
                            *[self.stamp[p][c] == self.stamp[q][c] for c in C],
                        ),
                    )
                )
            if variant.log_before_commit:
                self.axioms.append(z3.Not(self.crashed[q]))
        self.live = [self._decide(q, self._live_scores(q), CANDIDATES) for q in range(n)]
        inputs = CANDIDATES if variant.annotate_all_inputs else CANDIDATES - 1
        self.replayed = [self._decide(q, self._replay_scores(q), inputs) for q in range(n)]

    def _first(self, q: int) -> list[tuple[z3.BoolRef, int]]:
        """For each earlier question p: 'p is the first with q's log key'."""
        out = []
        for p in range(q):
            same = self._same(p, q)
            earlier = [z3.Not(self._same(r, q)) for r in range(p)]
            out.append((z3.And(same, *earlier), p))
        return out

    def _same(self, p: int, q: int) -> z3.BoolRef:
        if self.variant.key_theta:
            return z3.And(self.qkey[p] == self.qkey[q], self.theta[p] == self.theta[q])
        return self.qkey[p] == self.qkey[q]

    def _live_scores(self, q: int) -> list[z3.ArithRef]:
        """Live: the judge is asked once per (key, θ); a repeat reads the live log."""
        scores: list[z3.ArithRef] = []
        for c in range(CANDIDATES):
            s: z3.ArithRef = self.judge(q, 0, c)
            for cond, p in reversed(self._first(q)):
                if self.variant.key_theta:
                    s = z3.If(cond, self.judge(p, 0, c), s)
            scores.append(s)
        return scores

    def _replay_scores(self, q: int) -> list[z3.ArithRef]:
        v = self.variant
        scores: list[z3.ArithRef] = []
        for c in range(CANDIDATES):
            asked: z3.ArithRef = self.judge(q, 1, c)  # asking again: a second call
            if not v.keyed_log:
                scores.append(asked)
                continue
            logged: z3.ArithRef = self._live_scores(q)[c]
            for cond, p in reversed(self._first(q)):
                logged = z3.If(cond, self._live_scores(p)[c], logged)
            # a verdict lost in a crash between commit and the log append is asked again
            scores.append(z3.If(self.crashed[q], asked, logged))
        return scores

    def _decide(self, q: int, scores: list[z3.ArithRef], inputs: int) -> z3.ArithRef:
        """EWM with judge scores over the first `inputs` candidates: the winning value."""
        C = range(inputs)
        sums = [z3.Sum(*[z3.If(self.value[q][c] == v, scores[c], 0) for c in C]) for v in range(2)]

        def newest(v: int, u: int) -> z3.BoolRef:
            return z3.Or(
                *[
                    z3.And(
                        self.value[q][c] == v,
                        *[
                            z3.Implies(
                                self.value[q][d] == u,
                                lex_gt([self.stamp[q][c]], [self.stamp[q][d]]),
                            )
                            for d in C
                            if d != c
                        ],
                    )
                    for c in C
                ]
            )

        one_wins = z3.Or(sums[1] > sums[0], z3.And(sums[1] == sums[0], newest(1, 0)))
        return z3.If(one_wins, 1, 0)

    def n1(self) -> z3.BoolRef:
        """Some decision differs on replay."""
        return z3.Or(*[a != b for a, b in zip(self.live, self.replayed, strict=True)])

    def _contradicts(self, q: int) -> z3.BoolRef:
        return z3.Or(*[self.value[q][c] != self.value[q][0] for c in range(1, CANDIDATES)])

    def _changes(self, q: int) -> z3.BoolRef:
        return z3.Or(*[self.judge(q, 0, c) != self.judge(q, 1, c) for c in range(CANDIDATES)])

    def nontrivial(self, *, judge_changes: bool) -> z3.BoolRef:
        """A history worth a proof: a question whose candidates contradict each other and a
        (key, θ) asked twice; with `judge_changes`, a judge that changes its answer on a
        second call of a contradicting question."""
        parts = [
            z3.Or(*[self._contradicts(q) for q in range(self.n)]),
            z3.Or(*[self._same(p, q) for q in range(self.n) for p in range(q)]),
        ]
        if judge_changes:
            parts.append(
                z3.Or(*[z3.And(self._contradicts(q), self._changes(q)) for q in range(self.n)])
            )
        return z3.And(*parts)

    def witness_summary(self, m: z3.ModelRef) -> dict[str, Any]:
        def ev(e: Any) -> bool:
            return bool(z3.is_true(m.eval(e, model_completion=True)))

        return {
            "contradicting_questions": sum(ev(self._contradicts(q)) for q in range(self.n)),
            "repeated_log_keys": sum(ev(self._same(p, q)) for q in range(self.n) for p in range(q)),
            "judge_changes_answer": sum(ev(self._changes(q)) for q in range(self.n)),
        }

    def bounds(self) -> dict[str, Any]:
        return {"questions": self.n, "candidates": CANDIDATES, "values": 2, "judge_calls": 2}

    def describe(self, m: z3.ModelRef) -> tuple[dict[str, Any], dict[str, Any]]:
        from toki.formal.prover import as_json

        def ev(e: Any) -> Any:
            return as_json(m.eval(e, model_completion=True))

        keys: dict[str, str] = {}
        thetas: dict[str, str] = {}
        questions = []
        for q in range(self.n):
            k = keys.setdefault(str(m.eval(self.qkey[q], model_completion=True)), f"k{len(keys)}")
            th = str(m.eval(self.theta[q], model_completion=True))
            theta = thetas.setdefault(th, f"theta{len(thetas)}")
            questions.append(
                {
                    "question": q,
                    "key": k,
                    "theta": theta,
                    "claims": [
                        {
                            "id": f"q{q}c{c}",
                            "value": f"V{ev(self.value[q][c])}",
                            "recorded_at": ev(self.stamp[q][c]),
                        }
                        for c in range(CANDIDATES)
                    ],
                    "judge_first_call": [ev(self.judge(q, 0, c)) for c in range(CANDIDATES)],
                    "judge_second_call": [ev(self.judge(q, 1, c)) for c in range(CANDIDATES)],
                    "crash_before_log": bool(ev(self.crashed[q])),
                    "live_winner": f"V{ev(self.live[q])}",
                    "replay_winner": f"V{ev(self.replayed[q])}",
                }
            )
        scenario = {
            "format": "toki-proof-scenario/1",
            "operator": "EWM",
            "judge": "scores replace weights; judge_*_call are the scores per claim",
            "keyed_log": self.variant.keyed_log,
            "questions": questions,
            "anomalies": {"N1": bool(ev(self.n1()))},
        }
        return {"questions": questions}, scenario
