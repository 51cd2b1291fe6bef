"""Consistency models and the anomalies each one rules out, with Elle's names.

The tables are data, transcribed from Elle's ``elle/consistency_model.clj`` (jepsen-io/elle,
EPL; Kingsbury & Alvaro, VLDB 2020), which cites Adya, Bailis et al., Cerone et al., Daudjee
& Salem and others for each entry: which models imply which (``MODELS``), which anomalies a
model directly proscribes (``PROSCRIBED``) and which anomalies imply others (``IMPLIED``).
(Elle's newer releases call ROLA ``update-atomic``; so do these tables.)
Functions answer the questions ``toki check`` asks: which anomalies make a history invalid
for a model, which graphs (process, real-time) the search needs, and which models a set of
found anomalies rules out (Elle's ``not`` / ``also-not`` boundary).

toki's own anomaly names differ from Elle's in two ways, mapped by ``elle_name``: toki has no
predicate reads, so its ``G-single`` and ``G-nonadjacent`` are Elle's ``G-single-item`` and
``G-nonadjacent-item``; and ``garbage-read`` (a read of a value nobody in the history wrote)
is toki's own: no model proscribes it, because the value may predate the history (Elle
ignores such reads), so a verdict lists it as a note, never as a reason to be invalid.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from toki.errors import InvalidInput

__all__ = [
    "MODEL_NAMES",
    "anomalies_prohibited_by",
    "boundary",
    "canonical",
    "elle_name",
    "friendly",
    "graphs_needed",
    "implied_anomalies",
    "impossible_models",
    "parse_models",
]

CANONICAL: Final[dict[str, str]] = {
    "consistent-view": "PL-2+",
    "conflict-serializable": "PL-3",
    "cursor-stability": "PL-CS",
    "forward-consistent-view": "PL-FCV",
    "monotonic-snapshot-read": "PL-MSR",
    "monotonic-view": "PL-2L",
    "read-committed": "PL-2",
    "read-uncommitted": "PL-1",
    "repeatable-read": "PL-2.99",
    "serializable": "PL-3",
    "snapshot-isolation": "PL-SI",
    "strict-serializable": "PL-SS",
    "strong-serializable": "PL-SS",
    "update-serializable": "PL-3U",
    "strong-session-read-uncommitted": "strong-session-PL-1",
    "strong-session-read-committed": "strong-session-PL-2",
    "strong-read-uncommitted": "strong-PL-1",
    "strong-read-committed": "strong-PL-2",
}
# Elle's friendly names: the inverse map, with its choices where two names share one model.
FRIENDLY: Final[dict[str, str]] = {
    **{c: f for f, c in CANONICAL.items()},
    "PL-3": "serializable",
    "PL-SS": "strong-serializable",
}

# model -> weaker models it implies (canonicalized on use)
_MODEL_EDGES: Final[dict[str, tuple[str, ...]]] = {
    "causal-cerone": ("read-atomic",),
    "consistent-view": ("cursor-stability", "monotonic-view"),
    "conflict-serializable": ("view-serializable",),
    "cursor-stability": ("read-committed", "PL-2"),
    "forward-consistent-view": ("consistent-view",),
    "PL-2": ("PL-1",),
    "PL-3": ("repeatable-read", "update-serializable"),
    "update-serializable": ("forward-consistent-view",),
    "monotonic-atomic-view": ("read-committed",),
    "monotonic-view": ("PL-2",),
    "monotonic-snapshot-read": ("PL-2",),
    "parallel-snapshot-isolation": ("causal-cerone", "update-atomic"),
    "prefix": ("causal-cerone",),
    "read-atomic": ("monotonic-atomic-view",),
    "read-committed": ("read-uncommitted",),
    "repeatable-read": ("cursor-stability", "monotonic-atomic-view"),
    "update-atomic": ("read-atomic",),
    "serializable": ("repeatable-read", "snapshot-isolation", "view-serializable"),
    "session-serializable": ("1SR",),
    "snapshot-isolation": (
        "forward-consistent-view",
        "monotonic-atomic-view",
        "monotonic-snapshot-read",
        "parallel-snapshot-isolation",
        "prefix",
    ),
    "strict-serializable": (
        "PL-3",
        "serializable",
        "linearizable",
        "snapshot-isolation",
        "strong-snapshot-isolation",
        "strong-session-serializable",
    ),
    "strong-session-PL-1": ("PL-1",),
    "strong-session-PL-2": ("PL-2", "strong-session-PL-1"),
    "strong-PL-1": ("strong-session-PL-1",),
    "strong-PL-2": ("strong-session-PL-2", "strong-PL-1"),
    "strong-session-serializable": ("serializable", "strong-session-snapshot-isolation"),
    "strong-session-snapshot-isolation": ("snapshot-isolation", "strong-session-PL-2"),
    "strong-serializable": ("session-serializable",),
    "strong-snapshot-isolation": ("strong-session-snapshot-isolation", "strong-PL-2"),
    "linearizable": ("sequential",),
    "sequential": ("causal",),
    "causal": ("writes-follow-reads", "PRAM"),
    "PRAM": ("monotonic-reads", "monotonic-writes", "read-your-writes"),
}

_PROSCRIBED: Final[dict[str, tuple[str, ...]]] = {
    "causal-cerone": ("internal", "G1a"),
    "cursor-stability": ("G1", "G-cursor", "lost-update"),
    "monotonic-view": ("G1", "G-monotonic"),
    "monotonic-snapshot-read": ("G1", "G-MSR"),
    "consistent-view": ("G1", "G-single"),
    "forward-consistent-view": ("G1", "G-SIb"),
    "parallel-snapshot-isolation": ("internal", "G1a"),
    "PL-3": ("G1", "G2", "predicate-read-miss", "PL-3-cycle-exists"),
    "PL-2": ("G1", "PL-2-cycle-exists"),
    "PL-1": ("G0", "duplicate-elements", "cyclic-versions", "PL-1-cycle-exists"),
    "prefix": ("internal", "G1a"),
    "serializable": ("internal",),
    "snapshot-isolation": ("internal", "G1", "G-SI", "G-nonadjacent", "PL-SI-cycle-exists"),
    "read-atomic": ("internal", "G1a", "future-read"),
    "repeatable-read": ("G1", "G2-item", "PL-2.99-cycle-exists", "lost-update"),
    "update-atomic": ("lost-update",),
    "strict-serializable": ("G1", "G1c-realtime", "G2-realtime", "PL-SS-cycle-exists"),
    "strong-session-PL-1": ("strong-session-PL-1-cycle-exists", "G0-process"),
    "strong-session-PL-2": ("strong-session-PL-2-cycle-exists", "G1c-process"),
    "strong-PL-1": ("strong-PL-1-cycle-exists", "G0-realtime"),
    "strong-PL-2": ("strong-PL-2-cycle-exists", "G1c-realtime"),
    "strong-session-snapshot-isolation": (
        "internal",
        "G1-process",
        "G-nonadjacent-process",
        "strong-session-snapshot-isolation-cycle-exists",
    ),
    "strong-snapshot-isolation": (
        "internal",
        "G1-realtime",
        "G-nonadjacent-realtime",
        "strong-snapshot-isolation-cycle-exists",
    ),
    "strong-session-serializable": (
        "G1-process",
        "G2-process",
        "strong-session-serializable-cycle-exists",
    ),
    "update-serializable": ("G1", "G-update"),
}

# anomaly -> anomalies it implies (Elle's names)
IMPLIED: Final[dict[str, tuple[str, ...]]] = {
    "G0": ("G1c", "G0-process"),
    "G0-process": ("G1c-process", "G0-realtime"),
    "G0-realtime": ("G1c-realtime",),
    "G1a": ("G1",),
    "G1b": ("G1",),
    "G1c": ("G1", "G1c-process"),
    "G1c-process": ("G1c-realtime", "G1-process"),
    "G1c-realtime": ("G1-realtime",),
    "G1": ("G1-process",),
    "G1-process": ("G1-realtime",),
    "G-single-item": ("G-single", "G-single-item-process", "G-nonadjacent-item"),
    "G-single-item-process": (
        "G-single-process",
        "G-single-item-realtime",
        "G-nonadjacent-item-process",
    ),
    "G-single-item-realtime": ("G-single-realtime", "G-nonadjacent-item-realtime"),
    "G-single": ("G-nonadjacent", "GSIb", "G-single-process"),
    "G-single-process": ("G-nonadjacent-process", "G-single-realtime"),
    "G-single-realtime": ("G-nonadjacent-realtime",),
    "G-nonadjacent-item": ("G-nonadjacent", "G2-item", "G-nonadjacent-item-process"),
    "G-nonadjacent-item-process": (
        "G-nonadjacent-process",
        "G2-item-process",
        "G-nonadjacent-item-realtime",
    ),
    "G-nonadjacent-item-realtime": ("G2-item-realtime", "G-nonadjacent-realtime"),
    "G-nonadjacent": ("G2", "G-nonadjacent-process"),
    "G-nonadjacent-process": ("G2-process", "G-nonadjacent-realtime"),
    "G-nonadjacent-realtime": ("G2-realtime",),
    "G2": ("G2-process",),
    "G2-item": ("G2", "G2-item-process"),
    "G2-item-process": ("G2-process", "G2-item-realtime"),
    "G2-item-realtime": ("G2-realtime",),
    "G2-process": ("G2-realtime",),
    "GSIa": ("GSI",),
    "GSIb": ("GSI",),
    "incompatible-order": ("G1a",),
    "future-read": ("G1c",),
    "dirty-update": ("G1a",),
    "lost-update": ("write-skew", "G2-item"),
    "write-skew": ("G2",),
}

UNKNOWN_ANOMALIES: Final = frozenset(("empty-transaction-graph", "cycle-search-timeout"))


def canonical(model: str) -> str:
    return CANONICAL.get(model, model)


def friendly(model: str) -> str:
    return FRIENDLY.get(model, model)


def _model_graph() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, bs in _MODEL_EDGES.items():
        out.setdefault(canonical(a), set()).update(canonical(b) for b in bs)
        for b in bs:
            out.setdefault(canonical(b), set())
    return out


_MODELS: Final = _model_graph()
PROSCRIBED: Final[dict[str, set[str]]] = {}
for _m, _as in _PROSCRIBED.items():
    PROSCRIBED.setdefault(canonical(_m), set()).update(_as)
    _MODELS.setdefault(canonical(_m), set())
#: Every model name ``--consistency-model`` accepts (Elle's names, friendly and canonical).
MODEL_NAMES: Final = frozenset(_MODELS) | frozenset(CANONICAL)


Step = dict[str, set[str]] | dict[str, tuple[str, ...]]


def _closure(start: Iterable[str], step: Step) -> set[str]:
    seen = set(start)
    todo = list(seen)
    while todo:
        x = todo.pop()
        for y in step.get(x, ()):
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return seen


def _reverse(g: Step) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, bs in g.items():
        for b in bs:
            out.setdefault(b, set()).add(a)
    return out


_IMPLIED_BY: Final = _reverse(IMPLIED)
_STRONGER: Final = _reverse(_MODELS)
_PROSCRIBERS: Final = _reverse(PROSCRIBED)


def parse_models(names: Iterable[str]) -> list[str]:
    """Model names as given, checked against Elle's list."""
    out = []
    for n in names:
        n = n.strip().lstrip(":")
        if not n or n == "none":  # `--consistency-model none`: only explicit anomalies count
            continue
        if n not in MODEL_NAMES:
            known = ", ".join(sorted(FRIENDLY.get(m, m) for m in MODEL_NAMES if "-" in m))
            raise InvalidInput("--consistency-model", f"unknown model {n!r}", f"use one of {known}")
        out.append(n)
    return out


