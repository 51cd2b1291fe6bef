"""One transaction's mutable state inside the simulated store, and the version-visibility
helpers the store and its SSI bookkeeping (toki/sim/ssi.py) share."""

from __future__ import annotations

from typing import Any, NamedTuple

from toki.sim.ops import Key, Predicate, Version

__all__ = ["Pending", "Txn", "Wait", "by_key", "visible_index"]


class Pending(NamedTuple):
    value: Any
    deleted: bool
    version: int


class Wait(NamedTuple):
    fingerprint: tuple[Any, ...]
    point: int
    blockers: frozenset[int]


class Txn:
    """Mutable per-transaction state. SSI fields are used only at SERIALIZABLE."""

    __slots__ = (
        "commit_seq",
        "doomed",
        "id",
        "in_conf",
        "out_conf",
        "preds",
        "sireads",
        "slocks",
        "snap",
        "sum_out_min",
        "wait",
        "writes",
    )

    def __init__(self, tid: int) -> None:
        self.id = tid
        self.snap: int | None = None
        self.writes: dict[Key, Pending] = {}
        self.slocks: set[Key] = set()
        self.wait: Wait | None = None
        self.commit_seq: int | None = None
        self.doomed = False
        self.in_conf: set[int] = set()  # readers R with R -rw-> self
        self.out_conf: set[int] = set()  # writers W with self -rw-> W
        self.sireads: set[Key] = set()
        self.preds: list[Predicate] = []
        self.sum_out_min: int | None = None  # earliest commit among forgotten out-conflicts


def by_key(item: tuple[Key, Any]) -> str:
    return repr(item[0])


def visible_index(vs: list[Version] | None, snap: int) -> int:
    """Index of the newest version committed at or before `snap`, or -1."""
    if not vs:
        return -1
    i = len(vs) - 1
    while i >= 0 and vs[i].commit_seq > snap:
        i -= 1
    return i
