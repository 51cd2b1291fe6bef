"""A streaming reader for the EDN that Jepsen writes: one operation map per line.

``edn_format`` (maintained, on PyPI) parses all of EDN but is a PLY parser: ~3k history lines
per second, 10+ minutes for a 10^6-transaction history. Jepsen's histories use a small
subset (maps, vectors, keywords, integers, nil, booleans, short strings), so a chunk of lines
is rewritten with C-speed string operations into JSON and parsed by the standard library:

- commas are whitespace in EDN: every run of whitespace becomes one JSON comma;
- a map ``{k v …}`` becomes ``["\\x01", k, v, …]`` (the marker says it was a map);
- keywords ``:ok`` become strings ``"ok"`` (the colon dropped), ``nil`` becomes ``null``,
  sets and lists become arrays, and ``#jepsen.history.Op{…}`` records become maps.

Anything outside that subset in a chunk (a character literal, a tagged literal, a bigint, a
string holding brackets, a form split oddly) makes the chunk fail the fast path, and that
chunk is parsed by ``edn_format`` instead: the fast path is an optimisation, never a
different reading (a property test compares the two).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

import edn_format  # type: ignore[import-untyped]

from toki.errors import HistoryFormatError

__all__ = ["MAP", "chunks", "form_lines", "locate_error", "parse_chunk", "read_forms", "to_json"]

MAP: Final = "\x01"  # first element of an array that was a map
_OPEN_MAP: Final = '["\\u0001",'
_KEYWORD: Final = re.compile(r':([^,\[\]{}()"\s]+)')
_STRING: Final = re.compile(r'("(?:[^"\\]|\\.)*")', re.S)
_PLACEHOLDER: Final = re.compile("\x02([0-9]+)\x03")
# Jepsen's frequent keywords as plain string replacements (C speed); the rest by regex.
_OP_KEYS: Final = ("type", "f", "value", "time", "process", "index", "error")
_VALUES: Final = tuple(
    [(f":{k},", f'"{k}",') for k in ("invoke", "ok", "fail", "info", "txn")]
    + [(f"[:{k},", f'["{k}",') for k in ("append", "r", "w")]
)
_AS_ARRAY: Final = _VALUES + tuple((f":{k},", f'"{k}",') for k in _OP_KEYS)
# in object mode a map key becomes an object key: {:index, → {"index":  (Jepsen's keys only)
_AS_OBJECT: Final = (
    tuple((f"{d}:{k},", f'{d}"{k}":') for k in _OP_KEYS for d in ("{", ",")) + _VALUES
)
_CHUNK_LINES: Final = 20_000


def _tokens(part: str) -> list[str]:
    return part.replace(",", " ").split()


def _commas(text: str) -> str:
    """EDN's whitespace and commas as single JSON commas. Jepsen separates map entries with
    ", " and everything else with one space or a newline, which three replacements turn into
    commas; any other spacing takes the general route (split and join)."""
    s = text.replace(", ", " ").replace(" ", ",").replace("\n", ",").strip(",")
    if ",," in s or "[," in s or ",]" in s or "{," in s or ",}" in s or "\t" in s or "\r" in s:
        return ",".join(_tokens(text))
    return s


def _rewrite(text: str, objects: bool) -> str | None:
    """``text`` as JSON text (an array of its forms), or None outside the subset.

    With ``objects`` a map becomes a JSON object, which works only when every key is one of
    Jepsen's operation keys (a map with another key makes invalid JSON, so the caller falls
    back); otherwise a map becomes a marked array.
    """
    if "\\" in text or ";" in text:
        return None
    if "#" in text:
        text = text.replace("#jepsen.history.Op{", "{").replace("#{", "(")
        if "#" in text:
            return None
    strings: list[str] = []
    if '"' in text:
        # strings are set aside (a placeholder token each) so no rewrite touches them
        parts = _STRING.split(text)
        for i in range(1, len(parts), 2):
            if "\n" in parts[i]:
                return None
            strings.append(parts[i])
            parts[i] = f" \x02{len(strings) - 1}\x03 "
        text = "".join(parts)
        if '"' in text:
            return None
    s = _commas(text)
    s = s.replace("{", "{" if objects else _OPEN_MAP).replace("}", "}" if objects else "]")
    s = s.replace("(", "[").replace(")", "]").replace("[,", "[").replace(",]", "]")
    if not objects:
        s = s.replace(",]", "]")
    for _ in range(2):  # ",nil,nil," needs two passes
        s = s.replace(",nil,", ",null,").replace(",nil]", ",null]").replace(",nil}", ",null}")
    s = s.replace("[nil,", "[null,").replace("[nil]", "[null]")
    if s.startswith("nil,") or s == "nil":
        s = "null" + s[3:]
    if s.endswith(",nil"):
        s = s[:-3] + "null"
    for a, b in _AS_OBJECT if objects else _AS_ARRAY:
        s = s.replace(a, b)
    if objects:
        if s.count(":") != s.count('":'):
            return None  # another keyword: the marked-array path reads it
    elif ":" in s:
        s = _KEYWORD.sub(r'"\1"', s)
    if strings:
        s = _PLACEHOLDER.sub(lambda m: strings[int(m.group(1))], s)
    return "[" + s + "]"


def to_json(text: str) -> str | None:
    """Jepsen's EDN as JSON text whose operation maps are objects, or None (see ``_rewrite``)."""
    return _rewrite(text, True)


