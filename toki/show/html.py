"""A `Page` as one self-contained HTML file: the timeline as a table (a column per lane, a
row per step in schedule order), the anomaly's steps marked, each Adya cycle as an SVG
graph with its edges explained, and each step's full record in a <details> element.

Everything is readable without JavaScript (the records open natively, "show all steps" is
a checkbox); the script only adds the record panel and keyboard navigation. Big histories
show only the anomaly's neighbourhood until expanded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from html import escape

from toki.show.assets import CSS, JS
from toki.show.page import Cycle, Page, Row, Span

__all__ = ["NEIGHBOURHOOD", "SHOW_ALL_BELOW", "document", "render_page"]

#: A page with more rows than this and some marked step first shows only the marked steps
#: and NEIGHBOURHOOD rows either side of each.
SHOW_ALL_BELOW = 150
NEIGHBOURHOOD = 8
#: Beyond this many rows the steps away from the anomaly are not even written into the page
#: (a history of 10^5 transactions would make a page of 100 MB); the gap rows say so.
MAX_DRAWN = 5000

_BADGE = {
    "read": "READ",
    "write": "WRITE",
    "delete": "DELETE",
    "select": "SELECT",
    "commit": "COMMIT",
    "abort": "ABORT",
    "crash": "CRASH",
    "fault": "FAULT",
    "llm": "LLM",
    "info": "INFO?",
    "begin": "BEGIN",
}


def document(title: str, body: str, *, script: bool = True) -> str:
    """A complete HTML document with the inline stylesheet (and script)."""
    js = f"<script>{JS}</script>" if script else ""
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="generator" content="toki show">\n'
        f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n"
        f"<body>\n{body}\n{js}\n</body>\n</html>\n"
    )


def render_page(page: Page, *, back: str = "") -> str:
    """The page's HTML; `back` is an optional link (the matrix page) shown at the top."""
    parts = []
    if back:
        parts.append(f'<p class="noprint"><a href="{escape(back)}">&larr; verdict matrix</a></p>')
    parts.append(f'<header><h1 id="title">{escape(page.title)}</h1>')
    parts.append(
        f'<p class="sub">{escape(page.kind)} &middot; <code>{escape(page.source)}</code></p>'
    )
    parts.append(f'<p class="verdict" id="verdict">{escape(page.verdict)}</p></header>')
    parts.append('<dl class="facts">')
    for k, v in page.facts:
        parts.append(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>")
    parts.append("</dl>")
    if page.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in page.notes))
        parts.append("</ul>")
    parts.append('<h2 id="why">Why: the anomaly in words</h2>')
    text = escape("\n".join(page.explanation))
    parts.append(f'<pre class="explain" id="explanation">{text}</pre>')
    if page.cycles:
        parts.append('<h2 id="cycles">Dependency cycles</h2>')
        parts += [_cycle(c, n) for n, c in enumerate(page.cycles)]
    parts.append(_timeline(page))
    return document(page.title, "\n".join(parts))


# ---------------------------------------------------------------- the timeline


def _legend() -> str:
    items = [
        ("read", "a read"),
        ("write", "a write"),
        ("commit", "commit"),
        ("abort", "abort (dashed transaction)"),
        ("crash", "crash"),
        ("fault", "injected fault"),
        ("llm", "an LLM / judge answer"),
    ]
    spans = "".join(
        f'<span class="k-{k}"><span class="k">{_BADGE[k]}</span>{escape(t)}</span>'
        for k, t in items
    )
    return (
        f'<div class="legend" aria-label="legend">{spans}'
        '<span><span class="mark" style="display:inline">&#9650; anomaly:</span> a step that makes '
        "the anomaly</span>"
        "</div>"
    )


def _visible(rows: Sequence[Row]) -> list[bool]:
    """Which rows show before expanding: all of a small page, else the marked rows and
    their neighbourhood."""
    marked = [i for i, r in enumerate(rows) if r.mark]
    if len(rows) <= SHOW_ALL_BELOW or not marked:
        return [True] * len(rows)
    near = [False] * len(rows)
    for i in marked:
        for j in range(max(0, i - NEIGHBOURHOOD), min(len(rows), i + NEIGHBOURHOOD + 1)):
            near[j] = True
    return near


def _open_spans(page: Page) -> dict[tuple[int, str], Span]:
    """(row, lane) -> the transaction open on that lane at that row."""
    out: dict[tuple[int, str], Span] = {}
    for s in page.spans:
        for i in range(s.first, s.last + 1):
            out.setdefault((i, s.lane), s)
    return out


