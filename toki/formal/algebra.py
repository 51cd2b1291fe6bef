"""Unbounded lemmas about the operators' merge functions (no history, no bound).

LWW's merge is max by (recorded_at, id); RULE's is max by (policy preference, recorded_at,
id); EWM's is the pointwise sum of per-value evidence maps. Stated over all integers (all
reals for weights) and all maps, with universally quantified variables: z3 proves the
negation unsatisfiable.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

from toki.formal.encoding import lex_gt

__all__ = ["Pair", "ewm_merge", "lex_max", "lww_max", "lww_max_no_tiebreak"]

Pair = tuple[z3.ArithRef, ...]


def lex_max(a: Pair, b: Pair) -> Pair:
    """max by the lexicographic order (ties impossible unless a = b)."""
    pick = lex_gt(list(a), list(b))
    return tuple(z3.If(pick, x, y) for x, y in zip(a, b, strict=True))


def lww_max(a: Pair, b: Pair) -> Pair:
    return lex_max(a, b)


def lww_max_no_tiebreak(a: Pair, b: Pair) -> Pair:
    """The false variant: compare recorded_at only; on a tie the newcomer (b) wins."""
    pick = a[0] > b[0]
    return tuple(z3.If(pick, x, y) for x, y in zip(a, b, strict=True))


def ewm_merge(a: z3.ArrayRef, b: z3.ArrayRef) -> z3.ArrayRef:
    """Per-value evidence sums: (a ⊕ b)(v) = a(v) + b(v)."""
    v = z3.Int("v")
    return z3.Lambda([v], a[v] + b[v])


def ewm_overwrite(a: z3.ArrayRef, b: z3.ArrayRef) -> z3.ArrayRef:
    """The false variant: the later writer's totals overwrite (a lost evidence update)."""
    v = z3.Int("v")
    return z3.Lambda([v], z3.If(b[v] != 0, b[v], a[v]))


def semilattice_violation(join: Callable[[Pair, Pair], Pair], width: int) -> z3.BoolRef:
    """∃ a, b, c: join not commutative, associative or idempotent (over all integers)."""
    a = tuple(z3.Int(f"a{i}") for i in range(width))
    b = tuple(z3.Int(f"b{i}") for i in range(width))
    c = tuple(z3.Int(f"c{i}") for i in range(width))

    def ne(x: Pair, y: Pair) -> z3.BoolRef:
        return z3.Or(*[p != q for p, q in zip(x, y, strict=True)])

    return z3.Or(
        ne(join(a, b), join(b, a)),
        ne(join(join(a, b), c), join(a, join(b, c))),
        ne(join(a, a), a),
    )
