"""The host half of toki's own Memory as a real system (see `toki/real/inenv/toki_memory.py`).

The judge gate points ask what the EWM operator asks (a "score" question over the
contradicting versions); the reply scores the judge's pick 1.0 and the others 0.0, the pick
made by the workload's judge on the question "<key>: <incumbents> vs <challenger>" (the text
the TOKI model asks). Beliefs are `Memory.current` per key; recovery is reopening the durable
record and, separately, re-adjudicating it with a fresh judge; recoverable values are every
version in `Memory.history`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toki.real.adapter import Beliefs, Picker
from toki.real.gate import GatePoint
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import belief_entry

__all__ = ["TokiHost"]


@dataclass(frozen=True, slots=True)
class TokiHost:
    variant: str  # "memory" or "sqlite"

    def config(self, workload: Workload) -> dict[str, Any]:
        return {"variant": self.variant, "keys": list(workload.keys)}

    def answer(self, point: GatePoint, judge: Picker) -> Any:
        if point.kind != "llm":
            return None
        detail = point.detail if isinstance(point.detail, Mapping) else {}
        cands = list(detail.get("candidates") or [])
        if not cands:
            return {}
        values = [str(c.get("value")) for c in cands]
        if detail.get("task") == "contradicts":
            return {"contradicts": len(set(values)) > 1}
        question = f"{detail.get('key')}: {' / '.join(values[:-1])} vs {values[-1]}"
        pick = judge.pick(question, values)
        winner = [c for c in cands if str(c.get("value")) == pick][-1]
        if detail.get("task") == "score":
            return {"scores": [[c["id"], 1.0 if c is winner else 0.0] for c in cands]}
        return {"winner": winner["id"]}

    def beliefs(self, observation: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
        return _beliefs(observation.get("keys") or {}, keys)

    def recover(
        self, observation: Mapping[str, Any], keys: Sequence[str], judge: Picker, recovered: Any
    ) -> Beliefs:
        if not isinstance(recovered, Mapping) or "error" in recovered:
            why = recovered.get("error") if isinstance(recovered, Mapping) else "no recovery"
            return {k: {"value": None, "live": [], "recovery_failed": str(why)} for k in keys}
        return _beliefs(recovered.get("reopened") or {}, keys)

    def rejudged(self, recovered: Any, keys: Sequence[str]) -> Beliefs | None:
        """The re-adjudication's beliefs (None when it did not run)."""
        if not isinstance(recovered, Mapping) or "rejudged" not in recovered:
            return None
        return _beliefs(recovered["rejudged"], keys)

    def recoverable(self, observation: Mapping[str, Any], key: str) -> set[str]:
        entry = (observation.get("keys") or {}).get(key) or {}
        return {str(v) for v in entry.get("history", [])}

    def recorded(self, observation: Mapping[str, Any], claim: SimClaim) -> bool:
        """A version of this very claim is stored (value, source and valid-from day): an
        agent's two claims may carry one value, and a value alone would count the second
        as recorded when only the first was (a false N2 after a crash between them)."""
        entry = (observation.get("keys") or {}).get(claim.key) or {}
        mine = [str(claim.value), claim.source, claim.start]
        return any(list(c) == mine for c in entry.get("claims", []))


def _beliefs(view: Mapping[str, Any], keys: Sequence[str]) -> Beliefs:
    out: Beliefs = {}
    for k in keys:
        entry = view.get(k) or {}
        out[k] = belief_entry(str(v) for v in entry.get("values", []))
    return out
