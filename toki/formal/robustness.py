"""Robustness of each operator's transaction programs: is every execution at a level
serializable (its dependency graph acyclic, `toki.formal.dsg`), for ANY number of concurrent
claims?

A static dependency-graph analysis over symbolic transactions, discharged in z3. A symbolic
transaction is one run of an operator's program with every parameter free: the claim's value
(any integer: any number of values), whether it writes the head, whether it writes a row of
its own (audit or held), or, for RULE, the policy transaction. What it reads and writes:

- every program reads the head (a plain read at r, then the conditional update at w);
- EWM claims read every evidence register ev[u] and write ev[own value];
- RULE claims read the policy row; the policy transaction writes it and reads the claim rows
  (the head and every audit row);
- a row of its own is written by no other transaction.

**SNAPSHOT** (Fekete, Liarokapis, O'Neil, O'Neil, Shasha, TODS 2005, Theorem 3.1): every
non-serializable SI execution has two consecutive *vulnerable* anti-dependencies A →rw B →rw C
(A reads an item B writes, and A and B write no common item, so both may commit though
concurrent; C may be A). z3 is asked for three symbolic transactions with that structure;
unsat ⇒ **robust for every number of claims**.

**READ COMMITTED** (long write locks, reads of committed data): ww and wr edges follow commit
order, and so does an anti-dependency from a read made under the write lock the reader keeps
to its commit; a cycle needs an anti-dependency from an *unlocked* read (a plain read, a
predicate read, a conditional update that wrote nothing). z3 is asked for one; unsat ⇒
robust for every number of claims.

Where z3 finds the structure, the verdict comes from the bounded encoding: a history at the
level with a cycle in its dependency graph (k = 2, then 3 claims), replayed event for event in
the simulator, makes it **not robust**; none makes it **unknown**. SERIALIZABLE is robust by
its axiom (SSI aborts what would close a cycle).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache
from typing import Any

import z3

from toki.formal import witness
from toki.formal.dsg import cyclic
from toki.formal.encoding import OPERATORS, History
from toki.isolation import Isolation

__all__ = ["LEVELS", "Sym", "robustness", "verdict"]

LEVELS = (Isolation.READ_COMMITTED, Isolation.SNAPSHOT)
HEAD, EV, POL, ROW = 0, 1, 2, 3  # kinds of item
WITNESS_K = (2, 3)


@dataclass(frozen=True, slots=True)
class Sym:
    """One symbolic transaction of an operator's programs."""

    ident: z3.ArithRef
    policy: z3.BoolRef  # RULE's policy transaction (False for every other operator)
    value: z3.ArithRef
    writes_head: z3.BoolRef
    writes_row: z3.BoolRef

    @staticmethod
    def new(op: str, name: str) -> tuple[Sym, list[z3.BoolRef]]:
        s = Sym(
            z3.Int(f"{name}_id"),
            z3.Bool(f"{name}_policy"),
            z3.Int(f"{name}_value"),
            z3.Bool(f"{name}_writes_head"),
            z3.Bool(f"{name}_writes_row"),
        )
        well_formed = [s.value >= 0]
        if op != "RULE":
            well_formed.append(z3.Not(s.policy))
        return s, well_formed


def reads(op: str, a: Sym, kind: z3.ArithRef, idx: z3.ArithRef) -> z3.BoolRef:
    claim = z3.Not(a.policy)
    return z3.Or(
        kind == HEAD,
        z3.And(kind == EV, z3.BoolVal(op == "EWM"), claim),
        z3.And(kind == POL, z3.BoolVal(op == "RULE"), claim),
        z3.And(kind == ROW, a.policy),
    )


def writes(op: str, b: Sym, kind: z3.ArithRef, idx: z3.ArithRef) -> z3.BoolRef:
    return z3.Or(
        z3.And(kind == HEAD, b.writes_head),
        z3.And(kind == EV, z3.BoolVal(op == "EWM"), z3.Not(b.policy), idx == b.value),
        z3.And(kind == POL, b.policy),
        z3.And(kind == ROW, b.writes_row, idx == b.ident),
    )


def ww(op: str, a: Sym, b: Sym) -> z3.BoolRef:
    """a and b write a common item (rows of their own never are)."""
    return z3.Or(
        z3.And(a.writes_head, b.writes_head),
        z3.And(z3.BoolVal(op == "EWM"), z3.Not(a.policy), z3.Not(b.policy), a.value == b.value),
        z3.And(a.policy, b.policy),
    )


