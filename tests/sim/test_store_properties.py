"""Properties of the simulated store over random small programs and random interleavings.

* SERIALIZABLE: the committed transactions are equivalent to some serial order: for one of
  the permutations of the committed transactions, a serial run from the same initial state
  returns every value each committed transaction read and ends in the same final state.
* REPEATABLE_READ (PL-2.99) on item-only programs (no predicates, so no phantoms): the same.
* SNAPSHOT and REPEATABLE_READ: no lost update (committed increments all count).
* Every level: a step that raises WouldBlock changes nothing observable; committed
  transactions never read a version written by an aborted transaction (G1a) except at
  READ_UNCOMMITTED; the same program and schedule give the same history (determinism).

Seeds are fixed (derandomize=True); the whole file runs in a few seconds.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toki.isolation import Isolation
from toki.sim import Op, OpKind, SerializationFailure, SimStore, TxnStatus, WouldBlock

INITIAL = {1: 10, 2: 20}
KEYS = (1, 2, 3)  # 3 starts absent: writing it is an insert


def p_all(key: Any, value: Any) -> bool:
    return True


def p_even(key: Any, value: Any) -> bool:
    return bool(value % 2 == 0)


def p_big(key: Any, value: Any) -> bool:
    return bool(value > 15)


def p_odd_key(key: Any, value: Any) -> bool:
    return bool(key % 2 == 1)


PREDICATES: tuple[Callable[[Any, Any], bool], ...] = (p_all, p_even, p_big, p_odd_key)


def bump(key: Any, value: Any) -> Any:
    return value + 1


# A program op: ("r", k) ("w", k, v) ("inc", k) ("del", k) ("sel", i) ("upd", i) ("delw", i)
ProgOp = tuple[Any, ...]

item_op = st.one_of(
    st.tuples(st.just("r"), st.sampled_from(KEYS)),
    st.tuples(st.just("w"), st.sampled_from(KEYS), st.integers(1, 99)),
    st.tuples(st.just("inc"), st.sampled_from(KEYS)),
    st.tuples(st.just("del"), st.sampled_from(KEYS)),
)
predicate_op = st.one_of(
    st.tuples(st.just("sel"), st.integers(0, len(PREDICATES) - 1)),
    st.tuples(st.just("upd"), st.integers(0, len(PREDICATES) - 1)),
    st.tuples(st.just("delw"), st.integers(0, len(PREDICATES) - 1)),
)
any_op = st.one_of(item_op, predicate_op)
counter_op = st.one_of(
    st.tuples(st.just("r"), st.sampled_from(KEYS)),
    st.tuples(st.just("inc"), st.sampled_from(KEYS)),
)


def programs(op: st.SearchStrategy[ProgOp]) -> st.SearchStrategy[list[list[ProgOp]]]:
    return st.lists(st.lists(op, min_size=1, max_size=4), min_size=2, max_size=4)


schedules = st.lists(st.integers(0, 3), min_size=0, max_size=40)


def _steps(prog: list[ProgOp]) -> list[ProgOp]:
    """Store steps of a program: `inc` is a read step then a write step; then commit."""
    out: list[ProgOp] = []
    for op in prog:
        if op[0] == "inc":
            out += [("inc_read", op[1]), ("inc_write", op[1])]
        else:
            out.append(op)
    out.append(("commit",))
    return out


@dataclass
class Run:
    store: SimStore
    txn_ids: list[int]
    observed: dict[int, list[Any]] = field(default_factory=dict)  # program -> reads in order
    committed: list[int] = field(default_factory=list)  # program indices, in commit order
    waits: int = 0


def execute(level: Isolation, progs: list[list[ProgOp]], schedule: list[int]) -> Run:
    """Run the programs concurrently; `schedule` picks who moves next (then round robin).

    Checks on every WouldBlock that nothing observable changed."""
    store = SimStore(level, initial=INITIAL)
    steps = [_steps(p) for p in progs]
    run = Run(store, [store.begin() for _ in progs])
    pcs = [0] * len(progs)
    last_read: dict[int, Any] = {}
    waiting: dict[int, frozenset[int]] = {}
    live = list(range(len(progs)))
    choices = iter(schedule)
    for _ in range(2000):
        if not live:
            break
        finished = {t for t in run.txn_ids if store.status(t) is not TxnStatus.ACTIVE}
        runnable = [i for i in live if i not in waiting or waiting[i] & finished]
        pool = runnable or live
        i = pool[next(choices, 0) % len(pool)]
        if next(choices, None) is None:  # schedule exhausted: rotate fairly
            live.append(live.pop(live.index(i)))
        txn, op = run.txn_ids[i], steps[i][pcs[i]]
        before = (store.state_hash(), store.history_len(), store.snapshot(), store.active())
        try:
            result = _step(store, txn, op, last_read.get(i))
        except WouldBlock as wb:
            after = (store.state_hash(), store.history_len(), store.snapshot(), store.active())
            assert after == before, "WouldBlock changed the store"
            waiting[i] = wb.blockers
            run.waits += 1
            continue
        except SerializationFailure:
            assert store.status(txn) is TxnStatus.ABORTED
            live.remove(i)
            waiting.pop(i, None)
            continue
        waiting.pop(i, None)
        if op[0] in ("r", "inc_read", "sel", "upd", "delw"):
            run.observed.setdefault(i, []).append(result)
        if op[0] == "inc_read":
            last_read[i] = result
        pcs[i] += 1
        if op[0] == "commit":
            run.committed.append(i)
            live.remove(i)
    assert not live, "the schedule did not finish (a livelock in the store?)"
    return run


def _step(store: SimStore, txn: int, op: ProgOp, last: Any) -> Any:
    kind = op[0]
    if kind in ("r", "inc_read"):
        return store.read(txn, op[1])
    if kind == "w":
        return store.write(txn, op[1], op[2])
    if kind == "inc_write":
        return store.write(txn, op[1], (last or 0) + 1)
    if kind == "del":
        return store.delete(txn, op[1])
    if kind == "sel":
        return store.select(txn, PREDICATES[op[1]])
    if kind == "upd":
        return store.update_where(txn, PREDICATES[op[1]], bump)
    if kind == "delw":
        return store.delete_where(txn, PREDICATES[op[1]])
    if kind == "commit":
        return store.commit(txn)
    raise AssertionError(kind)


def serial(prog: list[ProgOp], state: dict[Any, Any]) -> list[Any]:
    """Run one program alone on `state` (mutated); return what it read."""
    seen: list[Any] = []
    for op in prog:
        kind = op[0]
        if kind == "r":
            seen.append(state.get(op[1]))
        elif kind == "w":
            state[op[1]] = op[2]
        elif kind == "inc":
            v = state.get(op[1])
            seen.append(v)
            state[op[1]] = (v or 0) + 1
        elif kind == "del":
            state.pop(op[1], None)
        else:
            pred = PREDICATES[op[1]]
            match = {k: v for k, v in state.items() if pred(k, v)}
            if kind == "sel":
                seen.append(match)
            elif kind == "upd":
                new = {k: bump(k, v) for k, v in match.items()}
                state.update(new)
                seen.append(new)
            else:
                for k in match:
                    del state[k]
                seen.append(match)
    return seen


def serial_order(progs: list[list[ProgOp]], run: Run) -> tuple[int, ...] | None:
    """A permutation of the committed programs that explains reads and final state, if any."""
    final = run.store.snapshot()
    for perm in itertools.permutations(run.committed):
        state = dict(INITIAL)
        if all(serial(progs[i], state) == run.observed.get(i, []) for i in perm) and (
            state == final
        ):
            return perm
    return None


# ---------------------------------------------------------------------------- properties


@settings(max_examples=400, derandomize=True, deadline=None)
@given(programs(any_op), schedules)
def test_serializable_is_equivalent_to_a_serial_order(
    progs: list[list[ProgOp]], schedule: list[int]
) -> None:
    run = execute(Isolation.SERIALIZABLE, progs, schedule)
    assert serial_order(progs, run) is not None, (progs, schedule, run.observed, run.committed)


@settings(max_examples=250, derandomize=True, deadline=None)
@given(programs(item_op), schedules)
def test_repeatable_read_items_only_is_serializable(
    progs: list[list[ProgOp]], schedule: list[int]
) -> None:
    """PL-2.99 forbids every item cycle (G2-item); only predicates can break it."""
    run = execute(Isolation.REPEATABLE_READ, progs, schedule)
    assert serial_order(progs, run) is not None, (progs, schedule, run.observed, run.committed)


@settings(max_examples=250, derandomize=True, deadline=None)
@given(programs(counter_op), schedules, st.sampled_from(["SNAPSHOT", "REPEATABLE_READ"]))
def test_no_lost_update(progs: list[list[ProgOp]], schedule: list[int], level: str) -> None:
    run = execute(Isolation[level], progs, schedule)
    final = run.store.snapshot()
    for key in KEYS:
        incs = sum(op == ("inc", key) for i in run.committed for op in progs[i])
        assert final.get(key, 0) == INITIAL.get(key, 0) + incs


@settings(max_examples=150, derandomize=True, deadline=None)
@given(programs(any_op), schedules, st.sampled_from(list(Isolation)))
def test_every_level_runs_deterministically_and_records_a_sound_history(
    progs: list[list[ProgOp]], schedule: list[int], level: Isolation
) -> None:
    run = execute(level, progs, schedule)  # also checks that every wait changed nothing
    again = execute(level, progs, schedule)
    history = run.store.history()
    assert history == again.store.history()
    assert run.store.state_hash() == again.store.state_hash()
    assert [op.step for op in history] == list(range(1, len(history) + 1))
    _check_history(run.store, history, level)


def _check_history(store: SimStore, history: tuple[Op, ...], level: Isolation) -> None:
    status = {op.txn: op.kind for op in history if op.kind in (OpKind.COMMIT, OpKind.ABORT)}
    # G1a: a committed transaction never read a version written by an aborted one.
    if level is not Isolation.READ_UNCOMMITTED:
        for op in history:
            if op.kind is OpKind.READ and status.get(op.txn) is OpKind.COMMIT:
                assert op.writer is None or status.get(op.writer, OpKind.COMMIT) is OpKind.COMMIT
    # The version order holds exactly the last write of each committed writer, in commit order.
    last_write: dict[tuple[int, Any], int] = {}
    for op in history:
        if op.kind in (OpKind.WRITE, OpKind.DELETE):
            last_write[(op.txn, op.key)] = op.step
    keys = store.keys()
    for key in keys:
        order = store.version_order(key)
        assert [v.commit_seq for v in order] == sorted(v.commit_seq for v in order)
        for v in order:
            if v.writer != 0:
                assert status[v.writer] is OpKind.COMMIT
                assert last_write[(v.writer, key)] == v.version
    installed = {(v.writer, v.key) for k in keys for v in store.version_order(k)}
    for (txn, key), _ in last_write.items():
        assert ((txn, key) in installed) == (status.get(txn) is OpKind.COMMIT)
