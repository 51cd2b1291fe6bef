"""Pipeline lift: composing rankings lexicographically (RULE's policy preference, then LWW's
(recorded_at, id)) is again a semilattice join, for every preference function π: ℤ → ℤ
(uninterpreted, unbounded). With ids distinct the composed order is total, so the n-ary fold
of the pipeline is the binary fold in any order (checked for n = 5 claims below)."""

from __future__ import annotations

import time
from dataclasses import replace

import z3

from toki.formal.algebra import semilattice_violation
from toki.formal.prover import NO_PREMISES, no_premises, refute
from toki.formal.result import ProofResult, Status

NAME = "lift_pipeline"
N = 5
STATEMENT = (
    "∀ π: ℤ→ℤ: max by (π(src), t, id) is a join; and for n claims with distinct ids every "
    "left fold equals the n-ary maximum"
)

pref = z3.Function("policy_preference", z3.IntSort(), z3.IntSort())


def _composed(a: tuple[z3.ArithRef, ...], b: tuple[z3.ArithRef, ...]) -> tuple[z3.ArithRef, ...]:
    # a = (source, t, id): rank (π(source), t, id)
    ra, rb = (pref(a[0]), a[1], a[2]), (pref(b[0]), b[1], b[2])
    pick = z3.Or(*[x for x in [_gt(ra, rb)]])
    return tuple(z3.If(pick, x, y) for x, y in zip(a, b, strict=True))


def _composed_no_id(
    a: tuple[z3.ArithRef, ...], b: tuple[z3.ArithRef, ...]
) -> tuple[z3.ArithRef, ...]:
    pick = _gt((pref(a[0]), a[1]), (pref(b[0]), b[1]))
    return tuple(z3.If(pick, x, y) for x, y in zip(a, b, strict=True))


def _gt(a: tuple[z3.ArithRef, ...], b: tuple[z3.ArithRef, ...]) -> z3.BoolRef:
    from toki.formal.encoding import lex_gt

    return lex_gt(list(a), list(b))


def _fold_violation(join: object, n: int) -> tuple[list[z3.BoolRef], z3.BoolRef]:
    """The left fold of n symbolic claims is not the n-ary maximum (one order suffices: the
    claims are arbitrary, so every order is a renaming of this one)."""
    xs = [tuple(z3.Int(f"x{i}_{f}") for f in ("src", "t", "id")) for i in range(n)]
    distinct = [z3.Distinct(*[x[2] for x in xs])]
    acc = xs[0]
    for x in xs[1:]:
        acc = join(acc, x)  # type: ignore[operator]

    def rank(x: tuple[z3.ArithRef, ...]) -> tuple[z3.ArithRef, ...]:
        return (pref(x[0]), x[1], x[2])

    is_max = [z3.And(*[z3.Or(_gt(rank(x), rank(y)), x[2] == y[2]) for y in xs]) for x in xs]
    nary = [
        z3.And(m, *[p == q for p, q in zip(acc, x, strict=True)])
        for m, x in zip(is_max, xs, strict=True)
    ]
    return distinct, z3.Not(z3.Or(*nary))


def _run(name: str, join: object, expected: Status, of: str | None, n: int) -> ProofResult:
    start = time.perf_counter()
    # an id names one version: equal ids are equal versions
    a, b, c = (tuple(z3.Int(f"{n}{i}") for i in range(3)) for n in "abc")
    same_id = [
        z3.Implies(x[2] == y[2], z3.And(*[p == q for p, q in zip(x, y, strict=True)]))
        for x, y in ((a, b), (b, c), (a, c))
    ]
    lattice = refute(
        name,
        STATEMENT,
        same_id,
        semilattice_violation(join, 3),  # type: ignore[arg-type]
        expected=expected,
        bounds={"join": "unbounded", "fold_n": n},
        false_variant_of=of,
        nontrivial=NO_PREMISES,
        summarize=no_premises,
    )
    if lattice.status is Status.PROVED:
        premises, diff = _fold_violation(join, n)
        lattice = refute(
            name,
            STATEMENT,
            premises,
            diff,
            expected=expected,
            bounds={"join": "unbounded", "fold_n": n},
            false_variant_of=of,
            nontrivial=NO_PREMISES,
            summarize=no_premises,
        )
    return replace(lattice, seconds=time.perf_counter() - start)


def prove(n: int = N) -> ProofResult:
    return _run(NAME, _composed, Status.PROVED, None, n)


def false_variants(n: int = N) -> list[ProofResult]:
    return [_run(NAME + "@no_id_tiebreak", _composed_no_id, Status.COUNTEREXAMPLE, NAME, n)]
