"""SERIALIZABLE's bookkeeping in the simulated store: PostgreSQL's serializable snapshot
isolation (Cahill et al. 2008; Ports & Grittner 2012) with exact predicates instead of page
locks. SIREAD locks on items and predicates, rw-antidependency edges between concurrent
transactions, the dangerous structure T_in -rw-> T_pivot -rw-> T_out checked as each edge is
added, and forgetting committed transactions no active one overlaps.

`Ssi` is a component of `SimStore` (toki/sim/store.py): the store calls it at each read,
write, commit and rollback, and it reads the store's versions, write locks and active
transactions, and fails a transaction through the store.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from toki.sim.ops import Key, Predicate, Version
from toki.sim.txn import Txn, by_key, visible_index

__all__ = ["PIVOT_DOOMED", "Ssi"]

RW_DEPENDENCIES = "could not serialize access due to read/write dependencies among transactions"
PIVOT_WRITE = RW_DEPENDENCIES + " (canceled on identification as a pivot, during write)"
PIVOT_READ = RW_DEPENDENCIES + " (canceled on conflict out to pivot, during read)"
PIVOT_DOOMED = RW_DEPENDENCIES + " (canceled on identification as a pivot by a concurrent commit)"


class Ssi:
    """SIREAD locks and rw edges of the transactions SERIALIZABLE still has to consider."""

    __slots__ = (
        "_active",
        "_fail",
        "_versions",
        "_xlock",
        "kept",
        "pred_holders",
        "siread",
        "txns",
    )

    def __init__(
        self,
        versions: Mapping[Key, list[Version]],
        xlock: Mapping[Key, int],
        active: Mapping[int, Txn],
        fail: Callable[[Txn, str], NoReturn],
    ) -> None:
        """The store's committed versions, write locks and active transactions (read, never
        written here), and how it fails a transaction (rollback, then the error)."""
        self._versions = versions
        self._xlock = xlock
        self._active = active
        self._fail = fail
        self.txns: dict[int, Txn] = {}  # active and still-relevant committed transactions
        self.siread: dict[Key, set[int]] = {}
        self.pred_holders: dict[int, Txn] = {}
        self.kept: deque[Txn] = deque()

    def committed(self, t: Txn, horizon: int) -> None:
        self.kept.append(t)
        self.forget_old(horizon)

    def aborted(self, t: Txn, horizon: int) -> None:
        self.forget(t)
        self.forget_old(horizon)

    def siread_add(self, t: Txn, key: Key) -> None:
        if key in t.sireads:
            return
        t.sireads.add(key)
        readers = self.siread.get(key)
        if readers is None:
            self.siread[key] = {t.id}
        else:
            readers.add(t.id)

    def conflict_out_next(self, t: Txn, key: Key, vs: list[Version] | None, idx: int) -> None:
        """A read saw a version that a concurrent transaction has overwritten (committed after
        our snapshot, or still in flight): rw edge from us to the next version's writer."""
        if vs is not None and idx + 1 < len(vs):
            writer = self.txns.get(vs[idx + 1].writer)
        else:
            holder = self._xlock.get(key)
            writer = self.txns.get(holder) if holder is not None and holder != t.id else None
        if writer is not None and writer is not t and not writer.doomed:
            self._flag(t, writer, t)

    def predicate_read(
        self, t: Txn, where: Predicate, snap: int, matched: Mapping[Key, Any]
    ) -> None:
        """Predicate SIREAD lock plus conflict-out to every concurrent writer whose version of
        a row would change the predicate's result (phantoms included)."""
        if not any(p is where for p in t.preds):
            t.preds.append(where)
        self.pred_holders[t.id] = t
        # Keys in a canonical order: which writers this read dooms must not depend on the
        # order in which independent commits first installed the keys (docs/exploration.md).
        for key, vs in sorted(self._versions.items(), key=by_key):
            if key in t.writes:
                continue
            idx = visible_index(vs, snap)
            if key in matched:
                self.siread_add(t, key)
                self.conflict_out_next(t, key, vs, idx)
            for v in vs[idx + 1 :]:
                if not v.deleted and where(key, v.value):
                    writer = self.txns.get(v.writer)
                    if writer is not None and not writer.doomed:
                        self._flag(t, writer, t)
        for key, holder in sorted(self._xlock.items(), key=by_key):
            if holder == t.id:
                continue
            p = self._active[holder].writes[key]
            w = self.txns[holder]
            if not p.deleted and not w.doomed and where(key, p.value):
                self._flag(t, w, t)

    def conflict_in(self, t: Txn, key: Key, value: Any, live: bool, snap: int) -> None:
        """A write by `t` overwrites what a concurrent transaction read (item SIREAD) or
        would change what its predicate read returned: rw edge from that reader to us.
        A doomed reader is skipped, as PostgreSQL does: it will roll back."""
        readers = self.siread.get(key)
        if readers:
            for rid in sorted(readers):
                r = self.txns.get(rid)
                if r is None or r is t or r.doomed:
                    continue
                if r.commit_seq is None or r.commit_seq > snap:
                    self._flag(r, t, t)
        if live and self.pred_holders:
            for r in list(self.pred_holders.values()):
                if r is t or r.doomed or (r.commit_seq is not None and r.commit_seq <= snap):
                    continue
                if t.id not in r.out_conf and any(p(key, value) for p in r.preds):
                    self._flag(r, t, t)

    def _flag(self, r: Txn, w: Txn, current: Txn) -> None:
        """Add the edge r -rw-> w, first checking PostgreSQL's dangerous structure
        T_in -rw-> T_pivot -rw-> T_out with T_out committed first (OnConflict_Check...)."""
        if w.id in r.out_conf or r is w:
            return
        ssi = self.txns
        cr, cw = r.commit_seq, w.commit_seq
        failure = False
        # w is a pivot whose out-conflict t2 committed first (t2 may be r itself: a 2-cycle).
        for oid in w.out_conf:
            c2 = ssi[oid].commit_seq
            if c2 is None:
                continue
            if (cr is None or c2 < cr or oid == r.id) and (cw is None or c2 < cw):
                failure = True
                break
        c2 = w.sum_out_min
        if not failure and c2 is not None and (cr is None or c2 < cr) and (cw is None or c2 < cw):
            failure = True
        # r is a pivot: w committed first and some t0 -rw-> r has not committed before w.
        if not failure and cw is not None:
            for iid in r.in_conf:
                t0 = ssi[iid]
                if t0.doomed:
                    continue
                if t0.commit_seq is None or t0 is w or t0.commit_seq > cw:
                    failure = True
                    break
        if failure:
            if w is current:
                self._fail(w, PIVOT_WRITE)
            if cw is not None:
                self._fail(r, PIVOT_READ)
            w.doomed = True
        r.out_conf.add(w.id)
        w.in_conf.add(r.id)

    def precommit(self, t: Txn) -> None:
        """`t` commits first: doom every active pivot n with t as its T_out and an active (or
        our own) T_in, so that the committing transaction makes progress (as PostgreSQL)."""
        ssi = self.txns
        doom = [
            n
            for n in (ssi[nid] for nid in t.in_conf)
            if n.commit_seq is None
            and not n.doomed
            and any(
                f is t or (f.commit_seq is None and not f.doomed)
                for f in (ssi[fid] for fid in n.in_conf)
            )
        ]
        # All decided on the state before any of them is doomed: PostgreSQL walks its list
        # in conflict order and a pivot doomed earlier no longer counts as a T_in later; that
        # order is an accident of scheduling, and dooming by it would make the outcome depend
        # on the order of independent steps. Dooming every candidate is the safe superset.
        for n in doom:
            n.doomed = True

    def forget(self, t: Txn) -> None:
        """Drop an aborted transaction (its reads and edges no longer matter)."""
        ssi = self.txns
        for rid in t.in_conf:
            other = ssi.get(rid)
            if other is not None:
                other.out_conf.discard(t.id)
        for wid in t.out_conf:
            other = ssi.get(wid)
            if other is not None:
                other.in_conf.discard(t.id)
        self._drop_reads(t)
        ssi.pop(t.id, None)

    def _drop_reads(self, t: Txn) -> None:
        for key in t.sireads:
            readers = self.siread.get(key)
            if readers is not None:
                readers.discard(t.id)
                if not readers:
                    del self.siread[key]
        t.sireads = set()
        t.preds = []
        self.pred_holders.pop(t.id, None)

    def forget_old(self, horizon: int) -> None:
        """Forget committed transactions that no active or future transaction overlaps.

        An rw edge needs two concurrent transactions, so such a transaction can gain no new
        edge; only its out-conflicts can still make a kept transaction a pivot, so each kept
        reader remembers the earliest forgotten out-conflict commit (PostgreSQL's summary)."""
        for a in self._active.values():
            s = a.snap if a.snap is not None else (a.wait.point if a.wait is not None else None)
            if s is not None and s < horizon:
                horizon = s
        kept = self.kept
        ssi = self.txns
        while kept and (kept[0].commit_seq or 0) <= horizon:
            t = kept.popleft()
            seq = t.commit_seq or 0
            for rid in t.in_conf:
                other = ssi.get(rid)
                if other is not None:
                    other.out_conf.discard(t.id)
                    if other.sum_out_min is None or seq < other.sum_out_min:
                        other.sum_out_min = seq
            for wid in t.out_conf:
                other = ssi.get(wid)
                if other is not None:
                    other.in_conf.discard(t.id)
            self._drop_reads(t)
            ssi.pop(t.id, None)
