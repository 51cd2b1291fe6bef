"""Histories on a page: a toki JSONL history's op records (re-run through its model when the
header names one, which gives each operation its agent), an Elle/Jepsen history's
transactions on their processes' lanes, and each Adya anomaly's cycle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toki.errors import InvalidInput
from toki.show.common import lanes, plain, short, touches
from toki.show.page import Cycle, CycleEdge, Page, Row, Span
from toki.show.simulated import walk

__all__ = ["elle_history", "load_elle", "not_a_history", "toki_history"]


def load_elle(path: Path, fmt: str, detected: bool = True) -> Any:
    """An Elle history; a file the format detection only took for EDN is refused in words
    (`not_a_history`)."""
    from toki.check.elle import load
    from toki.errors import HistoryFormatError

    try:
        return load(path, fmt)
    except HistoryFormatError as exc:
        raise not_a_history(path, exc, detected) from None


def not_a_history(path: Path, exc: Exception, detected: bool = True) -> Exception:
    """The error to report for `exc`, raised reading `path` as an Elle history: a file the
    format detection only took for EDN (a Markdown file starts with '#', as an EDN record
    does) is "neither a toki history nor an Elle history", not the EDN lexer's position;
    anything else is `exc` itself."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        head = fh.read(200).lstrip()
    looks_edn = head.startswith(("{", "[", ";", "#jepsen", "#{"))
    if detected and not looks_edn and "invalid EDN" in str(exc):
        return InvalidInput(
            str(path),
            "is neither a toki history nor an Elle history in EDN or JSON (its first "
            "line does not parse)",
            "see docs/history-format.md, or name the format with --format",
        )
    return exc


def _cycles(anomalies: Mapping[str, Sequence[Any]], limit: int = 6) -> list[Cycle]:
    from toki.check.adya.explain import kname, tname

    out: list[Cycle] = []
    for name in sorted(anomalies):
        for a in anomalies[name]:
            if not a.cycle or len(out) >= limit:
                continue
            edges = tuple(
                CycleEdge(
                    tname(e.src),
                    tname(e.dst),
                    str(e.rel),
                    f"{e.rel}" + ("" if e.key is None else f" {kname(e.key)}"),
                    e.explain(),
                )
                for e in a.cycle
            )
            out.append(Cycle(f"{name} #{len(out)}", edges, a.explain()))
    return out


def _marked_txns(anomalies: Mapping[str, Sequence[Any]]) -> dict[str, str]:
    from toki.check.adya.explain import tname

    marks: dict[str, str] = {}
    for name in sorted(anomalies):
        for a in anomalies[name]:
            for t in a.txns:
                marks.setdefault(tname(t), f"in {name}")
    return marks


def elle_history(path: Path) -> Page:
    from toki.check.adya import verdict as adya_verdict
    from toki.check.adya.explain import tname
    from toki.history import detect_format

    fmt = detect_format(path)
    history = load_elle(path, fmt)
    v = adya_verdict(history)
    marks = _marked_txns(v.anomalies)
    order = sorted(
        range(len(history.txns)),
        key=lambda i: (
            history.txns[i].start_index if history.txns[i].start_index is not None else i,
            i,
        ),
    )
    rows = []
    word = {"ok": "committed", "fail": "aborted", "info": "unknown outcome"}
    for pos, i in enumerate(order):
        t = history.txns[i]
        name = tname(t.id)
        ops = ", ".join(f"{op.kind} {op.key} {short(op.value, 30)}" for op in t.ops)
        kind = {"ok": "commit", "fail": "abort"}.get(t.status, "info")
        record = {
            "txn": name,
            "process": plain(t.process),
            "status": t.status,
            "ops": [[op.kind, op.key, plain(op.value)] for op in t.ops],
            "invoked at": t.start_index,
            "completed at": t.end_index,
        }
        rows.append(
            Row(
                pos,
                f"process {t.process}",
                f"{name} ({word.get(t.status, t.status)}): {ops}",
                kind,
                name,
                record,
                marks.get(name, ""),
            )
        )
    text = v.render(10).splitlines()
    facts = [
        ("format", fmt),
        ("workload", v.workload),
        ("transactions", f"{len(history.txns):,}"),
        ("checked for", ", ".join(v.models)),
        ("anomaly types", ", ".join(v.anomaly_types) or "none"),
    ]
    return Page(
        title=f"{path.name}: " + (", ".join(v.anomaly_types) or "no anomaly"),
        source=str(path),
        kind="Elle history",
        verdict=f"valid? {str(v.valid).lower()} (toki check)",
        facts=tuple(facts),
        explanation=tuple(text),
        rows=tuple(rows),
        lanes=lanes(rows),
        cycles=tuple(_cycles(v.anomalies)),
    )


