"""The Adya check, stage by stage: scan the transactions, place versions (given orders, list
reads, register inference), add process/real-time order, then search each strongly connected
component for the shortest cycle of each type.

``check`` returns toki's anomaly list; ``analyse`` also says how many edges the graph had
(an empty graph is something Elle reports); ``dependency_graph`` returns the whole typed
graph for inspection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import networkx as nx

from toki.check.adya.cycles import find_cycles
from toki.check.adya.explain import Anomaly
from toki.check.adya.graph import Graph, gc_paused, process_edges, realtime_edges, to_networkx
from toki.check.adya.history import History, Key, Value
from toki.check.adya.orders import key_orders, order_edges
from toki.check.adya.rw_register import register_edges
from toki.check.adya.scan import lost_updates, scan

__all__ = ["Analysis", "analyse", "check", "dependency_graph"]

DEFAULT_BUDGET = 2_000_000


@dataclass(frozen=True, slots=True)
class Analysis:
    """The anomalies found, and the number of edges the dependency graph had."""

    anomalies: list[Anomaly]
    edges: int


def _build(
    history: History,
    process: bool,
    realtime: bool,
    wfr_keys: bool,
    sequential_keys: bool,
    linearizable_keys: bool,
) -> tuple[Graph, list[Anomaly]]:
    s = scan(history)
    anomalies = list(s.anomalies)
    g = Graph(s.ids, len(s.ids))
    explicit = cast("dict[Key, tuple[Value, ...]]", history.version_order or {})
    orders, found = key_orders(s, explicit)
    anomalies += found
    reg_readers: dict[tuple[Key, Any], list[int]] = {}
    anomalies += order_edges(s, g, orders, reg_readers)
    anomalies += lost_updates(s)
    anomalies += register_edges(
        s,
        g,
        history,
        {k for k in s.reg_keys if k not in explicit},
        reg_readers,
        wfr_keys=wfr_keys,
        sequential_keys=sequential_keys,
        linearizable_keys=linearizable_keys,
    )
    if process:
        process_edges(g, s.procs, s.starts, s.oks)
    if realtime:
        realtime_edges(g, s.starts, s.ends)
    return g, anomalies


def analyse(
    history: History,
    *,
    process: bool = False,
    realtime: bool = False,
    wfr_keys: bool = False,
    sequential_keys: bool = False,
    linearizable_keys: bool = False,
    search_budget: int = DEFAULT_BUDGET,
) -> Analysis:
    """Every anomaly in ``history`` and the size of its dependency graph; see ``check``."""
    with gc_paused():
        g, anomalies = _build(
            history, process, realtime, wfr_keys, sequential_keys, linearizable_keys
        )
        cycles, edges = find_cycles(g, process, realtime, search_budget)
        return Analysis(anomalies + cycles, edges)


def check(
    history: History,
    *,
    process: bool = False,
    realtime: bool = False,
    wfr_keys: bool = False,
    sequential_keys: bool = False,
    linearizable_keys: bool = False,
    search_budget: int = DEFAULT_BUDGET,
) -> list[Anomaly]:
    """Every anomaly in ``history``: non-cycle ones, then per strongly connected component the
    shortest cycle of each type not implied by one already found there.

    ``process``/``realtime`` add session and real-time order edges (Elle's -process and
    -realtime variants). ``wfr_keys``, ``sequential_keys`` and ``linearizable_keys`` let
    register version orders be inferred from writes-follow-reads, process order or real-time
    order (Elle's options of the same names; off by default, as in Elle). ``search_budget``
    caps edge relaxations per anomaly type and component; when it runs out the component is
    reported with ``cycle-search-timeout`` and the ``*-cycle-exists`` anomalies that hold.
    """
    return analyse(
        history,
        process=process,
        realtime=realtime,
        wfr_keys=wfr_keys,
        sequential_keys=sequential_keys,
        linearizable_keys=linearizable_keys,
        search_budget=search_budget,
    ).anomalies


def dependency_graph(
    history: History,
    *,
    process: bool = False,
    realtime: bool = False,
    wfr_keys: bool = False,
    sequential_keys: bool = False,
    linearizable_keys: bool = False,
) -> nx.MultiDiGraph:
    """The whole typed dependency graph, one edge per (relation, key) with its ``Edge``.

    Nodes are the ids of committed and in-doubt transactions. Meant for inspection and small
    histories; ``check`` never builds this for a whole large history.
    """
    g, _ = _build(history, process, realtime, wfr_keys, sequential_keys, linearizable_keys)
    return to_networkx(g)
