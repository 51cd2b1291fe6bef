"""Recorded histories and their JSONL exchange format (documented in docs/history-format.md).

Line 1 is a header; every other line is one record:

    {"format": "toki-history", "version": 1, "system": "toki-ewm", "isolation": "snapshot",
     "workload": {...} | null, "strategy": "dpor", "seeds": [0], "schedule": [0, 1, ...],
     "judge_seed": 0, "recovery_seed": 1}
    {"type": "op", "txn": 1, "agent": 0, "kind": "read", "key": ["cur", "u:city"],
     "value": {...}, "version": 3, "at": 2}
    {"type": "belief", "at": 7, "key": "u:city", "value": "Berlin"}
    {"type": "final", "beliefs": {"u:city": {"value": "Berlin"}}}
    {"type": "recovered", "beliefs": {...}}
    {"type": "recoverable", "key": "u:city", "values": ["Berlin", "Lisbon"]}

`op` records are the transactions (kinds begin, read, write, delete, commit, abort; `version`
names the version a read saw — the `at` of the write that made it — or null for the initial
state, i.e. data present before the history begins). `belief` records say what the live
system believed or served at logical time `at`.
A file from the simulator carries its workload and schedule, so `toki check` can re-run it;
a file exported from another system carries what it has, and the checks that need more say
why they could not run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toki.errors import HistoryFormatError

__all__ = [
    "FORMAT",
    "FORMATS",
    "VERSION",
    "HistoryFile",
    "OpRecord",
    "detect_format",
    "read_history",
    "run_to_records",
    "to_adya",
    "write_history",
]

FORMAT = "toki-history"
VERSION = 1
#: The history formats ``toki check`` reads: toki's JSONL, and Jepsen/Elle's EDN and JSON.
FORMATS = ("toki", "elle-edn", "elle-json")
OP_KINDS = ("begin", "read", "write", "delete", "commit", "abort", "select")


@dataclass(frozen=True, slots=True)
class OpRecord:
    txn: Any
    kind: str
    at: int
    agent: Any = None
    key: Any = None
    value: Any = None
    version: Any = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class HistoryFile:
    header: Mapping[str, Any]
    ops: tuple[OpRecord, ...] = ()
    beliefs: tuple[tuple[int, str, Any], ...] = ()
    final: Mapping[str, Any] | None = None
    recovered: Mapping[str, Any] | None = None
    recoverable: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def detect_format(path: str | Path) -> str:
    """Which of ``FORMATS`` a file is in, from its first form (the suffix only breaks ties).

    toki's files start with a JSON header naming ``"format": "toki-history"``; Elle's EDN
    starts with a map or vector of keyword maps (``{:type …``), a ``#jepsen.history.Op``
    record or a ``;`` comment; anything else that starts as JSON is read as Elle's JSON.
    """
    p = Path(path)
    try:
        with p.open(encoding="utf-8") as fh:
            head = fh.read(4096)
    except (OSError, UnicodeDecodeError) as e:
        raise HistoryFormatError(str(p), f"cannot be read: {e}") from e
    text = head.lstrip()
    first = text.splitlines()[0] if text else ""
    if first.strip() == "{":  # an indented JSON document: a witness is one
        with p.open(encoding="utf-8") as fh:
            _refuse_witness(p, fh.read())
    if first.startswith("{") and '"format"' in first:
        try:
            if json.loads(first).get("format") == FORMAT:
                return "toki"
        except ValueError:
            pass
    body = text.lstrip("[ \t\r\n")
    if body.startswith(("{:", "#", ";", "{ :")) or text.startswith(";"):
        return "elle-edn"
    if body.startswith(('{"', '{ "', "{}")) or text.startswith("[]"):
        return "elle-json"
    suffix = p.suffix.lower()
    if suffix == ".edn":
        return "elle-edn"
    if suffix in (".json", ".jsonl"):
        return "elle-json"
    raise HistoryFormatError(
        str(p),
        "is neither a toki history, nor an Elle history in EDN or JSON",
        "see docs/history-format.md, or name the format with --format",
    )


def _err(line: int, problem: str, fix: str = "") -> HistoryFormatError:
    return HistoryFormatError(f"line {line}", problem, fix)


def read_history(path: str | Path) -> HistoryFile:
    """Parse and validate a history file; every problem is reported with its line number.

    A file with any problem raises HistoryFormatError listing all of them: a partially valid
    file is never half-checked silently."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HistoryFormatError(str(path), f"cannot be read: {e}") from e
    _refuse_witness(Path(path), text)
    return parse_history(text.splitlines(keepends=True), source=str(path))


WITNESS_FORMATS = ("toki-witness", "toki-relay-witness")


def _refuse_witness(path: Path, text: str) -> None:
    """A witness handed to `toki check` gets one line saying what it is, not an error for
    every line of its indented JSON."""
    if not text.lstrip().startswith("{"):
        return
    try:
        data = json.loads(text)
    except ValueError:
        return
    if isinstance(data, dict) and data.get("format") in WITNESS_FORMATS:
        raise HistoryFormatError(
            str(path), "is a witness file, not a history", f"use toki replay {path}"
        )


def parse_history(lines: Sequence[str], source: str = "<history>") -> HistoryFile:
    problems: list[str] = []
    records: list[tuple[int, dict[str, Any]]] = []
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            last = i == len(lines) and not raw.endswith("\n")
            what = "truncated last line" if last else f"not JSON ({exc.msg})"
            problems.append(f"line {i}: {what}")
            continue
        if not isinstance(data, dict):
            problems.append(f"line {i}: a record must be a JSON object")
            continue
        records.append((i, data))
    if not records or records[0][1].get("format") != FORMAT:
        first = records[0][0] if records else 1
        problems.insert(
            0,
            f"line {first}: missing header "
            f'(the first line must be {{"format": "{FORMAT}", "version": 1, ...}})',
        )
        raise HistoryFormatError(source, "; ".join(problems))
    header_line, header = records[0]
    if header.get("version") != VERSION:
        problems.append(
            f"line {header_line}: unsupported version {header.get('version')!r} "
            f"(this toki reads version {VERSION})"
        )
    ops: list[OpRecord] = []
    beliefs: list[tuple[int, str, Any]] = []
    final = recovered = None
    recoverable: dict[str, tuple[str, ...]] = {}
    begun: set[Any] = set()
    written: set[Any] = set()
    last_at = None
    for i, data in records[1:]:
        kind = data.get("type")
        if kind == "op":
            op_kind = data.get("kind")
            at = data.get("at")
            if op_kind not in OP_KINDS:
                problems.append(f"line {i}: unknown op kind {op_kind!r} (use one of {OP_KINDS})")
                continue
            if not isinstance(at, int):
                problems.append(f"line {i}: op needs an integer 'at' (logical time)")
                continue
            if last_at is not None and at < last_at:
                problems.append(f"line {i}: times out of order ({at} after {last_at})")
            last_at = at
            txn = data.get("txn")
            bad = _op_field_problem(data)
            if bad:
                problems.append(f"line {i}: {bad}")
                continue
            if op_kind == "begin":
                if txn in begun:
                    problems.append(f"line {i}: duplicate transaction id {txn!r}")
                begun.add(txn)
            elif txn not in begun:
                problems.append(f"line {i}: transaction {txn!r} used before its begin")
            if op_kind in ("write", "delete"):
                written.add(at)
            if (
                op_kind == "read"
                and data.get("version") is not None
                and data["version"] not in written
            ):
                problems.append(
                    f"line {i}: read of unknown version {data['version']!r} "
                    "(no earlier write has that 'at')"
                )
            ops.append(
                OpRecord(
                    txn,
                    op_kind,
                    at,
                    data.get("agent"),
                    _key(data.get("key")),
                    data.get("value"),
                    data.get("version"),
                    i,
                )
            )
        elif kind == "belief":
            if not isinstance(data.get("at"), int) or not isinstance(data.get("key"), str):
                problems.append(f"line {i}: belief needs integer 'at' and string 'key'")
                continue
            beliefs.append((data["at"], data["key"], data.get("value")))
        elif kind in ("final", "recovered"):
            beliefs_of = data.get("beliefs")
            if not isinstance(beliefs_of, dict):
                problems.append(f"line {i}: {kind} needs 'beliefs', an object (key → belief)")
                continue
            if kind == "final":
                final = beliefs_of
            else:
                recovered = beliefs_of
        elif kind == "recoverable":
            values = data.get("values", [])
            if not isinstance(data.get("key"), str) or not isinstance(values, list):
                problems.append(f"line {i}: recoverable needs string 'key' and list 'values'")
                continue
            recoverable[data["key"]] = tuple(str(v) for v in values)
        else:
            problems.append(
                f"line {i}: unknown record type {kind!r} "
                "(op, belief, final, recovered, recoverable)"
            )
    if problems:
        raise HistoryFormatError(source, "; ".join(problems), "see docs/history-format.md")
    return HistoryFile(header, tuple(ops), tuple(beliefs), final, recovered, recoverable)


def _is_key(key: Any) -> bool:
    if isinstance(key, list):
        return all(_is_key(k) for k in key)
    return isinstance(key, str | int | float) and not isinstance(key, bool)


def _op_field_problem(data: Mapping[str, Any]) -> str:
    """Why an op record's fields have the wrong types ("" when they are fine): a txn id or a
    key must be usable as a name, a version is the integer `at` of a write."""
    txn, key, version = data.get("txn"), data.get("key"), data.get("version")
    if not isinstance(txn, str | int) or isinstance(txn, bool):
        return f"op 'txn' must be a string or an integer, not {json.dumps(txn)}"
    if key is not None and not _is_key(key):
        return f"op 'key' must be a string, a number or an array of them, not {json.dumps(key)}"
    if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
        return f"op 'version' must be an integer or null, not {json.dumps(version)}"
    agent = data.get("agent")
    if agent is not None and not isinstance(agent, str | int):
        return f"op 'agent' must be a string or an integer, not {json.dumps(agent)}"
    return ""


def _key(key: Any) -> Any:
    return tuple(_key(k) for k in key) if isinstance(key, list) else key


def _json_key(key: Any) -> Any:
    return [_json_key(k) for k in key] if isinstance(key, tuple) else key


def run_to_records(ops: Iterable[Any]) -> list[dict[str, Any]]:
    """Simulator `Op`s (toki.sim.store) as op records."""
    out = []
    for op in ops:
        kind = op.kind.value
        if kind == "select":
            continue  # predicate reads are not part of the exchange format's item model
        rec: dict[str, Any] = {"type": "op", "txn": op.txn, "kind": kind, "at": op.step}
        if op.key is not None:
            rec["key"] = _json_key(op.key)
        if kind in ("read", "write"):
            rec["value"] = op.value
        if kind == "read":  # the initial data (writer 0) is the initial state: null
            rec["version"] = None if not op.writer else op.version
        out.append(rec)
    return out


def write_history(
    path: str | Path, header: Mapping[str, Any], records: Iterable[Mapping[str, Any]]
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.write(
            json.dumps(
                {"format": FORMAT, "version": VERSION, **header}, sort_keys=True, default=str
            )
            + "\n"
        )
        for rec in records:
            fh.write(json.dumps(rec, sort_keys=True, default=str) + "\n")
    return path


def to_adya(history: HistoryFile) -> Any:
    """The op records as the Adya checker's input: versions named by the `at` of their write,
    so written values are unique per key; the version order is the commit order."""
    from toki.check.adya import History, Op, Txn

    ops_by_txn: dict[Any, list[Any]] = {}
    status: dict[Any, Any] = {}
    order: dict[Any, list[Any]] = {}
    last_write: dict[Any, dict[Any, Any]] = {}
    for rec in history.ops:
        key = json.dumps(_json_key(rec.key)) if rec.key is not None else ""
        if rec.kind == "read":
            ops_by_txn.setdefault(rec.txn, []).append(Op("r", key, rec.version))
        elif rec.kind in ("write", "delete"):
            ops_by_txn.setdefault(rec.txn, []).append(Op("w", key, rec.at))
            last_write.setdefault(rec.txn, {})[key] = rec.at
        elif rec.kind == "commit":
            status[rec.txn] = "ok"
            for k, version in last_write.get(rec.txn, {}).items():
                order.setdefault(k, []).append(version)
        elif rec.kind == "abort":
            status[rec.txn] = "fail"
    txns = [Txn(t, None, tuple(ops), status.get(t, "info")) for t, ops in ops_by_txn.items()]
    return History(tuple(txns), order)
