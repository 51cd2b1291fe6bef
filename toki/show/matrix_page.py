"""The verdict matrix as a page (matrix.html): one table per fault setting, a row per system
(each real library's row under its model's), each cell its verdict in words and colour, the
rate and interval, the method, and a link to the page of its witness, which is written
next to the witness file (witnesses/NAME.html). Real cells say whether they agree with
their model cell (agreement.csv of the same run).

`toki matrix` calls `write_matrix_page` once the matrix and its agreement table are written;
the rows are the matrix's own (`MatrixResult.rows`), so every number on the page is the one
in matrix.csv.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from html import escape
from pathlib import Path
from typing import Any

from toki.show.html import document, render_page
from toki.show.sources import load_page

__all__ = ["VERDICT_WORDS", "render_matrix", "write_matrix_page", "write_witness_pages"]

#: The label each verdict carries beside its colour (colour is never the only signal).
VERDICT_WORDS = {
    "admits": "ADMITS",
    "excludes": "excludes",
    "not found": "not found",
    "undecided": "undecided",
    "abstains": "abstains",
}
_ANOMALY_NAMES = {
    "N1": "N1 replay inconsistency (fresh judge)",
    "RD": "recovery divergence (other causes)",
    "N2": "N2 belief-drift skew",
    "N3": "N3 audit erasure",
}
_FAULT_NAMES = {"none": "no faults", "crash": "one crash per agent"}


def write_matrix_page(
    folder: Path, rows: Sequence[Mapping[str, Any]], notes: Sequence[str] = ()
) -> Path:
    """Write matrix.html and a page beside every witness the rows link to; returns the
    matrix page's path."""
    folder = Path(folder)
    pages, problems = write_witness_pages(folder, rows)
    path = folder / "matrix.html"
    html = render_matrix(rows, [*notes, *problems], pages, _agreement(folder, rows))
    path.write_text(html, encoding="utf-8")
    return path


def write_witness_pages(
    folder: Path, rows: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, str], list[str]]:
    """(witness as in the rows -> its page, both relative to `folder`; a note per witness
    whose page could not be drawn, which keeps its JSON link: a long run is never lost to
    a page)."""
    from toki.errors import TokiError

    wdir = folder / "witnesses"
    if wdir.is_dir():
        for old in wdir.glob("*.html"):  # a page from an earlier run must not linger
            old.unlink()
    out: dict[str, str] = {}
    problems: list[str] = []
    for r in rows:
        witness = str(r.get("witness") or "")
        if not witness or witness in out or not (folder / witness).is_file():
            continue
        page = Path(witness).with_suffix(".html")
        try:
            # named as the matrix links it (relative to the folder), not by where the folder
            # was written, so the page is the same whatever path `--out` was given
            drawn = replace(load_page(folder / witness, replay_real=False), source=witness)
        except TokiError as exc:
            problems.append(f"no page for {witness}: {exc}")
            continue
        (folder / page).write_text(render_page(drawn, back="../matrix.html"), encoding="utf-8")
        out[witness] = page.as_posix()
    return out, problems


def _agreement(folder: Path, rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], Any]:
    """(real row's system, faults, anomaly) -> its agreement row, when the run had real rows."""
    path = folder / "agreement.csv"
    if not any(r.get("kind") == "real" for r in rows) or not path.is_file():
        return {}
    with path.open(newline="", encoding="utf-8") as fh:
        return {(f"{a['real']} (real)", a["faults"], a["anomaly"]): a for a in csv.DictReader(fh)}


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def _rate_line(r: Mapping[str, Any]) -> str:
    v, rate, lo, hi = (
        r["verdict"],
        _num(r.get("rate")),
        _num(r.get("ci_low")),
        _num(r.get("ci_high")),
    )
    if v == "admits" and r.get("mode") == "fault-free":
        return "fault-free witness"
    if v == "admits" and not math.isnan(rate):
        return f"rate {rate:.3f} [{lo:.3f}, {hi:.3f}]"
    if v == "not found" and not math.isnan(hi):
        return f"rate < {hi:.3f}"
    if v == "excludes" and r.get("mode") != "check":
        return "no anomalous run"
    return ""


def _workloads(reason: str) -> str:
    """ "exhaustive on 2 of 3 workloads" from the scope the matrix writes into a reason
    ("DPOR exhaustive on a, b; sampled (random + PCT) on c; ...")."""
    done = re.search(r"DPOR exhaustive on ([^;]+)", reason)
    rest = re.search(r"sampled \(random \+ PCT\) on ([^;]+)", reason)
    n_done = len(done.group(1).split(", ")) if done else 0
    n_rest = len(rest.group(1).split(", ")) if rest else 0
    if not n_done + n_rest:
        return ""
    return f"exhaustive on {n_done} of {n_done + n_rest} workload(s)"


def _method(r: Mapping[str, Any]) -> str:
    mode = str(r.get("mode") or "")
    runs, draws = r.get("runs"), r.get("draws")
    parts = [mode] if mode else []
    scope = _workloads(str(r.get("reason") or ""))
    if scope:
        parts.append(scope)
    if runs not in (None, "", 0):
        parts.append(f"n={int(_num(runs)):,}")
    if draws not in (None, ""):
        parts.append(f"{draws} draws")
    return ", ".join(parts)


