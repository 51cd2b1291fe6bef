"""Adya dependency-graph checker: G0, G1a, G1b, G1c, G-single, G-nonadjacent, G2-item, lost update.

Histories come from toki's simulator, from users' own memory systems and from Jepsen/Elle, so
the input types here are plain frozen values that know nothing about any of them.

Method (Elle's, Kingsbury & Alvaro 2020): derive typed edges (ww, wr, rw; optionally process
and real-time order) in per-key linear passes; keep only the edges that can lie on a cycle
(a linear filter in compiled code: scipy's strong components over a sparse matrix); build a
networkx graph of just those and find its components with
``networkx.strongly_connected_components``; inside each non-trivial component run one
breadth-first search per anomaly type for the *shortest* cycle of that type. Cycles are never
enumerated and ``networkx.find_cycle`` is never run on a large graph (it is quadratic on
acyclic graphs). Every reported step says why the edge exists. At a million transactions the
check is bound by the Python passes over the history (random dictionary probes, one per op),
not by the graph work.

Version order. When the history carries an explicit per-key order (the simulator installed the
versions, so it knows), edges are exact. Otherwise it is inferred: for list-append keys from
the longest read (every read is a prefix of it, as in Elle); for read-write registers only
what is certain: the initial state precedes every write, and a transaction that read ``a`` and
then wrote ``b`` puts ``a`` before ``b``. Inferred edges say so (``Edge.inferred``); an
inferred edge to a version that may not be the *next* one (``Edge.adjacent`` false) stands for
a path of the true graph with the same number of rw edges, so reported cycles stay real.

Naming follows Elle: a cycle is G0 (all ww), G1c (ww/wr, some wr), G-single (one rw),
G-nonadjacent (several rw, none adjacent) or G2-item (two adjacent rw), with ``-process`` or
``-realtime`` appended when it needs such an edge. Where two transactions are linked by several
relations, the most specific one (ww, then wr, then rw) names the step. G0, G1c and G-single
searches are exact; G-nonadjacent and G2-item search (transaction, automaton state) pairs and
keep only simple cycles, which matched brute force on every small history tested but is not
proven complete. A per-search budget of edge relaxations bounds the work in huge components.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

import networkx as nx
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from toki.errors import HistoryFormatError

__all__ = [
    "ANOMALY_NAMES",
    "Anomaly",
    "Edge",
    "History",
    "Op",
    "Txn",
    "check",
    "dependency_graph",
    "explain",
]

Key = str | int
TxnId = str | int
Value = Hashable
OpKind = Literal["r", "w", "append"]
Status = Literal["ok", "fail", "info"]
Rel = Literal["ww", "wr", "rw", "process", "realtime"]

#: Every anomaly name ``check`` can report. Cycle names may carry a ``-process`` or
#: ``-realtime`` suffix when the cycle needs a process-order or real-time edge.
ANOMALY_NAMES: Final = (
    "G0",
    "G1a",
    "G1b",
    "G1c",
    "G-single",
    "G-nonadjacent",
    "G2-item",
    "lost-update",
    "internal",
    "garbage-read",
    "incompatible-order",
)

_OP_KINDS: Final = frozenset(("r", "w", "append"))
_STATUSES: Final = frozenset(("ok", "fail", "info"))

# Edge labels as bits, in order of preference when one pair of transactions has several:
# a ww step makes a cycle more specific (G0) than wr (G1c) than rw (G-single/G2-item).
_WW: Final = 1
_WR: Final = 2
_RW: Final = 4
_PR: Final = 8
_RT: Final = 16
_LABELS: Final = (_WW, _WR, _RW, _PR, _RT)
_REL_NAME: Final[dict[int, Rel]] = {
    _WW: "ww",
    _WR: "wr",
    _RW: "rw",
    _PR: "process",
    _RT: "realtime",
}
_DATA: Final = _WW | _WR | _RW
_HUB: Final = 32  # reader -rw-> hub -_HUB-> unread appender: one rw step, two hops
# Edge flags.
_INFERRED: Final = 1
_LATER: Final = 2
_LIST: Final = 4

_NO_VERSION: Final = object()  # a read whose version cannot be placed


# --------------------------------------------------------------------------- input values


@dataclass(frozen=True, slots=True)
class Op:
    """One micro-operation of a transaction.

    ``w`` writes a register, ``append`` appends one element to a list, ``r`` reads: a register
    read returns the value (``None`` is the initial state), a list read returns the whole list
    (a tuple; a list is converted). Written values must be unique per key, as in Elle: a
    value is how a read names the version it saw.
    """

    kind: OpKind
    key: Key
    value: Value = None

    def __post_init__(self) -> None:
        if self.kind not in _OP_KINDS:
            raise HistoryFormatError(
                "Op.kind", f"{self.kind!r} is not a micro-op kind", "use 'r', 'w' or 'append'"
            )
        if not isinstance(self.key, str | int) or isinstance(self.key, bool):
            raise HistoryFormatError(
                "Op.key", f"{self.key!r} is a {type(self.key).__name__}", "use a str or int key"
            )
        if isinstance(self.value, list):
            object.__setattr__(self, "value", tuple(self.value))
        try:
            hash(self.value)
        except TypeError:
            raise HistoryFormatError(
                "Op.value",
                f"{self.value!r} is not hashable",
                "use numbers, strings, or tuples of them: a value names a version",
            ) from None


@dataclass(frozen=True, slots=True)
class Txn:
    """A transaction as recorded: its micro-ops and how it ended.

    ``ok`` committed, ``fail`` aborted (its writes must never be seen), ``info`` unknown (it may
    have committed; its writes may be seen, its reads are not trusted). ``start_index`` and
    ``end_index`` are positions in one real-time order (e.g. Jepsen's :index of the invocation
    and completion); they are needed only for real-time edges.
    """

    id: TxnId
    process: Hashable
    ops: tuple[Op, ...]
    status: Status = "ok"
    start_index: int | None = None
    end_index: int | None = None

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise HistoryFormatError(
                f"Txn {self.id!r}.status",
                f"{self.status!r} is not a completion status",
                "use 'ok', 'fail' or 'info'",
            )
        if not isinstance(self.ops, tuple):
            object.__setattr__(self, "ops", tuple(self.ops))


@dataclass(frozen=True, slots=True)
class History:
    """Transactions in history order, and optionally each key's committed version order.

    ``version_order[k]`` lists the values (register) or appended elements (list) of ``k`` in
    the order they were installed, committed versions only. Keys it does not name are inferred.
    """

    txns: tuple[Txn, ...]
    version_order: Mapping[Any, Sequence[Value]] | None = None  # keys are str | int

    def __post_init__(self) -> None:
        if not isinstance(self.txns, tuple):
            object.__setattr__(self, "txns", tuple(self.txns))
        if self.version_order is not None:
            object.__setattr__(
                self, "version_order", {k: tuple(v) for k, v in self.version_order.items()}
            )


# --------------------------------------------------------------------------- results


def _tname(tid: TxnId) -> str:
    return f"T{tid}" if isinstance(tid, int) else str(tid)


def _kn(key: Key | None) -> str:
    """A key as prose: ``x`` for a string key, ``key 3`` for an integer one."""
    return f"key {key}" if isinstance(key, int) else str(key)


@dataclass(frozen=True, slots=True)
class Edge:
    """One dependency T_src → T_dst and what justifies it.

    ww: src wrote ``src_value`` of ``key``, dst wrote the following version ``dst_value``.
    wr: src wrote ``src_value``, dst read it. rw: src read ``src_value`` (None: the initial
    state), dst wrote the following version ``dst_value``. process: ``src_value`` is the
    process. realtime: ``src_value`` is src's completion index, ``dst_value`` dst's start index.
    ``adjacent`` is false when ``dst_value`` is known to come later but maybe not next.
    """

    src: TxnId
    dst: TxnId
    rel: Rel
    key: Key | None = None
    src_value: Value = None
    dst_value: Value = None
    inferred: bool = False
    adjacent: bool = True
    list_key: bool = False

    def explain(self) -> str:
        """One line: what each transaction did and which edge that makes."""
        a, b, k = _tname(self.src), _tname(self.dst), _kn(self.key)
        x, y = self.src_value, self.dst_value
        nxt = "the next version" if self.adjacent else "a later version"
        if self.rel == "process":
            text = f"{a} and {b} ran in that order on process {x!r}"
        elif self.rel == "realtime":
            text = f"{a} completed (index {x}) before {b} began (index {y})"
        elif self.list_key:
            after = "right after it" if self.adjacent else "later"
            if self.rel == "ww":
                text = f"{a} appended {x!r} to {k}; {b} appended {y!r} {after}"
            elif self.rel == "wr":
                text = f"{a} appended {x!r} to {k}; {b} read {k} ending in {x!r}"
            elif x is None:
                text = f"{a} read {k} empty; {b} appended {y!r} to it"
            else:
                text = f"{a} read {k} ending in {x!r}; {b} appended {y!r} {after}"
        elif self.rel == "ww":
            text = f"{a} wrote {k}={x!r}; {b} wrote {nxt} {k}={y!r}"
        elif self.rel == "wr":
            text = f"{a} wrote {k}={x!r}; {b} read {k}={x!r}"
        elif x is None:
            first = "its first version" if self.adjacent else "a version"
            text = f"{a} read {k}'s initial state; {b} wrote {first} {k}={y!r}"
        else:
            text = f"{a} read {k}={x!r}; {b} wrote {nxt} {k}={y!r}"
        suffix = " (version order inferred)" if self.inferred else ""
        return f"{text} → {self.rel}{suffix}"


@dataclass(frozen=True, slots=True)
class Anomaly:
    """One anomaly: its name, the cycle (empty for non-cycle anomalies) and the transactions.

    ``reason`` explains non-cycle anomalies, and notes when a cycle search ran out of budget.
    """

    name: str
    cycle: tuple[Edge, ...]
    txns: tuple[TxnId, ...]
    reason: str = ""

    def explain(self) -> str:
        """The anomaly as a person reads it, one edge per line."""
        if not self.cycle:
            return f"{self.name}: {self.reason}"
        ring = " → ".join(_tname(e.src) for e in self.cycle) + " → " + _tname(self.cycle[0].src)
        lines = [f"{self.name}: {ring}"] + ["  " + e.explain() for e in self.cycle]
        if self.reason:
            lines.append("  (" + self.reason + ")")
        return "\n".join(lines)


def explain(anomalies: Iterable[Anomaly]) -> str:
    """All anomalies, explained; "no anomalies" when there are none."""
    parts = [a.explain() for a in anomalies]
    return "\n".join(parts) if parts else "no anomalies"


# --------------------------------------------------------------------------- derivation

# An edge's metadata: (label bit, key, src_value, dst_value, flags).
_Meta = tuple[int, Key | None, Value, Value, int]


@dataclass(slots=True)
class _Derived:
    """Everything the linear passes produce: nodes, compact edges, non-cycle anomalies."""

    ids: list[TxnId]  # txn ids, then hub placeholders
    n_txns: int  # nodes below this are transactions
    src: list[int]
    dst: list[int]
    meta: list[_Meta]
    anomalies: list[Anomaly]


def _bad(where: str, problem: str, fix: str = "") -> HistoryFormatError:
    return HistoryFormatError(where, problem, fix)


def _derive(history: History, process: bool, realtime: bool) -> _Derived:
    """All typed edges and the non-cycle anomalies, in passes linear in the history's size."""
    ids: list[TxnId] = []
    seen_ids: set[TxnId] = set()
    anomalies: list[Anomaly] = []
    writer: dict[Key, dict[Value, int]] = {}  # key -> value -> node of its writer
    failed: dict[tuple[Key, Value], TxnId] = {}  # (key, value) -> failed txn that wrote it
    failed_keys: set[Key] = set()
    intermediate: set[tuple[Key, Value]] = set()  # overwritten later by the same txn
    list_keys: set[Key] = set()
    reg_keys: set[Key] = set()
    wfr: list[tuple[Key, Any, Value]] = []  # (key, raw read value, final write) in one txn
    lu_cand: list[tuple[Key, Any, int]] = []  # read k, then wrote k (lost-update candidates)
    rk: list[Key] = []  # external reads of ok txns: key, raw value, node
    rv: list[Any] = []
    rn: list[int] = []
    procs: list[Hashable] = []
    starts: list[int | None] = []
    ends: list[int | None] = []
    oks: list[bool] = []
    rk_add, rv_add, rn_add = rk.append, rv.append, rn.append
    own_reads: list[tuple[Key, tuple[Value, ...]]] = []  # list reads after the txn's own append

    for t in history.txns:
        tid = t.id
        if tid in seen_ids:
            raise _bad(f"txn {tid!r}", "transaction id used twice", "give each txn its own id")
        seen_ids.add(tid)
        status = t.status
        ops = t.ops
        if status == "fail":
            for op in ops:
                if op.kind != "r":
                    failed[(op.key, op.value)] = tid
                    failed_keys.add(op.key)
            continue
        node = len(ids)
        ids.append(tid)
        procs.append(t.process)
        starts.append(t.start_index)
        ok = status == "ok"
        ends.append(t.end_index if ok else None)
        oks.append(ok)
        # Fast path: every op on its own key, so there is nothing internal to check.
        simple = len(ops) < 2 or len({op.key for op in ops}) == len(ops)
        own: dict[Key, Value] | None = None  # key -> last value this txn wrote
        ext: dict[Key, Any] | None = None  # key -> first external read
        seen: dict[Key, tuple[Any, ...]] = {}  # key -> what this txn must read next
        for op in ops:
            k = op.key
            v = op.value
            kind = op.kind
            if kind == "r":
                if not ok:
                    continue
                if simple:
                    rk_add(k)
                    rv_add(v)
                    rn_add(node)
                    continue
                if k in seen and _internal_violation(seen[k], v):
                    anomalies.append(
                        Anomaly(
                            "internal",
                            (),
                            (tid,),
                            f"{_tname(tid)} read {_kn(k)}={_render_read(v, True)} but its own "
                            f"earlier reads and writes imply {_render_expected(seen[k])}",
                        )
                    )
                if own is None or k not in own:
                    rk_add(k)
                    rv_add(v)
                    rn_add(node)
                    if ext is None:
                        ext = {}
                    if k not in ext:
                        ext[k] = v
                elif type(v) is tuple:
                    own_reads.append((k, v))  # still reveals the list's version order
                seen[k] = ("L", v, ()) if type(v) is tuple and k in list_keys else ("R", v)
                continue
            if kind == "w":
                if k not in reg_keys:
                    if k in list_keys:
                        raise _bad(f"txn {tid!r}", f"key {k!r} is appended to and also written")
                    reg_keys.add(k)
            elif k not in list_keys:
                if k in reg_keys:
                    raise _bad(f"txn {tid!r}", f"key {k!r} is written and also appended to")
                list_keys.add(k)
            wd = writer.get(k)
            if wd is None:
                wd = writer[k] = {}
            elif v in wd:
                raise _bad(
                    f"txn {tid!r}",
                    f"value {v!r} of key {k!r} was already written by txn {ids[wd[v]]!r}",
                    "write unique values per key (a read names its version by value)",
                )
            wd[v] = node
            if simple:
                continue
            if own is None:
                own = {}
            if k in own:
                intermediate.add((k, own[k]))
            elif ext is not None and k in ext and ok:
                lu_cand.append((k, ext[k], node))
            own[k] = v
            if kind == "append":
                prev = seen.get(k)
                if prev is None:
                    seen[k] = ("L", None, (v,))
                elif prev[0] == "L":
                    seen[k] = ("L", prev[1], (*prev[2], v))
                elif prev[1] is None or type(prev[1]) is tuple:
                    seen[k] = ("L", prev[1] or (), (v,))
                else:
                    seen[k] = ("L", None, (v,))
            else:
                seen[k] = ("R", v)
        if own and ext:
            for k, v in own.items():
                if k in ext:
                    wfr.append((k, ext[k], v))

    src: list[int] = []
    dst: list[int] = []
    meta: list[_Meta] = []
    add_s, add_d, add_m = src.append, dst.append, meta.append
    # History.__post_init__ made every order a tuple
    explicit = cast("Mapping[Key, tuple[Value, ...]]", history.version_order or {})

    # ---- version orders. Inferred list orders: the longest read (all reads are its prefixes).
    longest: dict[Key, tuple[Value, ...]] = {}
    for k, v in itertools.chain(zip(rk, rv, strict=True), own_reads):
        if (
            k in list_keys
            and k not in explicit
            and type(v) is tuple
            and len(v) > len(longest.get(k, ()))
        ):
            longest[k] = v
    final = _final_writes(writer, intermediate, list_keys, reg_keys, explicit)
    # Per placed version (key, value): (writer, writer of the next run or _END/_TAIL, the next
    # run's first version, flags). One dict probe per read: at a million transactions the
    # checker is bound by random memory access, not by arithmetic.
    placed: dict[tuple[Key, Value], tuple[int, int, Value, int]] = {}
    initial: dict[Key, tuple[int, int, Value, int]] = {}  # the same for a read of the initial state
    orders: dict[Key, tuple[Value, ...]] = {}
    tails: dict[Key, tuple[list[tuple[int, Value]], set[int]]] = {}
    for k in list_keys | reg_keys:
        flags = _LIST if k in list_keys else 0
        if k in explicit:
            order = explicit[k]
        elif k in list_keys:
            order = longest.get(k, ())
            flags |= _INFERRED
        else:
            continue  # a register without explicit order: see _infer_registers
        if len(set(order)) != len(order):
            anomalies.append(
                Anomaly(
                    "incompatible-order",
                    (),
                    (),
                    f"the version order of {_kn(k)} lists an element twice: "
                    f"{_render_read(tuple(order), True)}",
                )
            )
            order = tuple(dict.fromkeys(order))
        orders[k] = order
        # runs: maximal stretches of consecutive versions by one writer
        wd = writer.get(k, {})
        run_w: list[int] = []
        run_first: list[Value] = []
        run_members: list[list[Value]] = []
        for e in order:
            w = wd.get(e)
            if w is None:
                if flags & _INFERRED:
                    continue  # aborted or garbage: reported per read
                raise _bad(
                    f"version_order[{k!r}]",
                    f"lists {e!r}, which no committed or in-doubt transaction wrote",
                    "list only installed versions",
                )
            if run_w and run_w[-1] == w:
                run_members[-1].append(e)
                continue
            if run_w:
                add_s(run_w[-1])
                add_d(w)
                add_m((_WW, k, run_members[-1][-1], e, flags))
            run_w.append(w)
            run_first.append(e)
            run_members.append([e])
        # Appends never read by anyone come after everything that was read (as in Elle).
        tail: list[tuple[int, Value]] = []
        if flags & _INFERRED:
            seen_e = set(order)
            tail = [(n, e) for e, n in final.get(k, ()) if e not in seen_e and oks[n]]
            for n, e in tail:
                if run_w and run_w[-1] != n:
                    add_s(run_w[-1])
                    add_d(n)
                    add_m((_WW, k, run_members[-1][-1], e, flags | _LATER))
            if tail:
                tails[k] = (tail, {n for n, _ in tail})
        last_next = _TAIL if tail else _END
        nruns = len(run_w)
        for r in range(nruns):
            nxt = (run_w[r + 1], run_first[r + 1]) if r + 1 < nruns else (last_next, None)
            entry = (run_w[r], nxt[0], nxt[1], flags)
            for e in run_members[r]:
                placed[(k, e)] = entry
        initial[k] = (-1, run_w[0], run_first[0], flags) if nruns else (-1, last_next, None, flags)

    # ---- every external read: G1a, garbage, G1b, wr; rw from the version order
    readers: dict[tuple[Key, Any], list[int]] = {}  # only for inferred registers
    tail_readers: dict[Key, list[tuple[int, Any]]] = {}
    for k, v, node in zip(rk, rv, rn, strict=True):
        is_list = k in list_keys or (k not in reg_keys and type(v) is tuple)
        if is_list:
            if v is None:
                v = ()
            elif type(v) is not tuple:
                raise _bad(
                    f"txn {ids[node]!r}",
                    f"read of list key {k!r} returned {v!r}, not a list",
                    "a read of an appended-to key returns the whole list",
                )
            ver = v[-1] if v else None
            if v and k in failed_keys:
                bad = next((e for e in v if (k, e) in failed), _NO_VERSION)
                if bad is not _NO_VERSION:
                    anomalies.append(
                        Anomaly(
                            "G1a",
                            (),
                            (ids[node], failed[(k, bad)]),
                            f"{_tname(ids[node])} read {_kn(k)}={_render_read(v, True)}, which "
                            f"contains {bad!r}, appended by {_tname(failed[(k, bad)])}, "
                            "which aborted",
                        )
                    )
                    continue
            if k in orders:
                order = orders[k]
                if v and order[: len(v)] != v:
                    anomalies.append(
                        Anomaly(
                            "incompatible-order",
                            (),
                            (ids[node],),
                            f"{_tname(ids[node])} read {_kn(k)}={_render_read(v, True)}, which is "
                            f"not a prefix of its version order {_render_read(order, True)}",
                        )
                    )
                    continue
        else:
            ver = v
        info = initial.get(k) if ver is None else placed.get((k, ver))
        if info is None:
            # not in a version order: an unplaced write, an aborted one, or garbage
            if ver is not None:
                wd = writer.get(k)
                w = None if wd is None else wd.get(ver)
                if w is None:
                    _bad_read(k, ver, v, is_list, ids[node], failed, anomalies)
                    continue
                if w != node:
                    add_s(w)
                    add_d(node)
                    add_m((_WR, k, ver, ver, _LIST if is_list else 0))
                    if (k, ver) in intermediate:
                        anomalies.append(_g1b(k, v, is_list, ids[node], ids[w]))
            if k in reg_keys and k not in explicit:
                readers.setdefault((k, ver), []).append(node)
            continue
        w, nw, nf, flags = info
        if w >= 0 and w != node:
            add_s(w)
            add_d(node)
            add_m((_WR, k, ver, ver, flags & _LIST))
            if intermediate and (k, ver) in intermediate:
                anomalies.append(_g1b(k, v, is_list, ids[node], ids[w]))
        if nw >= 0:
            if nw != node:
                add_s(node)
                add_d(nw)
                add_m((_RW, k, ver, nf, flags))
        elif nw == _TAIL and node not in tails[k][1]:
            # (a reader that appended to the tail itself may be the next writer: then no rw
            # to the other tail appenders is certain)
            tail_readers.setdefault(k, []).append((node, ver))

    # Readers of the last observed version anti-depend on every unread append. R readers and
    # A appends make R·A edges; past _HUB_FANOUT they go through one hub node per key
    # instead (R + A edges), which check() collapses back into R → A steps.
    n_txns = len(ids)
    for k, rs in tail_readers.items():
        tail = tails[k][0]
        fl = _LIST | _INFERRED | _LATER  # tails exist only for inferred orders
        if len(rs) * len(tail) <= _HUB_FANOUT:
            for node, ver in rs:
                for w2, e in tail:
                    add_s(node)
                    add_d(w2)
                    add_m((_RW, k, ver, e, fl))
            continue
        hub = len(ids)
        ids.append(f"<unread appends to {k!r}>")
        for node, ver in rs:
            add_s(node)
            add_d(hub)
            add_m((_RW, k, ver, None, fl))
        for w2, e in tail:
            add_s(hub)
            add_d(w2)
            add_m((_HUB, k, None, e, fl))

    _lost_updates(lu_cand, list_keys, ids, anomalies)
    if readers or wfr:
        reg = {k for k in reg_keys if k not in explicit}
        _infer_registers(reg, final, wfr, writer, oks, readers, src, dst, meta)
    if process:
        _process_edges(procs, starts, oks, src, dst, meta)
    if realtime:
        _realtime_edges(ids, starts, ends, src, dst, meta)
    return _Derived(ids, n_txns, src, dst, meta, anomalies)


