"""Read every kind of file toki writes into a `Page` (`load_page` decides which).

Model and relay witnesses are re-run exactly (as `toki replay` does) so every scheduler
choice becomes a row with the store operations it made; a crash or an injected fault is a row
of its own. A real witness is re-run on the real code when its environment exists (the full
record of each gate point: claim, detail, reply), else its saved story is drawn line by line.
A toki history is drawn from its op records (re-run through its model when the header names
one, which gives each operation its agent); an Elle/Jepsen history from its transactions.
The explanation is always the text the matching command prints.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from toki.errors import InvalidInput
from toki.show.page import Cycle, CycleEdge, Page, Row, Span

__all__ = ["file_kind", "load_elle", "load_page"]

#: The `format` field of each witness kind toki writes.
WITNESS_KINDS = {
    "toki-witness": "model witness",
    "toki-relay-witness": "relay witness",
    "toki-real-witness": "real witness",
}


def _short(value: Any, limit: int = 90) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain(value: Any) -> Any:
    """JSON-safe copy of a record (tuples as lists, unknown objects as their repr)."""
    return json.loads(json.dumps(value, default=repr))


def file_kind(path: Path) -> str:
    """ "model witness", "relay witness", "real witness", "toki history" or "Elle history"."""
    from toki.history import detect_format

    try:
        head = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            "file", f"{path} is not a text file", "give a witness or a history file"
        ) from None
    except OSError as exc:
        raise InvalidInput("file", f"cannot read {path}: {exc.strerror or exc}") from None
    if head.lstrip().startswith("{"):
        try:
            data = json.loads(head)
        except ValueError:
            data = None
        if isinstance(data, dict) and data.get("format") in WITNESS_KINDS:
            return WITNESS_KINDS[str(data["format"])]
    fmt = detect_format(path)
    return "toki history" if fmt == "toki" else "Elle history"


def load_elle(path: Path, fmt: str, detected: bool = True) -> Any:
    """An Elle history; a file the format detection only took for EDN (a Markdown file
    starts with '#', as an EDN record does) is refused in words, not with the EDN lexer's
    position."""
    from toki.check.elle import load
    from toki.errors import HistoryFormatError

    try:
        return load(path, fmt)
    except HistoryFormatError as exc:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(200).lstrip()
        looks_edn = head.startswith(("{", "[", ";", "#jepsen", "#{"))
        if detected and not looks_edn and "invalid EDN" in str(exc):
            raise InvalidInput(
                str(path),
                "is neither a toki history nor an Elle history in EDN or JSON (its first "
                "line does not parse)",
                "see docs/history-format.md, or name the format with --format",
            ) from None
        raise


def load_page(path: str | Path, *, replay_real: bool = True) -> Page:
    """The page of one witness or history file. `replay_real=False` draws a real witness
    from its saved story without starting the library (what the matrix page does)."""
    p = Path(path)
    kind = file_kind(p)
    if kind == "model witness":
        return _model_witness(p)
    if kind == "relay witness":
        return _relay_witness(p)
    if kind == "real witness":
        return _real_witness(p, replay_real)
    if kind == "toki history":
        return _toki_history(p)
    return _elle_history(p)


# ---------------------------------------------------------------- simulator runs


def _walk(program: Any, schedule: Sequence[Any]) -> list[tuple[Any, Any, int, list[Any]]]:
    """Each scheduler choice with its footprint (what DPOR knows it may read and write),
    the agent it concerns and the store ops it made."""
    from toki.sim.engine import Execution

    ex = Execution(program, track=True)
    out = []
    for choice in schedule:
        pid = ex.pid(choice)
        if pid is None:
            raise InvalidInput("schedule", f"choice {choice!r} does not fit the program")
        before, steps = ex.store.history_len(), len(ex.fps)
        ex.step(pid)
        fp = ex.fps[-1] if len(ex.fps) > steps else None
        agent = pid if pid < ex.n else pid - ex.n if pid < 2 * ex.n else -1
        out.append((choice, fp, agent, list(ex.store.history()[before:])))
    return out


def _footprint(fp: Any) -> dict[str, Any] | None:
    if fp is None:
        return None
    out: dict[str, Any] = {"kind": fp.kind}
    for name in ("reads", "shares", "writes"):
        resources = getattr(fp, name)
        if resources:
            out[name] = sorted((_plain(r) for r in resources), key=repr)
    return out


def _op_text(op: Any) -> str:
    kind = op.kind.value
    if kind in ("read", "write"):
        return f"{kind} {_short(op.key, 60)} = {_short(op.value, 60)}"
    if kind == "delete":
        return f"delete {_short(op.key, 60)}"
    if kind == "select":
        return "conditional statement" + (f" on {_short(op.key, 60)}" if op.key else "")
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


def _touches(key: Any, keys: Iterable[str]) -> bool:
    """Whether a store key belongs to one of the witness's belief keys: a tuple key names
    it as one of its parts (("mem", "alice:manager", id)) or spelled out in several
    (("item", "alice", "manager"))."""
    parts = key if isinstance(key, tuple | list) else (key,)
    joined = ":".join(str(p) for p in parts)
    return any(k in parts or k == key or k in joined for k in keys)


def _touches_any(op: Any, keys: Sequence[str]) -> bool:
    """An op on one of `keys`; a conditional statement (a search) counts when a row it
    matched is on one of them, or when it matched none (it found the key empty: the read
    a decision is based on)."""
    if op.kind.value == "select":
        matched = [s for s in op.items if s.matched]
        return not matched or any(_touches(s.key, keys) for s in matched)
    return op.key is not None and _touches(op.key, keys)


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
    steps: Sequence[tuple[Any, Any, int, list[Any]]],
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
    for i, (choice, fp, agent, ops) in enumerate(steps):
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
            text = "; ".join(texts) if texts else "runs (no store operation: local work or judge)"
            rows.append(Row(i, lane, text, kind, txn, record, why))
    last = len(rows) - 1
    spans += [Span(f"T{t}", lane, first, last, level) for t, (lane, first) in open_txn.items()]
    return rows, spans


def _lanes(rows: Iterable[Row]) -> tuple[str, ...]:
    def order(lane: str) -> tuple[int, Any]:
        nums = [int(n) for n in re.findall(r"\d+", lane)]
        return (1 if lane == "faults" else 0, (nums, lane))

    return tuple(sorted(dict.fromkeys(r.lane for r in rows), key=order))


def _witness_facts(
    data: Mapping[str, Any], extra: Sequence[tuple[str, str]]
) -> list[tuple[str, str]]:
    facts = [(k, v) for k, v in extra if v]
    facts += [
        ("keys", ", ".join(map(str, data.get("keys", ()))) or "-"),
        ("expected", _short(data.get("expected"), 400)),
        ("observed", _short(data.get("observed"), 400)),
    ]
    if data.get("details"):
        facts.append(("details", _short(data["details"], 400)))
    return facts


def _model_witness(path: Path) -> Page:
    from toki.check.witness import Witness, explain, read_witness_json, replay_witness
    from toki.isolation import Isolation
    from toki.systems.base import SimJudge, build_program
    from toki.systems.registry import get_system

    data = read_witness_json(path)
    w = Witness.from_json(data)
    system = get_system(w.system)
    run, verdict = replay_witness(w, system)
    program = build_program(
        system,
        w.workload,
        level=Isolation(w.isolation),
        judge=SimJudge(w.judge_p, w.judge_seed),
        crash_budget=w.crash_budget,
    )
    rows, spans = _sim_rows(_walk(program, w.schedule), w.anomaly, w.keys, w.isolation)
    closest = _closest_serial(w, system, run) if w.anomaly == "N2" else []
    facts = _witness_facts(
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
        lanes=_lanes(rows),
        spans=tuple(spans),
    )


#: Serial orders `toki show` runs to find the one closest to an N2 witness's state.
CLOSEST_ORDERS = 200


def _closest_serial(w: Any, system: Any, run: Any) -> list[tuple[str, str]]:
    """For N2: the serial order (keeping each agent's own order) whose beliefs differ from
    the observed ones in the fewest fields, its beliefs, and the difference."""
    from toki.check.anomalies import delivered, serial_orders
    from toki.systems.base import SimJudge, run_serially

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
        ("its beliefs", _short(state, 400)),
        ("observed vs serial", _short(d, 400)),
    ]


def _relay_witness(path: Path) -> Page:
    from toki.check.relay import RelayWitness
    from toki.check.witness import read_witness_json

    data = read_witness_json(path)
    w = RelayWitness.from_json(data)
    run, verdict = w.replay()
    rows, spans = _sim_rows(_walk(w.program(), w.schedule), "", (), w.level, "process")
    rows = _relay_marks(rows, dict(verdict.details))
    facts = [
        ("level", w.level),
        ("outbox rows", str(w.rows)),
        ("failures, crashes", f"{w.failures}, {w.crash_budget} per process"),
        ("settings", f"knowledge={w.knowledge}, on failure {w.on_failure}"),
        ("lost / invented", _short(dict(verdict.details), 400)),
    ]
    return Page(
        title=f"relay at {w.level}: history lost or invented",
        source=str(path),
        kind="relay witness",
        verdict=f"replayed: {'reproduced' if verdict.found else 'NOT reproduced'}",
        facts=tuple(facts),
        explanation=(*w.explain(run, verdict), f"reproduced: {verdict.found}"),
        rows=tuple(rows),
        lanes=_lanes(rows),
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


# ---------------------------------------------------------------- real witnesses

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
        record = _plain(dict(entry))
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


def _real_witness(path: Path, replay: bool) -> Page:
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
    facts = _witness_facts(
        data,
        [
            ("system", f"{w.system} ({w.version or 'this tree'})"),
            ("anomaly", w.anomaly),
            ("workload", w.workload.name),
            ("schedule", f"{len(w.schedule)} choices, {w.strategy}"),
            ("judge", _short(dict(w.judge))),
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
        lanes=_lanes(rows),
        spans=tuple(spans),
        notes=tuple(notes),
    )


# ---------------------------------------------------------------- histories


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


def _elle_history(path: Path) -> Page:
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
        ops = ", ".join(f"{op.kind} {op.key} {_short(op.value, 30)}" for op in t.ops)
        kind = {"ok": "commit", "fail": "abort"}.get(t.status, "info")
        record = {
            "txn": name,
            "process": _plain(t.process),
            "status": t.status,
            "ops": [[op.kind, op.key, _plain(op.value)] for op in t.ops],
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
        lanes=_lanes(rows),
        cycles=tuple(_cycles(v.anomalies)),
    )


def _toki_history(path: Path) -> Page:
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
        text = op.kind + ("" if op.key is None else f" {_short(op.key, 60)}")
        if op.kind in ("read", "write"):
            text += f" = {_short(op.value, 60)}"
        why = marks.get(txn, "")
        if not why and found and op.key is not None and op.kind in ("read", "write", "delete"):
            key = tuple(op.key) if isinstance(op.key, list) else op.key
            if _touches(key, keys):
                why = f"touches {', '.join(found)} key"
        record = {k: _plain(getattr(op, k)) for k in _OP_FIELDS}
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
            "anomaly " + _short(res, 300)
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
        lanes=_lanes(rows),
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
        for _c, _p, agent, ops in _walk(program, header["schedule"])
        for op in ops
        if agent >= 0
    }
