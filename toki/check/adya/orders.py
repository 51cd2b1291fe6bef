"""Edges from a total version order per key: a given one (toki's simulator knows it) or, for
list-append keys, the one every read reveals (Elle's inference).

For a list key every read returns the whole list, so the longest read is the version order
and every other read must be a prefix of it (else ``incompatible-order``). Appends nobody read
come after everything that was read. With the order known, each version links to the next:
ww between consecutive writers, wr from a version's writer to its readers, rw from a
version's readers to the writer of the *next element* (even when that is the same transaction
that wrote the read one: a read in the middle of a transaction's run of appends anti-depends
on that transaction, as in Elle).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from toki.check.adya.explain import Anomaly, kname, render_read, tname
from toki.check.adya.graph import INFERRED, LATER, LIST, RW, WR, WW, Graph, fan_out
from toki.check.adya.history import Key, TxnId, Value
from toki.check.adya.scan import Scan
from toki.errors import HistoryFormatError

__all__ = ["KeyOrder", "key_orders", "order_edges"]

_NONE: Final = object()


@dataclass(slots=True)
class KeyOrder:
    """One key's version order: elements, their positions and writers (-1: none known)."""

    order: tuple[Value, ...]
    pos: dict[Value, int]
    w: list[int]
    flags: int
    raw: tuple[Value, ...] = ()  # the longest read as read (it may repeat an element)
    first_dup: int = 1 << 62  # reads longer than this repeat an element
    tail: list[tuple[int, Value]] = field(default_factory=list)  # unread appends (lists)


def final_writes(s: Scan, keys: set[Key]) -> dict[Key, list[tuple[Value, int]]]:
    """Each txn's last write per key, for the given keys."""
    inter = s.intermediate
    return {
        k: [(v, n) for v, n in s.writer.get(k, {}).items() if (k, v) not in inter] for k in keys
    }


def key_orders(
    s: Scan, explicit: Mapping[Key, tuple[Value, ...]]
) -> tuple[dict[Key, KeyOrder], list[Anomaly]]:
    """The version order of every list key and every key with a given order."""
    anomalies: list[Anomaly] = []
    longest: dict[Key, tuple[Value, ...]] = {}
    list_keys = s.list_keys
    for k, v in itertools.chain(zip(s.rk, s.rv, strict=True), s.own_reads):
        if k in list_keys and type(v) is tuple and len(v) > len(longest.get(k, ())):
            longest[k] = v
    inferred = {k for k in list_keys if k not in explicit}
    final = final_writes(s, inferred)
    out: dict[Key, KeyOrder] = {}
    for k in list_keys | set(explicit):
        flags = LIST if k in list_keys else 0
        if k in explicit:
            order = explicit[k]
        else:
            order = longest.get(k, ())
            flags |= INFERRED
            if not order:
                # Elle: a key appended to exactly once and never read has the order [x]
                fin = final.get(k, [])
                if len(s.writer.get(k, {})) == 1 and len(fin) == 1 and s.oks[fin[0][1]]:
                    order = (fin[0][0],)
        raw = order
        first_dup = 1 << 62
        if len(set(order)) != len(order):
            if flags & INFERRED:
                seen: set[Value] = set()
                for j, e in enumerate(order):
                    if e in seen:
                        first_dup = j
                        break
                    seen.add(e)
            else:
                anomalies.append(_duplicates(k, order, None, False))
            order = tuple(dict.fromkeys(order))
        wd = s.writer.get(k, {})
        w = [wd.get(e, -1) for e in order]
        if not flags & INFERRED and -1 in w:
            e = order[w.index(-1)]
            raise HistoryFormatError(
                f"version_order[{k!r}]",
                f"lists {e!r}, which no committed or in-doubt transaction wrote",
                "list only installed versions",
            )
        ko = KeyOrder(order, {e: i for i, e in enumerate(order)}, w, flags, raw, first_dup)
        if flags & INFERRED:
            ko.tail = [(n, e) for e, n in final.get(k, ()) if e not in ko.pos and s.oks[n]]
        out[k] = ko
    anomalies.extend(_dirty_updates(s, out))
    return out, anomalies


