"""Read Jepsen/Elle histories (EDN or JSON) into ``toki.check.adya.History``, streaming.

Elle's rw-register (``[:r :x 1] [:w :x 2]``) and list-append (``[:append :x 3]
[:r :x [1 2 3]]``) workloads: one map per operation, an ``:invoke`` followed by its
completion (``:ok``, ``:fail`` or ``:info``). The completion carries the values reads
returned. Invocations and completions pair up per ``:process`` in order (first open, first
completed), so a process may have several operations open, as histories built by Elle's own
tests do. An operation without ``:process`` (or a completion without an invocation) stands
alone: it has no process order, and no real-time predecessors. An invocation that never
completes is in doubt, like ``:info``. Nemesis operations are skipped.

Both shapes elle-cli accepts are read: one map per line (EDN, JSON lines), or one vector /
array of maps. Files are read in chunks of lines (``toki.check.edn`` for EDN, the standard
library for JSON), so a 10^6-transaction history never sits in memory as text.

Every problem is a ``HistoryFormatError`` naming the line (or entry) and what is wrong.
Transaction ids are the completions' ``:index`` (the invocation's for in-doubt ones; the
position in the file when there is no ``:index``), as in Elle's own reports.
"""

from __future__ import annotations

import io
import itertools
import json
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final, Union

import msgspec

from toki.check import edn
from toki.check.adya.graph import gc_paused
from toki.check.adya.history import History, Op, OpKind, Txn
from toki.errors import HistoryFormatError

__all__ = ["history_from_ops", "load", "parse_edn", "parse_json"]

_MOPS: Final[dict[Any, OpKind]] = {"r": "r", "w": "w", "append": "append"}
_TYPES: Final = frozenset(("invoke", "ok", "fail", "info"))
_CHUNK: Final = 20_000
_new = object.__new__
_set = object.__setattr__

Where = int | str  # a line number, or a description such as "h.json entry 3"

_Scalar = Union[int, str]  # noqa: UP007 (msgspec reads the typing form)
_Read = Union[None, int, str, tuple[_Scalar, ...]]  # noqa: UP007


class _Record(msgspec.Struct, forbid_unknown_fields=False):
    """An operation as Jepsen writes it, decoded in one typed pass (msgspec builds the
    micro-ops as tuples in compiled code; anything else falls back to plain JSON)."""

    type: str
    value: list[tuple[str, _Scalar, _Read]] | None = None
    process: _Scalar | None = None
    index: int | None = None
    f: str | None = None


_DECODE: Final = msgspec.json.Decoder(list[_Record])


def load(path: str | Path, fmt: str | None = None) -> History:
    """Read an Elle history file: ``elle-edn`` or ``elle-json`` (default: detected)."""
    from toki.history import detect_format

    p = Path(path)
    if fmt is None:
        fmt = detect_format(p)
    if fmt not in ("elle-edn", "elle-json"):
        raise HistoryFormatError(str(p), f"is a {fmt} file, not an Elle history")
    try:
        with p.open(encoding="utf-8") as fh, gc_paused():  # millions of acyclic objects
            if fmt == "elle-edn":
                return _build(_edn_entries(fh, str(p)), str(p))
            return _build(_json_entries(fh, str(p), lambda: p.read_text("utf-8")), str(p))
    except (OSError, UnicodeDecodeError) as e:
        raise HistoryFormatError(str(p), f"cannot be read: {e}") from e


def parse_edn(text: str, *, source: str = "history.edn") -> History:
    """An Elle history in EDN: one op map per line, or one vector of op maps."""
    return _build(_edn_entries(io.StringIO(text), source), source)


def parse_json(text: str, *, source: str = "history.json") -> History:
    """An Elle history in JSON: one array of op objects, or one object per line (JSONL)."""
    return _build(_json_entries(io.StringIO(text), source, lambda: text), source)


def history_from_ops(entries: Iterable[tuple[str, Any]]) -> History:
    """Pair invocations with completions per process and build transactions.

    ``entries`` are (location, op map) with plain keys (``type``, ``process``, ``value``,
    optional ``index`` and ``f``); the location names the entry in error messages.
    """
    return _build(entries, "")


