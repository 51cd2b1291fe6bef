"""One pass over the transactions: who wrote each version, which reads are external, and the
anomalies visible inside one transaction (internal, future-read).

Everything later (version orders, edges) works from what this pass collects, so the history
is walked once. At a million transactions this pass and the edge passes dominate the check,
so the common case (every micro-op on its own key) takes a short path.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from toki.check.adya.explain import Anomaly, join, kname, render_read, tname
from toki.check.adya.history import History, Key, TxnId, Value
from toki.errors import HistoryFormatError

__all__ = ["Scan", "internal_violation", "lost_updates", "scan"]


@dataclass(slots=True)
class Scan:
    """What one pass over the history collects. Nodes are committed or in-doubt txns."""

    ids: list[TxnId] = field(default_factory=list)
    procs: list[Hashable] = field(default_factory=list)
    starts: list[int | None] = field(default_factory=list)
    ends: list[int | None] = field(default_factory=list)
    oks: list[bool] = field(default_factory=list)
    writer: dict[Key, dict[Value, int]] = field(default_factory=dict)  # key -> value -> node
    failed: dict[tuple[Key, Value], TxnId] = field(default_factory=dict)  # aborted writes
    failed_keys: set[Key] = field(default_factory=set)
    intermediate: set[tuple[Key, Value]] = field(default_factory=set)  # overwritten by own txn
    list_keys: set[Key] = field(default_factory=set)
    reg_keys: set[Key] = field(default_factory=set)
    # external reads of ok txns (key, raw value, node), in history order
    rk: list[Key] = field(default_factory=list)
    rv: list[Any] = field(default_factory=list)
    rn: list[int] = field(default_factory=list)
    own_reads: list[tuple[Key, tuple[Value, ...]]] = field(default_factory=list)  # after own append
    wfr: list[tuple[Key, Any, Value]] = field(default_factory=list)  # read k then wrote k
    lu_cand: list[tuple[Key, Any, int]] = field(default_factory=list)  # lost-update candidates
    anomalies: list[Anomaly] = field(default_factory=list)


def _bad(where: str, problem: str, fix: str = "") -> HistoryFormatError:
    return HistoryFormatError(where, problem, fix)


def scan(history: History) -> Scan:
    """Collect writers, external reads and in-transaction anomalies, in one linear pass."""
    s = Scan()
    ids, anomalies, writer = s.ids, s.anomalies, s.writer
    failed, failed_keys, intermediate = s.failed, s.failed_keys, s.intermediate
    list_keys, reg_keys = s.list_keys, s.reg_keys
    rk_add, rv_add, rn_add = s.rk.append, s.rv.append, s.rn.append
    seen_ids: set[TxnId] = set()

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
        s.procs.append(t.process)
        s.starts.append(t.start_index)
        ok = status == "ok"
        s.ends.append(t.end_index if ok else None)
        s.oks.append(ok)
        # Fast path: every op on its own key, so there is nothing internal to check.
        simple = len(ops) < 2 or len({op.key for op in ops}) == len(ops)
        own: dict[Key, Value] | None = None  # key -> last value this txn wrote
        ext: dict[Key, Any] | None = None  # key -> first external read
        expect: dict[Key, tuple[Any, ...]] = {}  # key -> what this txn must read next
        read_elems: dict[Key, set[Value]] | None = None  # list elements read so far
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
                if k in expect and internal_violation(expect[k], v):
                    anomalies.append(
                        Anomaly(
                            "internal",
                            (),
                            (tid,),
                            f"{tname(tid)} read {kname(k)}={render_read(v, True)} but its own "
                            f"earlier reads and writes imply {_render_expected(expect[k])}",
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
                    s.own_reads.append((k, v))  # still reveals the list's version order
                if type(v) is tuple and v:
                    if read_elems is None:
                        read_elems = {}
                    read_elems.setdefault(k, set()).update(v)
                expect[k] = ("L", v, ()) if type(v) is tuple and k in list_keys else ("R", v)
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
            if ok and kind == "append" and read_elems is not None and v in read_elems.get(k, ()):
                anomalies.append(
                    Anomaly(
                        "future-read",
                        (),
                        (tid,),
                        f"{tname(tid)} read {kname(k)} containing {v!r} before it appended "
                        f"{v!r} itself",
                    )
                )
            if own is None:
                own = {}
            if k in own:
                intermediate.add((k, own[k]))
            elif ext is not None and k in ext and ok:
                s.lu_cand.append((k, ext[k], node))
            own[k] = v
            if kind == "append":
                prev = expect.get(k)
                if prev is None:
                    expect[k] = ("L", None, (v,))
                elif prev[0] == "L":
                    expect[k] = ("L", prev[1], (*prev[2], v))
                elif prev[1] is None or type(prev[1]) is tuple:
                    expect[k] = ("L", prev[1] or (), (v,))
                else:
                    expect[k] = ("L", None, (v,))
            else:
                expect[k] = ("R", v)
        if own and ext and ok:
            for k, v in own.items():
                if k in ext:
                    s.wfr.append((k, ext[k], v))
    return s


def internal_violation(exp: tuple[Any, ...], v: Any) -> bool:
    """Does read value ``v`` contradict what the txn's own earlier ops imply (Elle's internal)?"""
    if exp[0] == "R":
        return bool(v != exp[1])
    if type(v) is not tuple:
        return True
    pre, suf = exp[1], exp[2]
    if pre is not None:
        return bool(v != pre + suf)
    return len(v) < len(suf) or v[len(v) - len(suf) :] != suf


def _render_expected(exp: tuple[Any, ...]) -> str:
    if exp[0] == "L":
        pre, suf = exp[1], exp[2]
        if pre is None:
            return "a list ending in " + render_read(suf, True)
        return render_read(pre + suf, True)
    return repr(exp[1])


def lost_updates(s: Scan) -> list[Anomaly]:
    """Two committed txns read the same version of k and both wrote k (Elle's lost-update)."""
    groups: dict[tuple[Key, Any], list[int]] = {}
    for k, v, node in s.lu_cand:
        ver = (v[-1] if v else None) if k in s.list_keys and type(v) is tuple else v
        groups.setdefault((k, ver), []).append(node)
    out = []
    for (k, ver), nodes in groups.items():
        if len(nodes) > 1:
            names = join([tname(s.ids[n]) for n in nodes])
            what = "the initial state" if ver is None else f"the version {ver!r}"
            both = "both" if len(nodes) == 2 else "all"
            out.append(
                Anomaly(
                    "lost-update",
                    (),
                    tuple(s.ids[n] for n in nodes),
                    f"{names} {both} read {what} of {kname(k)} and then wrote {kname(k)}: "
                    "all but one of those updates is lost",
                )
            )
    return out