def _rw(op: str, a: Sym, b: Sym, tag: str) -> z3.BoolRef:
    kind, idx = z3.Int(f"kind_{tag}"), z3.Int(f"idx_{tag}")
    return z3.And(a.ident != b.ident, reads(op, a, kind, idx), writes(op, b, kind, idx))


def static_structure(op: str, level: Isolation) -> tuple[str, dict[str, Any] | None, float]:
    """z3 over symbolic transactions: "absent" (robust for every k) or "present" (with the
    symbolic transactions z3 chose)."""
    start = time.perf_counter()
    s = z3.Solver()
    a, wa = Sym.new(op, "A")
    b, wb = Sym.new(op, "B")
    s.add(*wa, *wb)
    if level is Isolation.SNAPSHOT:
        c, wc = Sym.new(op, "C")
        s.add(*wc)
        s.add(_rw(op, a, b, "ab"), z3.Not(ww(op, a, b)), _rw(op, b, c, "bc"), z3.Not(ww(op, b, c)))
        syms = {"A": a, "B": b, "C": c}
    else:
        s.add(_rw(op, a, b, "ab"))  # every read of these programs is unlocked at some point
        syms = {"A": a, "B": b}
    answer = s.check()
    seconds = time.perf_counter() - start
    if answer == z3.unsat:
        return "absent", None, seconds
    m = s.model()

    def show(x: Sym) -> dict[str, Any]:
        def ev(e: z3.ExprRef) -> Any:
            return m.eval(e, model_completion=True)

        return {
            "policy": z3.is_true(ev(x.policy)),
            "value": ev(x.value).as_long(),
            "writes_head": z3.is_true(ev(x.writes_head)),
            "writes_row": z3.is_true(ev(x.writes_row)),
        }

    return "present", {name: show(x) for name, x in syms.items()}, seconds


def verdict(op: str, level: Isolation) -> dict[str, Any]:
    """robust / not robust (with a replayed witness) / unknown, for `op` at `level`."""
    if level is Isolation.SERIALIZABLE:
        h = History(3, level, op, policy_txn=op == "RULE", tag="_robser")
        s = z3.Solver()
        s.add(*h.axioms, cyclic(h))
        bounded = str(s.check())
        return {
            "verdict": "robust" if bounded == "unsat" else "unknown",
            "for_k": "all",
            "why": "the SERIALIZABLE axiom: some serial order of the committed transactions",
            "bounded_k3_cycle": bounded,
        }
    structure, symbolic, seconds = static_structure(op, level)
    out: dict[str, Any] = {"static": structure, "static_seconds": round(seconds, 4)}
    what = (
        "two consecutive vulnerable anti-dependencies (Fekete et al. 2005)"
        if level is Isolation.SNAPSHOT
        else "an anti-dependency from an unlocked read"
    )
    if structure == "absent":
        # the bounded encoding must agree: no cyclic history with k = 3 claims
        h = History(3, level, op, policy_txn=op == "RULE", tag="_robchk")
        s = z3.Solver()
        s.add(*h.axioms, cyclic(h))
        bounded = str(s.check())
        out["bounded_k3_cycle"] = bounded
        if bounded != "unsat":
            out.update(verdict="unknown", why=f"no {what}, yet the bounded encoding has a cycle")
            return out
        out.update(verdict="robust", for_k="all", why=f"no {what} among symbolic transactions")
        return out
    out["symbolic"] = symbolic
    for k in WITNESS_K:
        h = History(k, level, op, policy_txn=op == "RULE", tag=f"_rob{k}")
        _, scenario, _ = witness.replayable(h, [*h.axioms, cyclic(h)])
        if scenario is not None:
            out.update(
                verdict="not robust",
                why=f"{what}; a history with a dependency cycle, replayed in the simulator",
                witness={
                    "k": k,
                    "schedule": witness.schedule_line(scenario),
                    "replayed_in_simulator": True,
                    "scenario": scenario,
                },
            )
            return out
    out.update(verdict="unknown", why=f"{what}, but no cyclic history with k ≤ {WITNESS_K[-1]}")
    return out


@cache
def robustness(op: str) -> dict[str, dict[str, Any]]:
    """The verdict of `op` at every level the analysis decides, and at SERIALIZABLE."""
    if op not in OPERATORS:
        raise ValueError(f"operator: {op!r} is not one of {OPERATORS}")
    return {lvl.value: verdict(op, lvl) for lvl in (*LEVELS, Isolation.SERIALIZABLE)}
