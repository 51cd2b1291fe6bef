"""The execution engine: runs one schedule of a `Program` against its `SimStore`.

Strategies (`toki.sim.explore`, `toki.sim.dpor`) never touch agents or the store: they ask an
`Execution` which choices are enabled and tell it which one to take. A choice is a process id
(pid): agents are `0..n-1`, "crash agent i" is `n + i`, fault j is `2n + j`. Externally (in
recorded schedules) a choice is the agent index, the string `"crash:<i>"`, or the fault name.
Crash and fault choices stay on offer until their budget is spent (`Program.crash_budget` per
agent, `Fault.limit`), so no choice is ever disabled by another process's step, only enabled:
the assumption optimal DPOR is built on.

Blocking: a step the store answers with `WouldBlock` is still an executed event (the store
remembers the wait: deadlock detection and, as PostgreSQL does, the statement's start point).
The agent is then disabled until one of the transactions it waits for commits or aborts (or it
is crashed); the engine retries the same step when it is scheduled again. Every store-detected
deadlock aborts a victim, so a state where every running agent is blocked is reported as a
deadlock only if it happens anyway.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Final

from toki.errors import ProgramError, SerializationFailure, TokiError, WouldBlock
from toki.isolation import Isolation
from toki.sim.program import (
    ALL,
    CRASHED,
    Abort,
    Agent,
    Begin,
    Commit,
    Crash,
    Delete,
    DeleteWhere,
    Fault,
    Footprint,
    Local,
    Program,
    Read,
    Resource,
    Select,
    Step,
    UpdateWhere,
    Write,
)

__all__ = ["Execution", "choice_key"]

Choice = int | str

_BEGIN, _READ, _SELECT, _WRITE, _DELETE, _UPDATE, _DELETE_WHERE, _COMMIT, _ABORT, _LOCAL = range(10)
_KIND: Final[dict[type, int]] = {
    Begin: _BEGIN,
    Read: _READ,
    Select: _SELECT,
    Write: _WRITE,
    Delete: _DELETE,
    UpdateWhere: _UPDATE,
    DeleteWhere: _DELETE_WHERE,
    Commit: _COMMIT,
    Abort: _ABORT,
    Local: _LOCAL,
}
_KIND_NAME: Final = (
    "begin", "read", "select", "write", "delete", "update_where", "delete_where", "commit",
    "abort", "local",
)  # fmt: skip

_RU, _RC, _RR, _SI, _SER = range(5)
_LEVEL: Final = {
    Isolation.READ_UNCOMMITTED: _RU,
    Isolation.READ_COMMITTED: _RC,
    Isolation.REPEATABLE_READ: _RR,
    Isolation.SNAPSHOT: _SI,
    Isolation.SERIALIZABLE: _SER,
}

_DATA_ALL: Final[Resource] = ("data", ALL)
_XLOCK_ALL: Final[Resource] = ("xlock", ALL)
_SLOCK_ALL: Final[Resource] = ("slock", ALL)
_WAITS: Final[Resource] = ("waits", None)
_SSI_ALL: Final[Resource] = ("ssi", ALL)
_SEQ: Final[Resource] = ("seq", None)
_EMPTY: Final[frozenset[Resource]] = frozenset()


def choice_key(choice: Choice) -> tuple[int, Any]:
    """A total order on choices: agents by index, then crashes by agent, then faults by name."""
    if isinstance(choice, int):
        return (0, choice)
    if choice.startswith("crash:"):
        return (1, int(choice[6:]))
    return (2, choice)


class _AgentState:
    """The engine's view of one agent: its generator, pending step and open transaction."""

    __slots__ = (
        "attempted",
        "blockers",
        "done",
        "enabler",
        "failed",
        "gen",
        "index",
        "kind",
        "outcome",
        "pending",
        "sset",
        "txn",
        "waiting",
        "wset",
    )

    def __init__(self, index: int, gen: Agent) -> None:
        self.index = index
        self.gen = gen
        self.pending: Step | None = None
        self.kind = -1
        self.txn: int | None = None
        self.wset: set[Hashable] = set()  # keys this transaction holds write locks on
        self.sset: set[Hashable] = set()  # keys it holds REPEATABLE_READ read locks on
        self.attempted = False  # a statement ran (or waited): the snapshot is fixed
        self.waiting = False  # the last attempt blocked and has not been retried yet
        self.blockers: frozenset[int] | None = None  # not None: disabled until one finishes
        self.enabler = -1  # index of the event that re-enabled it (-1: none pending)
        self.failed: SerializationFailure | None = None  # the store aborted the transaction
        self.done = False
        self.outcome: Any = None


