"""What every decision carries: enough to explain it and to replay it without the judge."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toki.canonical import canonical_json, digest
from toki.isolation import Isolation
from toki.judge import JudgeKey
from toki.model import FactVersion
from toki.time import format_instant, parse_instant

__all__ = ["Action", "AuditRow", "Decision", "Provenance"]


class Action(enum.Enum):
    NOOP = "NOOP"  # a duplicate: nothing to do
    INSERT = "INSERT"  # no contradiction
    SUPERSEDE = "SUPERSEDE"  # the claim wins; the incumbents it beat are closed
    HOLD = "HOLD"  # the claim waits (PROPOSED, conflict OPEN) for confirmation or a person
    REJECT = "REJECT"  # an incumbent wins; the claim is kept as an audit row


@dataclass(frozen=True, slots=True)
class Provenance:
    """Operator and version, judge key θ, evidence digest, inputs, winner, losers, decided-at
    system time, isolation level in force, idempotency key, and whether the precondition held."""

    operator: str
    operator_version: str
    judge_key: JudgeKey | None
    evidence_digest: str
    inputs: tuple[str, ...]
    winner: str | None
    losers: tuple[str, ...]
    decided_at: datetime
    isolation: Isolation
    idempotency_key: str
    precondition_held: bool
    policy: str | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "operator": self.operator,
            "operator_version": self.operator_version,
            "judge_key": None if self.judge_key is None else self.judge_key.to_json(),
            "evidence_digest": self.evidence_digest,
            "inputs": list(self.inputs),
            "winner": self.winner,
            "losers": list(self.losers),
            "decided_at": format_instant(self.decided_at),
            "isolation": self.isolation.value,
            "idempotency_key": self.idempotency_key,
            "precondition_held": self.precondition_held,
            "policy": self.policy,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Provenance:
        jk = data.get("judge_key")
        return cls(
            operator=data["operator"],
            operator_version=data["operator_version"],
            judge_key=None if jk is None else JudgeKey(**jk),
            evidence_digest=data["evidence_digest"],
            inputs=tuple(data["inputs"]),
            winner=data.get("winner"),
            losers=tuple(data["losers"]),
            decided_at=parse_instant(data["decided_at"], "decided_at"),
            isolation=Isolation(data["isolation"]),
            idempotency_key=data["idempotency_key"],
            precondition_held=bool(data["precondition_held"]),
            policy=data.get("policy"),
            reason=data.get("reason", ""),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """An operator's answer: the action, the winner, the losers and why."""

    action: Action
    winner: str | None
    losers: tuple[str, ...]
    provenance: Provenance
    ranking: tuple[str, ...] = ()  # best first; each valid-time point goes to the best cover
    claim_id: str | None = None  # set by Memory.write: the version id the claim was given

    @property
    def token(self) -> str:
        """The idempotency key; for HOLD, the confirmation token."""
        return self.provenance.idempotency_key


@dataclass(frozen=True, slots=True)
class AuditRow:
    """The dual-row schema's audit row: a version that lost, with the decision's provenance."""

    row_kind: str  # always "audit"; current rows are the standing versions
    version: FactVersion
    provenance: Provenance
    strategy: str
    decided_at: datetime


def idempotency_key(operator: str, inputs: tuple[str, ...]) -> str:
    return "d-" + digest(canonical_json([operator, sorted(inputs)]))


def evidence_digest(payload: object) -> str:
    return digest(canonical_json(payload))
