"""Per-rule policy: a policy row keyed by fact key decides (prefer a source, newest valid
time, highest confidence, or manual). Policy changes are POLICY events, so a replay uses the
policy that was in force when the decision was made.

Precondition SERIALIZABLE: a policy may read other keys and rows (source trust, the policy
itself), so only a serializable execution keeps decisions equal to some serial order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.algebra.base import Choice, FoldOperator
from toki.algebra.context import ResolveContext
from toki.canonical import canonical_json, check_text, digest, shown
from toki.errors import InvalidInput, TokiError
from toki.isolation import Isolation
from toki.model import FactVersion

__all__ = ["POLICY_KINDS", "RULE", "PerRulePolicy", "Policy", "UnknownPolicy"]

POLICY_KINDS = ("prefer_source", "newest_valid_time", "highest_confidence", "manual")


class UnknownPolicy(TokiError):
    """No policy is in force for the key, or the policy names an unknown kind."""


@dataclass(frozen=True, slots=True)
class Policy:
    """A policy row. `sources` ranks trusted sources for prefer_source (earlier is better)."""

    kind: str
    sources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise UnknownPolicy(
                f"policy.kind: unknown policy {shown(self.kind)} (use one of {POLICY_KINDS})"
            )
        if self.kind == "prefer_source" and not self.sources:
            raise InvalidInput("policy.sources", "prefer_source needs at least one source")
        if not isinstance(self.sources, tuple):  # issue #36: sources are source ids (text)
            raise InvalidInput("policy.sources", f"expected a tuple, got {shown(self.sources)}")
        for source in self.sources:
            check_text(source, "policy.sources")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "sources": list(self.sources)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Policy:
        return cls(str(data["kind"]), tuple(data.get("sources", ())))

    @property
    def id(self) -> str:
        return "p-" + digest(canonical_json(self.to_json()), 16)


class PerRulePolicy(FoldOperator):
    name = "RULE"
    version = "1"
    requires = Isolation.SERIALIZABLE

    def choose(self, versions: Sequence[FactVersion], ctx: ResolveContext) -> Choice:
        key = versions[0].key
        raw = None if ctx.policy is None else ctx.policy(key, ctx.decided_at)
        if raw is None:
            raise UnknownPolicy(
                f"policy: no RULE policy is in force for fact_key {key.fact_key!r} of tenant "
                f"{key.tenant!r} at the decision time (call Memory.set_policy first)"
            )
        policy = Policy.from_json(raw)
        if policy.kind == "manual":
            return Choice(None, "manual policy: a person decides", policy=policy.id)
        if policy.kind == "newest_valid_time":
            ranking = sorted(versions, key=lambda v: (_start(v), v.recorded_at, v.id), reverse=True)
        elif policy.kind == "highest_confidence":
            ranking = sorted(versions, key=lambda v: (v.weight, v.recorded_at, v.id), reverse=True)
        else:
            rank = {s: i for i, s in enumerate(policy.sources)}
            ranking = sorted(
                versions,
                key=lambda v: (-rank.get(v.source_id, len(rank)), v.recorded_at, v.id),
                reverse=True,
            )
        return Choice(ranking, f"policy {policy.kind}", policy=policy.id)


def _start(v: FactVersion) -> float:
    return float("-inf") if v.valid.start is None else v.valid.start.timestamp()


RULE = PerRulePolicy()