def _first_sentence(text: str) -> str:
    """A resolution's first sentence (the whole is in agreement.md and the cell's tooltip)."""
    head, dot, rest = text.partition(". ")
    return head + ("." if dot else "") + (" …" if rest else "")


def _cell(
    r: Mapping[str, Any] | None, pages: Mapping[str, str], agree: Mapping[str, str] | None
) -> str:
    if r is None:
        return '<td class="cell empty">&ndash;</td>'
    v = str(r["verdict"])
    word = VERDICT_WORDS.get(v, v)
    inner = [f'<span class="word">{escape(word)}</span>']
    rate = _rate_line(r)
    if rate:
        inner.append(f'<span class="num">{escape(rate)}</span>')
    method = _method(r)
    if method:
        inner.append(f'<span class="method">{escape(method)}</span>')
    if agree is not None:
        a = agree.get("agree", "")
        text = {
            "yes": f"agrees with model {agree.get('model', '')}",
            "no": f"DISAGREES with model {agree.get('model', '')} "
            f"({agree.get('model_verdict', '')}): {_first_sentence(agree.get('resolution', ''))}",
        }.get(a, f"{a} ({agree.get('model', '')})")
        inner.append(f'<span class="agree agree-{escape(a)}">{escape(text)}</span>')
    witness = str(r.get("witness") or "")
    reason = str(r.get("reason") or "")
    if agree is not None and agree.get("resolution"):
        reason += " | agreement: " + agree["resolution"]
    title = escape(reason, quote=True)
    body = "".join(inner)
    if witness:
        href = pages.get(witness, witness)
        link_word = "witness page" if witness in pages else "witness (JSON)"
        body = (
            f'<a href="{escape(href)}" data-witness="{escape(witness)}" title="{title}">{body}'
            f'<span class="method">&rarr; {link_word}</span></a>'
        )
    cls = "v-" + v.replace(" ", "-")
    return f'<td class="cell {escape(cls)}" data-verdict="{escape(v)}" title="{title}">{body}</td>'


def render_matrix(
    rows: Sequence[Mapping[str, Any]],
    notes: Sequence[str] = (),
    pages: Mapping[str, str] | None = None,
    agreement: Mapping[tuple[str, str, str], Mapping[str, str]] | None = None,
) -> str:
    pages = pages or {}
    agreement = agreement or {}
    systems = list(dict.fromkeys(str(r["system"]) for r in rows))
    faults = list(dict.fromkeys(str(r["faults"]) for r in rows))
    anomalies = list(dict.fromkeys(str(r["anomaly"]) for r in rows))
    at = {(str(r["system"]), str(r["faults"]), str(r["anomaly"])): r for r in rows}
    kinds = {str(r["system"]): str(r.get("kind", "model")) for r in rows}
    versions = {str(r["system"]): str(r.get("version", "")) for r in rows}
    admits = sum(1 for r in rows if r["verdict"] == "admits")
    parts = [
        '<header><h1 id="title">Verdict matrix</h1>',
        f'<p class="sub">{len(systems)} systems &times; {len(anomalies)} anomalies &times; '
        f"{len(faults)} fault setting(s); {admits} cells admit an anomaly. Generated by "
        "<code>toki matrix</code>; the rules are in docs/verdict-matrix.md.</p></header>",
        '<div class="legend" aria-label="legend">'
        + "".join(
            f'<span class="v-{v.replace(" ", "-")}" style="padding:0 6px"><b>{escape(w)}</b></span>'
            for v, w in VERDICT_WORDS.items()
        )
        + "</div>",
        '<p class="help">ADMITS: a witness replays (rate = mean fraction of runs over judge '
        "draws, with its 95 % interval); excludes: no anomalous run where the search was "
        "exhaustive, or a deterministic check; not found: none in sampled runs (upper bound); "
        "undecided / abstains: no verdict. Click a cell with a witness to open its page; hover "
        "(or read matrix.md) for the full reason. Real rows (italic) sit under their model "
        "and say whether they agree with it.</p>",
    ]
    for f in faults:
        parts.append(f'<h2 id="faults-{escape(f)}">{escape(_FAULT_NAMES.get(f, f))}</h2>')
        head = "".join(
            f'<th scope="col">{escape(_ANOMALY_NAMES.get(a, a))}</th>' for a in anomalies
        )
        parts.append(
            f'<table class="matrix" data-faults="{escape(f)}"><colgroup><col class="sys">'
            f'{"<col>" * len(anomalies)}</colgroup><thead><tr><th scope="col">system'
            f"</th>{head}</tr></thead><tbody>"
        )
        for s in systems:
            if not any((s, f, a) in at for a in anomalies):
                continue
            kind = kinds[s]
            label = escape(s) + (f"<br><small>{escape(versions[s])}</small>" if versions[s] else "")
            cells = "".join(
                _cell(
                    at.get((s, f, a)), pages, agreement.get((s, f, a)) if kind == "real" else None
                )
                for a in anomalies
            )
            parts.append(
                f'<tr class="{escape(kind)}" data-system="{escape(s)}"><th scope="row">{label}'
                f"</th>{cells}</tr>"
            )
        parts.append("</tbody></table>")
    if notes:
        parts.append('<h2>Notes</h2><ul class="notes">')
        parts += [f"<li>{escape(n)}</li>" for n in notes]
        parts.append("</ul>")
    return document("Verdict matrix", "\n".join(parts), script=False)
