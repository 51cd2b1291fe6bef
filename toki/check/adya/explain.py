"""What the checker reports: typed edges that say why they exist, and anomalies built of them.

Every step of a reported cycle names what each transaction did (Elle's explanations: "T1
appended 3 to x; T2 read x ending in 3 → wr"), so a reader can check the claim against the
history without trusting the checker.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from toki.check.adya.history import Key, TxnId, Value

__all__ = ["Anomaly", "Edge", "Rel", "explain", "join", "kname", "render_read", "tname"]

Rel = Literal["ww", "wr", "rw", "process", "realtime"]


def tname(tid: TxnId) -> str:
    """A transaction as prose: ``T3`` for an integer id, the id itself otherwise."""
    return f"T{tid}" if isinstance(tid, int) else str(tid)


def kname(key: Key | None) -> str:
    """A key as prose: ``x`` for a string key, ``key 3`` for an integer one."""
    return f"key {key}" if isinstance(key, int) else str(key)


def render_read(v: Any, is_list: bool) -> str:
    """A read value as prose; long lists show only their last elements."""
    if is_list and isinstance(v, tuple):
        if len(v) > 6:
            return "[… " + " ".join(repr(e) for e in v[-3:]) + "]"
        return "[" + " ".join(repr(e) for e in v) + "]"
    return repr(v)


def join(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True, slots=True)
class Edge:
    """One dependency T_src → T_dst and what justifies it.

    ww: src wrote ``src_value`` of ``key``, dst wrote the following version ``dst_value``.
    wr: src wrote ``src_value``, dst read it. rw: src read ``src_value`` (None: the initial
    state), dst wrote the following version ``dst_value``. process: ``src_value`` is the
    process. realtime: ``src_value`` is src's completion index, ``dst_value`` dst's start index.
    ``adjacent`` is false when ``dst_value`` is known to come later but maybe not next: such
    an edge stands for a path of the true graph with the same number of rw edges.
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
        a, b, k = tname(self.src), tname(self.dst), kname(self.key)
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

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.src,
            "to": self.dst,
            "type": self.rel,
            "key": self.key,
            "value": _plain(self.src_value),
            "value'": _plain(self.dst_value),
            "explanation": self.explain(),
        }


def _plain(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


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
        ring = " → ".join(tname(e.src) for e in self.cycle) + " → " + tname(self.cycle[0].src)
        lines = [f"{self.name}: {ring}"] + ["  " + e.explain() for e in self.cycle]
        if self.reason:
            lines.append("  (" + self.reason + ")")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.name, "txns": list(self.txns)}
        if self.cycle:
            out["cycle"] = [e.to_json() for e in self.cycle]
        if self.reason:
            out["reason"] = self.reason
        out["explanation"] = self.explain()
        return out


def explain(anomalies: Iterable[Anomaly]) -> str:
    """All anomalies, explained; "no anomalies" when there are none."""
    parts = [a.explain() for a in anomalies]
    return "\n".join(parts) if parts else "no anomalies"