_END: Final = -1  # no next version
_TAIL: Final = -2  # next versions: the unplaced tail
_HUB_FANOUT: Final = 4096


def _bad_read(
    k: Key,
    ver: Value,
    v: Any,
    is_list: bool,
    reader: TxnId,
    failed: dict[tuple[Key, Value], TxnId],
    out: list[Anomaly],
) -> None:
    """A read of a version no committed or in-doubt txn wrote: aborted (G1a) or garbage."""
    if (k, ver) in failed:
        out.append(
            Anomaly(
                "G1a",
                (),
                (reader, failed[(k, ver)]),
                f"{_tname(reader)} read {_kn(k)}={_render_read(v, is_list)}, written by "
                f"{_tname(failed[(k, ver)])}, which aborted",
            )
        )
    else:
        out.append(
            Anomaly(
                "garbage-read",
                (),
                (reader,),
                f"{_tname(reader)} read {_kn(k)}={_render_read(v, is_list)}, "
                "which no transaction wrote",
            )
        )


def _g1b(k: Key, v: Any, is_list: bool, reader: TxnId, writer: TxnId) -> Anomaly:
    return Anomaly(
        "G1b",
        (),
        (reader, writer),
        f"{_tname(reader)} read {_kn(k)}={_render_read(v, is_list)}, which {_tname(writer)} "
        "overwrote before it committed",
    )


