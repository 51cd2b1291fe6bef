"""Version orders of read-write registers, inferred only from what is certain (Elle's sources).

A register read names one version, not the history before it, so the order is only partly
known. Elle's sources, each optional but the first:

- *initial state*: the initial (nil) state precedes every version;
- *writes follow reads* (``wfr_keys``): a transaction that read ``a`` and then wrote ``b``
  puts ``a`` before ``b``;
- *sequential keys*: each key is sequentially consistent, so along each process's order the
  last version a transaction touched precedes the first one the next transaction touched;
- *linearizable keys*: the same along real-time order.

A source whose versions would form a cycle (with those already taken) is reported as
``cyclic-versions`` and left out. Every version-graph edge ``a → b`` then gives ww edges from
``a``'s writers to ``b``'s and rw edges from ``a``'s readers to ``b``'s writers; such an edge
may skip versions (``adjacent`` false) and so stands for a path of the true graph with the
same number of rw edges.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Final

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from toki.check.adya.explain import Anomaly, join, kname
from toki.check.adya.graph import INFERRED, LATER, RW, WW, Graph, fan_out, realtime_order
from toki.check.adya.history import History, Key, Value
from toki.check.adya.orders import final_writes
from toki.check.adya.scan import Scan

__all__ = ["register_edges"]

_NIL: Final = None
VersionEdges = dict[Key, set[tuple[Value, Value]]]


def register_edges(
    s: Scan,
    g: Graph,
    history: History,
    keys: set[Key],
    readers: dict[tuple[Key, Any], list[int]],
    *,
    wfr_keys: bool = False,
    sequential_keys: bool = False,
    linearizable_keys: bool = False,
) -> list[Anomaly]:
    """ww and rw edges of the registers in ``keys`` (those without a given version order)."""
    if not keys:
        return []
    anomalies: list[Anomaly] = []
    final = final_writes(s, keys)
    # writers a version edge can use: committed final writes, and in-doubt ones someone read
    fwriter: dict[Key, dict[Value, int]] = {
        k: {v: n for v, n in fin if s.oks[n] or (k, v) in readers} for k, fin in final.items()
    }
    sources: list[tuple[str, VersionEdges]] = []
    if wfr_keys:
        sources.append(("writes-follow-reads", _wfr(s, keys)))
    if sequential_keys or linearizable_keys:
        touched = _touched(s, history, keys)
        if sequential_keys:
            sources.append(("sequential-keys", _sequential(s, touched)))
        if linearizable_keys:
            sources.append(("linearizable-keys", _linearizable(s, touched)))
    # initial state: nil precedes every value read or written
    values: dict[Key, set[Value]] = {k: set(fwriter.get(k, ())) for k in keys}
    for (k, v), _ in readers.items():
        if v is not None and k in values:
            values[k].add(v)
    taken: VersionEdges = {}
    used = ["initial-state"]
    for name, edges in sources:
        merged = {k: taken.get(k, set()) | edges.get(k, set()) for k in set(taken) | set(edges)}
        cycles = _cycles(merged, values)
        if cycles:
            for k, scc in cycles:
                shown = join(sorted((repr(v) for v in scc), key=str))
                anomalies.append(
                    Anomaly(
                        "cyclic-versions",
                        (),
                        (),
                        f"the versions {shown} of {kname(k)} form a cycle when inferred from "
                        f"{join([*used, name])}; the order {name} infers contradicts the rest, "
                        "so it is set aside for these versions",
                    )
                )
            continue
        taken = merged
        used.append(name)
    flags = INFERRED | LATER
    add = g.add
    for k in keys:
        fw = fwriter.get(k, {})
        writers = [(n, v) for v, n in fw.items()]
        fan_out(
            g,
            [(r, None) for r in readers.get((k, None), ())],
            writers,
            k,
            flags,
            f"<versions of {k!r} after its initial state>",
        )
        for a, b in taken.get(k, ()):
            if a is None or a == b:
                continue
            wb = fw.get(b)
            if wb is None:
                continue
            wa = fw.get(a)
            if wa is not None and wa != wb:
                add(wa, wb, (WW, k, a, b, flags))
            for r in readers.get((k, a), ()):
                if r != wb:
                    add(r, wb, (RW, k, a, b, flags))
    return anomalies


def _wfr(s: Scan, keys: set[Key]) -> VersionEdges:
    out: VersionEdges = {}
    for k, a, b in s.wfr:
        if k in keys and a is not None and a != b:
            out.setdefault(k, set()).add((a, b))
    return out


# Per node: key -> (first external value, last external value) of the registers it touched.
_Touched = list[dict[Key, tuple[Value, Value]] | None]


def _touched(s: Scan, history: History, keys: set[Key]) -> _Touched:
    """What each committed or in-doubt txn externally read first and wrote last, per key.

    A committed txn's first value is its external read (else its first write), its last value
    its final write (else its read); an in-doubt txn counts only its writes.
    """
    out: _Touched = []
    for t in history.txns:
        if t.status == "fail":
            continue
        ok = t.status == "ok"
        first: dict[Key, Value] = {}
        last: dict[Key, Value] = {}
        wrote: set[Key] = set()
        for op in t.ops:
            k = op.key
            if k not in keys:
                continue
            if op.kind == "r":
                if ok and k not in wrote and k not in first:
                    first[k] = op.value
                    last[k] = op.value
            else:
                wrote.add(k)
                first.setdefault(k, op.value)
                last[k] = op.value
        out.append({k: (first[k], last[k]) for k in first} if first else None)
    return out


def _chain(out: VersionEdges, touched: _Touched, pairs: list[tuple[int, int]]) -> None:
    for a, b in pairs:
        ta, tb = touched[a], touched[b]
        if ta is None or tb is None:
            continue
        for k, (_, last) in ta.items():
            got = tb.get(k)
            if got is not None and got[0] != last:
                out.setdefault(k, set()).add((last, got[0]))


def _sequential(s: Scan, touched: _Touched) -> VersionEdges:
    """Along each process: a txn's last version of k precedes the next k-txn's first one."""
    out: VersionEdges = {}
    by_proc: dict[Hashable, list[tuple[int, int]]] = {}
    for node, p in enumerate(s.procs):
        if p is None or touched[node] is None:
            continue
        st = s.starts[node]
        by_proc.setdefault(p, []).append((node if st is None else st, node))
    for seq in by_proc.values():
        seq.sort()
        last_by_key: dict[Key, int] = {}
        for _, node in seq:
            tn = touched[node]
            assert tn is not None
            for k, (first, _) in tn.items():
                prev = last_by_key.get(k)
                if prev is not None:
                    tp = touched[prev]
                    assert tp is not None
                    if tp[k][1] != first:
                        out.setdefault(k, set()).add((tp[k][1], first))
                last_by_key[k] = node
    return out


def _linearizable(s: Scan, touched: _Touched) -> VersionEdges:
    """In real-time order, per key: a k-txn's last version precedes its successors' first."""
    out: VersionEdges = {}
    by_key: dict[Key, list[int]] = {}
    for node, tn in enumerate(touched):
        if tn is not None:
            for k in tn:
                by_key.setdefault(k, []).append(node)
    for k, nodes in by_key.items():
        starts = [s.starts[n] for n in nodes]
        ends = [s.ends[n] for n in nodes]
        local = [s.ids[n] for n in nodes]
        for a, b in realtime_order(local, starts, ends):
            ta, tb = touched[nodes[a]], touched[nodes[b]]
            assert ta is not None and tb is not None
            if ta[k][1] != tb[k][0]:
                out.setdefault(k, set()).add((ta[k][1], tb[k][0]))
    return out


def _cycles(edges: VersionEdges, values: dict[Key, set[Value]]) -> list[tuple[Key, list[Value]]]:
    """Non-trivial strongly connected version sets, per key, with nil before every value."""
    index: dict[tuple[Key, Value], int] = {}
    src: list[int] = []
    dst: list[int] = []

    def node(k: Key, v: Value) -> int:
        i = index.get((k, v))
        if i is None:
            i = index[(k, v)] = len(index)
        return i

    for k, es in edges.items():
        nil = node(k, _NIL)
        for a, b in es:
            src.append(node(k, a))
            dst.append(node(k, b))
        for v in values.get(k, set()) | {x for e in es for x in e if x is not None}:
            src.append(nil)
            dst.append(node(k, v))
    if not src:
        return []
    n = len(index)
    m = csr_matrix((np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n, n))
    count, labels = connected_components(m, directed=True, connection="strong")
    sizes = np.bincount(labels, minlength=count)
    groups: dict[int, list[tuple[Key, Value]]] = {}
    for (k, v), i in index.items():
        if sizes[labels[i]] > 1:
            groups.setdefault(int(labels[i]), []).append((k, v))
    return [(members[0][0], [v for _, v in members]) for members in groups.values()]
