"""Evidence-weighted merge: the value with the most accumulated evidence wins.

A value's evidence is the sum of the weights of every claim ever recorded for it on the
key (losers included: losing does not erase evidence), plus the weights of the versions
being folded that are not yet on record. A judge, when present, scores each candidate and
its score replaces that candidate's own weight. Ties go to the value whose latest evidence
is newest, then to the larger version id, so the winner depends only on the set.

Precondition SERIALIZABLE. A claim writes the evidence total of its own value (and the
current row only when the winning value changes), but decides by comparing that total with
the totals of the other values, which it only reads. At READ_COMMITTED two writers read the
same total and one's evidence is lost (N2); at SNAPSHOT first-committer-wins protects each
total, but two claims for different values can each read the other's total as it was and
both commit (write skew): the current value ends with less evidence than another (N2).
z3 finds it (proofs/isolation_ewm.py, false variant @snapshot) and the simulator replays it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from toki.algebra.base import Choice, FoldOperator
from toki.algebra.context import ResolveContext
from toki.isolation import Isolation
from toki.judge import JudgeQuestion
from toki.model import FactVersion

__all__ = ["EWM", "EvidenceWeightedMerge"]


class EvidenceWeightedMerge(FoldOperator):
    name = "EWM"
    version = "1"
    requires = Isolation.SERIALIZABLE

    def choose(self, versions: Sequence[FactVersion], ctx: ResolveContext) -> Choice:
        ordered = sorted(versions, key=lambda v: (v.recorded_at, v.id))
        evidence: dict[str, FactVersion] = {}
        if ctx.evidence is not None:
            evidence = {v.id: v for v in ctx.evidence(ordered[0].key)}
        evidence.update((v.id, v) for v in ordered)
        weights = {vid: float(v.weight) for vid, v in evidence.items()}
        theta = None
        asked = ctx.consult(JudgeQuestion(ordered[0].key, "score", tuple(ordered)))
        if asked is not None:
            verdict, theta = asked
            for v in ordered:
                score = verdict.score_of(v.id)
                if score is not None:
                    weights[v.id] = score
        totals: dict[str, float] = defaultdict(float)
        newest: dict[str, tuple[datetime, str]] = {}
        for vid, v in evidence.items():
            totals[v.value_json] += weights[vid]
            stamp = (v.recorded_at, vid)
            if v.value_json not in newest or stamp > newest[v.value_json]:
                newest[v.value_json] = stamp
        ranking = sorted(
            ordered,
            key=lambda v: (totals[v.value_json], newest[v.value_json], v.recorded_at, v.id),
            reverse=True,
        )
        best = ranking[0].value_json
        return Choice(ranking, f"accumulated evidence {totals[best]:g} for {best}", theta)


EWM = EvidenceWeightedMerge()
