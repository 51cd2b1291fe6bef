"""Two-way agreement on one concrete workload: z3 with the claims pinned, and DPOR run to
completion, must give the same set of anomaly sets.

A workload is a `Spec`: concrete claims (value, weight, recorded_at, id, source), whether
each transaction commits, an operator and a level. z3 pins every claim attribute and every
end, and asks, for each subset S of {N1, N2, N3}, for a history with exactly S; each model it
finds is replayed in the simulator event for event and every field z3 chose (what each read
saw, whether the conditional update ran and the head it saw, what each write did, the
anomalies) must agree. DPOR explores every schedule of the same transactions; the runs in
which every transaction ends as the workload says (the store refused none) give its set.

z3 → simulator: a z3 set with no replayable model (a few schedules are tried) is reported;
simulator → z3: a DPOR set z3 finds unsatisfiable is reported. Either is a disagreement.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Any

import z3

from toki.formal import witness
from toki.formal.dsg import DISTINCT_ROWS
from toki.formal.encoding import History
from toki.formal.simulate import Spec, anomalies, program_of
from toki.sim.dpor import DPOR
from toki.sim.explore import Stats

__all__ = ["ANOMALIES", "compare", "pinned", "z3_sets"]

ANOMALIES = ("N1", "N2", "N3")
SUBSETS = [
    frozenset(c) for n in range(len(ANOMALIES) + 1) for c in itertools.combinations(ANOMALIES, n)
]


def history(spec: Spec, tag: str = "") -> History:
    claims = [t for t in spec.txns if t.claim is not None]
    return History(
        len(claims),
        spec.level,
        spec.operator,
        values=spec.values,
        policy_txn=len(claims) < len(spec.txns),
        tag=tag,
    )


def pinned(h: History, spec: Spec) -> list[z3.BoolRef]:
    """Every claim attribute and every transaction's end, as the workload says."""
    out: list[z3.BoolRef] = []
    for i, t in enumerate(spec.txns):
        out.append(h.com(i) == t.commit)
        c = t.claim
        if c is None:
            continue
        out += [
            h.value(i) == c.value,
            h.weight(i) == z3.Q(c.weight.numerator, c.weight.denominator),
            h.recorded(i) == c.recorded,
            h.vid(i) == c.id,
            h.source(i) == c.source,
        ]
    return out


def _exactly(h: History, s: frozenset[str]) -> z3.BoolRef:
    terms = {"N1": h.n1(), "N2": h.n2(), "N3": h.n3()}
    return z3.And(*[terms[a] if a in s else z3.Not(terms[a]) for a in ANOMALIES])


def z3_sets(spec: Spec, *, tries: int = 3) -> dict[frozenset[str], dict[str, Any]]:
    """For each anomaly set z3 admits: whether a model of it replayed with every field
    agreeing, and why the others did not."""
    h = history(spec)
    base = [*h.axioms, *pinned(h, spec)]
    out: dict[frozenset[str], dict[str, Any]] = {}
    for s in SUBSETS:
        solver = z3.Solver()
        solver.add(*base, _exactly(h, s))
        if solver.check() != z3.sat:
            continue
        _, scenario, rejected = witness.replayable(h, [*base, _exactly(h, s)], tries=tries)
        out[s] = {"replayed": scenario is not None, "rejected": rejected}
    return out


def sim_sets(spec: Spec, *, budget: int) -> tuple[set[frozenset[str]], int, bool, int]:
    """(anomaly sets of the runs that end as the workload says, runs, finished, runs in which
    the store refused a transaction)."""
    ends = {t.name: t.commit for t in spec.txns}
    found: set[frozenset[str]] = set()
    runs = refused = 0
    for run in DPOR().runs(program_of(spec), Stats()):
        runs += 1
        out = anomalies(spec, dict(run.state), run.history)
        committed = set(out.commit_order)
        if {n for n, c in ends.items() if c} != committed:
            refused += 1
        else:
            found.add(frozenset(a for a in ANOMALIES if out.anomalies[a]))
        if runs >= budget:
            return found, runs, False, refused
    return found, runs, True, refused


