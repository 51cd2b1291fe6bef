"""Shared driver of the four isolation-soundness statements."""

from __future__ import annotations

import z3

from toki.formal import witness
from toki.formal.encoding import History, Variant
from toki.formal.prover import refute
from toki.formal.result import ProofResult, Status
from toki.isolation import Isolation

K = 3

VARIANT_FIELDS = ("no_conflict", "audit_write", "locked_decision", "audit_from_write")


def isolation(
    name: str,
    operator: str,
    level: Isolation,
    *,
    k: int = K,
    expected: Status = Status.PROVED,
    variant: Variant | None = None,
    false_variant_of: str | None = None,
    notes: str = "",
    extra_premises: tuple[z3.BoolRef, ...] = (),
) -> ProofResult:
    """∀ histories of ≤k claim transactions at `level`: ¬N1 ∧ ¬N2 ∧ ¬N3, with a premise
    witness (a non-trivial history the premises admit) for the proved case."""
    variant = Variant() if variant is None else variant
    h = History(k, level, operator, policy_txn=operator == "RULE", variant=variant)
    statement = (
        f"{operator} at {level.value}: no history of ≤{k} claim transactions admits N1, N2 or N3"
    )
    bounds = h.bounds()
    if variant != Variant():
        bounds["variant"] = {f: getattr(variant, f) for f in VARIANT_FIELDS}
    return refute(
        name,
        statement,
        [*h.axioms, *extra_premises],
        z3.Or(h.n1(), h.n2(), h.n3()),
        expected=expected,
        bounds=bounds,
        describe=h.describe,
        false_variant_of=false_variant_of,
        notes=notes,
        witness=lambda premises: witness.find(h, premises),
    )
