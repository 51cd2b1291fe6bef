"""The isolation lattice that operator preconditions are checked against.

Levels form a partial order, not a line (Adya 1999; Berenson et al. 1995):

    READ_UNCOMMITTED < READ_COMMITTED < REPEATABLE_READ  < SERIALIZABLE
                                      < SNAPSHOT          <

REPEATABLE_READ here is Adya's PL-2.99 (item locks held to commit, no predicate locks): it
forbids lost update and read skew on items but admits phantoms (G2 over predicates).
SNAPSHOT forbids phantoms on reads of its own snapshot but admits write skew (G2-item).
Each admits an anomaly the other forbids, so neither dominates the other; both are
dominated by SERIALIZABLE, which admits no Adya anomaly.
"""

from __future__ import annotations

import enum

from toki.errors import IsolationViolation

__all__ = ["Isolation", "IsolationViolation", "check_precondition", "dominates"]


class Isolation(enum.Enum):
    """An isolation level. Compare with `dominates`, never with `<` on the values."""

    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"
    REPEATABLE_READ = "repeatable_read"
    SNAPSHOT = "snapshot"
    SERIALIZABLE = "serializable"

    @classmethod
    def parse(cls, text: str) -> Isolation:
        """Parse a level name: 'read committed', 'READ_COMMITTED', 'snapshot', 'si', ..."""
        norm = text.strip().lower().replace("-", "_").replace(" ", "_")
        aliases = {
            "si": "snapshot",
            "snapshot_isolation": "snapshot",
            "rc": "read_committed",
            "ru": "read_uncommitted",
            "rr": "repeatable_read",
            "pl_2.99": "repeatable_read",
            "ser": "serializable",
        }
        norm = aliases.get(norm, norm)
        for level in cls:
            if level.value == norm:
                return level
        names = ", ".join(level.value for level in cls)
        from toki.errors import InvalidInput

        raise InvalidInput("isolation", f"unknown level {text!r}", f"use one of: {names}")


# Immediate successors (the Hasse diagram); `dominates` is its reflexive-transitive closure.
_COVERS: dict[Isolation, frozenset[Isolation]] = {
    Isolation.READ_UNCOMMITTED: frozenset({Isolation.READ_COMMITTED}),
    Isolation.READ_COMMITTED: frozenset({Isolation.REPEATABLE_READ, Isolation.SNAPSHOT}),
    Isolation.REPEATABLE_READ: frozenset({Isolation.SERIALIZABLE}),
    Isolation.SNAPSHOT: frozenset({Isolation.SERIALIZABLE}),
    Isolation.SERIALIZABLE: frozenset(),
}


def _up_set(level: Isolation) -> frozenset[Isolation]:
    seen = {level}
    frontier = [level]
    while frontier:
        for nxt in _COVERS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return frozenset(seen)


_UP: dict[Isolation, frozenset[Isolation]] = {level: _up_set(level) for level in Isolation}


def dominates(a: Isolation, b: Isolation) -> bool:
    """True when level `a` is at least as strong as `b` (a guarantees everything b does)."""
    return a in _UP[b]


def join(a: Isolation, b: Isolation) -> Isolation:
    """The weakest level dominating both (REPEATABLE_READ ⊔ SNAPSHOT = SERIALIZABLE)."""
    common = _UP[a] & _UP[b]
    for level in common:
        if all(dominates(other, level) for other in common):
            return level
    raise AssertionError("the lattice has a top")  # pragma: no cover


def check_precondition(level: Isolation, required: Isolation, *, what: str) -> bool:
    """Raise IsolationViolation unless `level` dominates `required`; return True when it does."""
    if dominates(level, required):
        return True
    raise IsolationViolation(
        f"{what} requires isolation {required.value} but the store runs at {level.value}; "
        f"run the store at {required.value} or stronger, or pass allow_weaker_isolation=True "
        "to record the violation in the provenance instead"
    )