def _internal_violation(exp: tuple[Any, ...], v: Any) -> bool:
    """Does read value ``v`` contradict what the txn's own earlier ops imply (Elle's internal)?"""
    if exp[0] == "R":
        return bool(v != exp[1])
    if type(v) is not tuple:
        return True
    pre, suf = exp[1], exp[2]
    if pre is not None:
        return bool(v != pre + suf)
    return len(v) < len(suf) or v[len(v) - len(suf) :] != suf


def _final_writes(
    writer: dict[Key, dict[Value, int]],
    intermediate: set[tuple[Key, Value]],
    list_keys: set[Key],
    reg_keys: set[Key],
    explicit: Mapping[Key, tuple[Value, ...]],
) -> dict[Key, list[tuple[Value, int]]]:
    """Each txn's last write per key, for the keys whose version order must be inferred."""
    need = {k for k in list_keys | reg_keys if k not in explicit}
    final: dict[Key, list[tuple[Value, int]]] = {}
    if not need:
        return final
    for k in need:
        final[k] = [(v, n) for v, n in writer.get(k, {}).items() if (k, v) not in intermediate]
    return final


def _lost_updates(
    cands: list[tuple[Key, Any, int]], list_keys: set[Key], ids: list[TxnId], out: list[Anomaly]
) -> None:
    """Two committed txns read the same version of k and both wrote k (Elle's lost-update)."""
    groups: dict[tuple[Key, Any], list[int]] = {}
    for k, v, node in cands:
        ver = (v[-1] if v else None) if k in list_keys and type(v) is tuple else v
        groups.setdefault((k, ver), []).append(node)
    for (k, ver), nodes in groups.items():
        if len(nodes) > 1:
            names = _join([_tname(ids[n]) for n in nodes])
            what = "the initial state" if ver is None else f"the version {ver!r}"
            both = "both" if len(nodes) == 2 else "all"
            out.append(
                Anomaly(
                    "lost-update",
                    (),
                    tuple(ids[n] for n in nodes),
                    f"{names} {both} read {what} of {_kn(k)} and then wrote {_kn(k)}: "
                    "all but one of those updates is lost",
                )
            )


