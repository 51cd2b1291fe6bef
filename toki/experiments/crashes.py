"""Sampling runs with crash faults at uniformly drawn points (the verdict matrix's sampler for
its crash setting).

A random walk or PCT over every enabled choice treats "crash agent i" like any other choice:
offered at every step, it is taken within the first few steps of almost every run, so nearly
every sampled run is two agents that crashed before doing anything. `CrashPoints` instead
schedules the agents alone (a random walk, or PCT of depth d over the agents) and draws for
each agent, before the run, where it crashes: before its k-th step for k uniform in 1..L, or
not at all, where L is the most steps that agent has taken in a run so far. Every crash point
is then about as likely as any other, as it is for DPOR, which enumerates them all.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from dataclasses import dataclass

from toki.errors import InvalidInput
from toki.sim.engine import Execution
from toki.sim.explore import Run, Stats, record
from toki.sim.program import Program

__all__ = ["CrashPoints"]


def _seed(seed: int, index: int) -> int:
    digest = hashlib.sha256(f"crash-points:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


@dataclass(frozen=True, slots=True)
class CrashPoints:
    """Seeded runs with one crash per agent at a uniformly drawn point (or none).

    `depth` None: the agents are scheduled by a random walk; d ≥ 1: by PCT of depth d over
    the agents (Burckhardt et al. 2010), with k estimated from the longest run so far. Run i
    depends only on the seed and i (and the runs before it, through the length estimates);
    its schedule replays it on its own."""

    seed: int = 0
    depth: int | None = None

    def __post_init__(self) -> None:
        if self.depth is not None and self.depth < 1:
            raise InvalidInput("depth", f"{self.depth} < 1", "PCT depth d counts from 1")

    @property
    def name(self) -> str:
        how = "random" if self.depth is None else f"pct,d={self.depth}"
        return f"crash-points({how},seed={self.seed})"

    def runs(self, program: Program, stats: Stats) -> Iterator[Run]:
        longest: list[int] = []
        total = 0
        index = 0
        while True:
            rng = random.Random(_seed(self.seed, index))
            ex = Execution(program)
            n = ex.n
            if len(longest) < n:
                longest = [2] * n
            crash_at = [rng.randrange(longest[i] + 1) for i in range(n)]  # 0: no crash
            taken = [0] * n
            crashed = [False] * n
            movers = list(range(n)) + [p for p in ex.enabled() if p >= 2 * n]  # agents, faults
            prio = dict(zip(movers, rng.sample(range(len(movers)), len(movers)), strict=True))
            k = max(total, 2 * n)
            change = set(rng.sample(range(1, k + 1), min((self.depth or 1) - 1, k)))
            step = 0
            while en := ex.enabled():
                ready = [p for p in en if p < n or p >= 2 * n]
                if not ready:  # only crash choices are left (no-ops for finished agents)
                    crashed[en[0] - n] = True
                    ex.step(en[0])
                    continue
                step += 1
                if self.depth is None:
                    pid = ready[int(rng.random() * len(ready))]
                else:
                    pid = max(ready, key=prio.__getitem__)
                    if step in change:
                        prio[pid] = min(prio.values()) - 1
                        pid = max(ready, key=prio.__getitem__)
                due = pid < n and not crashed[pid] and taken[pid] + 1 == crash_at[pid]
                if due:
                    crashed[pid] = True
                    ex.step(n + pid)
                    continue
                if pid < n:
                    taken[pid] += 1
                ex.step(pid)
            longest = [max(a, b) for a, b in zip(longest, taken, strict=True)]
            total = max(total, step)
            stats.steps += ex.steps
            yield record(ex, self.name, (self.seed, index))
            index += 1