# --------------------------------------------------------------------------- reading


Batch = tuple[Sequence[Where], list[Any]]  # where each entry is, and the entries


def _entries(batches: Iterable[Batch]) -> Iterator[tuple[Where, Any]]:
    for wheres, data in batches:
        yield from zip(wheres, data, strict=True)


def _edn_entries(fh: IO[str], source: str) -> Iterator[tuple[Where, Any]]:
    return _entries(_edn_batches(fh, source))


def _json_entries(fh: IO[str], source: str, whole: Any) -> Iterator[tuple[Where, Any]]:
    return _entries(_json_batches(fh, source, whole))


def _edn_batches(fh: IO[str], source: str) -> Iterator[Batch]:
    """EDN forms a chunk at a time: Jepsen's operation maps through the JSON rewrite and the
    typed decoder; anything else through the general reader."""
    first = True
    for offset, lines, text in edn.chunks(fh):
        forms: list[Any] | None = None
        js = edn.to_json(text)
        if js is not None:
            try:
                forms = list(_DECODE.decode(js))
            except (msgspec.ValidationError, msgspec.DecodeError):
                forms = None
        if forms is None:
            try:
                forms = edn.parse_chunk(text)
            except Exception as e:  # edn_format raises EDNDecodeError, and ply may raise others
                raise edn.locate_error(lines, offset, source, e) from e
            if (
                first
                and len(forms) == 1
                and type(forms[0]) is list
                and (not forms[0] or forms[0][0] != edn.MAP)
            ):  # one vector of op maps
                yield (
                    [f"{source} entry {i + 1}" for i in range(len(forms[0]))],
                    [_as_map(x) for x in forms[0]],
                )
                continue
            forms = [_as_map(x) for x in forms]
        first = False
        yield edn.form_lines(lines, offset, len(forms)), forms


def _as_map(x: Any) -> Any:
    if type(x) is list and x and x[0] == edn.MAP:
        return dict(zip(x[1::2], x[2::2], strict=True))
    return x


def _json_batches(fh: IO[str], source: str, whole: Any) -> Iterator[Batch]:
    """JSON lines, or an array with one op per line, parsed a chunk of lines at a time; an
    array laid out any other way is parsed whole."""
    lines = iter(fh)
    head = list(itertools.islice(lines, _CHUNK))
    first = next((s for s in (x.strip() for x in head) if s), "")
    if first.startswith("["):
        yield from _json_array(lines, head, source, whole)
        return
    lineno = 0
    pending = head
    while pending:
        parts = [line for line in pending if not line.isspace()]
        data = _decode("[" + ",".join(parts) + "]") if parts else []
        if data is None or len(data) != len(parts):
            nums = [lineno + i + 1 for i, line in enumerate(pending) if not line.isspace()]
            raise _json_error([p.strip() for p in parts], nums, source)
        if len(parts) == len(pending):
            yield range(lineno + 1, lineno + len(pending) + 1), data
        else:
            yield [lineno + i + 1 for i, line in enumerate(pending) if not line.isspace()], data
        lineno += len(pending)
        pending = list(itertools.islice(lines, _CHUNK))


def _json_array(lines: Iterator[str], head: list[str], source: str, whole: Any) -> Iterator[Batch]:
    """A JSON array with one op per line (elle-cli's layout): elements end a line with a
    comma, so a chunk of lines is itself a comma-separated run of elements."""
    entry = 0
    pending = head
    opened = False
    while pending:
        body = "".join(pending).strip()
        if not opened:
            body = body[1:].lstrip()  # the array's "["
            opened = True
        if body.endswith("]") and not body.endswith("]]"):
            body = body[:-1].rstrip()  # the array's "]" (an element ends with "}")
        body = body.rstrip(",")
        data = _decode("[" + body + "]") if body else []
        if data is None:  # laid out some other way: parse the whole file (from where we are)
            rest = list(itertools.islice(_json_whole(whole(), source), entry, None))
            yield [w for w, _ in rest], [op for _, op in rest]
            return
        yield [f"{source} entry {entry + i + 1}" for i in range(len(data))], data
        entry += len(data)
        pending = list(itertools.islice(lines, _CHUNK))


