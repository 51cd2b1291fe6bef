"""The dependency graph: typed edges between transactions, held compactly.

An edge is (src node, dst node, meta) with meta = (label bit, key, src value, dst value,
flags). Nodes are transactions (committed or in doubt), then *hub* placeholders: when R
readers of one version all anti-depend on W writers, the R·W edges go through one hub node
(R + W edges) and the cycle search counts ``reader -rw-> hub -HUB-> writer`` as one rw step.
Two transactions may be linked by several relations at once (an rw and a realtime edge, say);
the search sees all of them (Elle's edges carry a set of relations, and so do ours).
"""

from __future__ import annotations

import gc
import itertools
from array import array
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import networkx as nx
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from toki.check.adya.explain import Edge, Rel
from toki.check.adya.history import Key, TxnId, Value
from toki.errors import HistoryFormatError

__all__ = ["HUB", "PR", "RT", "RW", "WR", "WW", "Graph", "Meta"]

# Edge labels as bits.
WW: Final = 1
WR: Final = 2
RW: Final = 4
PR: Final = 8
RT: Final = 16
HUB: Final = 32  # reader -rw-> hub -HUB-> writer: one rw step, two hops
DATA: Final = WW | WR | RW
REL_NAME: Final[dict[int, Rel]] = {WW: "ww", WR: "wr", RW: "rw", PR: "process", RT: "realtime"}
# Edge flags.
INFERRED: Final = 1  # the version order was inferred, not given
LATER: Final = 2  # dst's version comes later, maybe not next
LIST: Final = 4  # a list-append key

# An edge's metadata: (label bit, key, src_value, dst_value, flags).
Meta = tuple[int, Key | None, Value, Value, int]


@dataclass(slots=True)
class Graph:
    """Nodes (transaction ids, then hubs) and edges in parallel compact columns.

    A million-transaction history has millions of edges: as C arrays (node numbers, label and
    flag bytes) plus three object pointers each (key and the two values, objects the history
    already holds), an edge costs ~40 bytes instead of ~170 as Python tuples.
    """

    ids: list[TxnId]
    n_txns: int
    src: array[int] = field(default_factory=lambda: array("i"))
    dst: array[int] = field(default_factory=lambda: array("i"))
    lab: array[int] = field(default_factory=lambda: array("B"))
    flg: array[int] = field(default_factory=lambda: array("B"))
    kab: list[Any] = field(default_factory=list)  # key, src value, dst value per edge
    # realtime edges come last and keep no kab entries: their values are these indexes
    starts: list[int | None] = field(default_factory=list)
    ends: list[int | None] = field(default_factory=list)

    def hub(self, name: str) -> int:
        """A new hub node."""
        self.ids.append(name)
        return len(self.ids) - 1

    def add(self, u: int, v: int, m: Meta) -> None:
        """One edge u → v with its metadata (the hot loops inline these appends)."""
        self.src.append(u)
        self.dst.append(v)
        self.lab.append(m[0])
        self.kab.extend((m[1], m[2], m[3]))
        self.flg.append(m[4])

    def meta(self, i: int) -> Meta:
        j = 3 * i
        kab = self.kab
        if j >= len(kab):  # a realtime edge (see realtime_edges)
            return (RT, None, self.ends[self.src[i]], self.starts[self.dst[i]], 0)
        return (self.lab[i], kab[j], kab[j + 1], kab[j + 2], self.flg[i])

    def __len__(self) -> int:
        return len(self.src)

    def edge(self, i: int) -> Edge:
        return to_edge(self.ids, self.src[i], self.dst[i], self.meta(i))


def to_edge(ids: list[TxnId], u: int, v: int, m: Meta) -> Edge:
    label, key, a, b, flags = m
    return Edge(
        ids[u],
        ids[v],
        REL_NAME[label],
        key,
        a,
        b,
        inferred=bool(flags & INFERRED),
        adjacent=not flags & LATER,
        list_key=bool(flags & LIST),
    )


def through(into_hub: Meta, out_of_hub: Meta) -> Meta:
    """reader -rw-> hub -> writer, as the one rw step it stands for."""
    return (RW, into_hub[1], into_hub[2], out_of_hub[3], into_hub[4] | out_of_hub[4])