def _timeline(page: Page) -> str:
    rows = page.rows
    near = _visible(rows)
    hidden = near.count(False)
    lanes = page.lanes
    opened = _open_spans(page)
    out = [
        f'<h2 id="timeline-title">Timeline: {len(rows):,} steps on {len(lanes)} lane(s)</h2>',
        '<p class="help noprint">Each row is one step in schedule order, in the column of the '
        "lane that took it; shaded columns are transactions. Click a step (or focus it and "
        "press Enter) for its full record. Keys: <kbd>j</kbd>/<kbd>k</kbd> next/previous step, "
        "<kbd>n</kbd>/<kbd>p</kbd> next/previous anomaly step, <kbd>e</kbd> show all steps.</p>",
        _legend(),
    ]
    if hidden and len(rows) <= MAX_DRAWN:
        out.append(
            f'<input type="checkbox" id="expand"><label for="expand">show all {len(rows):,} '
            f"steps ({hidden:,} hidden: only the anomaly's neighbourhood is shown)</label>"
        )
    out.append('<div class="layout"><div class="scroll">')
    head = "".join(f'<th scope="col" class="lane-head">{escape(lane)}</th>' for lane in lanes)
    out.append(
        f'<table class="timeline" id="timeline"><thead><tr><th class="idx" scope="col">#</th>'
        f"{head}</tr></thead><tbody>"
    )
    width = len(lanes) + 1
    drawn = len(rows) <= MAX_DRAWN or not hidden
    gap = 0
    for pos, row in enumerate(rows):
        if not near[pos]:
            gap += 1
            if drawn:
                out.append(_row(row, pos, lanes, opened, page, far=True))
            continue
        if gap:
            out.append(_gap(gap, width, drawn))
            gap = 0
        out.append(_row(row, pos, lanes, opened, page, far=False))
    if gap:
        out.append(_gap(gap, width, drawn))
    out.append("</tbody></table></div>")
    out.append(
        '<aside id="record" aria-live="polite"><h3>Step record</h3><p class="what">'
        "Click a step to see its full record here.</p><pre></pre></aside></div>"
    )
    return "\n".join(out)


def _gap(n: int, width: int, drawn: bool = True) -> str:
    if not drawn:
        return (
            f'<tr class="gap kept"><td colspan="{width}">&hellip; {n:,} step(s) away from the '
            f"anomaly not drawn (a page draws at most {MAX_DRAWN:,} steps; toki check reads "
            "them all)</td></tr>"
        )
    return (
        f'<tr class="gap"><td colspan="{width}"><label for="expand">&hellip; {n:,} step(s) '
        "away from the anomaly hidden: show all</label></td></tr>"
    )


def _row(
    row: Row,
    pos: int,
    lanes: Sequence[str],
    opened: dict[tuple[int, str], Span],
    page: Page,
    *,
    far: bool,
) -> str:
    classes = "far" if far else ""
    cells = [f'<th class="idx" scope="row">{row.index}</th>']
    for lane in lanes:
        span = opened.get((pos, lane))
        tcls = f" in-txn t-{span.outcome}" if span else ""
        if lane != row.lane:
            label = ""
            if span is not None and span.first == pos:
                label = f'<span class="span-label">{escape(span.txn)} begins</span>'
            cells.append(f'<td class="lane{tcls}">{label}</td>')
            continue
        cells.append(_step_cell(row, pos, span, tcls))
    return f'<tr id="s{pos}" class="{classes}">' + "".join(cells) + "</tr>"


def _step_cell(row: Row, pos: int, span: Span | None, tcls: str) -> str:
    badge = _BADGE.get(row.kind, "")
    k = f'<span class="k">{badge}</span>' if badge else ""
    txn = f'<span class="txn">{escape(row.txn)}</span>' if row.txn else ""
    label = ""
    if span is not None and span.first == pos:
        level = f" · {span.level}" if span.level else ""
        label = f'<span class="span-label">{escape(span.txn)}{escape(level)} begins</span>'
    end = ""
    if span is not None and span.last == pos and span.outcome != "open":
        end = f'<span class="span-label outcome">{escape(span.txn)} {escape(span.outcome)}</span>'
    mark = f'<span class="mark">&#9650; anomaly: {escape(row.mark)}</span>' if row.mark else ""
    record = json.dumps(row.record, indent=1, sort_keys=True, default=str, ensure_ascii=False)
    title = row.text if len(row.text) <= 300 else row.text[:297] + "..."
    marked = " marked" if row.mark else ""
    return (
        f'<td class="lane step k-{escape(row.kind)}{tcls}{marked}" data-step="{row.index}" '
        f'data-lane="{escape(row.lane)}" title="{escape(title)}">{label}<details><summary>'
        f"{k}{txn}{escape(row.text)}</summary><pre>{escape(record)}</pre></details>{mark}{end}</td>"
    )


