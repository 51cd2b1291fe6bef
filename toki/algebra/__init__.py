"""The operator algebra: LWW, EWM, AWAIT and RULE, each with an isolation precondition and a
provenance annotation, the gate that routes contradictions to them, and the n-ary fold."""

from toki.algebra.await_ import AWAIT, AwaitConfirmation
from toki.algebra.base import FoldOperator, Operator
from toki.algebra.context import ResolveContext
from toki.algebra.ewm import EWM, EvidenceWeightedMerge
from toki.algebra.gate import GateResult, gate
from toki.algebra.lww import LWW, LastWriterWins
from toki.algebra.provenance import Action, AuditRow, Decision, Provenance
from toki.algebra.rule import POLICY_KINDS, RULE, PerRulePolicy, Policy, UnknownPolicy

OPERATORS = {"LWW": LWW, "EWM": EWM, "AWAIT": AWAIT, "RULE": RULE}

__all__ = [
    "AWAIT",
    "EWM",
    "LWW",
    "OPERATORS",
    "POLICY_KINDS",
    "RULE",
    "Action",
    "AuditRow",
    "AwaitConfirmation",
    "Decision",
    "EvidenceWeightedMerge",
    "FoldOperator",
    "GateResult",
    "LastWriterWins",
    "Operator",
    "PerRulePolicy",
    "Policy",
    "Provenance",
    "ResolveContext",
    "UnknownPolicy",
    "gate",
]
