"""The gate: does a claim contradict what stands, and with which versions?

Structural contradiction: same key, overlapping effective valid time, different value. With
a judge and `semantic=True`, each structural candidate is also put to the judge ("does the
claim contradict it?"): a judge that says no makes the claim corroborating evidence rather
than a contradiction (e.g. "Berlin" and "Berlin, Germany").
"""

from __future__ import annotations

from dataclasses import dataclass

from toki.algebra.context import ResolveContext
from toki.judge import JudgeKey, JudgeQuestion
from toki.model import FactVersion
from toki.replay import KeyState

__all__ = ["GateResult", "gate"]


@dataclass(frozen=True, slots=True)
class GateResult:
    duplicate: bool
    contradicts: tuple[FactVersion, ...]  # the incumbents the operator must decide against
    equivalent: tuple[FactVersion, ...]  # judged to say the same thing as the claim
    judge_keys: tuple[JudgeKey, ...] = ()


def gate(
    state: KeyState | None, claim: FactVersion, ctx: ResolveContext, *, semantic: bool = False
) -> GateResult:
    if state is not None and claim.id in state.versions:
        return GateResult(True, (), ())
    if state is None:
        return GateResult(False, (), ())
    structural = [
        state.versions[vid]
        for vid in state.overlapping(claim.valid)
        if state.versions[vid].value_json != claim.value_json
    ]
    if not semantic or ctx.judge is None:
        return GateResult(False, tuple(structural), ())
    contradicts: list[FactVersion] = []
    equivalent: list[FactVersion] = []
    keys: list[JudgeKey] = []
    for incumbent in structural:
        asked = ctx.consult(JudgeQuestion(claim.key, "contradicts", (incumbent, claim)))
        assert asked is not None
        verdict, theta = asked
        keys.append(theta)
        (contradicts if verdict.contradicts else equivalent).append(incumbent)
    return GateResult(False, tuple(contradicts), tuple(equivalent), tuple(keys))