def _render_read(v: Any, is_list: bool) -> str:
    if is_list and isinstance(v, tuple):
        if len(v) > 6:
            return "[… " + " ".join(repr(e) for e in v[-3:]) + "]"
        return "[" + " ".join(repr(e) for e in v) + "]"
    return repr(v)


def _render_expected(exp: tuple[Any, ...]) -> str:
    if exp[0] == "L":
        pre, suf = exp[1], exp[2]
        if pre is None:
            return "a list ending in " + _render_read(suf, True)
        return _render_read(pre + suf, True)
    return repr(exp[1])


def _infer_registers(
    keys: set[Key],
    final: dict[Key, list[tuple[Value, int]]],
    wfr: list[tuple[Key, Any, Value]],
    writer: dict[Key, dict[Value, int]],
    oks: list[bool],
    readers: dict[tuple[Key, Any], list[int]],
    src: list[int],
    dst: list[int],
    meta: list[_Meta],
) -> None:
    """ww/rw edges for registers from orderings that are certain, never guessed ones.

    Certain: the initial state precedes every version; a txn that read ``a`` and then wrote
    ``b`` puts ``a`` before ``b``. The first version is known when exactly one written value
    has no known predecessor. rw edges from readers of ``a`` are added only when ``a`` has a
    single known successor, which keeps the edge count linear.
    """
    succ: dict[tuple[Key, Value], list[Value]] = {}
    has_pred: set[tuple[Key, Value]] = set()
    for k, a, b in wfr:
        if k not in keys or a is None or a not in writer.get(k, {}) or a == b:
            continue
        succ.setdefault((k, a), []).append(b)
        has_pred.add((k, b))
    flags = _INFERRED | _LATER
    for (k, a), bs in succ.items():
        wa = writer[k][a]
        for b in bs:
            wb = writer[k][b]
            if wa != wb:
                src.append(wa)
                dst.append(wb)
                meta.append((_WW, k, a, b, flags))
        if len(bs) == 1:
            wb = writer[k][bs[0]]
            for r in readers.get((k, a), ()):
                if r != wb:
                    src.append(r)
                    dst.append(wb)
                    meta.append((_RW, k, a, bs[0], flags))
    for k in keys:
        # an in-doubt (info) write counts only once someone read it: then it committed
        minimal = [
            (v, n)
            for v, n in final.get(k, [])
            if (k, v) not in has_pred and (oks[n] or (k, v) in readers)
        ]
        if len(minimal) != 1:
            continue
        v0, w0 = minimal[0]
        for r in readers.get((k, None), ()):
            if r != w0:
                src.append(r)
                dst.append(w0)
                meta.append((_RW, k, None, v0, _INFERRED))