def _duplicates(k: Key, v: tuple[Value, ...], reader: TxnId | None, read: bool) -> Anomaly:
    """A read (or a given order) that lists an element more than once."""
    counts: dict[Value, int] = {}
    for e in v:
        counts[e] = counts.get(e, 0) + 1
    dups = {e: c for e, c in counts.items() if c > 1}
    what = ", ".join(f"{e!r} ×{c}" for e, c in dups.items())
    if reader is None and read:
        return Anomaly(
            "duplicate-elements",
            (),
            (),
            f"the longest read of {kname(k)} contains an element more than once ({what})",
        )
    if reader is None:
        return Anomaly(
            "incompatible-order",
            (),
            (),
            f"the version order of {kname(k)} lists an element twice: {render_read(v, True)}",
        )
    return Anomaly(
        "duplicate-elements",
        (),
        (reader,),
        f"{tname(reader)} read {kname(k)}={render_read(v, True)}, which contains an element "
        f"more than once ({what})",
    )


def _dirty_updates(s: Scan, orders: dict[Key, KeyOrder]) -> list[Anomaly]:
    """A committed append after an aborted one in a list's order (Elle's dirty-update)."""
    out: list[Anomaly] = []
    failed = s.failed
    for k in s.failed_keys:
        ko = orders.get(k)
        if ko is None or not ko.flags & LIST:
            continue
        aborted: tuple[TxnId, Value] | None = None
        for e, w in zip(ko.order, ko.w, strict=True):
            f = failed.get((k, e))
            if f is not None:
                aborted = (f, e)
            elif w >= 0 and s.oks[w] and aborted is not None:
                out.append(
                    Anomaly(
                        "dirty-update",
                        (),
                        (aborted[0], s.ids[w]),
                        f"{tname(s.ids[w])} appended {e!r} to {kname(k)} after "
                        f"{aborted[1]!r}, appended by {tname(aborted[0])}, which aborted",
                    )
                )
                aborted = None
    return out