class Execution:
    """One run in progress. Deterministic: the same choices give the same run.

    With `track=True` every event's `Footprint` is recorded in `fps`, together with
    `alts[i]` (for a crash: the footprint of the step it discarded; for an agent step: the
    footprint its crash would have had just before), `enablers[i]` (for a retried step: the
    event whose commit or abort re-enabled it, else -1), `ends[i]` (the transaction event i
    ended, else -1) and `waits_on` (crash event -> the transactions its victim waited for).
    DPOR needs them all; `fps`, `alts`, `enablers` and `ends` hold the tracked events only.
    """

    __slots__ = (
        "agents",
        "alts",
        "crash_budget",
        "crashes",
        "en",
        "enablers",
        "ends",
        "fault_fired",
        "fault_names",
        "faults",
        "fps",
        "level",
        "max_steps",
        "n",
        "pids",
        "program",
        "ssi",
        "steps",
        "store",
        "track",
        "waits_on",
    )

    def __init__(self, program: Program, *, track: bool = False) -> None:
        world = program.build()
        self.program = program
        self.store = world.store
        self.level = _LEVEL[world.store.level]
        self.track = track
        self.n = len(world.agents)
        self.crash_budget = program.crash_budget
        self.max_steps = program.max_steps
        self.crashes = [0] * len(world.agents)  # crashes so far, per agent
        self.steps = 0
        self.faults: tuple[Fault, ...] = tuple(world.faults)
        self.fault_names = {f.name: j for j, f in enumerate(self.faults)}
        if len(self.fault_names) != len(self.faults):
            raise ProgramError("faults: two faults share a name (give each a unique name)")
        for f in self.faults:
            if f.name.startswith("crash:"):
                raise ProgramError(f"fault {f.name!r}: names starting 'crash:' are reserved")
        self.fault_fired = [0] * len(self.faults)
        self.pids: list[int] = []
        self.fps: list[Footprint] = []
        self.alts: list[Footprint | None] = []
        self.enablers: list[int] = []
        self.ends: list[int] = []  # per event: the transaction it ended (-1: none)
        self.waits_on: dict[int, frozenset[int]] = {}  # crash event -> its victim's blockers
        self.en: list[int] | None = None  # cache of enabled(); None when it may have changed
        self.agents = [_AgentState(i, gen) for i, gen in enumerate(world.agents)]
        self.ssi = _SsiGroups(self.n) if self.level == _SER else None
        for a in self.agents:
            try:
                first = next(a.gen)
            except StopIteration as stop:
                a.done = True
                a.outcome = stop.value
                continue
            except Exception as exc:
                raise ProgramError(
                    f"agent {a.index} raised before its first step: {exc!r}"
                ) from exc
            self._set_pending(a, first)

    # ------------------------------------------------------------------ choices

    def enabled(self) -> list[int]:
        """The pids that can run now, ascending (agents, then crashes, then faults).

        The list is cached until the next step changes it: do not mutate it."""
        if self.steps >= self.max_steps:
            return []
        out = self.en
        if out is not None:
            return out
        out = [a.index for a in self.agents if not a.done and a.blockers is None]
        if self.crash_budget:
            n, budget = self.n, self.crash_budget
            out.extend(n + i for i, c in enumerate(self.crashes) if c < budget)
        if self.faults:
            base = 2 * self.n
            fired = self.fault_fired
            out.extend(base + j for j, f in enumerate(self.faults) if fired[j] < f.limit)
        self.en = out
        return out

    def choice(self, pid: int) -> Choice:
        """The external name of a pid (what schedules record)."""
        n = self.n
        if pid < n:
            return pid
        if pid < 2 * n:
            return f"crash:{pid - n}"
        return self.faults[pid - 2 * n].name

    def pid(self, choice: Choice) -> int | None:
        """The pid of an external choice, or None when the program has no such choice."""
        if isinstance(choice, bool):
            return None
        if isinstance(choice, int):
            return choice if 0 <= choice < self.n else None
        if isinstance(choice, str):
            if choice.startswith("crash:"):
                rest = choice[6:]
                if rest.isdigit() and int(rest) < self.n:
                    return self.n + int(rest)
                return None
            j = self.fault_names.get(choice)
            return None if j is None else 2 * self.n + j
        return None

    @property
    def truncated(self) -> bool:
        return self.steps >= self.max_steps

    def deadlocked(self) -> bool:
        """Some agent is still running but every running agent is blocked."""
        live = [a for a in self.agents if not a.done]
        return bool(live) and all(a.blockers is not None for a in live)

    def outcomes(self) -> tuple[Any, ...]:
        """Each agent's return value; agents still running report "blocked" or "running"."""
        return tuple(
            a.outcome if a.done else ("blocked" if a.blockers is not None else "running")
            for a in self.agents
        )

    # ------------------------------------------------------------------ stepping

    def step(self, pid: int) -> None:
        """Execute one enabled choice (the caller guarantees it is enabled)."""
        n = self.n
        if pid < n:
            self._agent_step(self.agents[pid])
        elif pid < 2 * n:
            self._crash(self.agents[pid - n])
        else:
            self._fault(pid - 2 * n)
        self.steps += 1

    def _record(self, pid: int, fp: Footprint, alt: Footprint | None, enabler: int) -> None:
        self.pids.append(pid)
        self.fps.append(fp)
        self.alts.append(alt)
        self.enablers.append(enabler)
        self.ends.append(-1)

    def _agent_step(self, a: _AgentState) -> None:
        step: Any = a.pending
        kind = a.kind
        if self.track:
            fp = self.footprint(a, step, kind)
            alt = self._widen(self.crash_footprint(a)) if self.crash_budget else None
            self._record(a.index, fp, alt, a.enabler)
        else:
            self.pids.append(a.index)
        a.enabler = -1
        txn = a.txn
        result: Any = None
        if self.ssi is not None:
            if txn is not None and kind != _LOCAL:
                self.ssi.step(a.index, step, kind)
            elif kind == _BEGIN:
                self.ssi.begin(a.index)
        if kind >= _COMMIT or kind == _BEGIN:  # commit, abort, local, begin
            if kind == _COMMIT and txn is not None:
                try:
                    self.store.commit(txn)
                except SerializationFailure as failure:
                    result = failure  # the transaction is over either way
                self._ended(a, txn)
            elif kind == _BEGIN:
                if txn is not None:
                    raise self._misuse(a, "yielded Begin() while its transaction is still open")
                a.failed = None
                a.txn = self.store.begin()
            elif kind == _ABORT:
                a.failed = None
                if txn is not None:
                    self.store.abort(txn)
                    self._ended(a, txn)
            elif kind == _COMMIT:
                if a.failed is None:
                    raise self._misuse(a, "yielded Commit() outside a transaction")
                result = a.failed  # the store already aborted it: COMMIT answers the failure
                a.failed = None
        elif txn is None:
            if a.failed is None:
                raise self._misuse(
                    a, f"yielded {step!r} outside a transaction (yield Begin() first)"
                )
            result = a.failed  # as PostgreSQL: an aborted transaction refuses every statement
        else:
            try:
                result = self._statement(a, txn, step, kind)
            except WouldBlock as wb:
                a.blockers = wb.blockers
                self.en = None
                a.waiting = True
                a.attempted = True
                return
            except SerializationFailure as failure:
                result = failure
                self._ended(a, txn)
                a.failed = failure
        a.waiting = False
        try:
            nxt = a.gen.send(result)
        except StopIteration as stop:
            self._finish(a, stop.value)
            return
        except Exception as exc:
            raise self._crashed_agent(a, exc) from exc
        kind = _KIND.get(type(nxt), -1)
        if kind < 0:
            raise self._misuse(a, f"yielded {nxt!r}, which is not a Step (Begin, Read, ...)")
        a.pending = nxt
        a.kind = kind

    def _statement(self, a: _AgentState, txn: int, step: Any, kind: int) -> Any:
        store = self.store
        try:
            if kind == _READ:
                value = store.read(txn, step.key)
                if self.level == _RR:
                    a.sset.add(step.key)
                a.attempted = True
                return value
            if kind == _WRITE:
                store.write(txn, step.key, step.value)
                a.wset.add(step.key)
                a.attempted = True
                return None
            if kind == _SELECT:
                rows = store.select(txn, step.where)
                if self.level == _RR:
                    a.sset.update(rows)
                a.attempted = True
                return _canonical(rows)
            if kind == _DELETE:
                store.delete(txn, step.key)
                a.wset.add(step.key)
                a.attempted = True
                return None
            if kind == _UPDATE:
                rows = store.update_where(txn, step.where, step.fn)
            else:
                rows = store.delete_where(txn, step.where)
            a.wset.update(rows)
            a.attempted = True
            return _canonical(rows)
        except (WouldBlock, SerializationFailure):
            raise
        except TokiError as exc:
            raise self._misuse(a, f"made the store refuse {step!r}: {exc}") from exc

    def _set_pending(self, a: _AgentState, step: Any) -> None:
        kind = _KIND.get(type(step))
        if kind is None:
            raise self._misuse(a, f"yielded {step!r}, which is not a Step (Begin, Read, ...)")
        a.pending = step
        a.kind = kind

    def _finish(self, a: _AgentState, outcome: Any) -> None:
        a.failed = None
        if a.txn is not None:
            raise self._misuse(
                a, "returned with its transaction still open (yield Commit() or Abort() first)"
            )
        a.done = True
        a.pending = None
        a.outcome = outcome
        self.en = None

    def _ended(self, a: _AgentState, txn: int) -> None:
        """`txn` (the agent's transaction) committed or aborted: release the waiters on it."""
        a.txn = None
        a.wset = set()
        a.sset = set()
        a.attempted = False
        a.waiting = False
        index = len(self.pids) - 1
        if self.track:
            self.ends[-1] = txn
        for b in self.agents:
            blockers = b.blockers
            if blockers is not None and txn in blockers:
                b.blockers = None
                self.en = None
                b.enabler = index

    def _crash(self, a: _AgentState) -> None:
        if self.track:
            fp = self.crash_footprint(a)
            alt = None if a.pending is None else self._widen(self.footprint(a, a.pending, a.kind))
            self._record(self.n + a.index, fp, alt, -1)
        else:
            self.pids.append(self.n + a.index)
        self.crashes[a.index] += 1
        self.en = None
        if a.done:
            return  # too late: crashing a finished agent changes nothing
        if a.blockers is not None:
            if self.track:
                self.waits_on[len(self.pids) - 1] = a.blockers
            a.blockers = None
            a.enabler = len(self.pids) - 1
        else:
            a.enabler = -1
        if a.txn is not None:
            txn = a.txn
            self.store.abort(txn)
            self._ended(a, txn)
        a.waiting = False
        a.failed = None
        try:
            nxt = a.gen.throw(Crash(f"agent {a.index} crashed"))
        except StopIteration as stop:
            self._finish(a, stop.value)
            return
        except Crash:
            a.done = True
            a.pending = None
            a.outcome = CRASHED
            return
        except Exception as exc:
            raise self._crashed_agent(a, exc) from exc
        self._set_pending(a, nxt)

    def _fault(self, j: int) -> None:
        f = self.faults[j]
        if self.track:
            self._record(2 * self.n + j, self.fault_footprint(f), None, -1)
        else:
            self.pids.append(2 * self.n + j)
        self.fault_fired[j] += 1
        self.en = None
        try:
            f.apply()
        except Exception as exc:
            raise ProgramError(
                f"fault {f.name!r} raised {exc!r} (schedule so far: {self.schedule()!r})"
            ) from exc

    def schedule(self) -> tuple[Choice, ...]:
        """The choices taken so far, by their external names."""
        if not self.crash_budget and not self.faults:
            return tuple(self.pids)  # only agents: pids are the names
        return tuple(self.choice(p) for p in self.pids)

    def _misuse(self, a: _AgentState, what: str) -> ProgramError:
        return ProgramError(f"agent {a.index} {what} (schedule so far: {self.schedule()!r})")

    def _crashed_agent(self, a: _AgentState, exc: BaseException) -> ProgramError:
        return ProgramError(
            f"agent {a.index} raised {exc!r}; agents must return their outcome "
            f"(schedule so far: {self.schedule()!r})"
        )

    # ------------------------------------------------------------------ footprints

    def footprint(self, a: _AgentState, step: Step, kind: int) -> Footprint:
        """The footprint of `a` executing `step` now, from `a`'s own state only.

        An upper bound over every outcome (done, blocked, aborted), so it is known before the
        step runs; `docs/exploration.md` lists the rules and why each is needed.
        """
        level = self.level
        ser = level == _SER
        name = _KIND_NAME[kind]
        me: Resource = ("agent", a.index)
        txn = a.txn
        if kind == _LOCAL:
            if step.reads or step.writes:  # type: ignore[union-attr]
                return Footprint(
                    name,
                    a.index,
                    txn,
                    reads=step.reads,  # type: ignore[union-attr]
                    writes=step.writes | {me},  # type: ignore[union-attr]
                )
            return Footprint(name, a.index, txn, writes=frozenset((me,)))
        if kind == _BEGIN or txn is None:
            # a begin touches no shared state (SERIALIZABLE included: a transaction that has
            # run no statement has no snapshot, no reads, no writes and no rw-edges); an abort
            # without a transaction or a statement after a failure does not reach the store
            return Footprint(name, a.index, None, writes=frozenset((me,)))
        writes: set[Resource] = {me}
        groups = self.ssi
        if groups is not None:
            writes |= groups.resources(a.index, step, kind)
        if kind in (_COMMIT, _ABORT):
            writes.update(("xlock", k) for k in a.wset)
            writes.update(("slock", k) for k in a.sset)
            if kind == _COMMIT:
                writes.update(("data", k) for k in a.wset)
                if ser:
                    writes.add(_SEQ)  # even a read-only commit decides who is concurrent
            return Footprint(name, a.index, txn, writes=frozenset(writes))
        reads: set[Resource] = set()
        shares: set[Resource] = set()
        if level >= _SI and not a.attempted:
            reads.add(_DATA_ALL)  # the first statement fixes the snapshot
            if ser:
                reads.add(_SEQ)
        can_block = can_fail = False
        if kind == _READ:
            key = step.key  # type: ignore[union-attr]
            if ser:
                # the rw-edge to a concurrent writer: its later versions and its pending one
                reads.update((("xlock", key), ("data", key)))
                can_fail = True
            elif level == _RC:
                reads.add(("data", key))
            elif level == _RU:
                reads.update((("xlock", key), ("data", key)))
            elif level == _RR:
                reads.update((("xlock", key), ("data", key)))
                shares.add(("slock", key))
                can_block = True
        elif kind == _SELECT:
            if ser:
                reads.update((_XLOCK_ALL, _DATA_ALL))
                can_fail = True
            elif level == _RC:
                reads.add(_DATA_ALL)
            elif level == _RU:
                reads.update((_XLOCK_ALL, _DATA_ALL))
            elif level == _RR:
                reads.update((_XLOCK_ALL, _DATA_ALL))
                shares.add(_SLOCK_ALL)
                can_block = True
        elif kind in (_WRITE, _DELETE):
            key = step.key  # type: ignore[union-attr]
            writes.add(("xlock", key))
            can_block = True
            if level == _RR:
                reads.add(("slock", key))
            elif level >= _SI:
                reads.add(("data", key))
                can_fail = True
        else:  # update_where / delete_where: a scan plus writes anywhere
            writes.add(_XLOCK_ALL)
            reads.update((_DATA_ALL, _SLOCK_ALL))
            can_block = True
            can_fail = level >= _SI
        holds = bool(a.wset or a.sset)
        if (can_block and holds) or can_fail:
            # it may abort (deadlock victim, serialization failure): its locks are released
            writes.update(("xlock", k) for k in a.wset)
            writes.update(("slock", k) for k in a.sset)
        if can_block and holds:
            writes.add(_WAITS)  # it may wait, and someone may be waiting for its locks
        return Footprint(
            name,
            a.index,
            txn,
            reads=frozenset(reads) if reads else _EMPTY,
            shares=frozenset(shares) if shares else _EMPTY,
            writes=frozenset(writes),
        )

    def _widen(self, fp: Footprint) -> Footprint:
        """An alternative footprint (`alts`) for DPOR to place later in a reversed race.

        It is computed here but runs after the independent steps that DPOR moves before it;
        at SERIALIZABLE those may grow its SSI group, so any group becomes every group."""
        if self.ssi is None or not any(r[0] == "ssi" for r in fp.writes):
            return fp
        writes = frozenset(r for r in fp.writes if r[0] != "ssi") | {_SSI_ALL}
        return Footprint(fp.kind, fp.agent, fp.txn, fp.reads, fp.shares, writes)

    def crash_footprint(self, a: _AgentState) -> Footprint:
        """Crashing `a`: its generator and crash count, and the rollback of its transaction."""
        writes: set[Resource] = {("agent", a.index)}
        if a.txn is not None:
            writes.update(("xlock", k) for k in a.wset)
            writes.update(("slock", k) for k in a.sset)
            if a.waiting and (a.wset or a.sset):
                writes.add(_WAITS)
            if self.ssi is not None:
                writes |= self.ssi.resources(a.index, None, _ABORT)
        return Footprint("crash", a.index, a.txn, writes=frozenset(writes))

    def fault_footprint(self, f: Fault) -> Footprint:
        affects = range(self.n) if f.affects is None else sorted(f.affects)
        writes: set[Resource] = {("fault", f.name)}
        writes.update(("agent", i) for i in affects)
        return Footprint("fault", None, None, writes=frozenset(writes))


