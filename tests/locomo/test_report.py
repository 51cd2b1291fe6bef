"""The LoCoMo figure speaks plain words, separates zeros from missing data, marks checks and
uses a colour-blind-safe palette; the paper side-by-side reads the new row kinds."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from toki.locomo import LocomoDataset, run_ablations
from toki.locomo.report import PALETTE, paper_comparison, plot_ablations


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    from .conftest import invented_dataset

    return run_ablations(invented_dataset(), resamples=200)


def _texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text) if t.get_text().strip()]


def test_figure_has_no_code_identifiers(rows: list[dict[str, Any]]) -> None:
    texts = _texts(plot_ablations(rows))
    codes = {str(r[k]) for r in rows for k in ("ablation", "variant", "slice") if k in r}
    assert texts and not [t for t in texts if t in codes]
    assert not [t for t in texts if re.search(r"\b[a-z]+_[a-z_]+\b", t)]
    assert "(a) Typing the memory" in texts and "Last writer wins" in texts


def _full_rows() -> list[dict[str, Any]]:
    """A score row with 0.5 for every bar of the figure."""
    out = []
    for abl, field, variants, groups in (
        ("typed_layer", "category", ["typed", "flat"], [1, 2, 3, 4, "all"]),
        (
            "audit_rows",
            "slice",
            ["dual_row", "overwrite"],
            ["superseded", "control_single", "control_latest", "qa_superseded"],
        ),
        (
            "operator",
            "slice",
            ["LWW", "EWM", "AWAIT", "RULE"],
            ["superseded", "control_single", "control_latest", "answerable"],
        ),
    ):
        for v in variants:
            for g in groups:
                r = {
                    "ablation": abl,
                    "kind": "score",
                    "variant": v,
                    "category": "all",
                    "slice": "answerable",
                    "metric": "f1",
                    "n": 10,
                    "score": 0.5,
                    "ci_low": 0.4,
                    "ci_high": 0.6,
                }
                r[field] = g
                out.append(r)
    return out


def test_zero_bars_differ_from_missing_data() -> None:
    rows = _full_rows()
    assert "n/a" not in _texts(plot_ablations(rows)) and "0" not in _texts(plot_ablations(rows))
    rows[0].update(score=0.0, ci_low=0.0, ci_high=0.0)
    del rows[3]
    texts = _texts(plot_ablations(rows))
    assert texts.count("n/a") == 1 and texts.count("0") == 1


def test_checks_are_hatched_and_colours_are_colour_blind_safe(rows: list[dict[str, Any]]) -> None:
    fig = plot_ablations(rows)
    bars = [
        p
        for p in fig.findobj(Rectangle)
        if p.get_height() > 0 and p.axes is not None and p.get_width() < 0.5
    ]
    assert bars
    colours = {to_hex(b.get_facecolor()).upper() for b in bars}
    assert colours <= {c.upper() for c in PALETTE}
    hatched = [b for b in bars if b.get_hatch()]
    n_checks = sum(1 for r in rows if r["kind"] == "check")
    assert len(hatched) == n_checks > 0


def test_paper_comparison_reads_checks_and_holm(real_dataset: LocomoDataset) -> None:
    rows = run_ablations(real_dataset, limit=2, resamples=200)
    lines = {r["measure"]: r for r in paper_comparison(rows)}
    assert "Holm" in lines["typed layer: with vs without"]["toki"]
    assert (
        "a check, not a test"
        in lines["audit-row defence (dual-row - overwrite), as-of slice"]["toki"]
    )
    assert "controls (nothing superseded)" in lines


NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "locomo_ablation.ipynb"
FIGURE = NOTEBOOK.parent / "figures" / "locomo_ablation.png"


def test_the_notebook_is_committed_executed_with_its_figure_inline() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs for c in code), "commit the notebook executed"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    pngs = [
        o.data["image/png"] for c in code for o in c.outputs if "image/png" in o.get("data", {})
    ]
    assert len(pngs) == 1
    assert base64.b64decode(pngs[0]) == FIGURE.read_bytes(), "the inline figure is the file's"


def test_the_notebook_quotes_no_text_from_the_data(real_dataset: LocomoDataset) -> None:
    text = NOTEBOOK.read_text(encoding="utf-8")
    said = [o.text for c in real_dataset.conversations for o in c.observations]
    said += [q.question for c in real_dataset.conversations for q in c.qa]
    assert said and not [s for s in said if len(s) > 20 and s in text]
