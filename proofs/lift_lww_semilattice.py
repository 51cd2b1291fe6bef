"""LWW's merge, max by (recorded_at, id), is a semilattice join over all integers:
commutative, associative, idempotent. Unbounded (universally quantified integers), so any
order and grouping of any number of claims, and any binary fold, gives the n-ary winner."""

from __future__ import annotations

from toki.formal.algebra import lww_max, lww_max_no_tiebreak, semilattice_violation
from toki.formal.prover import NO_PREMISES, no_premises, refute
from toki.formal.result import ProofResult, Status

NAME = "lift_lww_semilattice"
STATEMENT = "∀ a, b, c ∈ ℤ²: a⊔b = b⊔a, (a⊔b)⊔c = a⊔(b⊔c), a⊔a = a  (⊔ = max by (t, id))"


def prove() -> ProofResult:
    return refute(
        NAME,
        STATEMENT,
        [],
        semilattice_violation(lww_max, 2),
        expected=Status.PROVED,
        bounds={"unbounded": True},
        nontrivial=NO_PREMISES,
        summarize=no_premises,
    )


def false_variants() -> list[ProofResult]:
    return [
        refute(
            NAME + "@no_tiebreak",
            STATEMENT,
            [],
            semilattice_violation(lww_max_no_tiebreak, 2),
            expected=Status.COUNTEREXAMPLE,
            bounds={"unbounded": True},
            false_variant_of=NAME,
            notes="LWW ignoring the id tie-break: equal times resolve by arrival order",
        )
    ]
