"""The dependency graph of a `History` (Adya's DSG over its committed transactions) and what
is built on it: SERIALIZABLE's axiom, cycles, and truly concurrent conflicting pairs.

Edges, for committed i ≠ j and a resource x (the head, ev[v], the policy row, the claim rows
the policy transaction selects):

- ww j → i: both write x and j commits first (the version order: every level holds long
  write locks, so committed writers of x commit in the order they wrote);
- wr j → i: a read of x by i sees j's write (or a later version);
- rw i → j (anti-dependency): a read of x by i does not see j's write of x.

SERIALIZABLE is PostgreSQL's serializable snapshot isolation: snapshot reads, NOCONFLICT,
and SOME total order of the committed transactions that every edge respects (PL-3: the
graph is acyclic). It is not the commit order: an rw edge may point from a transaction that
commits later to one that commits earlier.
"""

from __future__ import annotations

import itertools

import z3

from toki.formal.terms import Encoded

__all__ = [
    "SER_AXIOM",
    "conflict",
    "cyclic",
    "edges",
    "serial_order_axioms",
    "truly_concurrent",
    "truly_concurrent_pairs",
]


SER_AXIOM = (
    "some serial order: the committed transactions' dependency graph (ww, wr, rw) is acyclic "
    "(Adya PL-3, as PostgreSQL's SSI guarantees), not the commit order"
)

DISTINCT_ROWS = frozenset({"claims"})
"""Resources that stand for one row per writer (the claim rows the policy transaction
selects): read together, never written by two transactions (no ww edge)."""


def edges(h: Encoded) -> dict[tuple[int, int], z3.BoolRef]:
    """(j, i) → "j must precede i in every serial order" (ww, wr or rw, both committed)."""
    live = h.live
    writers = live["writers"]
    conds: dict[tuple[int, int], list[z3.BoolRef]] = {
        p: [] for p in itertools.permutations(h.txns, 2)
    }
    for res, ws in writers.items():
        if res in DISTINCT_ROWS:
            continue
        for j, i in itertools.permutations(ws, 2):
            conds[(j, i)].append(z3.And(ws[j], ws[i], h.end(j) < h.end(i)))
    for i in h.txns:
        for res, view in live["reads"][i]["of"]:
            for j, w in writers[res].items():
                if j == i:
                    continue
                conds[(j, i)].append(z3.And(w, view(j, i)))  # wr
                conds[(i, j)].append(z3.And(w, z3.Not(view(j, i))))  # rw
    return {
        (j, i): z3.And(h.com(j), h.com(i), z3.Or(*c)) if c else z3.BoolVal(False)
        for (j, i), c in conds.items()
    }


def serial_order_axioms(h: Encoded) -> list[z3.BoolRef]:
    """SERIALIZABLE: some order `serial_pos` of the transactions respects every edge."""
    pos = z3.Function(f"serial_pos{h.tag}", z3.IntSort(), z3.IntSort())
    h.serial_pos = pos
    out: list[z3.BoolRef] = [z3.Distinct(*[pos(i) for i in h.txns])] if len(h.txns) > 1 else []
    out += [z3.Implies(e, pos(j) < pos(i)) for (j, i), e in edges(h).items()]
    return out


def cyclic(h: Encoded) -> z3.BoolRef:
    """The committed transactions' dependency graph has a cycle (not serializable)."""
    e = edges(h)
    cycles = []
    for n in range(2, len(h.txns) + 1):
        for cyc in itertools.permutations(h.txns, n):
            if cyc[0] != min(cyc):
                continue
            cycles.append(z3.And(*[e[(cyc[m], cyc[(m + 1) % n])] for m in range(n)]))
    return z3.Or(*cycles) if cycles else z3.BoolVal(False)


def truly_concurrent(h: Encoded, i: int, j: int) -> z3.BoolRef:
    """Each of i and j reads before the other ends: neither ran after the other in effect."""
    return z3.And(h.read(i) < h.end(j), h.read(j) < h.end(i))


def conflict(h: Encoded, i: int, j: int) -> z3.BoolRef:
    """One of i, j writes a resource the other reads or writes (in the live run)."""
    live = h.live
    writers = live["writers"]
    reads = {t: {res for res, _ in live["reads"][t]["of"]} for t in (i, j)}
    parts = []
    for res, ws in writers.items():
        for a, b in ((i, j), (j, i)):
            if a not in ws:
                continue
            other = [ws[b]] if b in ws and res not in DISTINCT_ROWS else []
            if res in reads[b]:
                other.append(z3.BoolVal(True))
            if other:
                parts.append(z3.And(ws[a], z3.Or(*other)))
    return z3.Or(*parts) if parts else z3.BoolVal(False)


def truly_concurrent_pairs(
    h: Encoded, *, both_committed: bool = True
) -> list[tuple[tuple[int, int], z3.BoolRef]]:
    """Pairs of transactions that conflict and are truly concurrent; committed both (or, with
    `both_committed=False`, at least one)."""
    out = []
    for i, j in itertools.combinations(h.txns, 2):
        ended = z3.And(h.com(i), h.com(j)) if both_committed else z3.Or(h.com(i), h.com(j))
        out.append(((i, j), z3.And(ended, truly_concurrent(h, i, j), conflict(h, i, j))))
    return out
