"""The outcome of one z3 proof: a frozen value that the runner prints and serialises.

A statement is *proved* when the negation of its claim is unsatisfiable within the printed
bounds (or with no bound, for the algebraic lemmas) AND its premises admit a non-trivial
history (the `premise_witness`); *vacuous* when they admit only trivial ones (a failure);
*counterexample* when z3 found a model of the negation, which is kept as plain JSON-able
data (and as a replayable scenario).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ProofResult", "Status"]


class Status(enum.Enum):
    PROVED = "proved"
    COUNTEREXAMPLE = "counterexample"
    UNKNOWN = "unknown"
    VACUOUS = "vacuous"  # the premises admit only trivial histories: the proof shows nothing


@dataclass(frozen=True, slots=True)
class ProofResult:
    """name, status, what was expected, the bounds it holds within, how long z3 took, and
    (for a counterexample) the model and the concrete scenario it stands for."""

    name: str
    statement: str
    status: Status
    expected: Status
    bounds: dict[str, Any]
    seconds: float
    model: dict[str, Any] | None = None
    scenario: dict[str, Any] | None = None
    false_variant_of: str | None = None
    notes: str = ""
    premise_witness: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # statement-specific JSON fields

    @property
    def ok(self) -> bool:
        """The status is what the statement (or false variant) says it should be."""
        return self.status is self.expected

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "statement": self.statement,
            "status": self.status.value,
            "expected": self.expected.value,
            "ok": self.ok,
            "bounds": dict(self.bounds),
            "seconds": round(self.seconds, 4),
            "model": self.model,
            "scenario": self.scenario,
            "false_variant_of": self.false_variant_of,
            "notes": self.notes,
            "premise_witness": self.premise_witness,
            **self.extra,
        }
