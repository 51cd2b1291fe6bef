"""Run one statement through z3: the claim is proved when its negation is unsatisfiable."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import z3

from toki.formal.result import ProofResult, Status

__all__ = ["NO_PREMISES", "as_json", "no_premises", "premise_witness", "refute"]

TIMEOUT_MS = 60_000

NO_PREMISES = z3.BoolVal(True)
"""`nontrivial` for a lemma quantified over all values: only the premises' satisfiability."""


def no_premises(m: z3.ModelRef) -> dict[str, Any]:
    """The witness summary of a lemma without a history."""
    return {"premises": "satisfiable; the lemma is quantified over all values"}


def as_json(value: z3.ExprRef) -> Any:
    """A z3 value as plain JSON data (ints, floats for reals, bools)."""
    if z3.is_true(value):
        return True
    if z3.is_false(value):
        return False
    if z3.is_int_value(value):
        return value.as_long()
    if z3.is_rational_value(value):
        frac = Fraction(value.numerator_as_long(), value.denominator_as_long())
        return int(frac) if frac.denominator == 1 else float(frac)
    if z3.is_algebraic_value(value):
        return float(value.approx(10).as_decimal(10).rstrip("?"))
    return str(value)


def refute(
    name: str,
    statement: str,
    premises: Sequence[z3.BoolRef],
    negated_claim: z3.BoolRef,
    *,
    expected: Status,
    bounds: dict[str, Any],
    describe: Callable[[z3.ModelRef], tuple[dict[str, Any], dict[str, Any] | None]] | None = None,
    false_variant_of: str | None = None,
    notes: str = "",
    nontrivial: z3.BoolRef | None = None,
    summarize: Callable[[z3.ModelRef], dict[str, Any]] | None = None,
    witness: Callable[[Sequence[z3.BoolRef]], dict[str, Any]] | None = None,
) -> ProofResult:
    """Check premises ∧ ¬claim: unsat → proved; sat → counterexample (with its model and
    scenario from `describe`); unknown (timeout) → unknown.

    A proved statement is then checked for vacuity: z3 must find a model of premises ∧
    `nontrivial` (a history worth proving something about), summarised by `summarize` as
    the `premise_witness`; without one the status is VACUOUS. Pass `nontrivial` for every
    statement with premises (True stands for "no premises to check"), or `witness`, which
    finds (and checks) the witness itself from the premises (`toki.formal.witness.find`)."""
    solver = z3.Solver()
    solver.set("timeout", TIMEOUT_MS)
    solver.add(*premises)
    solver.add(negated_claim)
    start = time.perf_counter()
    answer = solver.check()
    seconds = time.perf_counter() - start
    model: dict[str, Any] | None = None
    scenario: dict[str, Any] | None = None
    if answer == z3.unsat:
        status = Status.PROVED
    elif answer == z3.sat:
        status = Status.COUNTEREXAMPLE
        m = solver.model()
        if describe is not None:
            model, scenario = describe(m)
        else:
            model = {d.name(): as_json(m[d]) for d in m.decls() if d.arity() == 0}
    else:
        status = Status.UNKNOWN
        notes = (notes + " " if notes else "") + f"z3: {solver.reason_unknown()}"
    found: dict[str, Any] | None = None
    if status is Status.PROVED and witness is not None:
        found = witness(premises)
        seconds += float(found.get("seconds", 0.0))
    elif status is Status.PROVED and nontrivial is not None:
        found, seconds_w = premise_witness(premises, nontrivial, summarize)
        seconds += seconds_w
    if found is not None and not found["exists"]:
        status = Status.VACUOUS
        notes = (notes + " " if notes else "") + "premises admit only trivial histories"
    return ProofResult(
        name=name,
        statement=statement,
        status=status,
        expected=expected,
        bounds=dict(bounds),
        seconds=seconds,
        model=model,
        scenario=scenario,
        false_variant_of=false_variant_of,
        notes=notes,
        premise_witness=found,
    )


def premise_witness(
    premises: Sequence[z3.BoolRef],
    nontrivial: z3.BoolRef,
    summarize: Callable[[z3.ModelRef], dict[str, Any]] | None,
) -> tuple[dict[str, Any], float]:
    """A model of the premises in which the history is non-trivial (or its absence)."""
    solver = z3.Solver()
    solver.set("timeout", TIMEOUT_MS)
    solver.add(*premises)
    solver.add(nontrivial)
    start = time.perf_counter()
    answer = solver.check()
    seconds = time.perf_counter() - start
    out: dict[str, Any] = {"exists": answer == z3.sat, "z3": str(answer)}
    if answer == z3.sat and summarize is not None:
        out.update(summarize(solver.model()))
    return out, seconds