def process_edges(
    g: Graph, procs: list[Hashable], starts: list[int | None], oks: list[bool]
) -> None:
    """Each process's committed transactions in order (start index, else history order)."""
    by_proc: dict[Hashable, list[tuple[int, int]]] = {}
    for node, p in enumerate(procs):
        if p is None or not oks[node]:
            continue
        s = starts[node]
        by_proc.setdefault(p, []).append((node if s is None else s, node))
    for p, seq in by_proc.items():
        seq.sort()
        for (_, a), (_, b) in itertools.pairwise(seq):
            g.add(a, b, (PR, None, p, None, 0))


def realtime_order(
    ids: Sequence[TxnId], starts: list[int | None], ends: list[int | None]
) -> Iterator[tuple[int, int]]:
    """(a, b) with a completed before b began, transitively reduced (Elle's frontier).

    The frontier holds completed txns not yet covered by a later completed one; each txn links
    from the frontier at its start, so pairs are O(n · concurrency), not O(n²). A transaction
    without a start index (a completion with no invocation) gets no predecessors.
    """
    events: list[tuple[int, int, int]] = []
    for node in range(len(starts)):
        s = starts[node]
        e = ends[node]
        if s is not None:
            events.append((s, 0, node))
        if e is not None:
            if s is not None and e < s:
                raise HistoryFormatError(
                    f"txn {ids[node]!r}", f"end_index {e} is before start_index {s}"
                )
            events.append((e, 1, node))
    events.sort()
    frontier: set[int] = set()
    preds: dict[int, list[int]] = {}
    for _, kind, node in events:
        if kind == 0:
            ps = sorted(frontier)
            preds[node] = ps
            for p in ps:
                yield p, node
        else:
            frontier.difference_update(preds.get(node, ()))
            frontier.add(node)


def realtime_pairs(
    ids: Sequence[TxnId], starts: list[int | None], ends: list[int | None]
) -> tuple[np.ndarray, np.ndarray]:
    """``realtime_order`` in compiled code, as two arrays (sources, destinations): the same
    pairs, grouped by destination in start order (within a group, in completion order).

    The frontier has a closed form: p precedes x iff p completed before x began and no
    transaction d began after p completed and completed before x began, i.e. iff
    ``M(x) <= end(p) < start(x)`` where ``M(x)`` is the latest start among transactions
    completed before x began. With the completed transactions sorted by end, x's
    predecessors are one slice of them, found by two binary searches.
    """
    has_s = np.array([s is not None for s in starts], dtype=bool)
    has_e = np.array([e is not None for e in ends], dtype=bool)
    try:
        s_arr = np.array([0 if s is None else s for s in starts], dtype=np.int64)
        e_arr = np.array([0 if e is None else e for e in ends], dtype=np.int64)
    except OverflowError:  # indexes beyond 64 bits: the frontier, step by step
        pairs = list(realtime_order(ids, starts, ends))
        return (
            np.array([p for p, _ in pairs], dtype=np.int64),
            np.array([x for _, x in pairs], dtype=np.int64),
        )
    bad = np.flatnonzero(has_s & has_e & (e_arr < s_arr))
    if len(bad):
        node = int(bad[0])
        raise HistoryFormatError(
            f"txn {ids[node]!r}", f"end_index {ends[node]} is before start_index {starts[node]}"
        )
    done = np.flatnonzero(has_e)
    xs = np.flatnonzero(has_s)
    if not len(done) or not len(xs):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    done = done[np.argsort(e_arr[done], kind="stable")]
    e_sorted = e_arr[done]
    latest = np.maximum.accumulate(np.where(has_s[done], s_arr[done], np.iinfo(np.int64).min))
    xs = xs[np.argsort(s_arr[xs], kind="stable")]  # in start order, as the events are
    hi = np.searchsorted(e_sorted, s_arr[xs], side="left")
    m = latest[np.maximum(hi - 1, 0)]
    lo = np.where(hi > 0, np.searchsorted(e_sorted, m, side="left"), 0)
    counts = np.maximum(hi - lo, 0)
    ends_at = np.cumsum(counts)
    src = done[np.arange(int(ends_at[-1])) + np.repeat(lo - ends_at + counts, counts)]
    return src, np.repeat(xs, counts)


