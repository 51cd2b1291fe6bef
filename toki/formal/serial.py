"""Serial outcomes: every belief a serial execution of a history's committed transactions
can end in (N2 asks whether the live belief is one of them), each with the condition under
which that execution exists."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import z3

from toki.formal.terms import NONE, Encoded, Serial, lex_gt

__all__ = ["serial_beliefs"]


def serial_beliefs(h: Encoded) -> list[Serial]:
    """Every belief a serial execution of the committed transactions can end in, each
    with the condition under which that execution exists.

    LWW: the newest committed claim (max is a join: order-free, proofs/lift_*). EWM: the
    value with the largest summed evidence, ties to the newest (sums commute). AWAIT:
    the first claim stays (any committed claim can be first). RULE with a policy
    change: one fold per order, (k+1)! of them."""
    V = range(h.values)
    C = h.claims
    if h.op == "LWW":
        best = [
            z3.And(
                h.com(j),
                *[z3.Implies(h.com(m), lex_gt(h.stamp(j), h.stamp(m))) for m in C if m != j],
            )
            for j in C
        ]
        belief = [z3.Or(*[z3.And(best[j], h.val(j) == v) for j in C]) for v in V]
        return [(z3.BoolVal(True), belief, None)]
    if h.op == "EWM":
        sums = [
            z3.Sum(*[z3.If(z3.And(h.com(j), h.val(j) == v), h.weight(j), 0) for j in C]) for v in V
        ]
        belief = []
        for v in V:
            wins = [
                z3.Or(sums[v] > sums[u], z3.And(sums[v] == sums[u], _newer(h, v, u)))
                for u in V
                if u != v
            ]
            belief.append(z3.And(sums[v] > 0, *wins))
        return [(z3.BoolVal(True), belief, sums)]
    if h.op == "AWAIT":
        none = z3.Not(z3.Or(*[h.com(j) for j in C]))
        outs: list[Serial] = [(none, [z3.BoolVal(False) for _ in V], None)]
        return outs + [(h.com(j), [h.val(j) == v for v in V], None) for j in C]
    orders = itertools.permutations(h.txns)
    return [(z3.BoolVal(True), _rule_fold(h, order), None) for order in orders]


def _newer(h: Encoded, v: int, u: int) -> z3.BoolRef:
    """v's newest committed evidence is newer than u's (u may have none)."""
    return z3.Or(
        *[
            z3.And(
                h.com(c),
                h.val(c) == v,
                *[
                    z3.Implies(
                        z3.And(h.com(d), h.val(d) == u),
                        lex_gt(h.stamp(c), h.stamp(d)),
                    )
                    for d in h.claims
                    if d != c
                ],
            )
            for c in h.claims
        ]
    )


def _rule_fold(h: Encoded, order: Sequence[int]) -> list[z3.BoolRef]:
    """RULE run serially in `order` (aborted transactions skipped): the head's claim."""
    head: z3.ArithRef = z3.IntVal(NONE)
    pol: z3.BoolRef = z3.BoolVal(False)
    applied: list[int] = []
    for i in order:
        c = h.com(i)
        if i == h.P:
            best: z3.ArithRef = z3.IntVal(NONE)
            for a in applied:
                better = z3.And(
                    h.com(a),
                    z3.Or(best == NONE, lex_gt(h._rank(a, True), h._rank(best, True))),
                )
                best = z3.If(better, z3.IntVal(a), best)
            head = z3.If(z3.And(c, best != NONE), best, head)
            pol = z3.Or(pol, c)
            continue
        take = z3.Or(head == NONE, lex_gt(h._rank(i, pol), h._rank(head, pol)))
        head = z3.If(z3.And(c, take), z3.IntVal(i), head)
        applied.append(i)
    return [z3.And(head != NONE, h.val(head) == v) for v in range(h.values)]
