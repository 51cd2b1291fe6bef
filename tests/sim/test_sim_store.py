"""The store's API contract: errors, the recorded history, hashing, waits, deadlocks, SSI."""

from __future__ import annotations

from typing import Any

import pytest

from toki.errors import InvalidInput, TokiError
from toki.isolation import Isolation
from toki.sim import (
    Deadlock,
    OpKind,
    SerializationFailure,
    SimStore,
    TransactionError,
    TxnStatus,
    Version,
    WouldBlock,
)

RC, RR, SI, SER = (
    Isolation.READ_COMMITTED,
    Isolation.REPEATABLE_READ,
    Isolation.SNAPSHOT,
    Isolation.SERIALIZABLE,
)


def store(level: Isolation = RC) -> SimStore:
    return SimStore(level, initial={1: 10, 2: 20})


# ---------------------------------------------------------------------------- errors


def test_unknown_and_finished_transactions_are_refused_with_a_clear_error() -> None:
    s = store()
    with pytest.raises(TransactionError, match="no transaction 99"):
        s.read(99, 1)
    t = s.begin()
    s.commit(t)
    for call in (lambda: s.read(t, 1), lambda: s.write(t, 1, 5), lambda: s.commit(t)):
        with pytest.raises(TransactionError, match=f"transaction {t} already committed"):
            call()
    with pytest.raises(TransactionError, match="already committed"):
        s.abort(t)
    assert issubclass(TransactionError, TokiError)


def test_abort_after_a_serialization_failure_is_a_no_op() -> None:
    s = store(SI)
    t1, t2 = s.begin(), s.begin()
    s.read(t2, 1)
    s.write(t1, 1, 11)
    s.commit(t1)
    with pytest.raises(SerializationFailure, match="concurrent update") as info:
        s.write(t2, 1, 12)
    assert info.value.txn == t2
    n = s.history_len()
    s.abort(t2)  # like ROLLBACK after an error in PostgreSQL
    assert s.history_len() == n
    assert s.status(t2) is TxnStatus.ABORTED
    with pytest.raises(TransactionError, match="already aborted"):
        s.read(t2, 1)


def test_bad_values_are_refused_before_anything_changes() -> None:
    with pytest.raises(InvalidInput, match="level"):
        SimStore("snapshot", initial={})  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="initial"):
        SimStore(RC, initial={1: None})
    s = store()
    t = s.begin()
    n = s.history_len()
    with pytest.raises(InvalidInput, match="use delete"):
        s.write(t, 1, None)
    with pytest.raises(InvalidInput, match="use delete_where"):
        s.update_where(t, lambda k, v: True, lambda k, v: None)
    assert s.history_len() == n
    assert s.status(t) is TxnStatus.ACTIVE


# ---------------------------------------------------------------------------- history


def test_history_records_versions_read_and_written() -> None:
    s = store(SI)
    t1 = s.begin()
    s.write(t1, 1, 11)
    s.write(t1, 1, 12)  # intermediate version 11 is never installed
    s.delete(t1, 2)
    s.commit(t1)
    t2 = s.begin()
    assert s.read(t2, 1) == 12
    assert s.read(t2, 2) is None
    assert s.read(t2, 3) is None
    assert s.select(t2, lambda k, v: v > 0) == {1: 12}
    s.commit(t2)
    h = s.history()
    kinds = [op.kind for op in h]
    assert kinds == [
        OpKind.BEGIN, OpKind.WRITE, OpKind.WRITE, OpKind.DELETE, OpKind.COMMIT,
        OpKind.BEGIN, OpKind.READ, OpKind.READ, OpKind.READ, OpKind.SELECT, OpKind.COMMIT,
    ]  # fmt: skip
    w12, dele = h[2], h[3]
    assert (w12.txn, w12.key, w12.value, w12.writer, w12.version) == (t1, 1, 12, t1, w12.step)
    assert (dele.key, dele.value, dele.version) == (2, None, dele.step)
    r1, r2, r3, sel = h[6], h[7], h[8], h[9]
    assert (r1.value, r1.writer, r1.version) == (12, t1, w12.step)
    assert (r2.value, r2.writer, r2.version) == (None, t1, dele.step)  # saw the tombstone
    assert (r3.writer, r3.version) == (None, None)  # key never existed
    assert sel.value == ((1, 12),)
    assert [(i.key, i.version, i.matched) for i in sel.items] == [
        (1, w12.step, True),
        (2, dele.step, False),
    ]
    assert s.version_order(1) == (
        Version(1, 10, False, 0, 0, 0),
        Version(1, 12, False, t1, w12.step, 1),
    )
    assert s.version_order(2)[-1].deleted
    assert s.snapshot() == {1: 12}


