"""Model and relay witnesses on a page: the schedule re-run exactly (as `toki replay` does),
one row per scheduler choice with its footprint and the store operations it made; a crash or
an injected fault is a row of its own; transactions are spans ended by their commit, abort or
their agent's crash. For N2, the closest serial state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from toki.errors import InvalidInput
from toki.show.common import lanes, plain, short, touches, witness_facts
from toki.show.page import Page, Row, Span
from toki.systems.base import SimJudge

__all__ = ["RecordingJudge", "Walked", "model_witness", "relay_witness", "walk"]


class Walked(NamedTuple):
    """One scheduler choice as re-run: its footprint (what DPOR knows it may read and
    write), the agent it concerns (-1: a fault), the store ops it made, and the judge's
    answers it got."""

    choice: Any
    footprint: Any
    agent: int
    ops: list[Any]
    judged: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class RecordingJudge(SimJudge):
    """A SimJudge (the same answers) that also lists each question, the candidates, the
    answer and θ (its p and seed): what a step's record shows as the judge's answer."""

    log: list[dict[str, Any]] = field(default_factory=list, compare=False, repr=False)

    def pick(self, question: str, candidates: Sequence[str]) -> str:
        answer = SimJudge.pick(self, question, candidates)
        theta = {"p": self.p, "seed": self.seed}
        entry = {"question": question, "candidates": list(candidates), "answer": answer}
        self.log.append({**entry, "θ": theta})
        return answer


def walk(
    program: Any, schedule: Sequence[Any], judge: RecordingJudge | None = None
) -> list[Walked]:
    """Re-run `schedule` on `program`, choice by choice; `judge`, the recording judge the
    program was built with, attributes its answers to the steps that asked."""
    from toki.sim.engine import Execution

    ex = Execution(program, track=True)
    log: list[dict[str, Any]] = judge.log if judge is not None else []
    out = []
    for choice in schedule:
        pid = ex.pid(choice)
        if pid is None:
            raise InvalidInput("schedule", f"choice {choice!r} does not fit the program")
        before, steps, asked = ex.store.history_len(), len(ex.fps), len(log)
        ex.step(pid)
        fp = ex.fps[-1] if len(ex.fps) > steps else None
        agent = pid if pid < ex.n else pid - ex.n if pid < 2 * ex.n else -1
        ops = list(ex.store.history()[before:])
        out.append(Walked(choice, fp, agent, ops, list(log[asked:])))
    return out


def _footprint(fp: Any) -> dict[str, Any] | None:
    if fp is None:
        return None
    out: dict[str, Any] = {"kind": fp.kind}
    for name in ("reads", "shares", "writes"):
        resources = getattr(fp, name)
        if resources:
            out[name] = sorted((plain(r) for r in resources), key=repr)
    return out


def _op_text(op: Any) -> str:
    kind = op.kind.value
    if kind in ("read", "write"):
        return f"{kind} {short(op.key, 60)} = {short(op.value, 60)}"
    if kind == "delete":
        return f"delete {short(op.key, 60)}"
    if kind == "select":
        return "conditional statement" + (f" on {short(op.key, 60)}" if op.key else "")
    if kind == "abort":
        return f"abort ({op.note or 'rolled back'})"
    return str(kind)


def _op_record(op: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"step": op.step, "txn": f"T{op.txn}", "kind": op.kind.value}
    for name in ("key", "value", "writer", "version", "note"):
        v = getattr(op, name)
        if v not in (None, ""):
            rec[name] = v
    if op.items:
        rec["rows seen"] = [list(s) for s in op.items]
    return rec


def _touches_any(op: Any, keys: Sequence[str]) -> bool:
    """An op on one of `keys`; a conditional statement (a search) counts when a row it
    matched is on one of them, or when it matched none (it found the key empty: the read
    a decision is based on)."""
    if op.kind.value == "select":
        matched = [s for s in op.items if s.matched]
        return not matched or any(touches(s.key, keys) for s in matched)
    return op.key is not None and touches(op.key, keys)


_MARKS = {
    "N2": {
        "read": "read of the key's state a decision is based on (stale once the other "
        "transaction commits)",
        "select": "read of the key's state a decision is based on",
        "write": "a decision written from that read",
        "delete": "a decision written from that read",
    },
    "N3": {
        "write": "overwrites a value that was believed",
        "delete": "deletes a value that was believed",
    },
    "N1": {"write": "durably recorded: what recovery re-adjudicates"},
    "RD": {"write": "durably recorded: what recovery rebuilds from"},
}


def _sim_rows(
    steps: Sequence[Walked],
    anomaly: str,
    keys: Sequence[str],
    level: str,
    lane_word: str = "agent",
) -> tuple[list[Row], list[Span]]:
    """Rows (one per scheduler choice) and transaction spans of a simulator run."""
    rows: list[Row] = []
    spans: list[Span] = []
    open_txn: dict[int, tuple[str, int]] = {}  # txn -> (lane, first row)
    committed: set[int] = set()
    marks = _MARKS.get(anomaly, {})
    for i, (choice, fp, agent, ops, judged) in enumerate(steps):
        lane = f"{lane_word} {agent}" if agent >= 0 else "faults"
        record: dict[str, Any] = {"schedule position": i, "choice": choice}
        if fp is not None:
            record["footprint"] = _footprint(fp)
        if isinstance(choice, str) and choice.startswith("crash:"):
            for t, (span_lane, first) in list(open_txn.items()):  # its transaction rolls back
                if span_lane == lane:
                    del open_txn[t]
                    spans.append(Span(f"T{t}", lane, first, i, level, "aborted"))
            rows.append(
                Row(
                    i,
                    lane,
                    f"{lane_word} {agent} crashes: its open transaction rolls back",
                    "crash",
                    record=record,
                    mark="a crash" if anomaly in ("N1", "RD", "N3") else "",
                )
            )
        elif agent < 0:
            rows.append(Row(i, lane, f"fault {choice} injected", "fault", record=record))
        else:
            texts, why, kind, txn = [], "", "step", ""
            for op in ops:
                texts.append(_op_text(op))
                k = op.kind.value
                # the row's badge: its last op, unless an earlier one says more (a write
                # or a commit outranks the begin, read or select that came before it)
                kind = k if kind in ("step", "begin", "select", "read") else kind
                txn = f"T{op.txn}"
                if k == "read" and op.writer and op.writer != op.txn and op.writer not in committed:
                    why = "reads an uncommitted write (dirty read)"
                elif not why and k in marks and _touches_any(op, keys):
                    why = marks[k]
                if k == "begin":
                    open_txn[op.txn] = (lane, i)
                elif k == "commit":
                    committed.add(op.txn)
                if k in ("commit", "abort") and op.txn in open_txn:
                    span_lane, first = open_txn.pop(op.txn)
                    outcome = "committed" if k == "commit" else "aborted"
                    spans.append(Span(f"T{op.txn}", span_lane, first, i, level, outcome))
            record["operations"] = [_op_record(op) for op in ops]
            if judged:
                record["judge"] = judged
            text = "; ".join(texts) if texts else "runs (no store operation: local work or judge)"
            rows.append(Row(i, lane, text, kind, txn, record, why))
    last = len(rows) - 1
    spans += [Span(f"T{t}", lane, first, last, level) for t, (lane, first) in open_txn.items()]
    return rows, spans


def model_witness(path: Path) -> Page:
    from toki.check.witness import Witness, explain, read_witness_json, replay_witness
    from toki.isolation import Isolation
    from toki.systems.base import build_program
    from toki.systems.registry import get_system

    data = read_witness_json(path)
    w = Witness.from_json(data)
    system = get_system(w.system)
    run, verdict = replay_witness(w, system)
    judge = RecordingJudge(w.judge_p, w.judge_seed)
    program = build_program(
        system, w.workload, level=Isolation(w.isolation), judge=judge, crash_budget=w.crash_budget
    )
    rows, spans = _sim_rows(walk(program, w.schedule, judge), w.anomaly, w.keys, w.isolation)
    closest = _closest_serial(w, system, run) if w.anomaly == "N2" else []
    facts = witness_facts(
        data,
        [
            ("system", w.system),
            ("anomaly", w.anomaly),
            ("isolation", w.isolation),
            ("workload", w.workload.name),
            ("schedule", f"{len(w.schedule)} choices, {w.strategy}"),
            ("judge", f"p = {w.judge_p}, seed {w.judge_seed} (recovery seed {w.recovery_seed})"),
        ],
    )
    return Page(
        title=f"{w.anomaly} in {w.system} at {w.isolation}",
        source=str(path),
        kind="model witness",
        verdict=f"replayed: {w.anomaly} {'reproduced' if verdict.found else 'NOT reproduced'}",
        facts=(*facts, *closest),
        explanation=(*explain(w, run, system), f"reproduced: {verdict.found}"),
        rows=tuple(rows),
        lanes=lanes(rows),
        spans=tuple(spans),
    )


#: Serial orders `toki show` runs to find the one closest to an N2 witness's state.
CLOSEST_ORDERS = 200


def _closest_serial(w: Any, system: Any, run: Any) -> list[tuple[str, str]]:
    """For N2: the serial order (keeping each agent's own order) whose beliefs differ from
    the observed ones in the fewest fields, its beliefs, and the difference."""
    from toki.check.anomalies import delivered, serial_orders
    from toki.systems.base import run_serially

    judge = SimJudge(w.judge_p, w.judge_seed)
    keys = list(w.workload.keys)
    live = system.beliefs(dict(run.state), keys)
    seqs = [seq for seq, _ in delivered(w.workload, run)]
    orders, complete = serial_orders(seqs, CLOSEST_ORDERS)

    def diff(state: Any) -> dict[str, Any]:
        out = {}
        for k in sorted(set(live) | set(state)):
            a, b = live.get(k) or {}, state.get(k) or {}
            fields = sorted(set(a) | set(b)) if isinstance(a, dict) and isinstance(b, dict) else []
            changed = {
                f: {"observed": a.get(f), "serial": b.get(f)}
                for f in fields
                if a.get(f) != b.get(f)
            }
            if changed or (not fields and a != b):
                out[k] = changed or {"observed": a, "serial": b}
        return out

    best = None
    for order in orders:
        state = system.beliefs(run_serially(system, w.workload, order, judge), keys)
        d = diff(state)
        size = sum(len(v) for v in d.values())
        if best is None or size < best[0]:
            best = (size, order, state, d)
    if best is None:
        return []
    _, order, state, d = best
    tried = f"{len(orders)} serial order(s){'' if complete else ', sampled'}"
    return [
        (
            "closest serial order",
            " → ".join(f"{c.key}={c.value}" for c in order) + f" (of {tried})",
        ),
        ("its beliefs", short(state, 400)),
        ("observed vs serial", short(d, 400)),
    ]


def relay_witness(path: Path) -> Page:
    from toki.check.relay import RelayWitness
    from toki.check.witness import read_witness_json

    data = read_witness_json(path)
    w = RelayWitness.from_json(data)
    run, verdict = w.replay()
    rows, spans = _sim_rows(walk(w.program(), w.schedule), "", (), w.level, "process")
    rows = _relay_marks(rows, dict(verdict.details))
    facts = [
        ("level", w.level),
        ("outbox rows", str(w.rows)),
        ("failures, crashes", f"{w.failures}, {w.crash_budget} per process"),
        ("settings", f"knowledge={w.knowledge}, on failure {w.on_failure}"),
        ("lost / invented", short(dict(verdict.details), 400)),
    ]
    return Page(
        title=f"relay at {w.level}: history lost or invented",
        source=str(path),
        kind="relay witness",
        verdict=f"replayed: {'reproduced' if verdict.found else 'NOT reproduced'}",
        facts=tuple(facts),
        explanation=(*w.explain(run, verdict), f"reproduced: {verdict.found}"),
        rows=tuple(rows),
        lanes=lanes(rows),
        spans=tuple(spans),
    )


def _relay_marks(rows: Sequence[Row], details: Mapping[str, Any]) -> list[Row]:
    """The relay's anomaly: the injected failures, aborts and crashes, and every step on an
    outbox or log row that ends up lost, stamped with the relay's clock, or invented."""
    import dataclasses

    why = {
        **{int(i): "a row that is lost" for i in details.get("lost_rows") or ()},
        **{
            int(i): "a row stamped with the relay's clock"
            for i in details.get("relay_time_rows") or ()
        },
        **{int(i): "a row that was invented" for i in details.get("phantom_rows") or ()},
    }
    out = []
    for r in rows:
        mark = {
            "fault": "an injected failure",
            "abort": "a failed transaction",
            "crash": "a crash",
        }.get(r.kind, "")
        for op in r.record.get("operations", ()):
            key = op.get("key")
            if isinstance(key, tuple) and key[:1] in (("outbox",), ("log",)) and key[-1] in why:
                mark = mark or why[key[-1]]
        out.append(dataclasses.replace(r, mark=mark) if mark else r)
    return out
