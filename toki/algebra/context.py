"""The context an operator decides in: the judge and its keyed log, isolation, the clock,
the evidence already on record, and the policies in force."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from toki.errors import IsolationViolation
from toki.isolation import Isolation, check_precondition, dominates
from toki.judge import (
    Judge,
    JudgeKey,
    JudgeLog,
    JudgeQuestion,
    Verdict,
    judge_key,
    validate_verdict,
)
from toki.model import FactKey, FactVersion

__all__ = ["JudgeCall", "ResolveContext"]

EvidenceLookup = Callable[[FactKey], "Sequence[FactVersion]"]
PolicyLookup = Callable[[FactKey, datetime], "Mapping[str, object] | None"]


@dataclass(frozen=True, slots=True)
class JudgeCall:
    """One verdict the write path must log (as a DECISION event) before it commits."""

    key: FactKey
    theta: JudgeKey
    question: JudgeQuestion
    verdict: Verdict


@dataclass(slots=True)
class ResolveContext:
    decided_at: datetime
    isolation: Isolation = Isolation.SERIALIZABLE
    judge: Judge | None = None
    judge_log: JudgeLog | None = None  # where verdicts are looked up; None: logging is off
    own_log: JudgeLog | None = None  # verdicts already in this store's log (not re-logged)
    allow_weaker_isolation: bool = False
    evidence: EvidenceLookup | None = None  # every non-revoked version on record for a key
    policy: PolicyLookup | None = None
    new_calls: list[JudgeCall] = field(default_factory=list)
    judge_invocations: int = 0

    def precondition(self, required: Isolation, operator: str) -> bool:
        """True if the store's level dominates `required`; raise unless weaker is allowed."""
        if dominates(self.isolation, required):
            return True
        if self.allow_weaker_isolation:
            return False
        check_precondition(self.isolation, required, what=f"operator {operator}")
        raise IsolationViolation("unreachable")  # pragma: no cover

    def consult(self, question: JudgeQuestion) -> tuple[Verdict, JudgeKey] | None:
        """Ask the judge, through the keyed log: a logged verdict is reused, never re-asked."""
        if self.judge is None:
            return None
        theta = judge_key(self.judge, question)
        for call in self.new_calls:  # asked already within this write
            if call.key == question.key and call.theta == theta:
                return call.verdict, theta
        if self.judge_log is not None:
            logged = self.judge_log.get(question.key, theta)
            if logged is not None:
                if self.own_log is None or self.own_log.get(question.key, theta) is None:
                    self.new_calls.append(JudgeCall(question.key, theta, question, logged))
                return logged, theta
        self.judge_invocations += 1
        verdict = validate_verdict(question, self.judge.judge(question))
        if self.judge_log is not None:
            self.new_calls.append(JudgeCall(question.key, theta, question, verdict))
        return verdict, theta
