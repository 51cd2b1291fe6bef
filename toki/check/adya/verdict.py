"""A verdict as Elle gives one: ``valid?``, the anomaly types, each anomaly explained, and the
consistency models the history rules out.

The consistency models asked for decide which anomalies make a history invalid and which
graphs the search needs (real-time edges for strict models, process edges for strong-session
ones), exactly as in Elle's ``elle.txn/result-map``: anomalies a model proscribes make the
history invalid; an empty dependency graph or a search that ran out of budget, alone, make it
``unknown``; other anomalies are not reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from toki.check.adya.checker import DEFAULT_BUDGET, analyse
from toki.check.adya.explain import Anomaly
from toki.check.adya.history import History
from toki.check.adya.models import (
    UNKNOWN_ANOMALIES,
    anomalies_implying,
    anomalies_prohibited_by,
    boundary,
    canonical,
    elle_name,
    graphs_needed,
    impossible_models,
    parse_models,
)

__all__ = ["Verdict", "verdict", "workload"]

Valid = bool | Literal["unknown"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """``valid`` is True, False or "unknown"; ``anomalies`` maps Elle's type names to the
    anomalies of that type; ``not_``/``also_not`` are the models ruled out (weakest first)."""

    valid: Valid
    anomalies: dict[str, list[Anomaly]]
    not_: list[str]
    also_not: list[str]
    models: list[str]
    workload: str
    process_edges: bool
    realtime_edges: bool
    options: dict[str, bool] = field(default_factory=dict)
    notes: dict[str, list[Anomaly]] = field(default_factory=dict)  # found, not reportable

    @property
    def anomaly_types(self) -> list[str]:
        return sorted(self.anomalies)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"valid?": self.valid}
        if self.anomalies:
            out["anomaly-types"] = self.anomaly_types
            out["anomalies"] = {
                t: [a.to_json() for a in self.anomalies[t]] for t in self.anomaly_types
            }
            out["not"] = self.not_
            out["also-not"] = self.also_not
        out["consistency-models"] = self.models
        out["workload"] = self.workload
        out["graphs"] = [
            n
            for n, on in (("process", self.process_edges), ("realtime", self.realtime_edges))
            if on
        ]
        out["options"] = self.options
        if self.notes:
            out["notes"] = {t: [a.to_json() for a in v] for t, v in sorted(self.notes.items())}
        return out

    def render(self, limit: int = 10) -> str:
        """Elle-like text: valid?, types, the models ruled out, then each anomaly explained."""
        valid = "true" if self.valid is True else "false" if self.valid is False else "unknown"
        lines = [f"valid? {valid}"]
        if self.anomalies:
            lines.append("anomaly-types: " + ", ".join(self.anomaly_types))
            if self.not_:
                lines.append("not: " + ", ".join(self.not_))
            if self.also_not:
                lines.append("also-not: " + ", ".join(self.also_not))
            for t in self.anomaly_types:
                found = self.anomalies[t]
                for i, a in enumerate(found[:limit]):
                    lines.append("")
                    lines.append(f"{t} #{i}")
                    text = a.explain()
                    if text.startswith(a.name):  # toki's name → Elle's, e.g. G-single-item
                        text = t + text[len(a.name) :]
                    lines.append(text)
                if len(found) > limit:
                    lines.append(f"… and {len(found) - limit} more {t}")
        if self.notes:
            counts = ", ".join(f"{t} ×{len(v)}" for t, v in sorted(self.notes.items()))
            lines.append("")
            lines.append(f"also found, not ruled out by these models: {counts}")
            for _, v in sorted(self.notes.items()):
                lines += ["  " + a.explain() for a in v[:limit]]
        return "\n".join(lines)


def workload(history: History) -> str:
    """``list-append``, ``rw-register``, ``mixed`` or ``empty``, by the micro-ops used."""
    kinds = {op.kind for t in history.txns for op in t.ops}
    app, w = "append" in kinds, "w" in kinds
    if app and w:
        return "mixed"
    if app:
        return "list-append"
    if w:
        return "rw-register"
    reads = [op.value for t in history.txns for op in t.ops]
    if any(isinstance(v, tuple) for v in reads):
        return "list-append"
    return "rw-register" if reads else "empty"


def plan(models: Iterable[str], anomalies: Iterable[str]) -> tuple[list[str], set[str], bool, bool]:
    """The models asked for (canonical), the anomalies that make a history invalid, and
    whether the graph needs process / real-time edges."""
    ms = parse_models(models)
    extra = [a.strip().lstrip(":") for a in anomalies if a.strip()]
    prohibited = anomalies_prohibited_by(ms) | anomalies_implying(extra)
    process, realtime = graphs_needed(prohibited | UNKNOWN_ANOMALIES)
    return ms, prohibited, process, realtime


def options(wfr_keys: bool, sequential_keys: bool, linearizable_keys: bool) -> dict[str, bool]:
    """The register-inference options as a verdict reports them."""
    return {
        "wfr-keys": wfr_keys,
        "sequential-keys": sequential_keys,
        "linearizable-keys": linearizable_keys,
    }


def verdict(
    history: History,
    *,
    models: Iterable[str] = ("strict-serializable",),
    anomalies: Iterable[str] = (),
    wfr_keys: bool = False,
    sequential_keys: bool = False,
    linearizable_keys: bool = False,
    search_budget: int = DEFAULT_BUDGET,
) -> Verdict:
    """Check ``history`` against consistency models (Elle's names; default strict
    serializability, as in Elle) and any extra anomaly types that must not occur."""
    ms, prohibited, process, realtime = plan(models, anomalies)
    reportable = prohibited | UNKNOWN_ANOMALIES
    result = analyse(
        history,
        process=process,
        realtime=realtime,
        wfr_keys=wfr_keys,
        sequential_keys=sequential_keys,
        linearizable_keys=linearizable_keys,
        search_budget=search_budget,
    )
    found: dict[str, list[Anomaly]] = {}
    for a in result.anomalies:
        found.setdefault(elle_name(a.name), []).append(a)
    if result.edges == 0:
        found["empty-transaction-graph"] = []
    not_, also_not = boundary(found)
    # a cycle-exists anomaly says nothing more once another anomaly rules its model out
    ruled_out = impossible_models(t for t in found if not t.endswith("-cycle-exists"))
    shown = {
        t: v
        for t, v in found.items()
        if t in reportable
        and not (t.endswith("-cycle-exists") and canonical(t[: -len("-cycle-exists")]) in ruled_out)
    }
    notes = {
        t: v for t, v in found.items() if t not in shown and v and not t.endswith("-cycle-exists")
    }
    valid: Valid
    if not shown:
        valid = True
    elif any(t in prohibited for t in shown):
        valid = False
    else:
        valid = "unknown"
    return Verdict(
        valid,
        shown if valid is not True else {},
        not_ if valid is not True else [],
        also_not if valid is not True else [],
        ms,
        workload(history),
        process,
        realtime,
        options(wfr_keys, sequential_keys, linearizable_keys),
        notes,
    )