class _SsiGroups:
    """Which transactions' SERIALIZABLE bookkeeping a step may read or change
    (docs/exploration.md).

    SSI decides aborts on the rw-antidependency graph: a step of transaction T looks at the
    transactions it gains an edge with, their neighbours, and (a commit) the in-neighbours of
    its in-neighbours. All of those are connected to T by rw-edges, and an edge joins two
    concurrent transactions that touched a common key. So transactions are kept in groups
    (union-find), each named by (agent, n) = the agent's n-th transaction, a name that is the
    same in every equivalent schedule. A statement joins its transaction's group with the
    groups of every transaction of *another* agent it could gain an edge with (a read of k:
    those that wrote k; a write of k: those that read k or ran a predicate statement; an
    agent's earlier transactions ended before this one began, so they are never concurrent
    with it); a predicate statement (select, update/delete where) joins every transaction
    that has run a statement, and an update/delete where is a writer of every key. Groups
    only grow, so a step's group is an upper bound of its transaction's component in the
    store's graph. A step's footprint writes ("ssi", node) for every node of the groups it
    touches; steps of disjoint groups commute.
    """

    __slots__ = (
        "active",
        "count",
        "current",
        "parent",
        "predicates",
        "readers",
        "scanners",
        "writers",
    )

    def __init__(self, n: int) -> None:
        self.count = [0] * n  # transactions begun so far, per agent
        self.current: list[tuple[int, int]] = [(i, 0) for i in range(n)]
        self.parent: dict[tuple[int, int], tuple[int, int]] = {}
        self.readers: dict[Hashable, set[tuple[int, int]]] = {}  # key -> nodes that read it
        self.writers: dict[Hashable, set[tuple[int, int]]] = {}  # key -> nodes that wrote it
        self.predicates: set[tuple[int, int]] = set()  # nodes that ran a predicate statement
        self.scanners: set[tuple[int, int]] = set()  # nodes that ran update/delete where
        self.active: set[tuple[int, int]] = set()  # nodes that ran at least one statement

    def begin(self, agent: int) -> None:
        self.count[agent] += 1
        node = (agent, self.count[agent])
        self.current[agent] = node
        self.parent[node] = node

    def _root(self, node: tuple[int, int]) -> tuple[int, int]:
        parent = self.parent
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def _partners(self, agent: int, step: Any, kind: int) -> set[tuple[int, int]] | None:
        """Other agents' transactions the step may gain an rw-edge with (None: any)."""
        if kind == _READ:
            found = self.writers.get(step.key, set()) | self.scanners
        elif kind in (_WRITE, _DELETE):
            found = self.readers.get(step.key, set()) | self.predicates
        elif kind in (_SELECT, _UPDATE, _DELETE_WHERE):
            return None
        else:
            return set()  # commit, abort (and a crash's rollback): only the existing edges
        return {node for node in found if node[0] != agent}

    def resources(self, agent: int, step: Any, kind: int) -> frozenset[Resource]:
        partners = self._partners(agent, step, kind)
        if partners is None:
            return frozenset((_SSI_ALL,))
        roots = {self._root(self.current[agent])} | {self._root(p) for p in partners}
        return frozenset(("ssi", node) for node in self.parent if self._root(node) in roots)

    def step(self, agent: int, step: Any, kind: int) -> None:
        """Record that `agent` runs `step` in its transaction (whatever its outcome)."""
        me = self.current[agent]
        partners = self._partners(agent, step, kind)
        if partners is None:
            # a transaction that has run no statement has no snapshot and no edges yet (its
            # begin commutes with this step): it joins later through readers/writers/predicates
            partners = set(self.active)
            self.predicates.add(me)
            if kind != _SELECT:
                self.scanners.add(me)  # it may write any key: a later reader of it gains an edge
        elif kind == _READ:
            self.readers.setdefault(step.key, set()).add(me)
        elif kind in (_WRITE, _DELETE):
            self.writers.setdefault(step.key, set()).add(me)
        self.active.add(me)
        root = self._root(me)
        for p in partners:
            self.parent[self._root(p)] = root


def _canonical(rows: dict[Any, Any]) -> dict[Any, Any]:
    """Rows in a canonical key order: the store lists keys in first-commit order, which differs
    between equivalent schedules, and an agent must not be able to tell them apart."""
    if len(rows) < 2:
        return rows
    return dict(sorted(rows.items(), key=lambda kv: repr(kv[0])))
