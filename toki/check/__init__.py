"""Checkers over recorded histories: the Adya dependency graph and Jepsen/Elle input."""

from toki.check.adya import (
    ANOMALY_NAMES,
    Anomaly,
    Edge,
    History,
    Op,
    Txn,
    Verdict,
    check,
    dependency_graph,
    explain,
    verdict,
)
from toki.check.elle import load, parse_edn, parse_json

__all__ = [
    "ANOMALY_NAMES",
    "Anomaly",
    "Edge",
    "History",
    "Op",
    "Txn",
    "Verdict",
    "check",
    "dependency_graph",
    "explain",
    "load",
    "parse_edn",
    "parse_json",
    "verdict",
]
