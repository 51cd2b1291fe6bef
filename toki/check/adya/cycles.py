"""Cycle search and classification inside each strongly connected component (Elle's method).

Inside each component, one breadth-first search per anomaly type finds the *shortest* cycle of
that type: G0 (all ww), G1c (ww/wr, some wr), G-single (exactly one rw), G-nonadjacent (two or
more rw, none adjacent) and G2-item (two adjacent rw), each also with ``-process`` or
``-realtime`` when it needs such an edge. The search walks (transaction, automaton state)
pairs; an edge that carries several relations (an rw and a realtime edge between the same two
transactions) may be taken as any of them. Types implied by one already found in the component
are not searched again (Elle does the same), and cycles are never enumerated.

G0, G1c and G-single searches are exact. G-nonadjacent and G2-item keep only simple cycles of
the (transaction, state) search, which matched brute force on every small history tested but
is not proven complete. A per-search budget of edge relaxations bounds the work in huge
components; when it runs out the component still gets an answer: a ``cycle-search-timeout``
note, and ``*-cycle-exists`` anomalies that prove a cycle exists in the subgraph a consistency
model must keep acyclic (Elle's fallback), found from strong components alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from toki.check.adya.explain import Anomaly, Edge
from toki.check.adya.graph import (
    DATA,
    HUB,
    PR,
    RT,
    RW,
    WR,
    WW,
    Graph,
    Meta,
    cyclic_edges,
    through,
    to_edge,
)
from toki.check.adya.models import elle_name, implied_anomalies

__all__ = ["find_cycles"]

_PLAIN, _NONADJ, _ADJ = 0, 1, 2


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    anchor: int
    allowed: int
    automaton: int
    required: int = 0


_BASE: Final = (
    _Spec("G0", WW, WW, _PLAIN),
    _Spec("G1c", WR, WW | WR, _PLAIN),
    _Spec("G-single", RW, WW | WR, _PLAIN),
    _Spec("G-nonadjacent", RW, DATA, _NONADJ),
    _Spec("G2-item", RW, DATA, _ADJ),
)


def _specs(process: bool, realtime: bool) -> list[_Spec]:
    """Data-only types, then process variants, then realtime ones (Elle's severity order)."""
    out = [_Spec(s.name, s.anchor, s.allowed | HUB, s.automaton) for s in _BASE]
    if process:
        out += [
            _Spec(s.name + "-process", s.anchor, s.allowed | PR | HUB, s.automaton, PR)
            for s in _BASE
        ]
    if realtime:
        out += [
            _Spec(s.name + "-realtime", s.anchor, s.allowed | PR | RT | HUB, s.automaton, RT)
            for s in _BASE
        ]
    return out


# Automaton state bits: 1 = last edge was rw, 2 = condition met (another rw / an adjacent rw
# pair), 4 = the required order edge was used.
def _step(spec: _Spec, state: int, label: int) -> int:
    if label == HUB:
        return state  # the second half of an rw step
    if spec.required and label == spec.required:
        state |= 4
    if spec.automaton == _PLAIN:
        return state
    if label == RW:
        if spec.automaton == _NONADJ:
            return -1 if state & 1 else state | 3
        return state | 1 | (2 if state & 1 else 0)
    return state & ~1


def _accepts(spec: _Spec, state: int) -> bool:
    if spec.required and not state & 4:
        return False
    if spec.automaton == _NONADJ:
        return not state & 1 and bool(state & 2)
    if spec.automaton == _ADJ:
        return bool(state & 3)
    return True


_BITS: Final = [tuple(1 << i for i in range(6) if m >> i & 1) for m in range(64)]


def _tables(spec: _Spec) -> tuple[list[list[tuple[tuple[int, int], ...]]], list[bool]]:
    """For each state and edge mask: the (new state, label) choices the spec allows."""
    trans = []
    for s in range(8):
        row = []
        for mask in range(64):
            opts = []
            for lab in _BITS[mask]:
                if lab & spec.allowed:
                    t = _step(spec, s, lab)
                    if t >= 0:
                        opts.append((t, lab))
            row.append(tuple(opts))
        trans.append(row)
    return trans, [_accepts(spec, s) for s in range(8)]


Adj = dict[int, list[tuple[int, int]]]


def _shortest_through(
    adj: Adj,
    u: int,
    v: int,
    s0: int,
    trans: list[list[tuple[tuple[int, int], ...]]],
    acc: list[bool],
    limit: int,
    budget: list[int],
    n_txns: int,
) -> list[tuple[int, int, int]] | None:
    """Shortest simple path v ⇝ u the automaton accepts, closing the anchor edge u → v.

    ``limit`` caps the cycle length (anchor included); ``budget`` counts edge relaxations and
    stops the search when it runs out.
    """
    start = v * 8 + s0
    parent: dict[int, int] = {start: -1}
    plabel: dict[int, int] = {}
    frontier = [start]
    depth = 1
    while frontier and depth + 1 < limit:
        nxt: list[int] = []
        for code in frontier:
            x = code >> 3
            row = trans[code & 7]
            edges = adj.get(x, ())
            budget[0] -= len(edges)
            for y, mask in edges:
                for t, lab in row[mask]:
                    if y == u:
                        if acc[t]:
                            path = _unwind(parent, plabel, code)
                            path.append((x, u, lab))
                            if _simple(u, path, n_txns):
                                return path
                        continue
                    c2 = y * 8 + t
                    if c2 in parent:
                        continue
                    parent[c2] = code
                    plabel[c2] = lab
                    nxt.append(c2)
            if budget[0] < 0:
                return None
        frontier = nxt
        depth += 1
    return None


def _simple(u: int, path: list[tuple[int, int, int]], n_txns: int) -> bool:
    """No transaction twice, at least two of them (a hub may not close a self-loop)."""
    nodes = [u] + [a for a, _, _ in path if a != u]
    if len(nodes) != len(path) + 1:
        return False
    txns = [n for n in nodes if n < n_txns]
    return len(txns) >= 2 and len(set(txns)) == len(txns) and len(set(nodes)) == len(nodes)


def _unwind(
    parent: dict[int, int], plabel: dict[int, int], code: int
) -> list[tuple[int, int, int]]:
    path: list[tuple[int, int, int]] = []
    while parent[code] != -1:
        p = parent[code]
        path.append((p >> 3, code >> 3, plabel[code]))
        code = p
    path.reverse()
    return path


def _search(
    scc: list[int], adj: Adj, spec: _Spec, budget: int, n_txns: int
) -> tuple[list[tuple[int, int, int]] | None, bool]:
    """The shortest cycle of one type in one component, and whether the search finished."""
    trans, acc = _tables(spec)
    s0 = 0 if spec.automaton == _PLAIN else 1  # after the anchor edge (1: it was rw)
    anchors = [(x, y) for x in scc for y, mask in adj.get(x, ()) if mask & spec.anchor]
    best: list[tuple[int, int, int]] | None = None
    left = [budget]
    for x, y in anchors:
        limit = len(best) if best is not None else len(scc) + 1
        if limit <= 2:
            break
        s_anchor = s0
        if spec.required and spec.anchor == spec.required:
            s_anchor |= 4
        path = _shortest_through(adj, x, y, s_anchor, trans, acc, limit, left, n_txns)
        if path is not None:
            best = [(x, y, spec.anchor), *path]
        if left[0] < 0:
            return best, False
    return best, True


def _collapse(
    steps: list[tuple[int, int, int]], metas: dict[tuple[int, int, int], Meta], n_txns: int
) -> list[tuple[int, int, Meta]]:
    """A found cycle as txn-to-txn steps with their explanations (hub hops merged)."""
    out: list[tuple[int, int, Meta]] = []
    i = 0
    while i < len(steps):
        x, y, lab = steps[i]
        m = metas[(x, y, lab)]
        if y >= n_txns:
            _, z, lab2 = steps[(i + 1) % len(steps)]
            out.append((x, z, through(m, metas[(y, z, lab2)])))
            i += 2
        else:
            out.append((x, y, m))
            i += 1
    return out


def _rotate(steps: list[tuple[int, int, Meta]]) -> list[tuple[int, int, Meta]]:
    """Start a cycle at its earliest transaction, so reports are deterministic."""
    i = min(range(len(steps)), key=lambda j: steps[j][0])
    return steps[i:] + steps[:i]


def classify(labels: Sequence[int]) -> str:
    """Elle's naming: by rw count and adjacency, then a -process/-realtime suffix."""
    rw = labels.count(RW)
    if rw == 1:
        name = "G-single"
    elif rw > 1:
        adjacent = any(labels[i] == RW and labels[i - 1] == RW for i in range(len(labels)))
        name = "G2-item" if adjacent else "G-nonadjacent"
    elif WR in labels:
        name = "G1c"
    else:
        name = "G0"
    if RT in labels:
        return name + "-realtime"
    if PR in labels:
        return name + "-process"
    return name


# Subgraphs a model must keep acyclic (Elle's cycle-exists specs): (anomaly, labels, kind),
# where kind "nonadjacent" means the labels' ww/wr part extended by single rw steps.
_EXISTS: Final = (
    ("PL-1-cycle-exists", WW, ""),
    ("PL-2-cycle-exists", WW | WR, ""),
    ("PL-SI-cycle-exists", WW | WR, "nonadjacent"),
    ("PL-3-cycle-exists", DATA, ""),
)
_EXISTS_PROCESS: Final = (
    ("strong-session-PL-1-cycle-exists", WW | PR, ""),
    ("strong-session-PL-2-cycle-exists", WW | WR | PR, ""),
    ("strong-session-snapshot-isolation-cycle-exists", WW | WR | PR, "nonadjacent"),
    ("strong-session-serializable-cycle-exists", DATA | PR, ""),
)
_EXISTS_REALTIME: Final = (
    ("strong-PL-1-cycle-exists", WW | RT, ""),
    ("strong-PL-2-cycle-exists", WW | WR | RT, ""),
    ("strong-snapshot-isolation-cycle-exists", WW | WR | RT, "nonadjacent"),
    ("PL-SS-cycle-exists", DATA | RT, ""),
)


def _cycle_exists(
    scc: list[int], adj: Adj, process: bool, realtime: bool, g: Graph
) -> list[Anomaly]:
    """Which model-specific subgraphs of this component still have a cycle (proofs by SCC)."""
    specs = list(_EXISTS)
    if process:
        specs += _EXISTS_PROCESS
    if realtime:
        specs += _EXISTS_REALTIME
    index = {x: i for i, x in enumerate(scc)}
    out = []
    for name, labels, kind in specs:
        src: list[int] = []
        dst: list[int] = []
        base: dict[int, list[int]] = {}
        rw: dict[int, list[int]] = {}
        for x in scc:
            for y, mask in adj.get(x, ()):
                if y not in index:
                    continue
                if mask & (labels | HUB):
                    base.setdefault(x, []).append(y)
                if kind and mask & (RW | HUB):
                    rw.setdefault(x, []).append(y)
        for x, ys in base.items():
            for y in ys:
                src.append(index[x])
                dst.append(index[y])
                if kind:  # x -base-> y -rw-> z also counts as one step x → z
                    for z in rw.get(y, ()):
                        src.append(index[x])
                        dst.append(index[z])
        if not src:
            continue
        n = len(scc)
        m = csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
        count, labels_ = connected_components(m, directed=True, connection="strong")
        sizes = np.bincount(labels_, minlength=count)
        big = [c for c in range(count) if sizes[c] > 1]
        loops = [a for a, b in zip(src, dst, strict=True) if a == b]
        if not big and not loops:
            continue
        if loops:  # x -base-> y -rw-> x: a cycle through one extended step (Elle counts it)
            x = scc[loops[0]]
            members = [x, *sorted(_through_rw(x, adj, labels) & set(scc))[:1]]
        else:
            smallest = min(big, key=lambda c: sizes[c])
            members = [scc[i] for i in np.flatnonzero(labels_ == smallest)]
        txns = tuple(g.ids[x] for x in members if x < g.n_txns)
        out.append(
            Anomaly(
                name,
                (),
                txns,
                f"a cycle exists among these {len(txns)} transactions in the subgraph "
                f"{_subgraph_name(labels, kind)}, which this model must keep acyclic",
            )
        )
    return out


def _through_rw(x: int, adj: Adj, labels: int) -> set[int]:
    """The transactions y with x -base-> y (the first half of a one-step extended loop)."""
    return {y for y, mask in adj.get(x, ()) if mask & labels}


def _subgraph_name(labels: int, kind: str) -> str:
    parts = [
        n
        for b, n in ((WW, "ww"), (WR, "wr"), (RW, "rw"), (PR, "process"), (RT, "realtime"))
        if labels & b
    ]
    text = " ∪ ".join(parts)
    return f"({text}) extended by single rw steps" if kind else text


def find_cycles(
    g: Graph, process: bool, realtime: bool, search_budget: int
) -> tuple[list[Anomaly], int]:
    """Cycle anomalies of the graph, and the number of data/order edges between transactions."""
    inside, labels = cyclic_edges(len(g.ids), g.src, g.dst)
    pairs: dict[tuple[int, int], int] = {}
    metas: dict[tuple[int, int, int], Meta] = {}
    for i in inside:
        u, v, m = g.src[i], g.dst[i], g.meta(i)
        lab = m[0]
        pairs[(u, v)] = pairs.get((u, v), 0) | lab
        metas.setdefault((u, v, lab), m)
    if not pairs:
        return [], len(g)
    comps: dict[int, list[int]] = {}
    for node in {x for p in pairs for x in p}:
        comps.setdefault(int(labels[node]), []).append(node)
    adj: Adj = {}
    for (u, v), mask in pairs.items():
        adj.setdefault(u, []).append((v, mask))
    for x in adj:
        adj[x].sort()
    sccs = sorted((sorted(c) for c in comps.values() if len(c) > 1), key=lambda c: c[0])
    specs = _specs(process, realtime)
    out: list[Anomaly] = []
    for scc in sccs:
        found: list[tuple[str, list[tuple[int, int, int]]]] = []
        skip: set[str] = set()
        timed_out = ""
        for spec in specs:
            if elle_name(spec.name) in skip:
                continue
            path, finished = _search(scc, adj, spec, search_budget, g.n_txns)
            if path is not None:
                found.append((spec.name, path))
                skip |= implied_anomalies([elle_name(spec.name)])
            if not finished:
                timed_out = spec.name
                break
        for name, steps in found:
            real = _rotate(_collapse(steps, metas, g.n_txns))
            cycle: tuple[Edge, ...] = tuple(to_edge(g.ids, x, y, m) for x, y, m in real)
            out.append(Anomaly(name, cycle, tuple(g.ids[x] for x, _, _ in real)))
        if timed_out:
            txns = tuple(g.ids[x] for x in scc if x < g.n_txns)
            out.append(
                Anomaly(
                    "cycle-search-timeout",
                    (),
                    txns,
                    f"the search for {timed_out} in a component of {len(txns)} transactions "
                    "ran out of budget; types after it were not searched",
                )
            )
        if timed_out or not found:
            out.extend(_cycle_exists(scc, adj, process, realtime, g))
    return out, len(g)
