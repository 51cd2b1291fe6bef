"""Read Jepsen/Elle histories (EDN or JSON) into ``toki.check.adya.History``.

Elle's rw-register (``[:r :x 1] [:w :x 2]``) and list-append (``[:append :x 3]
[:r :x [1 2 3]]``) workloads: one map per operation, an ``:invoke`` followed by its
completion (``:ok``, ``:fail`` or ``:info``) on the same ``:process``. The completion carries
the values reads returned. An invocation that never completes is in doubt, like ``:info``.

EDN is parsed with the ``edn_format`` package (maintained, on PyPI), JSON with the standard
library; both shapes elle-cli accepts are read: a file of one map per line, or one vector/array
of maps. ``edn_format`` is a PLY parser and reads ~3-4k history lines per second here (a
200k-line Jepsen file takes about a minute); JSON reads ~6x faster, so convert very large
files to JSON (elle-cli reads both) if reading time matters.

Every problem is a ``HistoryFormatError`` naming the line (or entry) and what is wrong.
Transaction ids are the completions' ``:index`` (the invocation's for in-doubt ones), as in
Elle's own reports; the version order is left to ``adya`` to infer.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from pathlib import Path
from typing import Any

import edn_format  # type: ignore[import-untyped]

from toki.check.adya import History, Op, OpKind, Txn
from toki.errors import HistoryFormatError

__all__ = ["history_from_ops", "load", "parse_edn", "parse_json"]

_MOPS: dict[str, OpKind] = {"r": "r", "w": "w", "append": "append"}
_TYPES = frozenset(("invoke", "ok", "fail", "info"))


def load(path: str | Path) -> History:
    """Read a history file: ``.edn`` as EDN, ``.json``/``.jsonl`` as JSON, else by content."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HistoryFormatError(str(p), f"cannot be read: {e}") from e
    suffix = p.suffix.lower()
    if suffix == ".edn":
        return parse_edn(text, source=str(p))
    if suffix in (".json", ".jsonl"):
        return parse_json(text, source=str(p))
    try:
        return parse_json(text, source=str(p))
    except HistoryFormatError as e:
        if not e.problem.startswith("invalid JSON"):
            raise
    return parse_edn(text, source=str(p))


def parse_edn(text: str, *, source: str = "history.edn") -> History:
    """An Elle history in EDN: one op map per line, or one vector of op maps."""
    try:
        forms = edn_format.loads_all(text, write_ply_tables=False)
    except Exception as e:  # edn_format raises EDNDecodeError, and ply may raise others
        raise _locate_edn_error(text, source, e) from e
    if len(forms) == 1 and isinstance(forms[0], list | tuple | edn_format.ImmutableList):
        items = [(f"{source} entry {i + 1}", _plain(x)) for i, x in enumerate(forms[0])]
    else:
        lines = [
            n
            for n, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.lstrip().startswith(";")
        ]
        if len(lines) == len(forms):
            where = [f"{source} line {n}" for n in lines]
        else:
            where = [f"{source} entry {i + 1}" for i in range(len(forms))]
        items = [(w, _plain(x)) for w, x in zip(where, forms, strict=True)]
    return history_from_ops(items)


