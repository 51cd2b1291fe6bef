"""The Operator protocol and the shared shape of every operator.

An operator decides among mutually contradicting versions. `fold(versions)` is the n-ary
operator; `resolve(incumbents, claim)` is its binary use on the write path, and is defined
as a fold so that the two agree by construction wherever the winner does not depend on
arrival order (the laws table says where that is).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from toki.algebra.context import ResolveContext
from toki.algebra.provenance import (
    Action,
    Decision,
    Provenance,
    evidence_digest,
    idempotency_key,
)
from toki.errors import InvalidInput
from toki.isolation import Isolation
from toki.judge import JudgeKey
from toki.model import FactVersion

__all__ = ["Choice", "FoldOperator", "Operator"]


@runtime_checkable
class Operator(Protocol):
    name: str
    version: str
    requires: Isolation

    def resolve(
        self, incumbents: Sequence[FactVersion], claim: FactVersion, ctx: ResolveContext
    ) -> Decision: ...

    def fold(self, versions: Sequence[FactVersion], ctx: ResolveContext) -> Decision: ...


class Choice:
    """What an operator's rule decided: a ranking of the versions, best first (None: hold),
    and why. The winner is the first; on the write path each valid-time point goes to the
    best-ranked version covering it, so interval-aware resolution needs the whole order."""

    __slots__ = ("judge_key", "policy", "ranking", "reason")

    def __init__(
        self,
        ranking: Sequence[FactVersion] | None,
        reason: str,
        judge_key: JudgeKey | None = None,
        policy: str | None = None,
    ) -> None:
        self.ranking = None if ranking is None else tuple(ranking)
        self.reason = reason
        self.judge_key = judge_key
        self.policy = policy

    @property
    def winner(self) -> FactVersion | None:
        return None if not self.ranking else self.ranking[0]


class FoldOperator:
    """Base class: subclasses implement `choose`, the n-ary rule."""

    name = "operator"
    version = "1"
    requires = Isolation.SERIALIZABLE

    def choose(self, versions: Sequence[FactVersion], ctx: ResolveContext) -> Choice:
        raise NotImplementedError

    def fold(self, versions: Sequence[FactVersion], ctx: ResolveContext) -> Decision:
        unique = _unique(versions)
        if not unique:
            raise InvalidInput("versions", "cannot fold an empty set of versions")
        held = ctx.precondition(self.requires, self.name)
        choice = self.choose(unique, ctx)
        ids = tuple(v.id for v in unique)
        losers: tuple[str, ...] = ()
        if choice.winner is None:
            action, winner = Action.HOLD, None
        else:
            action, winner = Action.SUPERSEDE, choice.winner.id
            # versions saying what the winner says are not beaten, whatever their id
            value = choice.winner.value_json
            losers = tuple(v.id for v in unique if v.value_json != value)
        ranking = () if choice.ranking is None else tuple(v.id for v in choice.ranking)
        prov = self._provenance(ctx, unique, ids, winner, losers, held, choice)
        return Decision(action, winner, losers, prov, ranking)

    def resolve(
        self, incumbents: Sequence[FactVersion], claim: FactVersion, ctx: ResolveContext
    ) -> Decision:
        if any(v.id == claim.id for v in incumbents):
            held = ctx.precondition(self.requires, self.name)
            ids = tuple(v.id for v in _unique([*incumbents, claim]))
            prov = self._provenance(
                ctx, [claim], ids, claim.id, (), held, Choice([claim], "duplicate delivery")
            )
            return Decision(Action.NOOP, claim.id, (), prov, (claim.id,))
        decision = self.fold([*incumbents, claim], ctx)
        if decision.action is Action.HOLD:
            return decision
        if decision.winner == claim.id:
            return decision  # SUPERSEDE: the claim beat every incumbent
        return Decision(
            Action.REJECT, decision.winner, decision.losers, decision.provenance, decision.ranking
        )

    def _provenance(
        self,
        ctx: ResolveContext,
        versions: Sequence[FactVersion],
        ids: tuple[str, ...],
        winner: str | None,
        losers: tuple[str, ...],
        held: bool,
        choice: Choice,
    ) -> Provenance:
        evidence = [[v.id, v.value_json, v.weight, v.source_id] for v in versions]
        return Provenance(
            operator=self.name,
            operator_version=self.version,
            judge_key=choice.judge_key,
            evidence_digest=evidence_digest(sorted(evidence)),
            inputs=tuple(sorted(ids)),
            winner=winner,
            losers=tuple(sorted(losers)),
            decided_at=ctx.decided_at,
            isolation=ctx.isolation,
            idempotency_key=idempotency_key(self.name, ids),
            precondition_held=held,
            policy=choice.policy,
            reason=choice.reason,
        )

    def __repr__(self) -> str:
        return f"{self.name} (requires {self.requires.value})"


def _unique(versions: Sequence[FactVersion]) -> list[FactVersion]:
    seen: dict[str, FactVersion] = {}
    for v in versions:
        seen.setdefault(v.id, v)
    return list(seen.values())