def test_state_hash_depends_on_the_committed_state_only() -> None:
    a = SimStore(RC, initial={1: 10, 2: 20})
    b = SimStore(RC, initial={2: 20, 1: 10})
    assert a.state_hash() == b.state_hash()
    t = a.begin()
    a.write(t, 1, 11)
    assert a.state_hash() == b.state_hash()  # uncommitted
    a.commit(t)
    assert a.state_hash() != b.state_hash()
    u = b.begin()
    b.write(u, 1, 11)
    b.commit(u)
    assert a.state_hash() == b.state_hash()
    assert SimStore(RC, initial={1: "1"}).state_hash() != SimStore(RC, initial={1: 1}).state_hash()


# ---------------------------------------------------------------------------- waits


def test_wouldblock_names_the_blocker_and_the_retry_succeeds_after_it_finishes() -> None:
    s = store(RC)
    t1, t2 = s.begin(), s.begin()
    s.write(t1, 1, 11)
    before = (s.state_hash(), s.history_len(), s.snapshot())
    with pytest.raises(WouldBlock) as info:
        s.write(t2, 1, 12)
    assert info.value.blockers == frozenset({t1})
    assert (s.state_hash(), s.history_len(), s.snapshot()) == before
    s.commit(t1)
    s.write(t2, 1, 12)
    s.commit(t2)
    assert s.snapshot() == {1: 12, 2: 20}  # read committed: T1's update is lost


def test_read_committed_deadlock_aborts_the_step_that_closes_the_cycle() -> None:
    s = store(RC)  # PostgreSQL detects this deadlock at any level
    t1, t2 = s.begin(), s.begin()
    s.write(t1, 1, 11)
    s.write(t2, 2, 22)
    with pytest.raises(WouldBlock):
        s.write(t1, 2, 21)
    with pytest.raises(Deadlock, match="deadlock") as info:
        s.write(t2, 1, 12)
    assert isinstance(info.value, SerializationFailure)
    assert s.status(t2) is TxnStatus.ABORTED
    assert s.history()[-1].kind is OpKind.ABORT and "deadlock" in s.history()[-1].note
    s.write(t1, 2, 21)  # the survivor's retry goes through
    s.commit(t1)
    assert s.snapshot() == {1: 11, 2: 21}


def test_a_different_statement_after_a_wait_starts_afresh() -> None:
    """Only a retry of the blocked statement keeps its start point (the snapshot)."""
    s = store(SI)
    t1, t2 = s.begin(), s.begin()
    s.write(t1, 1, 11)
    s.write(t1, 2, 21)
    with pytest.raises(WouldBlock):
        s.write(t2, 1, 12)  # T2's first statement: its snapshot would predate T1's commit
    s.commit(t1)
    assert s.read(t2, 2) == 21  # not a retry: the snapshot is taken now
    s.write(t2, 1, 12)  # and no longer conflicts
    s.commit(t2)
    assert s.snapshot() == {1: 12, 2: 21}


def test_repeatable_read_holds_read_locks_to_commit() -> None:
    s = store(RR)
    t1, t2 = s.begin(), s.begin()
    assert s.read(t1, 1) == 10
    with pytest.raises(WouldBlock):
        s.write(t2, 1, 11)
    s.write(t1, 1, 12)  # sole reader may upgrade its lock
    with pytest.raises(WouldBlock):
        s.read(t2, 1)  # write-locked
    s.commit(t1)
    assert s.read(t2, 1) == 12
    # No predicate locks survive a statement: a phantom insert does not wait.
    assert s.select(t2, lambda k, v: v > 100) == {}
    t3 = s.begin()
    s.write(t3, 3, 300)
    s.commit(t3)
    assert s.select(t2, lambda k, v: v > 100) == {3: 300}


def test_read_uncommitted_reads_pending_writes_and_deletes() -> None:
    s = store(Isolation.READ_UNCOMMITTED)
    t1, t2 = s.begin(), s.begin()
    s.write(t1, 1, 11)
    s.delete(t1, 2)
    s.write(t1, 3, 33)
    assert s.read(t2, 1) == 11
    assert s.read(t2, 2) is None
    assert s.select(t2, lambda k, v: True) == {1: 11, 3: 33}
    assert s.history()[-2].writer == t1