def order_edges(
    s: Scan, g: Graph, orders: dict[Key, KeyOrder], reg_readers: dict[tuple[Key, Any], list[int]]
) -> list[Anomaly]:
    """ww along each order; for every external read: G1a, garbage, G1b, incompatible order,
    wr from its writer, rw to the next writer. Reads of registers without a given order are
    collected in ``reg_readers`` for ``rw_register``."""
    anomalies: list[Anomaly] = []
    add = g.add
    for k, korder in orders.items():
        w, order, flags = korder.w, korder.order, korder.flags
        for i in range(1, len(order)):
            a, b = w[i - 1], w[i]
            if a >= 0 and b >= 0 and a != b:
                add(a, b, (WW, k, order[i - 1], order[i], flags))
        if korder.tail and order and w[-1] >= 0:
            for n, e in korder.tail:
                if n != w[-1]:
                    add(w[-1], n, (WW, k, order[-1], e, flags | LATER))
    ids, writer, failed, inter = s.ids, s.writer, s.failed, s.intermediate
    list_keys, reg_keys, failed_keys = s.list_keys, s.reg_keys, s.failed_keys
    tail_readers: dict[Key, list[tuple[int, Value]]] = {}
    for k, v, node in zip(s.rk, s.rv, s.rn, strict=True):
        is_list = k in list_keys or (k not in reg_keys and type(v) is tuple)
        ko = orders.get(k)
        if is_list:
            if v is None:
                v = ()
            elif type(v) is not tuple:
                raise HistoryFormatError(
                    f"txn {ids[node]!r}",
                    f"read of list key {k!r} returned {v!r}, not a list",
                    "a read of an appended-to key returns the whole list",
                )
            ver = v[-1] if v else None
            if v and k in failed_keys:
                bad = next((e for e in v if (k, e) in failed), _NONE)
                if bad is not _NONE:
                    anomalies.append(
                        Anomaly(
                            "G1a",
                            (),
                            (ids[node], failed[(k, bad)]),
                            f"{tname(ids[node])} read {kname(k)}={render_read(v, True)}, which "
                            f"contains {bad!r}, appended by {tname(failed[(k, bad)])}, "
                            "which aborted",
                        )
                    )
            if ko is not None and v:
                if len(v) > ko.first_dup and ko.raw[: len(v)] == v:
                    # a prefix of the longest read as read, repeats included
                    anomalies.append(_duplicates(k, v, ids[node], True))
                elif ko.pos.get(ver, -1) != len(v) - 1 or ko.order[: len(v)] != v:
                    if len(set(v)) != len(v):
                        anomalies.append(_duplicates(k, v, ids[node], True))
                    anomalies.append(
                        Anomaly(
                            "incompatible-order",
                            (),
                            (ids[node],),
                            f"{tname(ids[node])} read {kname(k)}={render_read(v, True)}, which "
                            f"is not a prefix of {render_read(ko.order, True)}, another read "
                            "of it",
                        )
                    )
                    # it still saw its last element's writer (as in Elle); where it sits in
                    # the version order is unknown, so no rw edge
                    wn = writer.get(k, {}).get(ver, -1)
                    if wn >= 0 and wn != node:
                        add(wn, node, (WR, k, ver, ver, LIST))
                    continue
        else:
            ver = v
        if ver is None:
            i = -1
        elif ko is not None:
            i = ko.pos.get(ver, -2)
        else:
            i = -2
        if i == -2:
            # not in a version order: an unplaced write, an aborted one, or garbage
            wd = writer.get(k)
            wq = None if wd is None else wd.get(ver)
            if wq is None:
                _bad_read(k, ver, v, is_list, ids[node], failed, anomalies)
                if ko is None and (k, ver) not in failed:
                    # a version from before the history, perhaps: its readers still
                    # anti-depend on the versions inferred to follow it
                    reg_readers.setdefault((k, ver), []).append(node)
                continue
            if wq != node:
                add(wq, node, (WR, k, ver, ver, LIST if is_list else 0))
                if (k, ver) in inter:
                    anomalies.append(_g1b(k, v, is_list, ids[node], ids[wq]))
            if ko is None:
                reg_readers.setdefault((k, ver), []).append(node)
            continue
        if ko is None:  # the initial state of a register without a given order
            reg_readers.setdefault((k, None), []).append(node)
            continue
        if i >= 0:
            wn = ko.w[i]
            if wn >= 0 and wn != node:
                add(wn, node, (WR, k, ver, ver, ko.flags & LIST))
                if (k, ver) in inter:
                    anomalies.append(_g1b(k, v, is_list, ids[node], ids[wn]))
        j = i + 1
        if j < len(ko.order):
            nw = ko.w[j]
            if nw >= 0 and nw != node:
                add(node, nw, (RW, k, ver, ko.order[j], ko.flags))
        elif ko.tail:
            tail_readers.setdefault(k, []).append((node, ver))
    # Readers of the last observed version anti-depend on every unread append.
    for k, rs in tail_readers.items():
        fan_out(g, rs, orders[k].tail, k, LIST | INFERRED | LATER, f"<unread appends to {k!r}>")
    return anomalies


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
        if is_list:
            return  # reported above with the aborted element
        out.append(
            Anomaly(
                "G1a",
                (),
                (reader, failed[(k, ver)]),
                f"{tname(reader)} read {kname(k)}={render_read(v, is_list)}, written by "
                f"{tname(failed[(k, ver)])}, which aborted",
            )
        )
    else:
        out.append(
            Anomaly(
                "garbage-read",
                (),
                (reader,),
                f"{tname(reader)} read {kname(k)}={render_read(v, is_list)}, "
                "which no transaction in the history wrote (garbage, or data from before it)",
            )
        )


def _g1b(k: Key, v: Any, is_list: bool, reader: TxnId, writer: TxnId) -> Anomaly:
    return Anomaly(
        "G1b",
        (),
        (reader, writer),
        f"{tname(reader)} read {kname(k)}={render_read(v, is_list)}, which {tname(writer)} "
        "overwrote before it committed",
    )