def _process_edges(
    procs: list[Hashable],
    starts: list[int | None],
    oks: list[bool],
    src: list[int],
    dst: list[int],
    meta: list[_Meta],
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
            src.append(a)
            dst.append(b)
            meta.append((_PR, None, p, None, 0))


def _realtime_edges(
    ids: list[TxnId],
    starts: list[int | None],
    ends: list[int | None],
    src: list[int],
    dst: list[int],
    meta: list[_Meta],
) -> None:
    """T1 → T2 when T1 completed before T2 began, transitively reduced (Elle's frontier).

    The frontier holds completed txns not yet covered by a later completed one; each txn links
    from the frontier at its start, so edges are O(n · concurrency), not O(n²).
    """
    events: list[tuple[int, int, int]] = []
    for node in range(len(starts)):
        s = starts[node]
        e = ends[node]
        if s is None:
            continue
        events.append((s, 0, node))
        if e is not None:
            if e < s:
                raise _bad(f"txn {ids[node]!r}", f"end_index {e} is before start_index {s}")
            events.append((e, 1, node))
    events.sort()
    frontier: set[int] = set()
    preds: dict[int, list[int]] = {}
    for idx, kind, node in events:
        if kind == 0:
            ps = sorted(frontier)
            preds[node] = ps
            for p in ps:
                src.append(p)
                dst.append(node)
                meta.append((_RT, None, ends[p], idx, 0))
        else:
            frontier.difference_update(preds.get(node, ()))
            frontier.add(node)


# --------------------------------------------------------------------------- graph


def _edge(ids: list[TxnId], u: int, v: int, m: _Meta) -> Edge:
    label, key, a, b, flags = m
    return Edge(
        ids[u],
        ids[v],
        _REL_NAME[label],
        key,
        a,
        b,
        inferred=bool(flags & _INFERRED),
        adjacent=not flags & _LATER,
        list_key=bool(flags & _LIST),
    )


def dependency_graph(
    history: History, *, process: bool = False, realtime: bool = False
) -> nx.MultiDiGraph:
    """The whole typed dependency graph, one edge per (relation, key) with its ``Edge``.

    Nodes are the ids of committed and in-doubt transactions. Meant for inspection and small
    histories; ``check`` never builds this for a whole large history.
    """
    d = _derive(history, process, realtime)
    g = nx.MultiDiGraph()
    g.add_nodes_from(d.ids[: d.n_txns])
    hub_out: dict[int, list[tuple[int, _Meta]]] = {}
    for u, v, m in zip(d.src, d.dst, d.meta, strict=True):
        if u >= d.n_txns:
            hub_out.setdefault(u, []).append((v, m))
    for u, v, m in zip(d.src, d.dst, d.meta, strict=True):
        if u >= d.n_txns:
            continue
        expanded = [(v, m)] if v < d.n_txns else [(w, _through(m, m2)) for w, m2 in hub_out[v]]
        for w, m2 in expanded:
            e = _edge(d.ids, u, w, m2)
            gk = (e.rel, e.key)
            if not g.has_edge(e.src, e.dst, key=gk):
                g.add_edge(e.src, e.dst, key=gk, rel=e.rel, edge=e)
    return g


def _through(into_hub: _Meta, out_of_hub: _Meta) -> _Meta:
    """reader -rw-> hub -> appender, as the one rw step it stands for."""
    return (_RW, into_hub[1], into_hub[2], out_of_hub[3], into_hub[4])


def _collapse(
    steps: list[tuple[int, int, int]],
    pairs: dict[tuple[int, int], tuple[int, _Meta]],
    n_txns: int,
) -> list[tuple[int, int, _Meta]]:
    """A found cycle as txn-to-txn steps with their explanations (hub hops merged)."""
    out: list[tuple[int, int, _Meta]] = []
    i = 0
    while i < len(steps):
        x, y, _ = steps[i]
        m = pairs[(x, y)][1]
        if y >= n_txns:
            _, z, _ = steps[(i + 1) % len(steps)]
            out.append((x, z, _through(m, pairs[(y, z)][1])))
            i += 2
        else:
            out.append((x, y, m))
            i += 1
    return out


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: building millions of containers otherwise triggers it constantly."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _cyclic_edges(n: int, src: list[int], dst: list[int]) -> list[int]:
    """Indices of the edges that can lie on a cycle: both ends in one non-trivial SCC.

    A linear filter in compiled code (scipy's strong components over a sparse matrix), so that
    networkx, which needs ~10 s and ~1 GB per million transactions just to hold the graph,
    only ever sees the transactions that matter. On an acyclic history this returns nothing.
    """
    if not src:
        return []
    s = np.asarray(src, dtype=np.int64)
    d = np.asarray(dst, dtype=np.int64)
    m = csr_matrix((np.ones(len(s), dtype=np.int32), (s, d)), shape=(n, n))
    _, labels = connected_components(m, directed=True, connection="strong")
    sizes = np.bincount(labels)
    ls = labels[s]
    inside = (sizes[ls] > 1) & (ls == labels[d])
    return [int(i) for i in np.flatnonzero(inside)]


# --------------------------------------------------------------------------- cycle search

# A search spec: name, anchor label, labels allowed on the rest of the path, automaton,
# and the order label the variant must use (0 for the data-only base spec).
_PLAIN, _NONADJ, _ADJ = 0, 1, 2


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    anchor: int
    allowed: int
    automaton: int
    required: int = 0


_BASE_SPECS: Final = (
    _Spec("G0", _WW, _WW, _PLAIN),
    _Spec("G1c", _WR, _WW | _WR, _PLAIN),
    _Spec("G-single", _RW, _WW | _WR, _PLAIN),
    _Spec("G-nonadjacent", _RW, _DATA, _NONADJ),
    _Spec("G2-item", _RW, _DATA, _ADJ),
)


def _specs(process: bool, realtime: bool) -> list[_Spec]:
    out = [_Spec(s.name, s.anchor, s.allowed | _HUB, s.automaton) for s in _BASE_SPECS]
    for s in _BASE_SPECS:
        if process:
            out.append(
                _Spec(s.name + "-process", s.anchor, s.allowed | _PR | _HUB, s.automaton, _PR)
            )
        if realtime:
            out.append(
                _Spec(
                    s.name + "-realtime",
                    s.anchor,
                    s.allowed | _PR | _RT | _HUB,
                    s.automaton,
                    _RT,
                )
            )
    return out


# Automaton state bits: 1 = last edge was rw, 2 = condition met (another rw / an adjacent rw
# pair), 4 = the required order edge was used.
def _step(spec: _Spec, state: int, label: int) -> int:
    if label == _HUB:
        return state  # the second half of an rw step
    if spec.required and label == spec.required:
        state |= 4
    if spec.automaton == _PLAIN:
        return state
    if label == _RW:
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


def _tables(spec: _Spec) -> tuple[list[list[int]], list[bool]]:
    trans = [
        [_step(spec, s, lab) if lab & spec.allowed else -1 for lab in range(64)] for s in range(8)
    ]
    acc = [_accepts(spec, s) for s in range(8)]
    return trans, acc


def _shortest_through(
    adj: dict[int, list[tuple[int, int]]],
    u: int,
    v: int,
    s0: int,
    trans: list[list[int]],
    acc: list[bool],
    limit: int,
    budget: list[int],
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
            s = code & 7
            row = trans[s]
            edges = adj.get(x, ())
            budget[0] -= len(edges)
            for y, lab in edges:
                t = row[lab]
                if t < 0:
                    continue
                if y == u:
                    if acc[t]:
                        path = _unwind(parent, plabel, code)
                        path.append((x, u, lab))
                        nodes = [a for a, _, _ in path]
                        if u not in nodes and len(set(nodes)) == len(nodes):
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


def _search_scc(
    scc: list[int],
    adj: dict[int, list[tuple[int, int]]],
    specs: list[_Spec],
    budget: int,
) -> list[tuple[str, list[tuple[int, int, int]], bool]]:
    """Shortest cycle of each spec in one component: (name, steps, exhaustive) per hit."""
    hits: list[tuple[str, list[tuple[int, int, int]], bool]] = []
    for spec in specs:
        trans, acc = _tables(spec)
        s0 = 0 if spec.automaton == _PLAIN else 1  # after the anchor edge (1: it was rw)
        anchors = [(x, y) for x in scc for y, lab in adj.get(x, ()) if lab == spec.anchor]
        best: list[tuple[int, int, int]] | None = None
        left = [budget]
        for x, y in anchors:
            limit = len(best) if best is not None else len(scc) + 1
            if limit <= 2:
                break
            path = _shortest_through(adj, x, y, s0, trans, acc, limit, left)
            if path is not None:
                best = [(x, y, spec.anchor), *path]
            if left[0] < 0:
                break
        if best is not None:
            hits.append((spec.name, best, left[0] >= 0))
    return hits


def _rotate(steps: list[tuple[int, int, _Meta]]) -> list[tuple[int, int, _Meta]]:
    """Start a cycle at its earliest transaction, so reports are deterministic."""
    i = min(range(len(steps)), key=lambda j: steps[j][0])
    return steps[i:] + steps[:i]


def _classify(labels: Sequence[int]) -> str:
    """Elle's naming: by rw count and adjacency, then a -process/-realtime suffix."""
    rw = labels.count(_RW)
    if rw == 1:
        name = "G-single"
    elif rw > 1:
        adjacent = any(labels[i] == _RW and labels[i - 1] == _RW for i in range(len(labels)))
        name = "G2-item" if adjacent else "G-nonadjacent"
    elif _WR in labels:
        name = "G1c"
    else:
        name = "G0"
    if _RT in labels:
        return name + "-realtime"
    if _PR in labels:
        return name + "-process"
    return name


def check(
    history: History,
    *,
    process: bool = False,
    realtime: bool = False,
    search_budget: int = 2_000_000,
) -> list[Anomaly]:
    """Every anomaly in ``history``: non-cycle ones, then the shortest cycle of each type per
    strongly connected component.

    ``process``/``realtime`` add session and real-time order edges (Elle's -process and
    -realtime variants). ``search_budget`` caps edge relaxations per anomaly type and
    component, so a huge component cannot stall the check; a cycle found after the budget ran
    out says it may not be the shortest.
    """
    with _gc_paused():
        d = _derive(history, process, realtime)
        anomalies = list(d.anomalies)
        # the best (most specific) label per ordered pair, with its explanation
        pairs: dict[tuple[int, int], tuple[int, _Meta]] = {}
        for i in _cyclic_edges(len(d.ids), d.src, d.dst):
            u, v, m = d.src[i], d.dst[i], d.meta[i]
            got = pairs.get((u, v))
            if got is None or m[0] < got[0]:
                pairs[(u, v)] = (m[0], m)
        if not pairs:
            return anomalies
        g = nx.DiGraph()
        g.add_edges_from(pairs)
        sccs = sorted(
            (sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1),
            key=lambda c: c[0],
        )
        specs = _specs(process, realtime)
        for scc in sccs:
            members = set(scc)
            adj: dict[int, list[tuple[int, int]]] = {}
            for x in scc:
                adj[x] = sorted((y, pairs[(x, y)][0]) for y in g.successors(x) if y in members)
            hits = _search_scc(scc, adj, specs, search_budget)
            if not hits:
                hits = [_fallback(g.subgraph(scc), pairs)]
            for name, steps, exhaustive in hits:
                real = _rotate(_collapse(steps, pairs, d.n_txns))
                cycle = tuple(_edge(d.ids, x, y, m) for x, y, m in real)
                note = "" if exhaustive else "search budget ran out: may not be the shortest"
                anomalies.append(Anomaly(name, cycle, tuple(d.ids[x] for x, _, _ in real), note))
        return anomalies


def _fallback(
    sub: nx.DiGraph, pairs: dict[tuple[int, int], tuple[int, _Meta]]
) -> tuple[str, list[tuple[int, int, int]], bool]:
    """Some cycle of a strongly connected component, when every typed search ran out.

    ``find_cycle`` is fast here: the component is strongly connected, so the first depth-first
    branch closes a cycle.
    """
    found = nx.find_cycle(sub)
    steps = [(int(x), int(y), pairs[(x, y)][0]) for x, y in found]
    return _classify([lab for _, _, lab in steps if lab != _HUB]), steps, False


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