# ---------------------------------------------------------------------------- SSI


def test_serializable_write_skew_fails_at_the_second_write_once_the_first_committed() -> None:
    """The on-call doctors example: T1 commits before T2 writes, so T2 fails at its write
    ('canceled on identification as a pivot, during write')."""
    s = store(SER)
    t1, t2 = s.begin(), s.begin()
    everyone = s.select(t1, lambda k, v: True)
    assert s.select(t2, lambda k, v: True) == everyone
    s.write(t1, 1, 0)
    s.commit(t1)
    with pytest.raises(SerializationFailure, match="during write"):
        s.write(t2, 2, 0)
    assert s.snapshot() == {1: 0, 2: 20}


def test_serializable_two_cycle_with_a_committed_partner_is_refused() -> None:
    """Found by hypothesis: T0 reads x; T1 writes x, reads y by predicate, commits; T0 then
    writes y. T0 -rw-> T1 -rw-> T0 with T1 committed first."""
    s = store(SER)
    t0, t1 = s.begin(), s.begin()
    assert s.read(t0, 1) == 10
    s.write(t1, 1, 11)
    assert s.select(t1, lambda k, v: True) == {1: 11, 2: 20}
    assert s.read(t0, 2) == 20
    s.commit(t1)
    with pytest.raises(SerializationFailure, match="pivot"):
        s.write(t0, 2, 21)


def test_a_doomed_pivot_fails_at_its_next_step() -> None:
    s = store(SER)
    t1, t2 = s.begin(), s.begin()
    s.read(t1, 1)
    s.read(t2, 2)
    s.write(t1, 2, 21)  # T2 -rw-> T1
    s.write(t2, 1, 11)  # T1 -rw-> T2
    s.commit(t1)  # T1 commits first: T2 is doomed
    with pytest.raises(SerializationFailure, match="pivot"):
        s.read(t2, 1)


def test_serializable_forgets_transactions_no_one_overlaps() -> None:
    """Bounded bookkeeping: long runs of short transactions keep no SIREAD state around."""
    s = store(SER)
    for i in range(500):
        t = s.begin()
        s.select(t, lambda k, v: True)
        s.write(t, i % 2 + 1, i + 1)
        s.commit(t)
    assert s.active() == ()
    internal: Any = s
    ssi = internal._ssi  # the SERIALIZABLE bookkeeping (toki/sim/ssi.py)
    assert len(ssi.txns) == 0 and not ssi.siread and not ssi.pred_holders


def _doomed_pivot(s: SimStore) -> tuple[int, int]:
    """T1 reads keys 3 and 2 and writes 1; X overwrites 2 and commits (T1 -rw-> X); T3 reads
    1, sees T1's pending write and dooms T1 (a pivot whose out-conflict committed first).
    Returns (T1, T3); T1 is active, doomed, and still holds its SIREAD lock on key 3."""
    t1 = s.begin()
    s.read(t1, 3)
    s.read(t1, 2)
    s.write(t1, 1, 11)
    x = s.begin()
    s.write(x, 2, 21)
    s.commit(x)
    t3 = s.begin()
    assert s.read(t3, 1) == 10
    return t1, t3


def test_a_doomed_reader_does_not_make_a_writer_fail() -> None:
    """PostgreSQL's CheckTargetForConflictsIn skips doomed readers ("a transaction that will
    roll back"): writing what a doomed transaction read creates no rw-edge and cannot make
    the writer a pivot. Found when this store counted doomed readers as live: T4 (whose own
    out-conflict Y committed first) failed at its write although its only in-conflict came
    from a transaction already condemned to roll back."""
    s = SimStore(SER, initial={1: 10, 2: 20, 3: 30, 4: 40})
    t1, t3 = _doomed_pivot(s)
    t4 = s.begin()
    s.read(t4, 4)
    y = s.begin()
    s.write(y, 4, 41)  # T4 -rw-> Y, Y commits first
    s.commit(y)
    s.write(t4, 3, 31)  # T1 read 3, but T1 is doomed: no T1 -rw-> T4, no pivot
    s.commit(t4)
    with pytest.raises(SerializationFailure, match="pivot"):
        s.read(t1, 3)
    s.commit(t3)
    assert s.snapshot() == {1: 10, 2: 21, 3: 31, 4: 41}

