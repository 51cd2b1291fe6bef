"""Optimal dynamic partial-order reduction: source sets, wakeup trees and sleep sets.

This is Optimal-DPOR (Abdulla, Aronis, Jonsson, Sagonas, POPL 2014; JACM 2017, Algorithm 2),
stateless: every explored prefix is re-run from a fresh `Program.build()`. It explores exactly
one maximal schedule per Mazurkiewicz trace class of the `dependent` relation, provided the
relation is sound (a footprint is an upper bound, fixed by the agent's own state) — which the
tests check empirically against exhaustive search.

* After each maximal execution E, for every race e ⋖ e' (dependent events of different
  processes, e happens-before e' with nothing in between, and e' not *enabled by* e, i.e. e'
  is not a retry that e's commit or abort released), let E' = pre(E, e) and
  v = notdep(e, E)·proc(e'). Unless a process asleep at E' is a weak initial of v (that class
  was already explored), v is inserted into the wakeup tree at E'.
* The wakeup tree at a prefix is explored in order; after a child p is done, p goes to sleep
  at that prefix, and only the sleeping processes independent of the next step stay asleep.

Blocking fits the model because a blocked attempt is itself an event (the agent then waits to
be re-enabled by a commit or abort that is dependent with its retry), and footprints never
depend on outcomes. A crash changes its victim's next step: for a race between a crash and its
victim the reversed sequence ends with the footprint the engine recorded for the other order
(`Execution.alts`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from toki.sim.engine import Execution
from toki.sim.explore import Run, Stats, record
from toki.sim.program import Footprint, Program, covers, dependent

__all__ = ["DPOR"]


class _WNode:
    """A wakeup-tree node: a process to run next, with the footprint of its step there."""

    __slots__ = ("children", "fp", "pid")

    def __init__(self, pid: int, fp: Footprint | None) -> None:
        self.pid = pid
        self.fp = fp
        self.children: list[_WNode] = []


class _Node:
    """The exploration state at one prefix: its sleep set and its wakeup tree (children)."""

    __slots__ = ("sleep", "wut")

    def __init__(self, sleep: dict[int, Footprint], wut: list[_WNode]) -> None:
        self.sleep = sleep
        self.wut = wut


_Item = tuple[int, Footprint, int]  # (pid, footprint, uid): one event of a sequence v


@dataclass(frozen=True, slots=True)
class DPOR:
    """Optimal DPOR (source sets + wakeup trees + sleep sets) over the program's schedules.

    Counters in the exploration notes: `dpor_sleep_blocked` (executions abandoned because every
    enabled process was asleep), `dpor_footprint_drift` (a wakeup-tree step whose footprint,
    when run, was not covered by the one it was inserted with) and `dpor_disabled_wakeup` (a
    wakeup-tree step that was not enabled). All three are zero when the theory's assumptions
    hold; the tests assert it.
    """

    @property
    def name(self) -> str:
        return "dpor"

    def runs(self, program: Program, stats: Stats) -> Iterator[Run]:
        stack: list[_Node] = [_Node({}, [])]
        pids: list[int] = []
        fps: list[Footprint] = []
        alts: list[Footprint | None] = []
        enablers: list[int] = []
        ends: list[int] = []
        waits_on: dict[int, frozenset[int]] = {}
        hb: list[int] = []  # hb[j]: bitmask of the events that happen before event j
        direct: list[int] = []  # direct[j]: those with no event in between
        ex = Execution(program, track=True)
        agents = ex.n
        while True:
            blocked = False
            while en := ex.enabled():
                node = stack[-1]
                wut = node.wut
                if not wut:
                    pick = next((p for p in en if p not in node.sleep), None)
                    if pick is None:
                        blocked = True
                        break
                    wut.append(_WNode(pick, None))
                child = wut[0]
                if child.pid not in en:
                    stats.note("dpor_disabled_wakeup")
                    wut.pop(0)
                    continue
                ex.step(child.pid)
                fp = ex.fps[-1]
                if child.fp is not None and not covers(child.fp, fp):
                    stats.note("dpor_footprint_drift")
                child.fp = fp
                k = len(pids)
                pids.append(child.pid)
                fps.append(fp)
                alts.append(ex.alts[-1])
                enablers.append(ex.enablers[-1])
                ends.append(ex.ends[-1])
                blockers = ex.waits_on.get(len(ex.pids) - 1)
                if blockers is not None:
                    waits_on[k] = blockers
                mask = dmask = 0
                for i in range(k - 1, -1, -1):
                    if (mask >> i) & 1:
                        continue
                    if dependent(fps[i], fp):
                        mask |= hb[i] | (1 << i)
                        dmask |= 1 << i
                hb.append(mask)
                direct.append(dmask)
                sleep = {q: f for q, f in node.sleep.items() if not dependent(fp, f)}
                stack.append(_Node(sleep, child.children))
            stats.steps += ex.steps
            if blocked:
                stats.note("dpor_sleep_blocked")
            else:
                _races(stack, pids, fps, alts, enablers, hb, direct, agents)
                _crash_races(stack, pids, fps, alts, ends, waits_on, hb, agents)
                yield record(ex, self.name, footprints=fps)
            while True:
                stack.pop()
                if not stack:
                    stats.exhausted = True
                    return
                depth = len(stack) - 1
                node = stack[-1]
                done = node.wut.pop(0)
                node.sleep[done.pid] = fps[depth]
                del pids[depth:], fps[depth:], alts[depth:], enablers[depth:], ends[depth:]
                for gone in [i for i in waits_on if i >= depth]:
                    del waits_on[gone]
                del hb[depth:], direct[depth:]
                if node.wut:
                    break
            ex = Execution(program, track=False)
            for pid in pids:
                ex.step(pid)
            ex.track = True


def _races(
    stack: list[_Node],
    pids: list[int],
    fps: list[Footprint],
    alts: list[Footprint | None],
    enablers: list[int],
    hb: list[int],
    direct: list[int],
    agents: int,
) -> None:
    """Reverse every race of the maximal execution (Algorithm 2, lines 2-6). All of them, not
    only those of new events: v = notdep(e, E)·e' depends on the events after e' too."""
    n = len(pids)
    for j in range(n):
        dmask = direct[j]
        pj = pids[j]
        while dmask:
            i = dmask.bit_length() - 1
            dmask &= ~(1 << i)
            pi = pids[i]
            if pi == pj or enablers[j] == i:
                continue
            last = fps[j]
            if pi == pj + agents and pj < agents:
                continue  # a crash and its victim's next step: see _crash_races
            if pj == pi + agents and pi < agents:
                alt = alts[i]  # the victim's step, then its crash: the crash as it was before
                if alt is None:
                    continue
                last = alt
            _reverse(stack[i], i, last, pj, pids, fps, hb, n, agents)


def _crash_races(
    stack: list[_Node],
    pids: list[int],
    fps: list[Footprint],
    alts: list[Footprint | None],
    ends: list[int],
    waits_on: dict[int, frozenset[int]],
    hb: list[int],
    agents: int,
) -> None:
    """A crash replaces its victim's pending step (and kills the victim if it does not catch
    `Crash`): reverse that race too, v = notdep(crash, E)·victim, with the footprint of the
    step the crash discarded. A victim that was blocked can only take that step if one of the
    transactions it waited for ends within notdep(crash, E)."""
    n = len(pids)
    for i in range(n):
        victim = pids[i] - agents
        alt = alts[i]
        if not 0 <= victim < agents or alt is None:
            continue
        blockers = waits_on.get(i)
        if blockers is not None:
            bit = 1 << i
            if not any(ends[k] in blockers for k in range(i + 1, n) if not hb[k] & bit):
                continue
        _reverse(stack[i], i, alt, victim, pids, fps, hb, n, agents)


def _reverse(
    node: _Node,
    i: int,
    last: Footprint,
    last_pid: int,
    pids: list[int],
    fps: list[Footprint],
    hb: list[int],
    n: int,
    agents: int,
) -> None:
    """Insert v = notdep(e_i, E)·proc(e_j) into the wakeup tree at pre(E, e_i), unless a
    sleeping process is a weak initial of v."""
    items: list[_Item] = []
    preds: dict[int, int] = {}
    keep = 0
    bit_i = 1 << i
    for k in range(i + 1, n):
        if hb[k] & bit_i:
            continue
        keep |= 1 << k
        items.append((pids[k], fps[k], k))
        preds[k] = hb[k] & keep
    lp = 0
    for _, fp, uid in items:
        if not (lp >> uid) & 1 and dependent(fp, last):
            lp |= (1 << uid) | preds[uid]
    items.append((last_pid, last, n))
    preds[n] = lp
    sleep = node.sleep
    if sleep:
        for q, fq in sleep.items():
            first = next((it for it in items if it[0] == q), None)
            if first is not None:
                if preds[first[2]] == 0:
                    return  # q is an initial of v: its class was explored from this prefix
            elif not any(dependent(fq, fp) for _, fp, _ in items):
                return  # q commutes with all of v: q·v was explored
    _insert(node.wut, items, preds, agents)


def _insert(wut: list[_WNode], items: list[_Item], preds: dict[int, int], agents: int) -> None:
    """insert_[E](v, wut) of the paper: find the ≺-least node u with u ⊑ v (post-order); if it
    is a leaf, v is covered; otherwise hang the rest of v under it as a new last branch."""
    full = 0
    for _, _, uid in items:
        full |= 1 << uid
    found = _find(wut, full, items, preds, agents)
    if found is None:
        children, remaining = wut, full
    else:
        node, remaining = found
        if not node.children:
            return
        children = node.children
    for pid, fp, uid in items:
        if (remaining >> uid) & 1:
            new = _WNode(pid, fp)
            children.append(new)
            children = new.children


def _find(
    children: list[_WNode], remaining: int, items: list[_Item], preds: dict[int, int], agents: int
) -> tuple[_WNode, int] | None:
    for child in children:
        rest = _consume(child, remaining, items, preds, agents)
        if rest is None:
            continue  # no descendant can pass either
        deeper = _find(child.children, rest, items, preds, agents)
        return deeper if deeper is not None else (child, rest)
    return None


def _consume(
    node: _WNode, remaining: int, items: list[_Item], preds: dict[int, int], agents: int
) -> int | None:
    """One step of u ⊑ w: the node's process is an initial of w (remove its first event) or
    its step is independent of all of w (a weak initial); else None."""
    p = node.pid
    for pid, _, uid in items:
        if pid == p and (remaining >> uid) & 1:
            if preds[uid] & remaining:
                return None
            return remaining & ~(1 << uid)
    f = node.fp
    if f is None:
        return None
    for _, fp, uid in items:
        if (remaining >> uid) & 1 and dependent(f, fp):
            return None
    return remaining
