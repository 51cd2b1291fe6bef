"""With a deterministic judge (temperature 0, pinned seed: every call gives the same answer)
replay reproduces every decision even without the keyed log: the log is needed exactly for
non-deterministic judges (the converse of tightness)."""

from __future__ import annotations

import z3

from toki.formal.judgelog import CANDIDATES, JudgeRun, LogVariant
from toki.formal.prover import refute
from toki.formal.result import ProofResult, Status

NAME = "replay_deterministic_judge"
N = 2


def _run(name: str, pinned: bool, expected: Status, n: int, of: str | None) -> ProofResult:
    r = JudgeRun(n, LogVariant(keyed_log=False))
    # deterministic: the answer is a function of the question (key, θ), whatever the call
    same = [r.judge(q, 0, c) == r.judge(q, 1, c) for q in range(n) for c in range(CANDIDATES)]
    same += [
        z3.Implies(
            z3.And(r.qkey[p] == r.qkey[q], r.theta[p] == r.theta[q]),
            r.judge(p, 0, c) == r.judge(q, 0, c),
        )
        for q in range(n)
        for p in range(q)
        for c in range(CANDIDATES)
    ]
    return refute(
        name,
        "judge(q, call 1) = judge(q, call 2) ⇒ replay without the log reproduces every decision",
        [*r.axioms, *(same if pinned else [])],
        r.n1(),
        expected=expected,
        bounds=r.bounds(),
        describe=r.describe,
        false_variant_of=of,
        nontrivial=r.nontrivial(judge_changes=False),
        summarize=r.witness_summary,
    )


def prove(n: int = N) -> ProofResult:
    return _run(NAME, True, Status.PROVED, n, None)


def false_variants(n: int = N) -> list[ProofResult]:
    return [_run(NAME + "@stochastic_judge", False, Status.COUNTEREXAMPLE, n, NAME)]