def _decode(text: str) -> list[Any] | None:
    """A JSON array of operations: typed records, else plain JSON values, else None."""
    try:
        return list(_DECODE.decode(text))
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    try:
        out = json.loads(text)
    except ValueError:
        return None
    return out if isinstance(out, list) else None


def _json_whole(text: str, source: str) -> Iterator[tuple[Where, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise HistoryFormatError(f"{source} line {e.lineno}", f"invalid JSON: {e.msg}") from e
    if not isinstance(data, list):
        raise HistoryFormatError(source, "is not an array of operations")
    for i, op in enumerate(data):
        yield f"{source} entry {i + 1}", op


def _json_error(parts: list[str], nums: list[int], source: str) -> HistoryFormatError:
    for n, s in zip(nums, parts, strict=True):
        try:
            json.loads(s)
        except json.JSONDecodeError as e:
            return HistoryFormatError(f"{source} line {n}", f"invalid JSON: {e.msg}")
    return HistoryFormatError(source, "invalid JSON")


# --------------------------------------------------------------------------- building


def _where(source: str, w: Where) -> str:
    return f"{source} line {w}" if isinstance(w, int) else w


def _build(entries: Iterable[tuple[Where, Any]], source: str) -> History:
    """Pair invocations with completions (per process, first in first out) into txns."""
    pending: dict[Hashable, deque[tuple[Where, Any, int]]] = {}
    txns: list[Txn] = []
    used: set[int] = set()
    last_read: dict[Any, Any] = {}  # key -> the last list read of it, shared when read again
    append = txns.append
    typ: Any
    process: Any
    for pos, (where, op) in enumerate(entries):
        if type(op) is _Record:
            typ, process, index, f, value = op.type, op.process, op.index, op.f, op.value
        elif isinstance(op, Mapping):
            typ, process, index = op.get("type"), op.get("process"), op.get("index")
            f, value = op.get("f"), op.get("value")
        else:
            raise HistoryFormatError(
                _where(source, where), f"is a {type(op).__name__}, not an operation map"
            )
        if process == "nemesis" or process == ":nemesis":
            continue
        if typ not in _TYPES:
            shown = typ
            typ = _name(typ)
            if typ not in _TYPES:
                raise HistoryFormatError(
                    _where(source, where), f"type {shown!r} is not one of invoke, ok, fail, info"
                )
        if f is not None and f != "txn" and _name(f) != "txn":
            raise HistoryFormatError(
                _where(source, where),
                f"function {f!r} is not :txn",
                "only transactional histories are read",
            )
        if isinstance(process, list):
            process = tuple(process)
        elif not isinstance(process, Hashable):
            raise HistoryFormatError(_where(source, where), f":process {process!r} is not a value")
        if index is None:
            index = pos
        elif type(index) is not int:
            raise HistoryFormatError(_where(source, where), f":index {index!r} is not an integer")
        if typ == "invoke":
            if process is None:
                continue  # nothing pairs with it; its completion stands alone
            q = pending.get(process)
            if q is None:
                q = pending[process] = deque()
            q.append((where, value, index))
            continue
        q = pending.get(process) if process is not None else None
        inv = q.popleft() if q else None
        if value is None and inv is not None:
            value = inv[1]
        append(
            _txn(
                source, where, index, process, typ, value, inv[2] if inv else None, used, last_read
            )
        )
    for proc, waiting in pending.items():  # never completed: in doubt
        for where, value, index in waiting:
            append(_txn(source, where, index, proc, "info", value, index, used, last_read))
    return History(tuple(txns))


def _txn(
    source: str,
    where: Where,
    index: int,
    process: Hashable,
    status: str,
    value: Any,
    start: int | None,
    used: set[int],
    last_read: dict[Any, Any],
) -> Txn:
    if index in used:
        raise HistoryFormatError(
            _where(source, where), f":index {index} was already used by another operation"
        )
    used.add(index)
    if type(value) is not list and not isinstance(value, list | tuple):
        raise HistoryFormatError(
            _where(source, where),
            f"value {value!r} is not a transaction",
            "expected a vector of micro-ops",
        )
    ops = []
    for m in value:
        # the typed decoder's micro-ops are checked already, but for writes of nil or lists
        if type(m) is tuple and (m[0] == "r" or (m[2] is not None and type(m[2]) is not tuple)):
            f = _MOPS.get(m[0])
            if f is not None:
                # one object per key, and one read op per distinct list read (histories
                # repeat them; ops are immutable, so transactions may share one)
                k = m[1]
                v = m[2]
                seen = last_read.get(k)
                if seen is None:
                    last_read[k] = seen = (k, None, None)
                k = seen[0]
                if type(v) is tuple and v and seen[1] == v:
                    ops.append(seen[2])
                    continue
                op = _new(Op)
                _set(op, "kind", f)
                _set(op, "key", k)
                _set(op, "value", v)
                if type(v) is tuple and v:
                    last_read[k] = (k, v, op)
                ops.append(op)
                continue
        ops.append(_mop(source, where, m))
    end = index if status != "info" else None
    t = _new(Txn)
    _set(t, "id", index)
    _set(t, "process", process)
    _set(t, "ops", tuple(ops))
    _set(t, "status", status)
    _set(t, "start_index", start)
    _set(t, "end_index", end)
    return t


def _mop(source: str, where: Where, m: Any) -> Op:
    """One micro-op [f k v] with f in r, w, append (validated here, so built unchecked)."""
    if type(m) is not list or len(m) != 3:
        if not isinstance(m, list | tuple) or len(m) not in (2, 3):
            raise HistoryFormatError(
                _where(source, where),
                f"micro-op {m!r} is not [f key value]",
                "e.g. [:r :x 1] or [:append :x 3]",
            )
        m = [*m, None] if len(m) == 2 else list(m)
    f = _MOPS.get(m[0]) or _MOPS.get(_name(m[0]) or "")
    if f is None:
        raise HistoryFormatError(
            _where(source, where),
            f"micro-op {m!r} has unknown function {m[0]!r}",
            "use :r, :w or :append",
        )
    key = m[1]
    tk = type(key)
    if tk is not int and tk is not str:
        if isinstance(key, bool) or not isinstance(key, str | int | list):
            raise HistoryFormatError(
                _where(source, where), f"micro-op {m!r}: key {key!r} is not a string or integer"
            )
        key = _freeze(key)
    value = m[2]
    tv = type(value)
    if tv is list or tv is tuple:
        if f != "r":
            raise HistoryFormatError(
                _where(source, where), f"micro-op {m!r} writes a list; write one value"
            )
        value = tuple(value)
        for e in value:
            if type(e) is not int and (isinstance(e, list | dict) or not isinstance(e, Hashable)):
                raise HistoryFormatError(
                    _where(source, where), f"micro-op {m!r}: element {e!r} is not a value"
                )
    elif (
        tv is not int
        and tv is not str
        and value is not None
        and (isinstance(value, dict) or not isinstance(value, Hashable))
    ):
        raise HistoryFormatError(_where(source, where), f"micro-op {m!r}: {value!r} is not a value")
    if f != "r" and value is None:
        raise HistoryFormatError(
            _where(source, where), f"micro-op {m!r} writes nil", "write a unique value"
        )
    op = _new(Op)
    _set(op, "kind", f)
    _set(op, "key", key)
    _set(op, "value", value)
    return op


def _freeze(key: Any) -> Any:
    """A composite key (Elle allows vectors such as [:anti 3]) as a string naming it."""
    return json.dumps(key, separators=(",", ":"))


def _name(x: Any) -> str | None:
    """A keyword or string as a plain name (``:ok``, ``"ok"`` and ``":ok"`` are all ``ok``)."""
    if isinstance(x, str):
        return x[1:] if x.startswith(":") else x
    return None
