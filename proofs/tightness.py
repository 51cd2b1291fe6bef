"""Tightness: without the keyed judge log, z3 finds a replay-inconsistent run (a judge that
answers a second call differently). proofs/replay_deterministic_judge.py is the converse:
a deterministic judge needs no log."""

from __future__ import annotations

from toki.formal.judgelog import JudgeRun, LogVariant
from toki.formal.prover import refute
from toki.formal.result import ProofResult, Status

NAME = "tightness"
N = 2


def prove(n: int = N) -> ProofResult:
    r = JudgeRun(n, LogVariant(keyed_log=False))
    return refute(
        NAME,
        "without the keyed log, replay reproduces every decision (expected false: tightness)",
        r.axioms,
        r.n1(),
        expected=Status.COUNTEREXAMPLE,
        bounds=r.bounds(),
        describe=r.describe,
        notes="the counterexample is the tightness witness",
    )


def false_variants(n: int = N) -> list[ProofResult]:
    r = JudgeRun(n, LogVariant(log_before_commit=False))
    return [
        refute(
            NAME + "@log_after_commit",
            "with a keyed log appended after commit, replay reproduces every decision",
            r.axioms,
            r.n1(),
            expected=Status.COUNTEREXAMPLE,
            bounds=r.bounds(),
            describe=r.describe,
            false_variant_of=NAME,
            notes="a crash between commit and the log append loses the verdict",
        )
    ]
