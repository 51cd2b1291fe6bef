"""The one shared z3 encoding: claims, a bounded transaction history, isolation axioms, the
operators' semantics, the dual-row write, replay, and the anomalies N1–N3.

History model (bounded: k claim transactions on one fact key, plus an optional policy
transaction for RULE). Every transaction runs toki's write path as four events at integer
times: begin s < read r < write w < end e, where end is a commit or an abort. The read is
where the decision's inputs are taken; the write inserts the claim as a current or an audit
row and closes the current rows it beat (the dual-row write); nothing else is written.

Isolation axioms follow Cerone, Bernardi and Gotsman, "A framework for transactional
consistency models with atomic visibility" (CONCUR 2015): a transaction's reads see a set of
committed transactions (visibility) that is contained in the commit order (arbitration,
vis ⊆ ar), and each level constrains that set:

- READ_UNCOMMITTED (Adya PL-1): a read sees every write made before it, committed or not
  (no read locks); writers still hold long write locks (no G0).
- READ_COMMITTED: a read sees exactly the transactions committed before it (a prefix of ar
  at the time of the read). Decisions over the key's current rows (LWW, AWAIT, RULE) are
  locking reads taken with the key's write lock, which is held to commit; so they see every
  writer of the key that committed before the write (PostgreSQL's EvalPlanQual, and the
  simulator's). Plain reads (EWM's evidence totals, RULE's policy) see the prefix at r.
- SNAPSHOT: every read sees the transactions committed before begin (PREFIX on one snapshot),
  and two committed writers of the same key are not concurrent (NOCONFLICT: first committer
  wins).
- SERIALIZABLE: total visibility (TOTALVIS): each transaction sees exactly the transactions
  committed before it; commit order is the serial order.

Operator semantics (each valid-time point is decided separately, as `toki.algebra.allocate`
does; the model is one point that every claim covers): LWW ranks by (recorded_at, id),
EWM by per-value evidence sums (registers read then written: total[v] := read + weight),
AWAIT holds a contradicting claim (PROPOSED), RULE ranks by the policy in force (prefer a
source, then (recorded_at, id)). A claim whose value equals a current row's is never beaten
by it (toki: versions saying what the winner says are not losers).

The belief state is the set of values with a current row (and, for EWM, the totals).
N1: replay (re-running the committed claims through the write path in log order, i.e. commit
order, with verdicts from the keyed log) gives a different belief; N2: the belief is not that
of any serial execution of the committed claims; N3: a committed claim is in neither current,
audit nor held (PROPOSED) rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from toki.isolation import Isolation

__all__ = ["OPERATORS", "History", "Variant", "lex_gt"]

OPERATORS = ("LWW", "EWM", "AWAIT", "RULE")

# The shared sorts and functions: versions are indexed by integers; every attribute of a
# version (its claim) and of the transaction that wrote it is a function of the index.
VERSION = z3.IntSort()
KEY = z3.IntSort()
VALUE = z3.IntSort()
TIME = z3.IntSort()  # valid time and system time are both integer ticks


def lex_gt(a: Sequence[z3.ArithRef], b: Sequence[z3.ArithRef]) -> z3.BoolRef:
    """(a0, a1, ...) > (b0, b1, ...) lexicographically."""
    if not a:
        return z3.BoolVal(False)
    return z3.Or(a[0] > b[0], z3.And(a[0] == b[0], lex_gt(a[1:], b[1:])))


@dataclass(frozen=True, slots=True)
class Variant:
    """Switches for the deliberately false variants (each must yield a counterexample)."""

    no_conflict: bool = True  # SI's first-committer-wins axiom (NOCONFLICT)
    audit_write: bool = True  # dual-row: a closed loser becomes an audit row (not deleted)
    locked_decision: bool = True  # at RC, row decisions are locking reads under the key lock


class History:
    """A bounded history of `k` claim transactions (and, with `policy_txn`, one RULE policy
    change) at `level`, resolved by `operator`. Build once; ask for axioms and anomalies."""

    def __init__(
        self,
        k: int,
        level: Isolation,
        operator: str,
        *,
        values: int = 2,
        policy_txn: bool = False,
        variant: Variant = Variant(),
        tag: str = "",
    ) -> None:
        if operator not in OPERATORS:
            raise ValueError(f"operator: {operator!r} is not one of {OPERATORS}")
        self.k, self.level, self.op, self.values = k, level, operator, values
        self.variant, self.tag = variant, tag
        self.policy = policy_txn
        self.claims = list(range(k))
        self.P = k if policy_txn else None  # the policy transaction's index
        self.txns = list(range(k + (1 if policy_txn else 0)))
        t = tag
        # version attributes (claims): the shared functions
        self.value = z3.Function(f"value{t}", VERSION, VALUE)
        self.weight = z3.Function(f"weight{t}", VERSION, z3.RealSort())
        self.recorded = z3.Function(f"recorded_at{t}", VERSION, TIME)
        self.vid = z3.Function(f"id{t}", VERSION, z3.IntSort())
        self.source = z3.Function(f"source{t}", VERSION, z3.IntSort())
        self.key = z3.Function(f"key{t}", VERSION, KEY)
        self.valid_from = z3.Function(f"valid_from{t}", VERSION, TIME)
        self.valid_to = z3.Function(f"valid_to{t}", VERSION, TIME)
        self.point = z3.Int(f"valid_point{t}")
        # transaction events
        self.begin = z3.Function(f"begin{t}", VERSION, TIME)
        self.read = z3.Function(f"read{t}", VERSION, TIME)
        self.write = z3.Function(f"write{t}", VERSION, TIME)
        self.end = z3.Function(f"end{t}", VERSION, TIME)
        self.committed = z3.Function(f"committed{t}", VERSION, z3.BoolSort())
        self.axioms: list[z3.BoolRef] = []
        self._base_axioms()
        self.live = self._execute(self._plain_view, self._locked_view, "live")
        self.replay = self._execute(self._serial_view, self._serial_view, "replay")
        self._lock_axioms()

    # -- attributes --------------------------------------------------------------------

    def val(self, i: int) -> z3.ArithRef:
        return self.value(i)

    def stamp(self, i: int) -> list[z3.ArithRef]:
        return [self.recorded(i), self.vid(i)]

    def com(self, i: int) -> z3.BoolRef:
        return self.committed(i)

    # -- axioms ------------------------------------------------------------------------

    def _base_axioms(self) -> None:
        a = self.axioms
        for i in self.claims:
            a += [
                self.key(i) == 0,
                self.value(i) >= 0,
                self.value(i) < self.values,
                self.weight(i) > 0,
                self.recorded(i) >= 0,
                self.source(i) >= 0,
                self.source(i) < 2,
                # every claim covers the valid-time point under decision (allocate is pointwise)
                self.valid_from(i) <= self.point,
                self.point < self.valid_to(i),
            ]
        a.append(z3.Distinct(*[self.vid(i) for i in self.claims]))
        events: list[z3.ArithRef] = []
        for i in self.txns:
            s, r, w, e = self.begin(i), self.read(i), self.write(i), self.end(i)
            a += [s >= 0, s < r, r < w, w < e]
            events += [s, r, w, e]
        a.append(z3.Distinct(*events))

    def _lock_axioms(self) -> None:
        """After the live run exists (the policy txn writes the key only sometimes)."""
        a = self.axioms
        # long write locks at every level (no G0): two writers of the key do not overlap
        # between one's write and the other's end
        for i, j in itertools.combinations(self.txns, 2):
            a.append(
                z3.Implies(
                    z3.And(self.writes_key(i), self.writes_key(j)),
                    z3.Or(self.end(i) < self.write(j), self.end(j) < self.write(i)),
                )
            )
        if self.level is Isolation.SNAPSHOT and self.variant.no_conflict:
            for i, j in itertools.combinations(self.txns, 2):
                a.append(
                    z3.Implies(
                        z3.And(self.com(i), self.com(j), self.writes_key(i), self.writes_key(j)),
                        z3.Or(self.end(i) < self.begin(j), self.end(j) < self.begin(i)),
                    )
                )

    def writes_key(self, i: int) -> z3.BoolRef:
        """Claims always write the key (current or audit row); the policy txn only when its
        re-adjudication changes the current value."""
        if i == self.P:
            return self._p_writes_live
        return z3.BoolVal(True)

    # -- visibility (CBG axioms per level) ---------------------------------------------

    def _plain_view(self, j: int, i: int) -> z3.BoolRef:
        lvl = self.level
        if lvl is Isolation.READ_UNCOMMITTED:
            return z3.And(
                self.write(j) < self.read(i), z3.Or(self.com(j), self.read(i) < self.end(j))
            )
        if lvl is Isolation.READ_COMMITTED:
            return z3.And(self.com(j), self.end(j) < self.read(i))
        if lvl is Isolation.SNAPSHOT:
            return z3.And(self.com(j), self.end(j) < self.begin(i))
        return self._serial_view(j, i)

    def _locked_view(self, j: int, i: int) -> z3.BoolRef:
        if self.level is Isolation.READ_COMMITTED and self.variant.locked_decision:
            return z3.And(self.com(j), self.end(j) < self.write(i))
        return self._plain_view(j, i)

    def _serial_view(self, j: int, i: int) -> z3.BoolRef:
        return z3.And(self.com(j), self.end(j) < self.end(i))

    # -- the write path ----------------------------------------------------------------

    def _execute(
        self,
        pv: Callable[[int, int], z3.BoolRef],
        lv: Callable[[int, int], z3.BoolRef],
        run: str,
    ) -> dict[str, Any]:
        """Every transaction's decision from what it saw; the final rows and belief."""
        t = f"{self.tag}_{run}"
        rows = list(self.txns)  # the policy txn's re-adjudication writes a row too
        inscur = {i: z3.Bool(f"inscur{t}_{i}") for i in rows}
        closes = {(i, j): z3.Bool(f"closes{t}_{i}_{j}") for i in rows for j in rows if i != j}
        cons: list[z3.BoolRef] = []
        # the policy txn's row copies the attributes of the claim it promotes
        p_best = z3.Int(f"pbest{t}") if self.P is not None else None

        def rval(j: int) -> z3.ArithRef:
            if j == self.P:
                assert p_best is not None
                return self._pick(p_best, self.value)
            return self.val(j)

        def rrank(j: int, pol: z3.BoolRef) -> list[z3.ArithRef]:
            if j == self.P:
                assert p_best is not None
                best = p_best
                return [self._pick(best, self._rank_part(pol, n)) for n in range(3)]
            return self._rank(j, pol)

        def seen_cur(i: int, j: int) -> z3.BoolRef:
            others = [z3.And(lv(m, i), closes[(m, j)]) for m in rows if m not in (i, j)]
            return z3.And(lv(j, i), inscur[j], z3.Not(z3.Or(*others)) if others else True)

        totals: dict[int, z3.ArithRef] = {}
        if self.op == "EWM":
            totals = {i: z3.Real(f"total{t}_{i}") for i in self.claims}

            def last_in(i: int, j: int, v: z3.ArithRef) -> z3.BoolRef:
                later = [
                    z3.Implies(z3.And(pv(m, i), self.val(m) == v), self.write(m) < self.write(j))
                    for m in self.claims
                    if m not in (i, j)
                ]
                return z3.And(pv(j, i), self.val(j) == v, *later)

            def read_total(i: int, v: z3.ArithRef) -> z3.ArithRef:
                terms = [z3.If(last_in(i, j, v), totals[j], 0) for j in self.claims if j != i]
                return z3.Sum(*terms) if terms else z3.RealVal(0)

            for i in self.claims:
                cons.append(totals[i] == read_total(i, self.val(i)) + self.weight(i))

        for i in self.claims:
            if self.op == "EWM":
                mine = self.val(i)
                wins = []
                for u in range(self.values):
                    tu = read_total(i, z3.IntVal(u))
                    newer = self._newer(i, mine, z3.IntVal(u), pv)
                    wins.append(
                        z3.Or(
                            mine == u,
                            totals[i] > tu,
                            z3.And(totals[i] == tu, newer),
                        )
                    )
                cons.append(inscur[i] == z3.And(*wins))
            else:
                pol = pv(self.P, i) if self.P is not None else z3.BoolVal(False)
                beats = []
                for j in rows:
                    if j == i:
                        continue
                    if self.op == "AWAIT":
                        ok = rval(j) == self.val(i)
                    else:
                        ok = z3.Or(
                            rval(j) == self.val(i), lex_gt(self._rank(i, pol), rrank(j, pol))
                        )
                    beats.append(z3.Implies(seen_cur(i, j), ok))
                cons.append(inscur[i] == z3.And(*beats))
            for j in rows:
                if j != i:
                    closing = z3.And(seen_cur(i, j), inscur[i], rval(j) != self.val(i))
                    cons.append(closes[(i, j)] == (closing if self.op != "AWAIT" else False))
        if self.P is not None:
            P = self.P
            assert p_best is not None
            # re-adjudication under the new policy: the best visible claim under π1 ...
            vis = [c for c in self.claims]
            cons.append(z3.Or(*[p_best == c for c in vis]))
            for c in vis:
                best_c = z3.And(
                    pv(c, P),
                    *[
                        z3.Implies(pv(d, P), lex_gt(self._rank(c, True), self._rank(d, True)))
                        for d in vis
                        if d != c
                    ],
                )
                cons.append(z3.Implies(p_best == c, best_c))
            any_vis = z3.Or(*[pv(c, P) for c in vis])
            # ... is written only when it changes the current value
            writes = z3.And(
                any_vis,
                z3.Or(*[z3.And(seen_cur(P, j), rval(j) != rval(P)) for j in rows if j != P]),
            )
            cons.append(inscur[P] == writes)
            for j in rows:
                if j != P:
                    cons.append(
                        closes[(P, j)] == z3.And(seen_cur(P, j), writes, rval(j) != rval(P))
                    )
            if run == "live":
                self._p_writes_live = writes
        self.axioms += cons
        # final rows and belief
        current, audit, held = {}, {}, {}
        for j in rows:
            closed = z3.Or(*[z3.And(self.com(m), closes[(m, j)]) for m in rows if m != j])
            current[j] = z3.And(self.com(j), inscur[j], z3.Not(closed))
            if j == self.P:
                audit[j] = z3.BoolVal(False)
                held[j] = z3.BoolVal(False)
                continue
            held[j] = (
                z3.And(self.com(j), z3.Not(inscur[j])) if self.op == "AWAIT" else z3.BoolVal(False)
            )
            if self.variant.audit_write:
                audit[j] = z3.And(self.com(j), z3.Not(current[j]), z3.Not(held[j]))
            else:  # a closed loser is deleted; only rejected claims are stored as audit rows
                audit[j] = z3.And(self.com(j), z3.Not(inscur[j]), z3.Not(held[j]))
        belief = [
            z3.Or(*[z3.And(current[j], rval(j) == v) for j in rows]) for v in range(self.values)
        ]
        out: dict[str, Any] = {
            "current": current,
            "audit": audit,
            "held": held,
            "belief": belief,
            "inscur": inscur,
            "pv": pv,
            "lv": lv,
        }
        if self.op == "EWM":
            out["totals"] = [self._final_total(totals, v) for v in range(self.values)]
        if self.P is not None:
            out["policy"] = self.com(self.P)
            out["p_best"] = p_best
        return out

    # set before the live run builds the write-lock axioms that mention it
    _p_writes_live: z3.BoolRef = z3.BoolVal(False)

    def _pick(self, idx: z3.ArithRef, f: Callable[[int], z3.ArithRef]) -> z3.ArithRef:
        expr: z3.ArithRef = f(self.claims[-1])
        for c in reversed(self.claims[:-1]):
            expr = z3.If(idx == c, f(c), expr)
        return expr

    def _rank_part(self, pol: z3.BoolRef, n: int) -> Callable[[int], z3.ArithRef]:
        def part(c: int) -> z3.ArithRef:
            return self._rank(c, pol)[n]

        return part

    def _rank(self, i: int, pol: z3.BoolRef | bool) -> list[z3.ArithRef]:
        """RULE's prefer_source under policy π0 (prefer source 0) or π1 (prefer source 1);
        LWW is the same ranking without the preference (it is a constant)."""
        if self.op == "RULE":
            preferred = z3.If(z3.BoolVal(pol) if isinstance(pol, bool) else pol, 1, 0)
            pref = z3.If(self.source(i) == preferred, 1, 0)
        else:
            pref = z3.IntVal(0)
        return [pref, *self.stamp(i)]

    def _newer(
        self, i: int, v: z3.ArithRef, u: z3.ArithRef, pv: Callable[[int, int], z3.BoolRef]
    ) -> z3.BoolRef:
        """EWM's tie-break: v's newest evidence (in i's view and i itself) is newer than u's."""

        def seen(c: int) -> z3.BoolRef:
            return z3.BoolVal(True) if c == i else pv(c, i)

        return z3.Or(
            *[
                z3.And(
                    seen(c),
                    self.val(c) == v,
                    *[
                        z3.Implies(
                            z3.And(seen(d), self.val(d) == u), lex_gt(self.stamp(c), self.stamp(d))
                        )
                        for d in self.claims
                        if d != c
                    ],
                )
                for c in self.claims
            ]
        )

    def _final_total(self, totals: dict[int, z3.ArithRef], v: int) -> z3.ArithRef:
        """The register total[v] at the end: what its last committed writer wrote."""
        terms = []
        for j in self.claims:
            last = z3.And(
                self.com(j),
                self.val(j) == v,
                *[
                    z3.Implies(z3.And(self.com(m), self.val(m) == v), self.end(m) < self.end(j))
                    for m in self.claims
                    if m != j
                ],
            )
            terms.append(z3.If(last, totals[j], 0))
        return z3.Sum(*terms)

    # -- serial outcomes ---------------------------------------------------------------

    def serial_beliefs(self) -> list[tuple[list[z3.BoolRef], list[z3.ArithRef] | None]]:
        """Every belief a serial execution of the committed transactions can end in.

        LWW and EWM: one (their serial outcome does not depend on the order: max is a join
        and sums commute; proofs/lift_* prove it unbounded). AWAIT: the first claim stays.
        RULE with a policy change: one fold per permutation (k+1)!."""
        V = range(self.values)
        C = self.claims
        if self.op == "LWW":
            best = [
                z3.And(
                    self.com(j),
                    *[
                        z3.Implies(self.com(m), lex_gt(self.stamp(j), self.stamp(m)))
                        for m in C
                        if m != j
                    ],
                )
                for j in C
            ]
            return [([z3.Or(*[z3.And(best[j], self.val(j) == v) for j in C]) for v in V], None)]
        if self.op == "EWM":
            sums = [
                z3.Sum(
                    *[z3.If(z3.And(self.com(j), self.val(j) == v), self.weight(j), 0) for j in C]
                )
                for v in V
            ]
            anyc = z3.Or(*[self.com(j) for j in C])
            belief = []
            for v in V:
                wins = []
                for u in V:
                    if u == v:
                        continue
                    newer = self._newer_committed(v, u)
                    wins.append(z3.Or(sums[v] > sums[u], z3.And(sums[v] == sums[u], newer)))
                belief.append(z3.And(anyc, sums[v] > 0, *wins))
            return [(belief, sums)]
        if self.op == "AWAIT":
            outs: list[tuple[list[z3.BoolRef], list[z3.ArithRef] | None]] = []
            none = [z3.BoolVal(False) for _ in V]
            outs.append(([z3.And(z3.Not(z3.Or(*[self.com(j) for j in C])), b) for b in none], None))
            for j in C:
                outs.append(([z3.And(self.com(j), self.val(j) == v) for v in V], None))
            return outs
        return [(self._rule_fold(order), None) for order in itertools.permutations(self.txns)]

    def _newer_committed(self, v: int, u: int) -> z3.BoolRef:
        return z3.Or(
            *[
                z3.And(
                    self.com(c),
                    self.val(c) == v,
                    *[
                        z3.Implies(
                            z3.And(self.com(d), self.val(d) == u),
                            lex_gt(self.stamp(c), self.stamp(d)),
                        )
                        for d in self.claims
                        if d != c
                    ],
                )
                for c in self.claims
            ]
        )

    def _rule_fold(self, order: Sequence[int]) -> list[z3.BoolRef]:
        """RULE run serially in `order` (aborted transactions skipped): current rows as
        (value, rank under π0, rank under π1) entries."""
        cur: list[tuple[z3.BoolRef, z3.ArithRef, list[z3.ArithRef], list[z3.ArithRef]]] = []
        pol: z3.BoolRef = z3.BoolVal(False)
        applied: list[int] = []
        for i in order:
            c = self.com(i)
            if i == self.P:
                # best applied claim under π1
                best_val: z3.ArithRef = z3.IntVal(-1)
                best_r0: list[z3.ArithRef] = [z3.IntVal(-1)] * 3
                best_r1: list[z3.ArithRef] = [z3.IntVal(-1)] * 3
                have: z3.BoolRef = z3.BoolVal(False)
                for a in applied:
                    r1 = self._rank(a, True)
                    better = z3.And(self.com(a), z3.Or(z3.Not(have), lex_gt(r1, best_r1)))
                    best_val = z3.If(better, self.val(a), best_val)
                    best_r0 = [
                        z3.If(better, x, y)
                        for x, y in zip(self._rank(a, False), best_r0, strict=True)
                    ]
                    best_r1 = [z3.If(better, x, y) for x, y in zip(r1, best_r1, strict=True)]
                    have = z3.Or(have, self.com(a))
                writes = z3.And(c, have, z3.Or(*[z3.And(on, v != best_val) for on, v, _, _ in cur]))
                cur = [
                    (z3.And(on, z3.Not(z3.And(writes, v != best_val))), v, r0, r1)
                    for on, v, r0, r1 in cur
                ]
                cur.append((writes, best_val, best_r0, best_r1))
                pol = z3.Or(pol, c)
                continue
            r0, r1 = self._rank(i, False), self._rank(i, True)
            mine = [z3.If(pol, x, y) for x, y in zip(r1, r0, strict=True)]
            wins = z3.And(
                *[
                    z3.Implies(
                        on,
                        z3.Or(
                            v == self.val(i),
                            lex_gt(mine, [z3.If(pol, x, y) for x, y in zip(q1, q0, strict=True)]),
                        ),
                    )
                    for on, v, q0, q1 in cur
                ]
            )
            ins = z3.And(c, wins)
            cur = [
                (z3.And(on, z3.Not(z3.And(ins, v != self.val(i)))), v, q0, q1)
                for on, v, q0, q1 in cur
            ]
            cur.append((ins, self.val(i), r0, r1))
            applied.append(i)
        return [z3.Or(*[z3.And(on, v == val) for on, v, _, _ in cur]) for val in range(self.values)]

    # -- anomalies ---------------------------------------------------------------------

    @staticmethod
    def _differs(
        a: tuple[list[z3.BoolRef], list[z3.ArithRef] | None],
        b: tuple[list[z3.BoolRef], list[z3.ArithRef] | None],
    ) -> z3.BoolRef:
        parts = [x != y for x, y in zip(a[0], b[0], strict=True)]
        if a[1] is not None and b[1] is not None:
            parts += [x != y for x, y in zip(a[1], b[1], strict=True)]
        return z3.Or(*parts)

    def state(self, run: dict[str, Any]) -> tuple[list[z3.BoolRef], list[z3.ArithRef] | None]:
        return run["belief"], run.get("totals")

    def n1(self) -> z3.BoolRef:
        """Replay inconsistency: replay in log (commit) order differs from the live run."""
        return self._differs(self.state(self.live), self.state(self.replay))

    def n2(self) -> z3.BoolRef:
        """Belief-drift skew: the live belief is no serial execution's belief."""
        live = self.state(self.live)
        return z3.And(*[self._differs(live, s) for s in self.serial_beliefs()])

    def n3(self) -> z3.BoolRef:
        """Audit erasure: a committed claim is in no row (current, audit, held)."""
        lv = self.live
        return z3.Or(
            *[
                z3.And(
                    self.com(j),
                    z3.Not(lv["current"][j]),
                    z3.Not(lv["audit"][j]),
                    z3.Not(lv["held"][j]),
                )
                for j in self.claims
            ]
        )

    def bounds(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "policy_txns": 1 if self.policy else 0,
            "values": self.values,
            "events_per_txn": 4,
            "keys": 2 if self.policy else 1,
            "level": self.level.value,
        }

    # -- counterexamples as data -------------------------------------------------------

    def describe(self, m: z3.ModelRef) -> tuple[dict[str, Any], dict[str, Any]]:
        """(raw model, scenario) for a counterexample: see `to_scenario`."""
        from toki.formal.prover import as_json

        def ev(e: Any) -> Any:
            return as_json(m.eval(e, model_completion=True))

        raw: dict[str, Any] = {}
        for name, f in (
            ("value", self.value),
            ("weight", self.weight),
            ("recorded_at", self.recorded),
            ("id", self.vid),
            ("source", self.source),
            ("valid_from", self.valid_from),
            ("valid_to", self.valid_to),
        ):
            raw[name] = {str(i): ev(f(i)) for i in self.claims}
        for name, f in (
            ("begin", self.begin),
            ("read", self.read),
            ("write", self.write),
            ("end", self.end),
            ("committed", self.committed),
        ):
            raw[name] = {str(i): ev(f(i)) for i in self.txns}
        raw["valid_point"] = ev(self.point)
        return raw, self.to_scenario(m)

    def to_scenario(self, m: z3.ModelRef) -> dict[str, Any]:
        """A counterexample as a small concrete scenario (format: docs/proofs.md)."""
        from toki.formal.prover import as_json

        def ev(e: Any) -> Any:
            return as_json(m.eval(e, model_completion=True))

        def name(i: int) -> str:
            return "P" if i == self.P else f"T{i}"

        claims = [
            {
                "txn": name(i),
                "id": f"v{ev(self.vid(i))}",
                "value": f"V{ev(self.value(i))}",
                "weight": ev(self.weight(i)),
                "recorded_at": ev(self.recorded(i)),
                "source": f"s{ev(self.source(i))}",
                "valid": [ev(self.valid_from(i)), ev(self.valid_to(i))],
            }
            for i in self.claims
        ]
        lv = self.live
        steps: list[tuple[int, dict[str, Any]]] = []
        for i in self.txns:
            sees = sorted(name(j) for j in self.txns if j != i and ev(lv["pv"](j, i)))
            sees_locked = sorted(name(j) for j in self.txns if j != i and ev(lv["lv"](j, i)))
            steps.append((ev(self.begin(i)), {"txn": name(i), "op": "begin"}))
            steps.append((ev(self.read(i)), {"txn": name(i), "op": "read", "sees": sees}))
            steps.append((ev(self.write(i)), {"txn": name(i), "op": "write", "sees": sees_locked}))
            end = "commit" if ev(self.committed(i)) else "abort"
            steps.append((ev(self.end(i)), {"txn": name(i), "op": end}))
        steps.sort(key=lambda s: s[0])
        schedule = [dict(step, t=t) for t, step in steps]

        def belief(run: dict[str, Any]) -> dict[str, Any]:
            out: dict[str, Any] = {
                "current": [f"V{v}" for v in range(self.values) if ev(run["belief"][v])]
            }
            if "totals" in run:
                out["totals"] = {f"V{v}": ev(t) for v, t in enumerate(run["totals"])}
            return out

        rows = {}
        for j in self.claims:
            kind = "none"
            if ev(lv["current"][j]):
                kind = "current"
            elif ev(lv["audit"][j]):
                kind = "audit"
            elif ev(lv["held"][j]):
                kind = "held"
            if ev(self.committed(j)):
                rows[f"v{ev(self.vid(j))}"] = kind
        serial = []
        for b, totals in self.serial_beliefs():
            entry: dict[str, Any] = {"current": [f"V{v}" for v in range(self.values) if ev(b[v])]}
            if totals is not None:
                entry["totals"] = {f"V{v}": ev(t) for v, t in enumerate(totals)}
            if entry not in serial:
                serial.append(entry)
        scenario: dict[str, Any] = {
            "format": "toki-proof-scenario/1",
            "operator": self.op,
            "level": self.level.value,
            "key": "k0",
            "valid_point": ev(self.point),
            "claims": claims,
            "schedule": schedule,
            "rows": rows,
            "final": belief(lv),
            "replay": belief(self.replay),
            "serial": serial,
            "anomalies": {
                "N1": bool(ev(self.n1())),
                "N2": bool(ev(self.n2())),
                "N3": bool(ev(self.n3())),
            },
        }
        if self.P is not None:
            scenario["policy_change"] = {
                "txn": "P",
                "from": {"kind": "prefer_source", "sources": ["s0"]},
                "to": {"kind": "prefer_source", "sources": ["s1"]},
            }
        return scenario
