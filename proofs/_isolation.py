"""Shared driver of the four isolation-soundness statements."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

import z3

from toki.formal import witness
from toki.formal.dsg import SER_AXIOM
from toki.formal.encoding import History, Variant
from toki.formal.prover import refute
from toki.formal.result import ProofResult, Status
from toki.formal.robustness import robustness
from toki.formal.scenario import describe
from toki.isolation import Isolation

K = 3
K_MAX = 5  # a false variant's counterexample is looked for up to this many claims

VARIANT_FIELDS = ("no_conflict", "audit_write", "locked_decision", "audit_from_write")


def about(operators: tuple[str, ...], k: int) -> dict[str, Any]:
    """What `toki prove --json` states beside a bounded statement: the SER axiom, the bound,
    and the unbounded robustness verdict of each operator at each level."""
    return {
        "ser_axiom": SER_AXIOM,
        "k": k,
        "robustness": {op: robustness(op) for op in operators},
    }


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
    witness (an execution the simulator replays, with a truly concurrent conflicting pair)
    for the proved case. A statement k cannot express (vacuous at k: SERIALIZABLE aborts one
    of two concurrent EWM claims, so a witness with two commits needs three claims) or a
    false variant whose counterexample needs more claims (EWM's write skew at snapshot needs
    a third, committed first) is checked at the smallest k' ≤ K_MAX that expresses it; the
    bounds keep `k_asked` and the notes say why."""
    variant = Variant() if variant is None else variant
    args = (name, operator, level)
    result = _one(*args, k, expected, variant, false_variant_of, notes, extra_premises)
    if not result.ok and not extra_premises and result.status is not Status.UNKNOWN:
        for more in range(k + 1, K_MAX + 1):
            bigger = _one(*args, more, expected, variant, false_variant_of, notes, ())
            if bigger.ok:
                note = f"needs {more} claim transactions: with k = {k} it is {result.status.value}"
                bounds = {**bigger.bounds, "k_asked": k}
                return replace(bigger, bounds=bounds, notes=f"{notes} ({note})" if notes else note)
    return result


def _one(
    name: str,
    operator: str,
    level: Isolation,
    k: int,
    expected: Status,
    variant: Variant,
    false_variant_of: str | None,
    notes: str,
    extra_premises: tuple[z3.BoolRef, ...],
) -> ProofResult:
    h = History(k, level, operator, policy_txn=operator == "RULE", variant=variant)
    statement = (
        f"{operator} at {level.value}: no history of ≤{k} claim transactions admits N1, N2 or N3"
    )
    bounds = h.bounds()
    if variant != Variant():
        bounds["variant"] = {f: getattr(variant, f) for f in VARIANT_FIELDS}
    result = refute(
        name,
        statement,
        [*h.axioms, *extra_premises],
        z3.Or(h.n1(), h.n2(), h.n3()),
        expected=expected,
        bounds=bounds,
        describe=partial(describe, h),
        false_variant_of=false_variant_of,
        notes=notes,
        witness=lambda premises: witness.find(h, premises),
    )
    if expected is not Status.PROVED:
        return result  # a false variant: the statement it varies carries the verdicts
    return replace(result, extra=about((operator,), k))
