"""EWM's merge of evidence (per-value weight sums) is a commutative monoid for all real
weights and all maps value → weight (z3 arrays, unbounded): so folding evidence in any order
and grouping, one claim at a time or n at once, gives the same totals."""

from __future__ import annotations

import z3

from toki.formal.algebra import ewm_merge, ewm_overwrite
from toki.formal.prover import NO_PREMISES, no_premises, refute
from toki.formal.result import ProofResult, Status

NAME = "lift_ewm_monoid"
STATEMENT = "∀ maps a, b, c: ℤ → ℝ: a⊕b = b⊕a, (a⊕b)⊕c = a⊕(b⊕c), a⊕0 = a  (⊕ pointwise +)"


def _violation(merge: object) -> z3.BoolRef:
    m = merge  # a function of two arrays
    a, b, c = (z3.Array(n, z3.IntSort(), z3.RealSort()) for n in "abc")
    zero = z3.K(z3.IntSort(), z3.RealVal(0))
    v = z3.Int("probe")
    f = m  # type: ignore[assignment]
    return z3.Or(
        f(a, b)[v] != f(b, a)[v],  # type: ignore[operator]
        f(f(a, b), c)[v] != f(a, f(b, c))[v],  # type: ignore[operator]
        f(a, zero)[v] != a[v],  # type: ignore[operator]
    )


def prove() -> ProofResult:
    return refute(
        NAME,
        STATEMENT,
        [],
        _violation(ewm_merge),
        expected=Status.PROVED,
        bounds={"unbounded": True},
        nontrivial=NO_PREMISES,
        summarize=no_premises,
    )


def false_variants() -> list[ProofResult]:
    return [
        refute(
            NAME + "@overwrite",
            STATEMENT,
            [],
            _violation(ewm_overwrite),
            expected=Status.COUNTEREXAMPLE,
            bounds={"unbounded": True},
            false_variant_of=NAME,
            notes="merge that overwrites totals (what a lost update does): not commutative",
        )
    ]