REFUSED = "the simulator disagrees"
"""The store refused (aborted) a transaction z3 commits: SSI aborts some serializable
histories (a dangerous structure without a cycle), so at SERIALIZABLE z3 admits more than
the simulator runs. Such a model is set aside and z3 asked again; every other difference
(a step that would block, a field that differs) is a disagreement."""


PROBES = ("lock", "commit_before_read", "commit_before_write")


def _feature(h: History, name: str) -> z3.BoolRef:
    pairs = list(itertools.permutations(h.txns, 2))
    if name == "lock":  # must not exist: a write inside another writer's [write, end]
        return z3.Or(
            *[
                z3.And(ws[i], ws[j], h.write(i) < h.write(j), h.write(j) < h.end(i))
                for res, ws in h.live["writers"].items()
                if res not in DISTINCT_ROWS
                for i, j in itertools.permutations(ws, 2)
            ]
        )
    if name == "commit_before_read":  # j commits after i began, before i reads
        return z3.Or(*[z3.And(h.begin(i) < h.end(j), h.end(j) < h.read(i)) for i, j in pairs])
    # j commits between i's read and i's write
    return z3.Or(*[z3.And(h.read(i) < h.end(j), h.end(j) < h.write(i)) for i, j in pairs])


def probe(spec: Spec, name: str) -> dict[str, Any]:
    """z3 asked for a schedule with one interleaving feature (`PROBES`): a write inside
    another writer's lock window, which the simulator must never run, or a commit between
    another transaction's begin and read, or its read and write, where the levels differ.
    A model z3 finds must replay with every field agreeing (at SERIALIZABLE a model the
    store refuses is set aside, as in `z3_sets`)."""
    h = history(spec, tag=f"_probe_{name}")
    _, scenario, rejected = witness.replayable(
        h, [*h.axioms, *pinned(h, spec), _feature(h, name)], tries=3
    )
    sat = scenario is not None or bool(rejected)
    bad = [why for why in rejected if REFUSED not in why]
    return {"sat": sat, "ok": not bad and (not sat or scenario is not None), "rejected": bad[:1]}


def compare(spec: Spec, *, budget: int = 20_000) -> dict[str, Any]:
    """One workload, both ways (see the module docstring)."""
    start = time.perf_counter()
    z = z3_sets(spec)
    sim, runs, finished, refused = sim_sets(spec, budget=budget)
    zs = set(z)
    unreplayed = sorted(sorted(s) for s, r in z.items() if not r["replayed"])
    rejected = [why for r in z.values() for why in r["rejected"]]
    refusals = [why for why in rejected if REFUSED in why]
    mismatches = [why for why in rejected if REFUSED not in why]
    probes = {name: probe(spec, name) for name in PROBES}
    return {
        "operator": spec.operator,
        "level": spec.level.value,
        "txns": len(spec.txns),
        "commits": [t.commit for t in spec.txns],
        "z3": sorted(sorted(s) for s in zs),
        "sim": sorted(sorted(s) for s in sim),
        "runs": runs,
        "finished": finished,
        "refused_runs": refused,
        "z3_not_replayed": unreplayed,
        "store_refused_z3_models": len(refusals),
        "mismatches": mismatches,
        "probes": probes,
        "agree": (
            finished
            and zs == sim
            and not unreplayed
            and not mismatches
            and all(p["ok"] for p in probes.values())
        ),
        "seconds": round(time.perf_counter() - start, 3),
    }


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "workloads": len(rows),
        "finished": sum(r["finished"] for r in rows),
        "agreeing": sum(r["agree"] for r in rows),
        "disagreements": sum(not r["agree"] for r in rows),
        "z3_models_replayed": sum(len(r["z3"]) - len(r["z3_not_replayed"]) for r in rows),
        "store_refused_z3_models": sum(r["store_refused_z3_models"] for r in rows),
        "field_mismatches": sum(len(r["mismatches"]) for r in rows),
        "dpor_runs": sum(r["runs"] for r in rows),
    }