def toki_history(path: Path) -> Page:
    """A toki JSONL history: its op records on lanes (the record's agent, or the agent the
    re-run through the named model gives it, or its transaction), the Adya cycles, and the
    N1/N2/N3 checks as `toki check` reports them."""
    from toki.check.adya import verdict as adya_verdict
    from toki.check.runner import check_history_file
    from toki.history import read_history, to_adya

    history = read_history(path)
    result = check_history_file(history)
    found = [n for n, r in result["checks"].items() if n != "adya" and r.get("found")]
    owner = _history_agents(history.header)
    cycles: list[Cycle] = []
    marks: dict[str, str] = {}
    if history.ops:
        v = adya_verdict(to_adya(history))
        cycles, marks = _cycles(v.anomalies), _marked_txns(v.anomalies)
    keys = [str(k) for n in found for k in result["checks"][n].get("keys", ())]
    rows: list[Row] = []
    first: dict[Any, tuple[str, int]] = {}
    spans: list[Span] = []
    level = str(history.header.get("isolation", ""))
    for i, op in enumerate(history.ops):
        agent = op.agent if op.agent is not None else owner.get(op.at)
        lane = f"agent {agent}" if agent is not None else f"T{op.txn}"
        txn = f"T{op.txn}"
        text = op.kind + ("" if op.key is None else f" {short(op.key, 60)}")
        if op.kind in ("read", "write"):
            text += f" = {short(op.value, 60)}"
        why = marks.get(txn, "")
        if not why and found and op.key is not None and op.kind in ("read", "write", "delete"):
            key = tuple(op.key) if isinstance(op.key, list) else op.key
            if touches(key, keys):
                why = f"touches {', '.join(found)} key"
        record = {k: plain(getattr(op, k)) for k in _OP_FIELDS}
        kind = op.kind if op.kind in ("read", "write", "delete", "commit", "abort") else "step"
        rows.append(Row(i, lane, f"{txn} {text}", kind, txn, record, why))
        if op.txn not in first:
            first[op.txn] = (lane, i)
        if op.kind in ("commit", "abort"):
            lane0, start = first[op.txn]
            outcome = "committed" if op.kind == "commit" else "aborted"
            spans.append(Span(txn, lane0, start, i, level, outcome))
    ended = {s.txn for s in spans}
    last = len(rows) - 1
    spans += [
        Span(f"T{t}", ln, s, last, level) for t, (ln, s) in first.items() if f"T{t}" not in ended
    ]
    explanation = [
        f"{name}: "
        + (
            "anomaly " + short(res, 300)
            if res.get("found") or res.get("valid?") is False
            else "clean"
        )
        for name, res in result["checks"].items()
    ]
    explanation += [f"{n}: could not run ({why})" for n, why in result["could_not_run"].items()]
    explanation.append(f"valid? {str(result['valid?']).lower()}")
    facts = [
        ("system", str(history.header.get("system", "-"))),
        ("isolation", level or "-"),
        ("operations", f"{len(history.ops):,}"),
        ("found", ", ".join(found + [a for c in cycles for a in [c.name]]) or "nothing"),
    ]
    return Page(
        title=f"{path.name}: history" + (f" with {', '.join(found)}" if found else ""),
        source=str(path),
        kind="toki history",
        verdict=f"valid? {str(result['valid?']).lower()} (toki check)",
        facts=tuple(facts),
        explanation=tuple(explanation),
        rows=tuple(rows),
        lanes=lanes(rows),
        spans=tuple(spans),
        cycles=tuple(cycles),
    )


_OP_FIELDS = ("txn", "kind", "at", "agent", "key", "value", "version", "line")


def _history_agents(header: Mapping[str, Any]) -> dict[int, int]:
    """Which agent made each op (by its `at`), by re-running a simulator header's schedule;
    empty when the header names no model."""
    from toki.isolation import Isolation
    from toki.sim.workload import Workload
    from toki.systems.base import SimJudge, build_program
    from toki.systems.registry import SYSTEMS, get_system

    name = header.get("system")
    if name not in SYSTEMS or not header.get("workload") or header.get("schedule") is None:
        return {}
    system = get_system(str(name))
    program = build_program(
        system,
        Workload.from_json(header["workload"]),
        level=Isolation(str(header.get("isolation", system.isolation.value))),
        judge=SimJudge(float(header.get("judge_p", 0.5)), int(header.get("judge_seed", 0))),
        crash_budget=int(header.get("crash_budget", 0)),
    )
    return {
        op.step: agent
        for _c, _p, agent, ops, _j in walk(program, header["schedule"])
        for op in ops
        if agent >= 0
    }
