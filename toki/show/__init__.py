"""`toki show`: any witness or history toki writes as one self-contained HTML page, and the
verdict matrix as a page whose cells open their witnesses (docs/show.md)."""

from __future__ import annotations

from pathlib import Path

from toki.show.html import render_page
from toki.show.page import Cycle, CycleEdge, Page, Row, Span
from toki.show.sources import file_kind, load_page

__all__ = [
    "Cycle",
    "CycleEdge",
    "Page",
    "Row",
    "Span",
    "file_kind",
    "load_page",
    "render_page",
    "write_page",
]


def write_page(
    source: str | Path, out: str | Path, *, replay_real: bool = True, back: str = ""
) -> Page:
    """Read `source`, write its page to `out` (one HTML file) and return the page."""
    page = load_page(source, replay_real=replay_real)
    Path(out).write_text(render_page(page, back=back), encoding="utf-8")
    return page
