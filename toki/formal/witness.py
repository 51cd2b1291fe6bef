"""Premise witnesses that are executions: a model of a statement's premises with at least one
pair of truly concurrent conflicting transactions (each reads before the other ends; one
writes what the other reads or writes), replayed event for event in the simulator at the
statement's level (`toki.formal.simulate.check`). A model the simulator cannot run (its
store would block or refuse a step, or a field differs) is excluded and z3 asked again.

Both transactions of the pair committed is asked for first; when the premises admit none
(SERIALIZABLE aborts one of two concurrent EWM claims: each reads the evidence the other
writes), a pair with one committed transaction, in a history where at least two commit, is
the witness and `both_committed` says so.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import z3

from toki.formal.dsg import truly_concurrent_pairs
from toki.formal.encoding import History
from toki.formal.scenario import to_scenario
from toki.formal.simulate import check

__all__ = ["TRIES", "find", "replayable", "schedule_line"]

TRIES = 12
TIMEOUT_MS = 60_000


def _schedule_fixed(h: History, m: z3.ModelRef) -> z3.BoolRef:
    """The model's event order and ends, as a formula (to exclude that schedule)."""
    events = []
    for i in h.txns:
        for f in (h.begin, h.read, h.write, h.end):
            events.append((m.eval(f(i), model_completion=True).as_long(), f(i)))
    events.sort(key=lambda e: e[0])
    order = [a[1] < b[1] for a, b in itertools.pairwise(events)]
    ends = [h.com(i) == m.eval(h.com(i), model_completion=True) for i in h.txns]
    return z3.And(*order, *ends)


def replayable(
    h: History, formulas: Sequence[z3.BoolRef], *, tries: int = TRIES
) -> tuple[z3.ModelRef | None, dict[str, Any] | None, list[str]]:
    """A model of `formulas` whose scenario the simulator replays with every field agreeing:
    (model, scenario, why earlier models were rejected), or (None, None, …)."""
    rejected: list[str] = []
    solver = z3.Solver()
    solver.set("timeout", TIMEOUT_MS)
    solver.add(*formulas)
    for _ in range(tries):
        if solver.check() != z3.sat:
            break
        m = solver.model()
        scenario = to_scenario(h, m)
        replayed = check(scenario)
        if replayed["agree"]:
            return m, scenario, rejected
        rejected.append(replayed.get("error") or "; ".join(replayed["mismatches"]))
        solver.add(z3.Not(_schedule_fixed(h, m)))
    return None, None, rejected


def schedule_line(scenario: dict[str, Any]) -> str:
    """The schedule in one line: T0:b T0:r T0:w T0:c (begin, read, write, commit/abort)."""
    return " ".join(f"{s['txn']}:{s['op'][0]}" for s in scenario["schedule"])


def find(h: History, premises: Sequence[z3.BoolRef], *, tries: int = TRIES) -> dict[str, Any]:
    """The premise witness of a bounded statement about `h` (see the module docstring)."""
    start = time.perf_counter()
    rejected: list[str] = []
    for both in (True, False):
        pairs = truly_concurrent_pairs(h, both_committed=both)
        two = z3.AtLeast(*[h.com(i) for i in h.txns], 2)  # never a one-commit history
        goal = [*premises, two, z3.Or(*[c for _, c in pairs])]
        m, scenario, why = replayable(h, goal, tries=tries)
        rejected += why
        if m is None or scenario is None:
            continue

        def name(i: int) -> str:
            return "P" if i == h.P else f"T{i}"

        found = [
            f"{name(i)}-{name(j)}"
            for (i, j), c in pairs
            if z3.is_true(m.eval(c, model_completion=True))
        ]
        return {
            "exists": True,
            "z3": "sat",
            "both_committed": both,
            "truly_concurrent_conflicting_pairs": len(found),
            "pairs": found,
            "committed": sum(z3.is_true(m.eval(h.com(i), model_completion=True)) for i in h.txns),
            "replayed_in_simulator": True,
            "schedule": schedule_line(scenario),
            "rejected_models": rejected,
            "seconds": round(time.perf_counter() - start, 3),
        }
    return {
        "exists": False,
        "z3": "no replayable model",
        "rejected_models": rejected,
        "seconds": round(time.perf_counter() - start, 3),
    }
