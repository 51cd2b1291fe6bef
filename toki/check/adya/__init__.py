"""Adya dependency-graph checker, split by stage as Elle is (Kingsbury & Alvaro 2020).

- ``history``: the input values (``Op``, ``Txn``, ``History``);
- ``scan``: one pass over the transactions (writers, external reads, internal anomalies);
- ``orders``: edges from a total version order (given, or list-append reads);
- ``rw_register``: register version orders from initial state, writes-follow-reads,
  process or real-time order;
- ``graph``: the typed edge store, process and real-time order, the cyclic-edge filter;
- ``cycles``: shortest typed cycle per strongly connected component, and cycle-exists proofs;
- ``explain``: edges and anomalies that say why;
- ``models``: consistency models and the anomalies they proscribe (Elle's tables);
- ``checker``: ``check`` (toki's anomaly list); ``verdict``: Elle's valid?/anomaly-types.
"""

from typing import Final

from toki.check.adya.checker import Analysis, analyse, check, dependency_graph
from toki.check.adya.explain import Anomaly, Edge, explain
from toki.check.adya.history import History, Op, OpKind, Txn
from toki.check.adya.verdict import Verdict, verdict, workload

__all__ = [
    "ANOMALY_NAMES",
    "Analysis",
    "Anomaly",
    "Edge",
    "History",
    "Op",
    "OpKind",
    "Txn",
    "Verdict",
    "analyse",
    "check",
    "dependency_graph",
    "explain",
    "verdict",
    "workload",
]

#: Every anomaly name ``check`` can report. Cycle names may carry a ``-process`` or
#: ``-realtime`` suffix when the cycle needs a process-order or real-time edge; a component
#: whose search ran out of budget adds ``cycle-search-timeout`` and ``*-cycle-exists`` names.
ANOMALY_NAMES: Final = (
    "G0",
    "G1a",
    "G1b",
    "G1c",
    "G-single",
    "G-nonadjacent",
    "G2-item",
    "lost-update",
    "internal",
    "future-read",
    "dirty-update",
    "duplicate-elements",
    "cyclic-versions",
    "garbage-read",
    "incompatible-order",
    "cycle-search-timeout",
)
