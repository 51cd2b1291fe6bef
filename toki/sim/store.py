"""A deterministic, in-memory, multi-version transactional key-value store.

The simulator runs agents against this store so that the isolation level is an experimental
variable. Its behaviour at READ_COMMITTED, SNAPSHOT and SERIALIZABLE reproduces PostgreSQL's
published Hermitage results (read committed, repeatable read, serializable); READ_UNCOMMITTED
and REPEATABLE_READ follow Adya's PL-1 and PL-2.99 with the classic locking implementation.
`docs/isolation.md` explains each choice; the summary:

* every level takes long write locks on the keys it writes (no dirty writes, G0);
* READ_UNCOMMITTED reads the newest version, committed or not (dirty reads);
* READ_COMMITTED is PostgreSQL's: each statement reads the latest committed data; a write to a
  key locked by another writer waits, then applies to the newest version after re-checking
  the statement's predicate on it (EvalPlanQual);
* REPEATABLE_READ is PL-2.99 by locking: long item read and write locks, predicate locks only
  for the duration of one statement, so phantoms occur; waits and deadlocks are real;
* SNAPSHOT is PostgreSQL's "repeatable read": one snapshot per transaction, taken at its first
  statement, and first-updater-wins (writing a key that a concurrent transaction committed
  raises SerializationFailure);
* SERIALIZABLE is PostgreSQL's serializable snapshot isolation: SNAPSHOT plus SIREAD tracking
  of item and predicate reads, rw-antidependency edges and PostgreSQL's dangerous-structure
  rules (Cahill et al. 2008; Ports & Grittner 2012), with exact predicates instead of page locks.

Contract with callers (the scheduler): a step that would wait raises `WouldBlock` and changes
no data and no history, it only remembers the wait (for deadlock detection and, as PostgreSQL
does, the point in time the blocked statement started). Retry the same call later. A step a
database would refuse raises `SerializationFailure` (or its subclass `Deadlock`) after aborting
the transaction. Every statement is atomic: a predicate write either applies in full or waits.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, NoReturn

from toki.errors import (
    Deadlock,
    InvalidInput,
    SerializationFailure,
    TransactionError,
    WouldBlock,
)
from toki.isolation import Isolation
from toki.sim.ops import (
    INITIAL_TXN,
    Key,
    Op,
    OpKind,
    Predicate,
    Seen,
    TxnStatus,
    Updater,
    Version,
    not_active_error,
    state_digest,
    txn_status,
)
from toki.sim.ssi import PIVOT_DOOMED, Ssi
from toki.sim.txn import Pending, Txn, Wait, visible_index

__all__ = [
    "INITIAL_TXN",
    "Key",
    "Op",
    "OpKind",
    "Predicate",
    "Seen",
    "SimStore",
    "TxnStatus",
    "Updater",
    "Version",
    "not_active_error",
    "state_digest",
    "txn_status",
]

# Level codes, ordered so that `code >= _SI` means "multi-version snapshot reads".
_RU, _RC, _RR, _SI, _SER = 0, 1, 2, 3, 4
_CODE = {
    Isolation.READ_UNCOMMITTED: _RU,
    Isolation.READ_COMMITTED: _RC,
    Isolation.REPEATABLE_READ: _RR,
    Isolation.SNAPSHOT: _SI,
    Isolation.SERIALIZABLE: _SER,
}

_CONCURRENT_UPDATE = "could not serialize access due to concurrent update"


class _Row(NamedTuple):
    value: Any
    writer: int
    version: int
    live: bool


class SimStore:
    """A multi-version key-value store with five isolation levels; see the module docstring.

    >>> s = SimStore(Isolation.READ_COMMITTED, initial={1: 10})
    >>> t = s.begin(); s.write(t, 1, 11); s.commit(t); s.snapshot()
    {1: 11}
    """

    __slots__ = (
        "_active",
        "_code",
        "_finished",
        "_hist",
        "_level",
        "_next_id",
        "_seq",
        "_slock",
        "_ssi",
        "_step",
        "_versions",
        "_xlock",
    )

    def __init__(self, level: Isolation, initial: Mapping[Any, Any] | None = None) -> None:
        if not isinstance(level, Isolation):
            raise InvalidInput("level", f"{level!r} is not an Isolation", "e.g. Isolation.SNAPSHOT")
        self._level = level
        self._code = _CODE[level]
        self._versions: dict[Key, list[Version]] = {}
        for key, value in (initial or {}).items():
            if value is None:
                raise InvalidInput(f"initial[{key!r}]", "None is not storable", "omit the key")
            self._versions[key] = [Version(key, value, False, INITIAL_TXN, 0, 0)]
        self._xlock: dict[Key, int] = {}  # key -> the one transaction holding its write lock
        self._slock: dict[Key, set[int]] = {}  # REPEATABLE_READ item read locks
        self._active: dict[int, Txn] = {}
        self._finished: dict[int, TxnStatus] = {}
        self._next_id = 1
        self._seq = 0  # commits so far; a snapshot is "every commit with seq <= snap"
        self._step = 0
        self._hist: list[Op] = []
        # SERIALIZABLE bookkeeping: records of active and still-relevant committed txns.
        self._ssi = Ssi(self._versions, self._xlock, self._active, self._fail)

    # ------------------------------------------------------------------ public read-only API

    @property
    def level(self) -> Isolation:
        return self._level

    def history(self) -> tuple[Op, ...]:
        """Every operation so far, in step order (blocked attempts are not operations)."""
        return tuple(self._hist)

    def history_len(self) -> int:
        return len(self._hist)

    def version_order(self, key: Key) -> tuple[Version, ...]:
        """The committed versions of `key` in install (= commit) order, initial state first."""
        return tuple(self._versions.get(key, ()))

    def keys(self) -> tuple[Key, ...]:
        """Every key that has at least one committed version (live or deleted)."""
        return tuple(self._versions)

    def snapshot(self) -> dict[Key, Any]:
        """The committed state: live keys and their newest committed values."""
        return {k: vs[-1].value for k, vs in self._versions.items() if not vs[-1].deleted}

    def state_hash(self) -> str:
        """A deterministic sha256 of the committed state (keys and values by repr, sorted)."""
        return state_digest((repr(k), repr(v)) for k, v in self.snapshot().items())

    def status(self, txn: int) -> TxnStatus:
        return txn_status(txn, self._active, self._finished)

    def active(self) -> tuple[int, ...]:
        """Ids of the transactions that have begun and not finished, in begin order."""
        return tuple(self._active)

    # ------------------------------------------------------------------ transactions

    def begin(self) -> int:
        """Start a transaction. Its snapshot (SNAPSHOT/SERIALIZABLE) is taken at its first
        statement, as in PostgreSQL, not here."""
        tid = self._next_id
        self._next_id += 1
        t = Txn(tid)
        self._active[tid] = t
        if self._code == _SER:
            self._ssi.txns[tid] = t
        self._log(tid, OpKind.BEGIN)
        return tid

    def commit(self, txn: int) -> None:
        t = self._get(txn)
        t.wait = None
        if self._code == _SER:
            self._ssi.precommit(t)
        self._seq += 1
        seq = self._seq
        t.commit_seq = seq
        tid = t.id
        versions = self._versions
        xlock = self._xlock
        for key, p in t.writes.items():
            ver = Version(key, p.value, p.deleted, tid, p.version, seq)
            vs = versions.get(key)
            if vs is None:
                versions[key] = [ver]
            else:
                vs.append(ver)
            del xlock[key]
        t.writes = {}
        self._release_slocks(t)
        del self._active[tid]
        self._finished[tid] = TxnStatus.COMMITTED
        self._log(tid, OpKind.COMMIT)
        if self._code == _SER:
            self._ssi.committed(t, self._seq)

    def abort(self, txn: int) -> None:
        """Roll back. Aborting a transaction the store already aborted (after a
        SerializationFailure) is a no-op, like ROLLBACK in a failed PostgreSQL transaction."""
        t = self._active.get(txn)
        if t is None:
            if self._finished.get(txn) is TxnStatus.ABORTED:
                return
            raise self._not_active(txn)
        self._rollback(t, "abort")

    # ------------------------------------------------------------------ statements

    def read(self, txn: int, key: Key) -> Any:
        """The value of `key` as `txn` sees it, or None when it does not exist."""
        t = self._get(txn)
        point = self._seq if t.wait is None else self._resume(t, ("read", key))
        own = t.writes.get(key)
        if own is not None:
            self._log(t.id, OpKind.READ, key, own.value, t.id, own.version)
            return own.value
        code = self._code
        if code == _RU:
            holder = self._xlock.get(key)
            if holder is not None:
                p = self._active[holder].writes[key]
                self._log(t.id, OpKind.READ, key, p.value, holder, p.version)
                return p.value
        elif code == _RR:
            holder = self._xlock.get(key)
            if holder is not None:
                self._block(t, frozenset((holder,)), ("read", key), point)
            self._slock_add(t, key)
        vs = self._versions.get(key)
        ver: Version | None = None
        if code >= _SI:
            snap = t.snap if t.snap is not None else point
            t.snap = snap
            idx = visible_index(vs, snap)
            if idx >= 0 and vs is not None:
                ver = vs[idx]
            if code == _SER:
                self._ssi.siread_add(t, key)
                self._ssi.conflict_out_next(t, key, vs, idx)
        elif vs:
            ver = vs[-1]
        if ver is None:
            self._log(t.id, OpKind.READ, key, None, None, None)
            return None
        value = None if ver.deleted else ver.value
        self._log(t.id, OpKind.READ, key, value, ver.writer, ver.version)
        return value

    def select(self, txn: int, where: Predicate) -> dict[Key, Any]:
        """A predicate read: every live row with `where(key, value)` true, as `txn` sees it."""
        t = self._get(txn)
        fingerprint = ("select", where)
        point = self._seq if t.wait is None else self._resume(t, fingerprint)
        code = self._code
        if code == _RR:
            blockers = self._predicate_conflicts(t, where)
            if blockers:
                self._block(t, blockers, fingerprint, point)
        snap = self._statement_snap(t, point)
        items: list[Seen] = []
        result: dict[Key, Any] = {}
        for key, row in self._scan(t, snap):
            matched = row.live and bool(where(key, row.value))
            items.append(Seen(key, row.value, row.writer, row.version, matched))
            if matched:
                result[key] = row.value
        if code == _RR:
            for key in result:
                if key not in t.writes:
                    self._slock_add(t, key)
        elif code == _SER:
            self._ssi.predicate_read(t, where, snap, result)
        if code >= _SI:
            t.snap = snap
        self._log(t.id, OpKind.SELECT, None, tuple(result.items()), None, None, where, tuple(items))
        return result

    def write(self, txn: int, key: Key, value: Any) -> None:
        """Insert or update `key` (an upsert; writing a new key is an insert)."""
        if value is None:
            raise InvalidInput("value", "None is not a storable value", "use delete(txn, key)")
        self._put(txn, key, value, False)

    def delete(self, txn: int, key: Key) -> None:
        """Delete `key`: a blind write of a tombstone version."""
        self._put(txn, key, None, True)

    def update_where(self, txn: int, where: Predicate, fn: Updater) -> dict[Key, Any]:
        """`UPDATE ... SET value = fn(key, value) WHERE where(key, value)`; returns new values."""
        return self._modify(txn, where, fn)

    def delete_where(self, txn: int, where: Predicate) -> dict[Key, Any]:
        """`DELETE ... WHERE where(key, value)`; returns the deleted rows' values."""
        return self._modify(txn, where, None)

    # ------------------------------------------------------------------ statement internals

    def _put(self, txn: int, key: Key, value: Any, deleted: bool) -> None:
        t = self._get(txn)
        fingerprint = ("delete" if deleted else "write", key)
        point = self._seq if t.wait is None else self._resume(t, fingerprint)
        code = self._code
        tid = t.id
        holder = self._xlock.get(key)
        if holder is not None and holder != tid:
            self._block(t, self._write_blockers(t, key, holder), fingerprint, point)
        if code == _RR:
            readers = self._slock.get(key)
            if readers and (len(readers) > 1 or tid not in readers):
                self._block(t, self._write_blockers(t, key, None), fingerprint, point)
        if code >= _SI:
            snap = t.snap if t.snap is not None else point
            if key not in t.writes:
                vs = self._versions.get(key)
                if vs and vs[-1].commit_seq > snap:
                    self._fail(t, _CONCURRENT_UPDATE)
            if code == _SER:
                self._ssi.conflict_in(t, key, value, not deleted, snap)
            t.snap = snap
        self._apply(t, key, value, deleted)

    def _modify(self, txn: int, where: Predicate, fn: Updater | None) -> dict[Key, Any]:
        t = self._get(txn)
        fingerprint = ("update_where" if fn else "delete_where", where, fn)
        point = self._seq if t.wait is None else self._resume(t, fingerprint)
        code = self._code
        tid = t.id
        snap = self._statement_snap(t, point)
        items: list[Seen] = []
        candidates: list[tuple[Key, _Row]] = []
        for key, row in self._scan(t, snap):
            matched = row.live and bool(where(key, row.value))
            items.append(Seen(key, row.value, row.writer, row.version, matched))
            if matched:
                candidates.append((key, row))
        blockers: set[int] = set()
        for key, _ in candidates:
            holder = self._xlock.get(key)
            if holder is not None and holder != tid:
                blockers.add(holder)
            if code == _RR:
                blockers.update(r for r in self._slock.get(key, ()) if r != tid)
        if code == _RR:
            blockers.update(self._predicate_conflicts(t, where))
        if blockers:
            self._block(t, frozenset(blockers), fingerprint, point)
        # Compute the writes (EvalPlanQual at READ_COMMITTED), validate, then check, then apply.
        writes: list[tuple[Key, Any, Any]] = []  # key, new value (None = delete), old value
        for key, row in candidates:
            base = row.value
            if code >= _SI:
                if key not in t.writes and self._versions[key][-1].commit_seq > snap:
                    self._fail(t, _CONCURRENT_UPDATE)
            elif code == _RC and key not in t.writes:
                newest = self._versions[key][-1]
                if newest.version != row.version or newest.writer != row.writer:
                    # The row changed while we waited: re-check the predicate on the newest
                    # version and update that one, or skip the row (PostgreSQL EvalPlanQual).
                    if newest.deleted or not where(key, newest.value):
                        continue
                    base = newest.value
            if fn is None:
                writes.append((key, None, base))
            else:
                new = fn(key, base)
                if new is None:
                    raise InvalidInput("fn", f"returned None for key {key!r}", "use delete_where")
                writes.append((key, new, base))
        if code == _SER:
            self._ssi.predicate_read(t, where, snap, {k: r.value for k, r in candidates})
            for key, new, _ in writes:
                self._ssi.conflict_in(t, key, new, new is not None, snap)
        if code >= _SI:
            t.snap = snap
        self._log(
            tid,
            OpKind.SELECT,
            None,
            tuple((k, r.value) for k, r in candidates),
            None,
            None,
            where,
            tuple(items),
        )
        out: dict[Key, Any] = {}
        for key, new, old in writes:
            self._apply(t, key, new, new is None)
            out[key] = old if new is None else new
        return out

    def _apply(self, t: Txn, key: Key, value: Any, deleted: bool) -> None:
        step = self._log(t.id, OpKind.DELETE if deleted else OpKind.WRITE, key, value, t.id, None)
        t.writes[key] = Pending(value, deleted, step)
        self._xlock[key] = t.id

    def _statement_snap(self, t: Txn, point: int) -> int:
        """The commit horizon a statement reads at (RU/RR: now; RC: statement start; SI: txn)."""
        if self._code >= _SI:
            return t.snap if t.snap is not None else point
        if self._code == _RC:
            return point
        return self._seq

    def _scan(self, t: Txn, snap: int) -> Iterator[tuple[Key, _Row]]:
        """Every row the statement can see (tombstones included, live=False)."""
        writes = t.writes
        dirty = self._code == _RU
        xlock = self._xlock
        active = self._active
        tid = t.id
        for key, vs in self._versions.items():
            own = writes.get(key)
            if own is not None:
                yield key, _Row(own.value, tid, own.version, not own.deleted)
                continue
            if dirty:
                holder = xlock.get(key)
                if holder is not None:
                    p = active[holder].writes[key]
                    yield key, _Row(p.value, holder, p.version, not p.deleted)
                    continue
            idx = visible_index(vs, snap)
            if idx >= 0:
                v = vs[idx]
                yield key, _Row(v.value, v.writer, v.version, not v.deleted)
        for key, own in writes.items():
            if key not in self._versions:
                yield key, _Row(own.value, tid, own.version, not own.deleted)
        if dirty:
            for key, holder in list(xlock.items()):
                if holder != tid and key not in self._versions:
                    p = active[holder].writes[key]
                    yield key, _Row(p.value, holder, p.version, not p.deleted)

    def _predicate_conflicts(self, t: Txn, where: Predicate) -> frozenset[int]:
        """REPEATABLE_READ short predicate lock: writers holding a row whose committed or
        pending value satisfies the predicate."""
        out: set[int] = set()
        for key, holder in self._xlock.items():
            if holder == t.id:
                continue
            p = self._active[holder].writes[key]
            if not p.deleted and where(key, p.value):
                out.add(holder)
                continue
            vs = self._versions.get(key)
            if vs and not vs[-1].deleted and where(key, vs[-1].value):
                out.add(holder)
        return frozenset(out)

    def _write_blockers(self, t: Txn, key: Key, holder: int | None) -> frozenset[int]:
        out = {holder} if holder is not None else set()
        if self._code == _RR:
            out.update(r for r in self._slock.get(key, ()) if r != t.id)
        return frozenset(out)

    # ------------------------------------------------------------------ locks and waiting

    def _slock_add(self, t: Txn, key: Key) -> None:
        holders = self._slock.get(key)
        if holders is None:
            self._slock[key] = {t.id}
        else:
            holders.add(t.id)
        t.slocks.add(key)

    def _release_slocks(self, t: Txn) -> None:
        for key in t.slocks:
            holders = self._slock[key]
            holders.discard(t.id)
            if not holders:
                del self._slock[key]
        t.slocks = set()

    def _resume(self, t: Txn, fingerprint: tuple[Any, ...]) -> int:
        """A statement after a wait: if it retries the blocked one, it keeps the blocked
        statement's start point (PostgreSQL's statement snapshot); otherwise it starts now."""
        wait = t.wait
        t.wait = None
        if wait is not None and wait.fingerprint == fingerprint:
            return wait.point
        return self._seq

    def _block(
        self, t: Txn, blockers: frozenset[int], fingerprint: tuple[Any, ...], point: int
    ) -> NoReturn:
        if self._closes_cycle(t.id, blockers):
            names = ", ".join(str(b) for b in sorted(blockers))
            self._fail(
                t, f"deadlock detected: it waits for {names}, which wait for it", deadlock=True
            )
        t.wait = Wait(fingerprint, point, blockers)
        raise WouldBlock(t.id, blockers)

    def _closes_cycle(self, tid: int, blockers: frozenset[int]) -> bool:
        stack = list(blockers)
        seen: set[int] = set()
        while stack:
            b = stack.pop()
            if b == tid:
                return True
            if b in seen:
                continue
            seen.add(b)
            other = self._active.get(b)
            if other is not None and other.wait is not None:
                stack.extend(other.wait.blockers)
        return False

    # ------------------------------------------------------------------ finishing

    def _get(self, txn: int) -> Txn:
        t = self._active.get(txn)
        if t is None:
            raise self._not_active(txn)
        if t.doomed:
            self._fail(t, PIVOT_DOOMED)
        return t

    def _not_active(self, txn: object) -> TransactionError:
        return not_active_error(txn, self._finished)

    def _fail(self, t: Txn, reason: str, *, deadlock: bool = False) -> NoReturn:
        self._rollback(t, reason)
        if deadlock:
            raise Deadlock(t.id, reason)
        raise SerializationFailure(t.id, reason)

    def _rollback(self, t: Txn, note: str) -> None:
        for key in t.writes:
            del self._xlock[key]
        t.writes = {}
        t.wait = None
        self._release_slocks(t)
        del self._active[t.id]
        self._finished[t.id] = TxnStatus.ABORTED
        self._log(t.id, OpKind.ABORT, note=note)
        if self._code == _SER:
            self._ssi.aborted(t, self._seq)

    def _log(
        self,
        txn: int,
        kind: OpKind,
        key: Key | None = None,
        value: Any = None,
        writer: int | None = None,
        version: int | None = None,
        predicate: Predicate | None = None,
        items: tuple[Seen, ...] = (),
        note: str = "",
    ) -> int:
        self._step = step = self._step + 1
        if kind is OpKind.WRITE or kind is OpKind.DELETE:
            version = step  # a written version is named by the step that wrote it
        self._hist.append(Op(step, txn, kind, key, value, writer, version, predicate, items, note))
        return step
