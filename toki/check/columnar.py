"""The columnar check of Elle list-append histories: decoded operations go straight into
integer columns, the dependency graph is built over those columns, and strong components
are found in compiled code (scipy), with no ``Txn``/``Op`` objects and no per-edge values.

It decides one question exactly: would the exact checker (``toki.check.elle.load`` then
``toki.check.adya.verdict``) find nothing at all in this history? When the answer is yes,
the verdict is ``valid? true`` and nothing needs explaining. Anything that could make the
exact path report or refuse (an anomaly of any kind, a non-trivial strongly connected
component, an empty graph, a malformed or unusual operation, a register write) makes it
answer ``None``, and ``check_file`` then runs the exact path, whose
verdict and explanations (each cycle with the reason for each edge) are the output. So the
columnar path changes how fast a clean history is checked, never what any history's
verdict says; the property tests in ``tests/check/test_columnar.py`` hold it to that.

How it stays linear: every read must be a prefix of the longest read of its key (checked
as reads arrive, against the longest so far), so a read is kept as (key, length, reader)
only, and the version order of a key is its longest read. Writers of each position and
the ww/wr/rw edges are then array operations; real-time order is a chain of start/end
event nodes (O(n) edges, the reachability of Elle's transitively reduced order).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import msgspec
import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from toki.check.adya.checker import DEFAULT_BUDGET
from toki.check.adya.graph import HUB_FANOUT, gc_paused
from toki.check.adya.scan import internal_violation
from toki.check.adya.verdict import Verdict, options, plan, verdict
from toki.check.elle import Batch, _edn_batches, _Record, load
from toki.errors import HistoryFormatError

__all__ = ["Checked", "check_file", "clean_verdict", "json_batches"]

NONE: Final = -(2**63)  # no index (an :index this low is handed to the exact path)


class _Bail(Exception):
    """The exact path must look at this history."""


def clean_verdict(
    batches: Iterable[Batch],
    *,
    models: Iterable[str],
    anomalies: Iterable[str],
    wfr_keys: bool,
    sequential_keys: bool,
    linearizable_keys: bool,
) -> tuple[int, Verdict] | None:
    """(transactions, verdict) when the exact path would find nothing in the history the
    batches hold, else None. Register options do not matter: list keys are never inferred
    from them."""
    ms, _, process, realtime = plan(models, anomalies)
    try:
        with gc_paused():  # millions of small containers, none of them cyclic
            cols = _read(batches)
            if not _acyclic(cols, process, realtime):
                return None
    except (_Bail, HistoryFormatError, OverflowError, msgspec.ValidationError, msgspec.DecodeError):
        return None
    return cols.count, Verdict(
        True,
        {},
        [],
        [],
        ms,
        "list-append",
        process,
        realtime,
        options(wfr_keys, sequential_keys, linearizable_keys),
        {},
    )


_LINE: Final = msgspec.json.Decoder(_Record)
_ARRAY: Final = msgspec.json.Decoder(list[_Record])
_BLOCK: Final = 1 << 23


def json_batches(fh: BinaryIO) -> Iterator[Batch]:
    """An Elle JSON file (JSON lines, or an array with one op per line) as typed records,
    8 MiB of whole lines at a time, decoded from bytes: no line objects, no text copies.
    Anything else fails to decode, and the exact path reads it (with line numbers)."""
    array: bool | None = None
    rest = b""
    while True:
        chunk = fh.read(_BLOCK)
        data = rest + chunk
        cut = data.rfind(b"\n") + 1 if chunk else len(data)
        block, rest = data[:cut], data[cut:]
        if array is None:
            block = block.lstrip()
            if not block and chunk:
                continue
            array = block.startswith(b"[")
            if array:
                block = block[1:]
        if array:
            body = block.strip()
            if body.endswith(b"]"):  # the array's end (an element ends with "}")
                body = body[:-1].rstrip()
            body = body.rstrip(b",")
            if body:
                yield (), _ARRAY.decode(b"[" + body + b"]")
        elif block.strip():
            yield (), _LINE.decode_lines(block)
        if not chunk:
            return


class _Cols:
    """What the pass over the operations collects. Nodes are committed or in-doubt txns."""

    def __init__(self) -> None:
        self.count = 0  # transactions, aborted ones included
        self.ids = array("q")  # every transaction's :index
        self.starts = array("q")  # NONE: no invocation
        self.ends = array("q")  # NONE: in doubt
        self.procs: list[Hashable] = []
        self.oks = bytearray()
        self.writer: dict[Any, dict[Any, int]] = {}  # key -> appended element -> node
        self.failed: dict[Any, set[Any]] = {}  # key -> elements appended by aborted txns
        self.longest: dict[Any, tuple[Any, ...]] = {}  # key -> longest read so far
        self.intermediate: set[tuple[Any, Any]] = set()  # appends the same txn followed
        self.lost: set[tuple[Any, Any]] = set()  # (key, version read) then appended
        # external reads of committed txns: key, length, reader
        self.rk: list[Any] = []
        self.rl = array("q")
        self.rn = array("q")
        self.appends = False


def _read(batches: Iterable[Batch]) -> _Cols:
    """Pair invocations with completions (per process, first in first out, as
    ``toki.check.elle``) and collect each transaction's writes, reads and in-transaction
    facts (the exact path's ``scan``, for r and append; the common case inline)."""
    c = _Cols()
    pending: dict[Any, deque[tuple[Any, int]]] = {}
    writer, longest, failed = c.writer, c.longest, c.failed
    ids_add, oks_add, starts_add, ends_add = (
        c.ids.append,
        c.oks.append,
        c.starts.append,
        c.ends.append,
    )
    procs_add, rk_add, rl_add, rn_add = c.procs.append, c.rk.append, c.rl.append, c.rn.append
    node = -1
    for _, data in _and_in_doubt(batches, pending):
        if data and type(data[0]) is not _Record:
            raise _Bail  # one decode made the batch: all typed records, or none
        for r in data:
            proc = r.process
            if type(proc) is str and (proc == "nemesis" or proc == ":nemesis"):
                continue
            index = r.index
            f = r.f
            if index is None or proc is None or (f is not None and f != "txn"):
                raise _Bail
            typ = r.type
            if typ == "invoke":
                q = pending.get(proc)
                if q is None:
                    q = pending[proc] = deque()
                q.append((r.value, index))
                continue
            q = pending.get(proc)
            value, start = q.popleft() if q else (None, None)
            if r.value is not None:
                value = r.value
            if value is None or start == NONE:
                raise _Bail
            ids_add(index)
            if typ == "fail":
                for f, k, v in value:
                    if f == "append":
                        if v is None or type(v) is tuple:
                            raise _Bail
                        fs = failed.get(k)
                        if fs is None:
                            failed[k] = {v}
                        else:
                            fs.add(v)
                        c.appends = True
                    elif f != "r":
                        raise _Bail
                continue
            ok = typ == "ok"
            if not ok and typ != "info":
                raise _Bail
            node += 1
            oks_add(ok)
            starts_add(NONE if start is None else start)
            ends_add(index if ok else NONE)
            procs_add(proc)
            n = len(value)
            if n > 1 and (
                value[0][1] == value[1][1] if n == 2 else len({m[1] for m in value}) != n
            ):
                _txn_sharing_keys(c, ok, value, node)
                continue
            for f, k, v in value:
                if f == "r":
                    if not ok:
                        continue
                    if type(v) is not tuple:
                        raise _Bail
                    n = len(v)
                    cur = longest.get(k)
                    if cur is None:
                        longest[k] = v
                    elif n == len(cur):
                        if cur != v:
                            raise _Bail
                    elif n < len(cur):
                        if cur[:n] != v:
                            raise _Bail
                    elif v[: len(cur)] != cur:
                        raise _Bail
                    else:
                        longest[k] = v
                    rk_add(k)
                    rl_add(n)
                    rn_add(node)
                elif f == "append":
                    if v is None or type(v) is tuple:
                        raise _Bail
                    wd = writer.get(k)
                    if wd is None:
                        writer[k] = {v: node}
                    elif v in wd:
                        raise _Bail
                    else:
                        wd[v] = node
                else:
                    raise _Bail
    c.appends = c.appends or bool(writer)
    c.count = len(c.ids)
    return c


def _and_in_doubt(
    batches: Iterable[Batch], pending: dict[Any, deque[tuple[Any, int]]]
) -> Iterator[Batch]:
    """The batches, then an ``info`` completion for each invocation still pending at the
    end (in process order, as ``toki.check.elle`` appends them): it pairs with that
    invocation, so the txn gets the invocation's value and index, as there."""
    yield from batches
    yield (
        (),
        [
            _Record(type="info", process=p, index=index)
            for p, waiting in pending.items()
            for _, index in waiting
        ],
    )


def _seen(c: _Cols, k: Any, v: tuple[Any, ...]) -> None:
    """A read must be a prefix of the longest read of its key, or extend it."""
    cur = c.longest.get(k)
    if cur is None or (len(v) > len(cur) and v[: len(cur)] == cur):
        c.longest[k] = v
    elif cur[: len(v)] != v:
        raise _Bail


def _txn_sharing_keys(c: _Cols, ok: bool, value: Any, node: int) -> None:
    """A transaction touching one key more than once: ``scan``'s internal checks (internal,
    future-read), intermediate appends and lost-update candidates, bailing on any finding."""
    writer = c.writer
    own: dict[Any, Any] = {}  # key -> last element this txn appended
    ext: dict[Any, tuple[Any, ...]] = {}  # key -> first external read
    expect: dict[Any, tuple[Any, ...]] = {}  # key -> what this txn must read next
    reads: dict[Any, tuple[Any, ...]] = {}  # key -> longest read (the others are prefixes)
    for f, k, v in value:
        if f == "r":
            if not ok:
                continue
            if type(v) is not tuple:
                raise _Bail
            if k in expect and internal_violation(expect[k], v):
                raise _Bail
            _seen(c, k, v)
            if k not in own:
                c.rk.append(k)
                c.rl.append(len(v))
                c.rn.append(node)
                ext.setdefault(k, v)
            if len(v) > len(reads.get(k, ())):
                reads[k] = v
            expect[k] = ("L", v, ()) if k in writer else ("R", v)
            continue
        if f != "append" or v is None or type(v) is tuple:
            raise _Bail
        wd = writer.get(k)
        if wd is None:
            wd = writer[k] = {}
        elif v in wd:
            raise _Bail
        wd[v] = node
        if ok and v in reads.get(k, ()):
            raise _Bail  # future-read
        if k in own:
            c.intermediate.add((k, own[k]))
        elif k in ext and ok:
            seen = ext[k]
            ver = (k, seen[-1] if seen else None)
            if ver in c.lost:
                raise _Bail  # lost-update
            c.lost.add(ver)
        own[k] = v
        prev = expect.get(k)
        if prev is None:
            expect[k] = ("L", None, (v,))
        elif prev[0] == "L":
            expect[k] = ("L", prev[1], (*prev[2], v))
        elif prev[1] is None or type(prev[1]) is tuple:
            expect[k] = ("L", prev[1] or (), (v,))
        else:
            expect[k] = ("L", None, (v,))


def _acyclic(c: _Cols, process: bool, realtime: bool) -> bool:
    """Build the graph as arrays; True when it has edges and no cycle, and no read, order or
    write gives the exact path anything to report."""
    ids = np.frombuffer(c.ids, dtype=np.int64)
    if not c.appends or (ids <= NONE).any():
        raise _Bail  # no appends: not this workload; NONE: taken for "no index"
    if len(ids) > 1 and not (ids[1:] > ids[:-1]).all():
        ids = np.sort(ids)
        if (ids[1:] == ids[:-1]).any():
            raise _Bail  # an :index used twice: an error
    oks = c.oks
    n = len(oks)
    kid: dict[Any, int] = {}
    w: list[int] = []  # writer of each position of each key's order, keys one after another
    offsets: list[int] = []
    lengths: list[int] = []
    tails: dict[int, list[int]] = {}  # key id -> committed appends no read saw
    inter = c.intermediate
    inter_keys: dict[Any, list[Any]] = {}
    for k, e in inter:
        inter_keys.setdefault(k, []).append(e)
    inter_at: list[int] = []  # positions holding an intermediate append
    for k, wd in c.writer.items():
        order = c.longest.get(k, ())
        if not order and len(wd) == 1:  # appended to once, never read (Elle's rule)
            ((e, wn),) = wd.items()
            if oks[wn]:
                order = (e,)
        if len(set(order)) != len(order):
            raise _Bail  # duplicate-elements
        fs = c.failed.get(k)
        if fs is not None and not fs.isdisjoint(order):
            raise _Bail  # G1a or dirty-update
        i = kid[k] = len(offsets)
        offsets.append(len(w))
        lengths.append(len(order))
        ws = [wd.get(e, -1) for e in order]
        w += ws
        for e in inter_keys.get(k, ()):
            if e in order:
                inter_at.append(offsets[i] + order.index(e))
        if len(wd) > len(ws) - ws.count(-1):
            placed = set(order)
            tail = [
                wn for e, wn in wd.items() if e not in placed and (k, e) not in inter and oks[wn]
            ]
            if tail:
                tails[i] = tail
    for k in c.longest:
        if k not in kid and c.longest[k]:
            raise _Bail  # a non-empty read of a key nobody appended to: garbage or G1a
    wa = np.array(w, dtype=np.int64)
    off = np.array(offsets, dtype=np.int64)
    olen = np.array(lengths, dtype=np.int64)
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    # ww along each order
    if len(wa) > 1:
        inside = np.ones(len(wa), dtype=bool)
        inside[off[off < len(wa)]] = False  # a key's first position follows another key's last
        a, b = wa[:-1], wa[1:]
        m = inside[1:] & (a >= 0) & (b >= 0) & (a != b)
        srcs.append(a[m])
        dsts.append(b[m])
    # external reads: wr from the writer of the last element, rw to the writer of the next
    rk = np.array([kid.get(k, -1) for k in c.rk], dtype=np.int64)
    rl = np.frombuffer(c.rl, dtype=np.int64)
    rn = np.frombuffer(c.rn, dtype=np.int64)
    listed = rk >= 0
    rk, rl, rn = rk[listed], rl[listed], rn[listed]
    base = off[rk] + rl
    saw = rl > 0
    at = base[saw] - 1
    if inter_at and np.isin(at, np.array(inter_at, dtype=np.int64)).any():
        raise _Bail  # G1b: a read ending in an append its txn then followed
    wn = wa[at]
    m = (wn >= 0) & (wn != rn[saw])
    srcs.append(wn[m])
    dsts.append(rn[saw][m])
    more = rl < olen[rk]
    nw = wa[base[more]]
    m = (nw >= 0) & (nw != rn[more])
    srcs.append(rn[more][m])
    dsts.append(nw[m])
    hubs = 0
    if tails:
        last = ~more
        tail_readers: dict[int, list[int]] = {}
        for k, node in zip(rk[last].tolist(), rn[last].tolist(), strict=True):
            if k in tails:
                tail_readers.setdefault(k, []).append(node)
        extra_s: list[int] = []
        extra_d: list[int] = []
        for k, tail in tails.items():
            if lengths[k] and w[offsets[k] + lengths[k] - 1] >= 0:  # ww to each unread append
                prev = w[offsets[k] + lengths[k] - 1]
                for t in tail:
                    if t != prev:
                        extra_s.append(prev)
                        extra_d.append(t)
            readers = tail_readers.get(k, [])
            if not readers:
                continue
            if len(readers) * len(tail) <= HUB_FANOUT:
                plain, direct = [], readers
            else:
                wset = set(tail)
                plain = [r for r in readers if r not in wset]
                direct = [r for r in readers if r in wset]
            for r in direct:
                for t in tail:
                    if t != r:
                        extra_s.append(r)
                        extra_d.append(t)
            if plain:  # reader -> hub -> each unread append, as fan_out does
                hub = n + hubs
                hubs += 1
                extra_s += plain + [hub] * len(tail)
                extra_d += [hub] * len(plain) + tail
        srcs.append(np.array(extra_s, dtype=np.int64))
        dsts.append(np.array(extra_d, dtype=np.int64))
    if process:
        s, d = _process_pairs(c)
        srcs.append(s)
        dsts.append(d)
    edges = sum(len(x) for x in srcs)
    size = n + hubs
    if realtime:
        s, d, events, some = _realtime_chain(c, size)
        srcs.append(s)
        dsts.append(d)
        size += events
        edges += some
    if not edges:
        raise _Bail  # an empty graph is something the verdict reports
    src = np.concatenate(srcs)
    dst = np.concatenate(dsts)
    # float64 weights: the type the search works in, so it need not convert a copy
    g = csr_matrix((np.ones(len(src)), (src, dst)), shape=(size, size))
    _, labels = connected_components(g, directed=True, connection="strong")
    return bool(np.bincount(labels).max() == 1)


def _realtime_chain(c: _Cols, first: int) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Real-time order with the same reachability as ``realtime_pairs`` in O(n) edges: one
    node per start and end event (``first`` on), chained in time order (at one index, starts
    before ends, as the frontier's events), each txn into its end event, each start event
    into its txn. A path p ⇝ x through events exists iff p completed before x began, and
    ``realtime_pairs`` (the transitive reduction of that order) has the same paths. Returns
    the edges, the number of event nodes, and whether any such pair exists (the exact
    graph then has a real-time edge)."""
    starts = np.frombuffer(c.starts, dtype=np.int64)
    ends = np.frombuffer(c.ends, dtype=np.int64)
    has_s = starts != NONE
    has_e = ends != NONE
    if (has_s & has_e & (ends < starts)).any():
        raise _Bail  # the exact path names the txn
    s_nodes = np.flatnonzero(has_s)
    e_nodes = np.flatnonzero(has_e)
    txn = np.concatenate((s_nodes, e_nodes))
    when = np.concatenate((starts[s_nodes], ends[e_nodes]))
    kind = np.concatenate((np.zeros(len(s_nodes), np.int8), np.ones(len(e_nodes), np.int8)))
    order = np.lexsort((kind, when))
    ev = np.empty(len(order), dtype=np.int64)
    ev[order] = first + np.arange(len(order))  # each event's node, numbered in time order
    is_start = kind == 0
    src = np.concatenate((ev[is_start], txn[~is_start], ev[order[:-1]]))
    dst = np.concatenate((txn[is_start], ev[~is_start], ev[order[1:]]))
    some = bool(len(s_nodes) and len(e_nodes) and ends[e_nodes].min() < starts[s_nodes].max())
    return src, dst, len(order), some


def _process_pairs(c: _Cols) -> tuple[np.ndarray, np.ndarray]:
    """Each process's committed txns in order (start index, else node), as process_edges."""
    pid: dict[Hashable, int] = {}
    procs = np.array([pid.setdefault(p, len(pid)) for p in c.procs], dtype=np.int64)
    node = np.arange(len(c.oks), dtype=np.int64)
    starts = np.frombuffer(c.starts, dtype=np.int64)
    when = np.where(starts == NONE, node, starts)
    ok = np.frombuffer(c.oks, dtype=np.uint8).astype(bool)
    procs, node, when = procs[ok], node[ok], when[ok]
    order = np.lexsort((node, when, procs))
    procs, node = procs[order], node[order]
    same = procs[1:] == procs[:-1]
    return node[:-1][same], node[1:][same]


@dataclass(frozen=True, slots=True)
class Checked:
    """A checked history file: how many transactions it had, the verdict, and which path
    decided it (``columnar`` for a clean list-append history, else ``exact``)."""

    transactions: int
    verdict: Verdict
    path: str


def check_file(
    path: str | Path,
    fmt: str | None = None,
    *,
    models: Iterable[str] = ("strict-serializable",),
    anomalies: Iterable[str] = (),
    wfr_keys: bool = False,
    sequential_keys: bool = False,
    linearizable_keys: bool = False,
    search_budget: int = DEFAULT_BUDGET,
) -> Checked:
    """``verdict(load(path))``, faster: the columnar path (this module) decides
    histories it can prove clean in one streaming pass; every other history (anomalous,
    unusual, malformed) is loaded and checked by the exact path, which explains it."""
    from toki.history import detect_format

    p = Path(path)
    if fmt is None:
        fmt = detect_format(p)
    models, anomalies = list(models), list(anomalies)
    opts = {
        "wfr_keys": wfr_keys,
        "sequential_keys": sequential_keys,
        "linearizable_keys": linearizable_keys,
    }
    if fmt in ("elle-edn", "elle-json"):
        try:
            if fmt == "elle-edn":
                with p.open(encoding="utf-8") as fh:
                    batches = _edn_batches(fh, str(p))
                    clean = clean_verdict(batches, models=models, anomalies=anomalies, **opts)
            else:
                with p.open("rb") as raw:
                    batches = json_batches(raw)
                    clean = clean_verdict(batches, models=models, anomalies=anomalies, **opts)
        except (OSError, UnicodeDecodeError, HistoryFormatError):
            clean = None  # the exact path says what is wrong
        if clean is not None:
            return Checked(clean[0], clean[1], "columnar")
    history = load(p, fmt)
    v = verdict(history, models=models, anomalies=anomalies, search_budget=search_budget, **opts)
    return Checked(len(history.txns), v, "exact")
