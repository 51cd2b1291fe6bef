"""Real witnesses on a page: the library re-run gate point by gate point when its environment
exists (each point's full record: claim, detail, reply; a lane per agent and task or thread),
else the story saved in the witness, line by line."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toki.errors import InvalidInput
from toki.show.common import lanes, plain, short, witness_facts
from toki.show.page import Page, Row, Span

__all__ = ["real_witness"]


_STORY_LINE = re.compile(r"^\s*(\d+) agent (\d+) (.*)$")
_REAL_MARKS = {
    "N2": ("vector.search", "llm.", "judge.", "vector.insert", "vector.update", "vector.delete"),
    "N3": ("vector.update", "vector.delete", "history."),
    "N1": ("llm.", "judge."),
    "RD": ("vector.insert", "vector.update", "vector.delete", "history."),
}


def _real_mark(anomaly: str, point: str) -> str:
    """Why a gate point is part of the anomaly, by what the point does."""
    if not point.startswith(_REAL_MARKS.get(anomaly, ())):
        return ""
    if point.startswith(("llm.", "judge.")):
        return "a decision (the LLM's or judge's answer)"
    if point == "vector.search":
        return "reads the memories a decision is based on"
    return "writes what is stored"


def _real_lane(entry: Mapping[str, Any]) -> str:
    """agent i, and its task or thread when the trace names one (new fields appear here)."""
    agent = entry.get("crash", entry.get("agent", "?"))
    lane = f"agent {agent}"
    for sub in ("task", "thread"):
        if entry.get(sub) not in (None, ""):
            lane += f" · {sub} {entry[sub]}"
    return lane


def _real_rows(trace: Sequence[Mapping[str, Any]], anomaly: str) -> tuple[list[Row], list[Span]]:
    from toki.real.witness import _describe

    rows: list[Row] = []
    claims: dict[tuple[str, Any], list[int]] = {}
    for i, entry in enumerate(trace):
        lane = _real_lane(entry)
        record = plain(dict(entry))
        reply = entry.get("reply")
        if isinstance(reply, str) and reply.lstrip().startswith(("{", "[")):
            with contextlib.suppress(ValueError):  # an LLM's JSON answer, made readable
                record["reply, parsed"] = json.loads(reply)
        if "crash" in entry:
            rows.append(Row(i, lane, _describe(entry), "crash", record=record, mark="a crash"))
            continue
        point = str(entry.get("point", ""))
        kind = (
            "llm"
            if point.startswith(("llm.", "judge."))
            else "read"
            if point.endswith((".search", ".get", ".list"))
            else "write"
            if point.startswith(("vector.", "history.", "graph.", "db."))
            else "fault"
            if point.startswith("fault")
            else "step"
        )
        mark = _real_mark(anomaly, point)
        rows.append(Row(i, lane, _describe(entry), kind, record=record, mark=mark))
        if entry.get("claim") is not None:
            claims.setdefault((lane, entry["claim"]), []).append(i)
    spans = [
        Span(f"claim {c}", lane, idx[0], idx[-1], "real code", "open")
        for (lane, c), idx in claims.items()
    ]
    return rows, spans


def _story_rows(steps: Sequence[str], anomaly: str) -> list[Row]:
    """Rows from a real witness's saved story (its `steps` lines) when the library is not
    re-run: one per gate-point line."""
    rows = []
    for line in steps:
        m = _STORY_LINE.match(line)
        if not m:
            continue
        index, agent, text = int(m.group(1)), m.group(2), m.group(3)
        crash = text.startswith("CRASHES")
        point = re.search(r"\((\w+\.\w+)\)|at (\S+)|^(\w+)", text)
        name = next((g for g in point.groups() if g), "") if point else ""
        if "searches the vector store" in text:
            name = "vector.search"
        elif "inserts" in text and "vector store" in text:
            name = "vector.insert"
        elif text.startswith("writes history"):
            name = "history."
        rows.append(
            Row(
                index,
                f"agent {agent}",
                f"agent {agent} {text}",
                "crash" if crash else "llm" if "asks the LLM" in text else "step",
                record={"gate point": index, "agent": int(agent), "story": text},
                mark="a crash" if crash else _real_mark(anomaly, name),
            )
        )
    return rows


def real_witness(path: Path, replay: bool) -> Page:
    from toki.real.errors import EnvironmentMissing
    from toki.real.witness import RealWitness

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InvalidInput("file", f"{path} is not JSON ({exc})") from None
    w = RealWitness.load(path)
    notes: list[str] = []
    trace = data.get("trace")
    verdict_line = "as saved (not re-run)"
    explanation = tuple(w.steps)
    if trace is None and replay:
        from toki.real.witness import explain_real, replay_real

        try:
            rr, verdict = replay_real(w)
        except EnvironmentMissing as exc:
            notes.append(f"not re-run: {exc}; the steps below are the story saved when found")
        else:
            trace = list(rr.trace)
            explanation = tuple(explain_real(w, rr, verdict))
            explanation += (f"reproduced: {verdict.found}",)
            word = "reproduced" if verdict.found else "NOT reproduced"
            verdict_line = f"re-run on the real code: {word}"
    elif trace is None:
        notes.append(
            "drawn from the story saved when the witness was found (toki show re-runs "
            "the real code for each gate point's full record)"
        )
    spans: list[Span] = []
    if trace is not None:
        rows, spans = _real_rows(trace, w.anomaly)
    else:
        rows = _story_rows(w.steps, w.anomaly)
    facts = witness_facts(
        data,
        [
            ("system", f"{w.system} ({w.version or 'this tree'})"),
            ("anomaly", w.anomaly),
            ("workload", w.workload.name),
            ("schedule", f"{len(w.schedule)} choices, {w.strategy}"),
            ("judge", short(dict(w.judge))),
        ],
    )
    return Page(
        title=f"{w.anomaly} in {w.system} (real code)",
        source=str(path),
        kind="real witness",
        verdict=verdict_line,
        facts=tuple(facts),
        explanation=explanation,
        rows=tuple(rows),
        lanes=lanes(rows),
        spans=tuple(spans),
        notes=tuple(notes),
    )
