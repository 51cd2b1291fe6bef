"""The one shared z3 encoding: claims, a bounded transaction history, isolation axioms, the
operators' write path over ONE HEAD ROW PER KEY, the rows each transaction writes, replay,
and the anomalies N1–N3.

History model (bounded: k claim transactions on one fact key, plus an optional policy
transaction for RULE). Every transaction runs the write path as four events at integer
times, begin s < read r < write w < end e (a commit or an abort):

- at r it reads, with a plain read, the key's head row (and EWM's per-value evidence
  registers, RULE's policy row; the policy transaction reads the claims);
- at w it writes: the head row with ONE CONDITIONAL UPDATE (`UPDATE head SET … WHERE …`,
  which waits for the head's write lock and re-checks its predicate on the newest committed
  head: PostgreSQL's EvalPlanQual at read committed), EWM's evidence register of its own
  value, RULE's policy row, and the audit row of whatever it displaced from the head (or of
  itself, when it did not take the head); an AWAIT claim that may not take the head writes a
  held (PROPOSED) row instead. Aborted transactions leave nothing.

Resources and their writers: `head` (the claim holding it), `ev[v]` for each value v (EWM:
(total, newest evidence stamp)), `pol` (RULE's policy). Every level holds long write locks:
two writers of a resource do not overlap between write and end, and a conditional update
waits for the head's lock (its w is after the holder's end).

Isolation axioms follow Cerone, Bernardi and Gotsman (CONCUR 2015); the set of transactions a
read of i sees, per level (plain read at r; the conditional update at w):

- READ_UNCOMMITTED: plain reads see every write made before r that had not been rolled back
  (dirty); the conditional update sees the committed head at w (the simulator's PL-1: long
  write locks, the update re-checked at write time).
- READ_COMMITTED: plain reads see the transactions committed before r; the update those
  committed before w.
- SNAPSHOT: both see the transactions committed before s (one snapshot) and two committed
  writers of one resource are not concurrent (NOCONFLICT, first committer wins).
- SERIALIZABLE: what PostgreSQL's serializable snapshot isolation guarantees: snapshot
  isolation's reads and NOCONFLICT, and SOME total order of the committed transactions
  explains every read (their dependency graph is acyclic, Adya's PL-3;
  `toki.formal.dsg`). That order need not be the commit order: replay, which re-runs the
  log in commit order, may decide otherwise (N1).

Operators (one valid-time point, decided separately as `toki.algebra.allocate` does): LWW
takes the head iff it is empty or its (recorded_at, id) is smaller; AWAIT holds a claim whose
value contradicts the head (read at r, re-checked at w), else takes the head; EWM adds its
weight to ev[value] (read at r, written at w) and takes the head iff that value now has the
largest total (ties: newest evidence) and the head says something else; RULE takes the head
iff it ranks higher under the policy it read (prefer a source, then (recorded_at, id)); the
policy transaction switches the policy and re-adjudicates: among the claims it reads it picks
the best under the new policy and, if that is not the head's claim, puts it in the head.

Belief: the head's value (and EWM's totals). N1: replay (the committed transactions run
serially in commit order) ends in another belief; N2: the belief is no serial execution's;
N3: a committed claim is in no row written: not the head's claim, no audit row written for
it by a committed transaction, not held.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from toki.formal.terms import NONE, Serial, Step, lex_gt
from toki.isolation import Isolation

__all__ = ["OPERATORS", "History", "Variant", "lex_gt"]

OPERATORS = ("LWW", "EWM", "AWAIT", "RULE")

VERSION = z3.IntSort()
TIME = z3.IntSort()  # valid time and system time are both integer ticks
SNAPSHOT_READS = (Isolation.SNAPSHOT, Isolation.SERIALIZABLE)

View = Callable[[int, int], z3.BoolRef]



@dataclass(frozen=True, slots=True)
class Variant:
    """Switches for the deliberately false variants (each must yield a counterexample)."""

    no_conflict: bool = True  # SI's first-committer-wins axiom (NOCONFLICT)
    audit_write: bool = True  # the displaced head claim gets an audit row (not deleted)
    locked_decision: bool = True  # the head update is conditional, re-checked at w
    audit_from_write: bool = True  # the audit row names the head seen at w (False: at r)


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
        if k < 1:
            raise ValueError(f"k: {k} (need at least one claim transaction)")
        self.k, self.level, self.op, self.values = k, level, operator, values
        self.variant, self.tag = variant, tag
        self.policy = policy_txn
        self.claims = list(range(k))
        self.P = k if policy_txn else None
        self.txns = list(range(k + (1 if policy_txn else 0)))
        t = tag
        self.value = z3.Function(f"value{t}", VERSION, z3.IntSort())
        self.weight = z3.Function(f"weight{t}", VERSION, z3.RealSort())
        self.recorded = z3.Function(f"recorded_at{t}", VERSION, TIME)
        self.vid = z3.Function(f"id{t}", VERSION, z3.IntSort())
        self.source = z3.Function(f"source{t}", VERSION, z3.IntSort())
        self.valid_from = z3.Function(f"valid_from{t}", VERSION, TIME)
        self.valid_to = z3.Function(f"valid_to{t}", VERSION, TIME)
        self.point = z3.Int(f"valid_point{t}")
        self.begin = z3.Function(f"begin{t}", VERSION, TIME)
        self.read = z3.Function(f"read{t}", VERSION, TIME)
        self.write = z3.Function(f"write{t}", VERSION, TIME)
        self.end = z3.Function(f"end{t}", VERSION, TIME)
        self.committed = z3.Function(f"committed{t}", VERSION, z3.BoolSort())
        self.axioms: list[z3.BoolRef] = []
        self.serial_pos: z3.FuncDeclRef | None = None  # SERIALIZABLE's order (dsg.py)
        self._base_axioms()
        self.live = self._run(self._plain_view, self._locked_view, "live", dirty=True)
        self.replay = self._run(self._serial_view, self._serial_view, "replay", dirty=False)
        self._lock_axioms()
        if level is Isolation.SERIALIZABLE:
            from toki.formal.dsg import serial_order_axioms

            self.axioms += serial_order_axioms(self)

    # -- attributes --------------------------------------------------------------------

    def val(self, i: int | z3.ArithRef) -> z3.ArithRef:
        return self.value(i)

    def stamp(self, i: int | z3.ArithRef) -> list[z3.ArithRef]:
        return [self.recorded(i), self.vid(i)]

    def com(self, i: int) -> z3.BoolRef:
        return self.committed(i)

    def overlap(self, i: int, j: int) -> z3.BoolRef:
        """i and j run concurrently (each begins before the other ends)."""
        return z3.And(self.begin(i) < self.end(j), self.begin(j) < self.end(i))

    # -- axioms ------------------------------------------------------------------------

    def _base_axioms(self) -> None:
        a = self.axioms
        for i in self.claims:
            a += [
                self.value(i) >= 0,
                self.value(i) < self.values,
                self.weight(i) > 0,
                self.recorded(i) >= 0,
                self.source(i) >= 0,
                self.source(i) < 2,
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

    def _resources(self, st: dict[int, Step]) -> list[dict[int, z3.BoolRef]]:
        """The writers of each resource: the head, ev[v] (EWM), the policy row (RULE)."""
        out = [{i: st[i].head for i in self.txns}]
        if self.op == "EWM":
            out += [{i: st[i].ev[v] for i in self.claims} for v in range(self.values)]
        if self.P is not None:
            out.append({i: st[i].pol for i in self.txns})
        return out

    def _writers(self, st: dict[int, Step]) -> dict[Any, dict[int, z3.BoolRef]]:
        """Each resource a read can name, with its writers: the head, ev[v], the policy
        row, and "claims" (the rows the policy transaction selects: every claim writes the
        head or an audit row)."""
        out: dict[Any, dict[int, z3.BoolRef]] = {"head": {i: st[i].head for i in self.txns}}
        for v in range(self.values):
            out[("ev", v)] = {i: st[i].ev[v] for i in self.claims}
        if self.P is not None:
            out["pol"] = {i: st[i].pol for i in self.txns}
            out["claims"] = {i: z3.BoolVal(True) for i in self.claims}
        return out

    def _lock_axioms(self) -> None:
        st: dict[int, Step] = self.live["steps"]
        a = self.axioms
        for writers in self._resources(st):
            for i, j in itertools.permutations(writers, 2):
                # long write locks: a write (a matching conditional update) waits for the
                # holder's end, so it takes effect outside every other writer's [w, e]
                a.append(
                    z3.Implies(
                        z3.And(writers[i], writers[j]),
                        z3.Or(self.write(i) < self.write(j), self.end(j) < self.write(i)),
                    )
                )
            if self.level in SNAPSHOT_READS and self.variant.no_conflict:
                for i, j in itertools.combinations(writers, 2):
                    a.append(
                        z3.Implies(
                            z3.And(self.com(i), self.com(j), writers[i], writers[j]),
                            z3.Not(self.overlap(i, j)),
                        )
                    )

    # -- visibility (CBG axioms per level) ---------------------------------------------

    def _plain_view(self, j: int, i: int) -> z3.BoolRef:
        lvl = self.level
        if lvl is Isolation.READ_UNCOMMITTED:
            return z3.And(
                self.write(j) < self.read(i), z3.Or(self.com(j), self.read(i) < self.end(j))
            )
        if lvl is Isolation.READ_COMMITTED:
            return z3.And(self.com(j), self.end(j) < self.read(i))
        # SNAPSHOT and SERIALIZABLE (SSI reads its snapshot; the serial order is an axiom)
        return z3.And(self.com(j), self.end(j) < self.begin(i))

    def _locked_view(self, j: int, i: int) -> z3.BoolRef:
        """What the head's conditional update at w evaluates its predicate on: the newest
        head (dirty at RU); a matching row held by another writer makes it wait, so it takes
        effect only once no writer holds the head (`_lock_axioms`), and a row that does not
        match is skipped without waiting (PostgreSQL; the simulator)."""
        if self.level is Isolation.READ_UNCOMMITTED:
            return z3.And(
                self.write(j) < self.write(i), z3.Or(self.com(j), self.write(i) < self.end(j))
            )
        if self.level is Isolation.READ_COMMITTED:
            return z3.And(self.com(j), self.end(j) < self.write(i))
        return self._plain_view(j, i)

    def _serial_view(self, j: int, i: int) -> z3.BoolRef:
        """Replay's view: the log re-run serially in commit order."""
        return z3.And(self.com(j), self.end(j) < self.end(i))

    # -- reading a resource ------------------------------------------------------------

    def _last(
        self, i: int, writers: dict[int, z3.BoolRef], view: View, dirty: bool
    ) -> list[tuple[int, z3.BoolRef]]:
        """(j, "j is the last writer of the resource that i sees") for every candidate j.
        Dirty views order writers by write time, committed ones by commit time (the same
        order for committed writers under long write locks)."""
        order = self.write if dirty else self.end
        seen = {j: z3.And(view(j, i), w) for j, w in writers.items() if j != i}
        return [
            (
                j,
                z3.And(s, *[z3.Implies(seen[m], order(m) < order(j)) for m in seen if m != j]),
            )
            for j, s in seen.items()
        ]

    @staticmethod
    def _pick(cases: list[tuple[int, z3.BoolRef]], f: Callable[[int], Any], default: Any) -> Any:
        expr = default
        for j, cond in reversed(cases):
            expr = z3.If(cond, f(j), expr)
        return expr

    # -- the write path ----------------------------------------------------------------

    def _rank(self, i: int | z3.ArithRef, pol: z3.BoolRef | bool) -> list[z3.ArithRef]:
        """RULE's prefer_source under policy π0 (prefer s0) or π1 (prefer s1), then
        (recorded_at, id); LWW is the same ranking without the preference."""
        if self.op == "RULE":
            polb = z3.BoolVal(pol) if isinstance(pol, bool) else pol
            pref = z3.If(self.source(i) == z3.If(polb, 1, 0), 1, 0)
            return [pref, *self.stamp(i)]
        return self.stamp(i)

    def _run(self, pv: View, lv: View, run: str, *, dirty: bool) -> dict[str, Any]:
        """Every transaction's writes from what it read, then the final rows and belief."""
        t = f"{self.tag}_{run}"
        V = range(self.values)
        # each transaction's writes are named constants, defined by equations below, so
        # that reads (which mention other transactions' writes) stay small terms
        st: dict[int, Step] = {}
        for i in self.txns:
            st[i] = Step(
                head=z3.Bool(f"wh{t}_{i}"),
                holder=z3.Int(f"hw{t}_{i}"),
                audit=z3.Int(f"aud{t}_{i}"),
                held=z3.Bool(f"held{t}_{i}"),
                ev={v: z3.Bool(f"wev{t}_{i}_{v}") for v in V},
                total=z3.Real(f"tot{t}_{i}"),
                newest=(z3.Int(f"newr{t}_{i}"), z3.Int(f"newi{t}_{i}")),
                pol=z3.BoolVal(i == self.P),
            )
        cons: list[z3.BoolRef] = []
        head_w = {i: st[i].head for i in self.txns}
        # dirty plain reads (RU) take the last writer by write time; committed reads the
        # last by commit time
        dirty = dirty and self.level is Isolation.READ_UNCOMMITTED

        def holder(i: int, view: View, dirty_read: bool) -> z3.ArithRef:
            cases = self._last(i, head_w, view, dirty_read)
            return self._pick(cases, lambda j: st[j].holder, z3.IntVal(NONE))

        reads: dict[int, dict[str, Any]] = {}
        for i in self.txns:
            hp = holder(i, pv, dirty)
            hl = holder(i, lv, dirty)
            h = hl if self.variant.locked_decision else hp
            # the audit row names the head the update saw; a blind write saw only the read
            gone = hl if self.variant.audit_from_write and self.variant.locked_decision else hp
            s = st[i]
            reads[i] = {"head_read": hp, "head_write": hl}
            # every read statement, as (resource, view), for the dependency graph
            of: list[tuple[Any, View]] = [("head", pv), ("head", lv)]
            reads[i]["of"] = of
            if i == self.P:
                # the policy transaction: reads the claims, picks the best under π1
                best: z3.ArithRef = z3.IntVal(NONE)
                for c in self.claims:
                    better = z3.And(
                        pv(c, i),
                        z3.Or(best == NONE, lex_gt(self._rank(c, True), self._rank(best, True))),
                    )
                    best = z3.If(better, z3.IntVal(c), best)
                pb = z3.Int(f"pbest{t}")
                cons.append(pb == best)
                take = z3.And(pb != NONE, pb != h)
                reads[i]["update"] = pb != NONE
                cons += [
                    s.head == take,
                    s.holder == pb,
                    s.held == False,  # noqa: E712 (a z3 term)
                    s.audit == z3.If(z3.And(take, self.variant.audit_write), gone, NONE),
                    *[s.ev[v] == False for v in V],  # noqa: E712
                    s.total == 0,
                    s.newest[0] == NONE,
                    s.newest[1] == NONE,
                ]
                reads[i]["best"] = pb
                of.append(("claims", pv))
                continue
            mine = self.val(i)
            held: z3.BoolRef = z3.BoolVal(False)
            ev_w = {v: z3.BoolVal(False) for v in V}
            total: z3.ArithRef = z3.RealVal(0)
            newest: tuple[z3.ArithRef, z3.ArithRef] = (z3.IntVal(NONE), z3.IntVal(NONE))
            if self.op == "LWW":
                take = z3.Or(h == NONE, lex_gt(self.stamp(i), self.stamp(h)))
                reads[i]["update"] = z3.BoolVal(self.variant.locked_decision)
            elif self.op == "RULE":
                pol = pv(self.P, i) if self.P is not None else z3.BoolVal(False)
                reads[i]["policy"] = pol
                if self.P is not None:
                    of.append(("pol", pv))
                take = z3.Or(h == NONE, lex_gt(self._rank(i, pol), self._rank(h, pol)))
                reads[i]["update"] = z3.BoolVal(self.variant.locked_decision)
            elif self.op == "AWAIT":
                refused = z3.And(hp != NONE, self.val(hp) != mine)
                take = z3.And(z3.Not(refused), z3.Or(h == NONE, self.val(h) == mine))
                reads[i]["update"] = z3.Not(refused)
                held = z3.Not(take)
            else:  # EWM: registers ev[v] = (total, newest stamp), plain reads at r
                tot: dict[int, z3.ArithRef] = {}
                new: dict[int, tuple[z3.ArithRef, z3.ArithRef]] = {}
                for v in V:
                    cases = self._last(i, {j: st[j].ev[v] for j in self.claims}, pv, dirty)
                    tot[v] = self._pick(cases, lambda j: st[j].total, z3.RealVal(0))
                    new[v] = (
                        self._pick(cases, lambda j: st[j].newest[0], z3.IntVal(NONE)),
                        self._pick(cases, lambda j: st[j].newest[1], z3.IntVal(NONE)),
                    )
                reads[i]["totals"] = tot
                of += [(("ev", v), pv) for v in V]
                my_t = self._by_value(mine, tot) + self.weight(i)
                my_n0, my_n1 = (
                    self._by_value(mine, {v: new[v][0] for v in V}),
                    self._by_value(mine, {v: new[v][1] for v in V}),
                )
                newer_self = lex_gt(self.stamp(i), [my_n0, my_n1])
                total = my_t
                newest = (
                    z3.If(newer_self, self.recorded(i), my_n0),
                    z3.If(newer_self, self.vid(i), my_n1),
                )
                ev_w = {v: mine == v for v in V}
                wins = z3.And(
                    *[
                        z3.Or(
                            mine == u,
                            my_t > tot[u],
                            z3.And(my_t == tot[u], lex_gt(list(newest), list(new[u]))),
                        )
                        for u in V
                    ]
                )
                take = z3.And(wins, z3.Or(h == NONE, self.val(h) != mine))
                reads[i]["update"] = wins
            displaced = z3.If(self.variant.audit_write, gone, z3.IntVal(NONE))
            cons += [
                s.head == take,
                s.holder == i,
                s.held == held,
                s.audit == z3.If(take, displaced, z3.If(held, z3.IntVal(NONE), z3.IntVal(i))),
                *[s.ev[v] == ev_w[v] for v in V],
                s.total == total,
                s.newest[0] == newest[0],
                s.newest[1] == newest[1],
            ]
        self.axioms += cons
        # the final rows: what the last committed writer of each resource wrote
        final = self._pick(self._last_committed(head_w), lambda j: st[j].holder, NONE)
        fh = z3.Int(f"final_head{t}")
        self.axioms.append(fh == final)
        audited = {
            j: z3.Or(*[z3.And(self.com(i), st[i].audit == j) for i in self.txns])
            for j in self.claims
        }
        held_rows = {j: z3.And(self.com(j), st[j].held) for j in self.claims}
        belief = [z3.And(fh != NONE, self.val(fh) == v) for v in V]
        out: dict[str, Any] = {
            "steps": st,
            "reads": reads,
            "writers": self._writers(st),
            "head": fh,
            "audited": audited,
            "held": held_rows,
            "belief": belief,
            "pv": pv,
            "lv": lv,
        }
        if self.op == "EWM":
            out["totals"] = [
                self._pick(
                    self._last_committed({j: st[j].ev[v] for j in self.claims}),
                    lambda j: st[j].total,
                    z3.RealVal(0),
                )
                for v in V
            ]
        return out

    def _by_value(self, v: z3.ArithRef, table: dict[int, z3.ArithRef]) -> z3.ArithRef:
        expr = table[self.values - 1]
        for u in reversed(range(self.values - 1)):
            expr = z3.If(v == u, table[u], expr)
        return expr

    def _last_committed(self, writers: dict[int, z3.BoolRef]) -> list[tuple[int, z3.BoolRef]]:
        cw = {j: z3.And(self.com(j), w) for j, w in writers.items()}
        return [
            (j, z3.And(c, *[z3.Implies(cw[m], self.end(m) < self.end(j)) for m in cw if m != j]))
            for j, c in cw.items()
        ]

    # -- serial outcomes (toki/formal/serial.py) -------------------------------------

    def serial_beliefs(self) -> list[Serial]:
        """Every belief a serial execution of the committed transactions can end in."""
        from toki.formal.serial import serial_beliefs

        return serial_beliefs(self)

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
        return z3.And(
            *[z3.Implies(g, self._differs(live, (b, t))) for g, b, t in self.serial_beliefs()]
        )

    def in_rows(self, j: int) -> z3.BoolRef:
        """Committed claim j is in a row the live run wrote: the head, an audit row, held."""
        lv = self.live
        return z3.Or(lv["head"] == j, lv["audited"][j], lv["held"][j])

    def n3(self) -> z3.BoolRef:
        """Audit erasure: a committed claim is in no row (head, audit, held)."""
        return z3.Or(*[z3.And(self.com(j), z3.Not(self.in_rows(j))) for j in self.claims])

    def bounds(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "policy_txns": 1 if self.policy else 0,
            "values": self.values,
            "events_per_txn": 4,
            "head_rows_per_key": 1,
            "level": self.level.value,
        }
