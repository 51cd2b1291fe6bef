"""N1 and N3 for a bitemporal `Memory` (a real store, not a simulated model).

- `n1_memory`: rebuilding the state from the durable log (the store's own recovery
  procedure) must give the live state hash, and the projection must reconcile with it.
- `n3_as_of`: for every (system time t, key, valid time, value) that the live system served,
  the final store's as-of answer at t must be that value: otherwise what was believed at t can
  no longer be reconstructed (audit erasure).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toki.check.anomalies import Verdict
from toki.memory import Memory
from toki.model import FactKey
from toki.time import TimeLike

__all__ = ["Served", "n1_memory", "n3_as_of"]

Served = tuple[TimeLike, FactKey, TimeLike, Any]
"""(system time it was served at, key, valid time asked about, value served; None: unknown)."""


def n1_memory(memory: Memory) -> Verdict:
    replayed = Memory.replay(memory.events())
    report = memory.reconcile()
    differ = replayed.state_hash() != memory.state_hash() or not report.ok
    keys = tuple(str(d.key) for d in report.differences)
    return Verdict(
        "N1",
        differ,
        keys,
        memory.state_hash(),
        replayed.state_hash(),
        {"reconcile": report.describe()},
    )


def n3_as_of(memory: Memory, served: Iterable[Served]) -> Verdict:
    wrong = []
    for at, key, valid_at, value in served:
        answer = memory.resolve_at(key, valid_at, at)
        got = answer.value if answer.kind == "value" else None
        if got != value:
            wrong.append((str(at), str(key), str(valid_at), value, got))
    keys = tuple(sorted({w[1] for w in wrong}))
    return Verdict(
        "N3",
        bool(wrong),
        keys,
        [w[3] for w in wrong],
        [w[4] for w in wrong],
        {"mismatches": [list(w) for w in wrong]},
    )
