"""Provenance soundness: replaying every decision from its provenance annotation (inputs, θ)
and the keyed judge log reproduces the decision (EWM with judge scores, the hardest case)."""

from __future__ import annotations

from toki.formal.judgelog import JudgeRun, LogVariant
from toki.formal.prover import refute
from toki.formal.result import ProofResult, Status

NAME = "provenance_soundness"
N = 4


def _run(name: str, variant: LogVariant, expected: Status, n: int, of: str | None) -> ProofResult:
    r = JudgeRun(n, variant)
    return refute(
        name,
        "∀ decisions d: operator(annotation(d).inputs, log[key(d), θ(d)]) = winner(d)",
        r.axioms,
        r.n1(),
        expected=expected,
        bounds=r.bounds(),
        describe=r.describe,
        false_variant_of=of,
        nontrivial=r.nontrivial(judge_changes=True),
        summarize=r.witness_summary,
    )


def prove(n: int = N) -> ProofResult:
    return _run(NAME, LogVariant(), Status.PROVED, n, None)


def false_variants(n: int = N) -> list[ProofResult]:
    return [
        _run(
            NAME + "@log_keyed_by_key_only",
            LogVariant(key_theta=False),
            Status.COUNTEREXAMPLE,
            n,
            NAME,
        ),
        _run(
            NAME + "@annotation_omits_challenger",
            LogVariant(annotate_all_inputs=False),
            Status.COUNTEREXAMPLE,
            n,
            NAME,
        ),
    ]