def realtime_edges(g: Graph, starts: list[int | None], ends: list[int | None]) -> None:
    """T1 → T2 when T1 completed before T2 began (transitively reduced). They are the graph's
    last edges: their values (T1's end index, T2's start index) are read from ``starts`` and
    ``ends``, not stored per edge."""
    src, dst = realtime_pairs(g.ids, starts, ends)
    g.starts, g.ends = starts, ends
    g.src.frombytes(src.astype(np.int32).tobytes())
    g.dst.frombytes(dst.astype(np.int32).tobytes())
    g.lab.frombytes(np.full(len(src), RT, dtype=np.uint8).tobytes())
    g.flg.frombytes(np.zeros(len(src), dtype=np.uint8).tobytes())


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: building millions of containers otherwise triggers it constantly."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def cyclic_edges(n: int, src: array[int], dst: array[int]) -> tuple[list[int], np.ndarray]:
    """Indices of the edges that can lie on a cycle (both ends in one non-trivial SCC), and
    each node's component label.

    A linear filter in compiled code (scipy's strong components over a sparse matrix), so that
    the Python search only ever sees the transactions that matter. On an acyclic history this
    returns nothing.
    """
    if not src:
        return [], np.zeros(n, dtype=np.int64)
    s = np.frombuffer(src, dtype=np.int32)
    d = np.frombuffer(dst, dtype=np.int32)
    m = csr_matrix((np.ones(len(s)), (s, d)), shape=(n, n))  # float64: no converted copy
    _, labels = connected_components(m, directed=True, connection="strong")
    sizes = np.bincount(labels)
    ls = labels[s]
    inside = (sizes[ls] > 1) & (ls == labels[d])
    return [int(i) for i in np.flatnonzero(inside)], labels


def to_networkx(g: Graph) -> nx.MultiDiGraph:
    """The whole graph, one networkx edge per (relation, key) with its ``Edge``; hubs expanded."""
    out = nx.MultiDiGraph()
    out.add_nodes_from(g.ids[: g.n_txns])
    hub_out: dict[int, list[tuple[int, Meta]]] = {}
    edges = [(g.src[i], g.dst[i], g.meta(i)) for i in range(len(g))]
    for u, v, m in edges:
        if u >= g.n_txns:
            hub_out.setdefault(u, []).append((v, m))
    for u, v, m in edges:
        if u >= g.n_txns:
            continue
        expanded = [(v, m)] if v < g.n_txns else [(w, through(m, m2)) for w, m2 in hub_out[v]]
        for w, m2 in expanded:
            if w == u:
                continue
            e = to_edge(g.ids, u, w, m2)
            gk = (e.rel, e.key)
            if not out.has_edge(e.src, e.dst, key=gk):
                out.add_edge(e.src, e.dst, key=gk, rel=e.rel, edge=e)
    return out


HUB_FANOUT: Final = 4096


def fan_out(
    g: Graph,
    readers: list[tuple[int, Value]],
    writers: list[tuple[int, Value]],
    key: Key,
    flags: int,
    hub_name: str,
) -> None:
    """rw edges from every reader to every writer but itself, linear in their number.

    Past ``HUB_FANOUT`` pairs the readers that wrote nothing here go through one hub node
    (R + W edges); a reader that is also a writer links directly to the others, so that no
    path reader → hub → reader can close a false cycle.
    """
    if not readers or not writers:
        return
    if len(readers) * len(writers) <= HUB_FANOUT:
        for node, ver in readers:
            for w, e in writers:
                if w != node:
                    g.add(node, w, (RW, key, ver, e, flags))
        return
    wnodes = {w for w, _ in writers}
    plain = [(n, v) for n, v in readers if n not in wnodes]
    for node, ver in readers:
        if node in wnodes:
            for w, e in writers:
                if w != node:
                    g.add(node, w, (RW, key, ver, e, flags))
    if not plain:
        return
    hub = g.hub(hub_name)
    for node, ver in plain:
        g.add(node, hub, (RW, key, ver, None, flags))
    for w, e in writers:
        g.add(hub, w, (HUB, key, None, e, flags))