def parse_json(text: str, *, source: str = "history.json") -> History:
    """An Elle history in JSON: one array of op objects, or one object per line (JSONL)."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise HistoryFormatError(f"{source} line {e.lineno}", f"invalid JSON: {e.msg}") from e
        return history_from_ops((f"{source} entry {i + 1}", x) for i, x in enumerate(data))
    items: list[tuple[str, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append((f"{source} line {n}", json.loads(line)))
        except json.JSONDecodeError as e:
            raise HistoryFormatError(f"{source} line {n}", f"invalid JSON: {e.msg}") from e
    return history_from_ops(items)


def history_from_ops(entries: Iterable[tuple[str, Any]]) -> History:
    """Pair invocations with completions per process and build transactions.

    ``entries`` are (location, op map) with plain keys (``type``, ``process``, ``value``,
    optional ``index`` and ``f``); the location names the entry in error messages. Nemesis
    operations are skipped.
    """
    pending: dict[Hashable, tuple[str, Mapping[str, Any], int]] = {}
    txns: list[Txn] = []
    used: dict[int, str] = {}
    for pos, (where, op) in enumerate(entries):
        if not isinstance(op, Mapping):
            raise HistoryFormatError(where, f"is a {type(op).__name__}, not an operation map")
        process = op.get("process")
        if process == "nemesis":
            continue
        typ = _name(op.get("type"))
        if typ not in _TYPES:
            raise HistoryFormatError(
                where, f"type {op.get('type')!r} is not one of invoke, ok, fail, info"
            )
        if not isinstance(process, Hashable) or process is None:
            raise HistoryFormatError(where, "has no :process", "every operation names its process")
        f = _name(op.get("f") or "txn")
        if f != "txn":
            raise HistoryFormatError(
                where, f"function {f!r} is not :txn", "only transactional histories are read"
            )
        index = op.get("index", pos)
        if not isinstance(index, int) or isinstance(index, bool):
            raise HistoryFormatError(where, f":index {index!r} is not an integer")
        if typ == "invoke":
            if process in pending:
                raise HistoryFormatError(
                    where,
                    f"process {process!r} invoked again before its operation at "
                    f"{pending[process][0]} completed",
                )
            pending[process] = (where, op, index)
            continue
        inv = pending.pop(process, None)
        value = op.get("value")
        if value is None and inv is not None:
            value = inv[1].get("value")
        txns.append(_txn(where, index, process, typ, value, inv[2] if inv else None, used))
    for where, op, index in pending.values():  # never completed: in doubt
        txns.append(_txn(where, index, op.get("process"), "info", op.get("value"), index, used))
    return History(tuple(txns))


def _txn(
    where: str,
    index: int,
    process: Hashable,
    status: str,
    value: Any,
    start: int | None,
    used: dict[int, str],
) -> Txn:
    if index in used:
        raise HistoryFormatError(where, f":index {index} was already used at {used[index]}")
    used[index] = where
    if not isinstance(value, list | tuple):
        raise HistoryFormatError(
            where, f"value {value!r} is not a transaction", "expected a vector of micro-ops"
        )
    ops = tuple(_mop(where, m) for m in value)
    end = index if status != "info" else None
    if status == "ok":
        return Txn(index, process, ops, "ok", start, end)
    if status == "fail":
        return Txn(index, process, ops, "fail", start, end)
    return Txn(index, process, ops, "info", start, end)


def _mop(where: str, m: Any) -> Op:
    """One micro-op [f k v] with f in r, w, append."""
    if not isinstance(m, list | tuple) or len(m) != 3:
        raise HistoryFormatError(
            where, f"micro-op {m!r} is not [f key value]", "e.g. [:r :x 1] or [:append :x 3]"
        )
    f = _MOPS.get(_name(m[0]) or "")
    if f is None:
        raise HistoryFormatError(
            where, f"micro-op {m!r} has unknown function {m[0]!r}", "use :r, :w or :append"
        )
    key = m[1]
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise HistoryFormatError(where, f"micro-op {m!r}: key {key!r} is not a string or integer")
    value = m[2]
    if isinstance(value, list):
        if f != "r":
            raise HistoryFormatError(where, f"micro-op {m!r} writes a list; write one value")
        value = tuple(value)
    if f == "r" and isinstance(value, tuple):
        for e in value:
            if not isinstance(e, Hashable) or isinstance(e, list | dict):
                raise HistoryFormatError(where, f"micro-op {m!r}: element {e!r} is not a value")
    elif not isinstance(value, Hashable) or isinstance(value, dict):
        raise HistoryFormatError(where, f"micro-op {m!r}: {value!r} is not a value")
    if f != "r" and value is None:
        raise HistoryFormatError(where, f"micro-op {m!r} writes nil", "write a unique value")
    return Op(f, key, value)


def _name(x: Any) -> str | None:
    """A keyword or string as a plain name (``:ok``, ``"ok"`` and ``":ok"`` are all ``ok``)."""
    if isinstance(x, str):
        return x[1:] if x.startswith(":") else x
    return None


def _plain(x: Any) -> Any:
    """EDN data as plain Python: keywords and symbols become strings, vectors lists."""
    if isinstance(x, edn_format.Keyword | edn_format.Symbol):
        return str(x.name)
    if isinstance(x, Mapping):
        return {_plain(k): _plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple | edn_format.ImmutableList):
        return [_plain(v) for v in x]
    return x


def _locate_edn_error(text: str, source: str, err: Exception) -> HistoryFormatError:
    """Re-parse line by line to name the first line that is not valid EDN on its own."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith(";"):
            continue
        try:
            edn_format.loads_all(line, write_ply_tables=False)
        except Exception as e:
            return HistoryFormatError(f"{source} line {n}", f"invalid EDN: {_edn_msg(e)}")
    return HistoryFormatError(source, f"invalid EDN: {_edn_msg(err)}")


def _edn_msg(e: Exception) -> str:
    msg = str(e)
    if msg == "EOF Reached":
        return "unexpected end of input (an unclosed [ { or string)"
    if msg.startswith("LexToken("):
        tok = msg[len("LexToken(") :].split(",")
        return f"unexpected {tok[1] if len(tok) > 1 else msg}"
    return msg or type(e).__name__