# ---------------------------------------------------------------- cycles


def _cycle(cycle: Cycle, n: int) -> str:
    """The cycle as an SVG graph (nodes on a circle, each edge a labelled curved arrow with
    its explanation as a tooltip) and as a numbered list of edges with their explanations."""
    nodes = list(dict.fromkeys([e.src for e in cycle.edges] + [e.dst for e in cycle.edges]))
    k = len(nodes)
    radius = 70 + 28 * k
    size = 2 * radius + 180
    c = size / 2
    pos = {
        name: (
            c + radius * math.cos(2 * math.pi * i / k - math.pi / 2),
            c + radius * math.sin(2 * math.pi * i / k - math.pi / 2),
        )
        for i, name in enumerate(nodes)
    }
    svg = [
        f'<svg class="cycle" id="cycle-{n}" viewBox="0 0 {size:.0f} {size:.0f}" '
        f'width="{size:.0f}" height="{size:.0f}" role="img" '
        f'aria-labelledby="cycle-{n}-t"><title id="cycle-{n}-t">{escape(cycle.name)}: '
        f"{escape(' → '.join(e.src for e in cycle.edges))} → {escape(cycle.edges[0].src)}</title>",
        "<defs>"
        + "".join(
            f'<marker id="arrow-{n}-{kind}" viewBox="0 0 10 10" refX="9" refY="5" '
            f'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
            f'<path d="M0,0 L10,5 L0,10 z" fill="{colour}"/></marker>'
            for kind, colour in _EDGE_COLOURS.items()
        )
        + "</defs>",
    ]
    for j, e in enumerate(cycle.edges):
        (x1, y1), (x2, y2) = pos[e.src], pos[e.dst]
        dx, dy = x2 - x1, y2 - y1
        dist = math.hypot(dx, dy) or 1.0
        ux, uy = dx / dist, dy / dist
        sx, sy, tx, ty = x1 + 24 * ux, y1 + 24 * uy, x2 - 26 * ux, y2 - 26 * uy
        bend = (0.45 if k == 2 else 0.25) * dist
        mx, my = (sx + tx) / 2 + bend * uy, (sy + ty) / 2 - bend * ux
        # the label sits just outside the curve's midpoint, anchored away from the curve
        lx, ly = (sx + 2 * mx + tx) / 4 + 8 * uy, (sy + 2 * my + ty) / 4 - 8 * ux + 4
        anchor = "start" if uy > 0.2 else "end" if uy < -0.2 else "middle"
        if e.src == e.dst:  # a self-loop
            sx, sy, tx, ty = x1 - 10, y1 - 22, x1 + 10, y1 - 22
            mx, my, lx, ly, anchor = x1, y1 - 90, x1, y1 - 60, "middle"
        kind = e.kind if e.kind in _EDGE_COLOURS else "other"
        svg.append(
            f'<g class="edge e-{escape(kind)}" id="cycle-{n}-edge-{j}" data-edge="{n}-{j}" '
            f'data-kind="{escape(e.kind)}" tabindex="0"><title>{escape(e.explanation)}</title>'
            f'<path d="M{sx:.1f},{sy:.1f} Q{mx:.1f},{my:.1f} {tx:.1f},{ty:.1f}" '
            f'marker-end="url(#arrow-{n}-{kind})"/>'
            f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">{j + 1}. {escape(e.label)}'
            "</text></g>"
        )
    for name, (x, y) in pos.items():
        svg.append(
            f'<g class="node" data-txn="{escape(name)}"><circle cx="{x:.1f}" cy="{y:.1f}" r="22"/>'
            f'<text x="{x:.1f}" y="{y + 4:.1f}">{escape(name)}</text></g>'
        )
    svg.append("</svg>")
    items = "".join(
        f'<li data-edge="{n}-{j}"><span class="ekind">{escape(e.kind)}</span> '
        f"{escape(e.src)} &rarr; {escape(e.dst)}: {escape(e.explanation)}</li>"
        for j, e in enumerate(cycle.edges)
    )
    return (
        f'<section class="cycle-block"><h3>{escape(cycle.name)}</h3>{"".join(svg)}'
        f'<ol class="edges">{items}</ol></section>'
    )


_EDGE_COLOURS = {
    "ww": "#0072B2",
    "wr": "#009E73",
    "rw": "#D55E00",
    "process": "#555555",
    "realtime": "#555555",
    "other": "#555555",
}