def implied_anomalies(anomalies: Iterable[str]) -> set[str]:
    """The anomalies, and every anomaly they imply (Elle's ``all-implied-anomalies``)."""
    return _closure(anomalies, IMPLIED)


def anomalies_prohibited_by(models: Iterable[str]) -> set[str]:
    """Anomalies that cannot be present if every one of ``models`` holds."""
    ms = _closure((canonical(m) for m in models), _MODELS)
    direct = set().union(*(PROSCRIBED.get(m, set()) for m in ms)) if ms else set()
    return _closure(direct, _IMPLIED_BY)


def anomalies_implying(anomalies: Iterable[str]) -> set[str]:
    """The anomalies, and every anomaly that implies one of them."""
    return _closure(anomalies, _IMPLIED_BY)


def impossible_models(anomalies: Iterable[str]) -> set[str]:
    """Canonical models ruled out by the anomalies found."""
    direct: set[str] = set()
    for a in implied_anomalies(anomalies):
        direct |= _PROSCRIBERS.get(a, set())
    return _closure(direct, _STRONGER)


def boundary(anomalies: Iterable[str]) -> tuple[list[str], list[str]]:
    """(``not``, ``also-not``): the weakest models ruled out, and the stronger rest."""
    impossible = impossible_models(anomalies)
    weakest = {
        m for m in impossible if not (_closure(_MODELS.get(m, ()), _MODELS) & (impossible - {m}))
    }
    return (
        sorted(friendly(m) for m in weakest),
        sorted(friendly(m) for m in impossible - weakest),
    )


def graphs_needed(reportable: set[str]) -> tuple[bool, bool]:
    """(process, realtime): realtime edges when a realtime anomaly matters, else process
    edges when a process anomaly does (Elle: realtime edges subsume process order)."""
    if any(a.endswith("-realtime") for a in reportable):
        return False, True
    return any(a.endswith("-process") for a in reportable), False


def elle_name(name: str) -> str:
    """toki's anomaly name as Elle spells it (G-single → G-single-item, …)."""
    for base in ("G-single", "G-nonadjacent"):
        if name == base or name.startswith(base + "-"):
            return base + "-item" + name[len(base) :]
    return name