def _fast(text: str) -> list[Any] | None:
    """The forms of ``text`` through the JSON rewrite, or None when it is outside the subset."""
    s = _rewrite(text, False)
    if s is None:
        return None
    try:
        out = json.loads(s)
    except ValueError:
        return None
    return out if isinstance(out, list) else None


def _plain(x: Any) -> Any:
    """``edn_format`` data in the fast path's shape: keywords as names, maps as marked arrays."""
    if isinstance(x, edn_format.Keyword | edn_format.Symbol):
        return str(x.name)
    if isinstance(x, dict) or hasattr(x, "items"):
        out: list[Any] = [MAP]
        for k, v in x.items():
            out += (_plain(k), _plain(v))
        return out
    if isinstance(x, list | tuple | set | frozenset | edn_format.ImmutableList):
        return [_plain(v) for v in x]
    return x


edn_format.add_tag("jepsen.history.Op", lambda m: m)


def _slow(text: str) -> list[Any]:
    return [_plain(f) for f in edn_format.loads_all(text, write_ply_tables=False)]


def parse_chunk(text: str) -> list[Any]:
    """Every top-level form in ``text``; raises ``ValueError``-like errors from edn_format."""
    fast = _fast(text)
    return fast if fast is not None else _slow(text)


def _balanced(text: str) -> bool:
    opens = text.count("[") + text.count("{") + text.count("(")
    return opens == text.count("]") + text.count("}") + text.count(")")


def chunks(lines: Iterable[str]) -> Iterator[tuple[int, list[str], str]]:
    """(line offset, lines, text) of ``_CHUNK_LINES`` lines at a time, never splitting a form
    (comment lines blanked, so line numbers stay right)."""
    it = iter(lines)
    lineno = 0
    pending: list[str] = []
    while True:
        block = list(itertools.islice(it, _CHUNK_LINES))
        if not block and not pending:
            return
        pending += block
        text = "".join("\n" if line.lstrip().startswith(";") else line for line in pending)
        if block and not _balanced(text):
            continue  # a form continues past this chunk
        yield lineno, pending, text
        lineno += len(pending)
        pending = []
        if not block:
            return


def form_lines(lines: list[str], offset: int, count: int) -> list[int]:
    """The line number of each of ``count`` top-level forms in ``lines``."""
    starts = [offset + i + 1 for i, line in enumerate(lines) if _starts_form(line)]
    if len(starts) != count:
        starts = _form_starts(lines, offset)
    return starts if len(starts) == count else [offset + 1] * count


def read_forms(lines: Iterable[str], source: str) -> Iterator[tuple[int, Any]]:
    """(line number, form) for each top-level form, maps as marked arrays.

    A form must start on its own line (Jepsen writes one per line; a pretty-printed form may
    span lines). Errors name the first line that is not valid EDN.
    """
    for offset, pending, text in chunks(lines):
        try:
            forms = parse_chunk(text)
        except Exception as e:  # edn_format raises EDNDecodeError, and ply may raise others
            raise locate_error(pending, offset, source, e) from e
        yield from zip(form_lines(pending, offset, len(forms)), forms, strict=True)


def _form_starts(lines: list[str], offset: int) -> list[int]:
    """Line numbers where a top-level form begins (brackets balanced before it)."""
    out = []
    depth = 0
    for i, line in enumerate(lines):
        if depth == 0 and _starts_form(line):
            out.append(offset + i + 1)
        if not line.lstrip().startswith(";"):
            depth += line.count("[") + line.count("{") + line.count("(")
            depth -= line.count("]") + line.count("}") + line.count(")")
    return out


def _starts_form(line: str) -> bool:
    s = line.lstrip()
    return bool(s) and s[0] in "{[(#"


def locate_error(lines: list[str], offset: int, source: str, err: Exception) -> HistoryFormatError:
    """Re-parse line by line to name the first line that is not valid EDN on its own."""
    for n, line in enumerate(lines, offset + 1):
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
