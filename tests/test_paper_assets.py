"""The committed paper assets and benchmarks/README.md match what the result files give.

Fails when someone regenerates a result file (proofs, calibration, matrix, benchmarks, ...) but
not the assets: run `make paper-assets`.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _assets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paper_assets", ROOT / "paper" / "assets.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_assets"] = module
    spec.loader.exec_module(module)
    return module


def test_committed_paper_assets_are_up_to_date(tmp_path: Path) -> None:
    assets = _assets()
    assets.write(assets.build(ROOT), tmp_path)
    committed = ROOT / "paper" / "generated"
    fresh = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    old = {p.name: p.read_bytes() for p in committed.iterdir() if p.is_file()}
    assert sorted(fresh) == sorted(old), "paper/generated/ has other files: make paper-assets"
    compare = sys.modules["paper_assets"].comparable  # PDFs: all but the font programs
    stale = sorted(n for n in fresh if compare(n, fresh[n]) != compare(n, old[n]))
    assert not stale, f"stale in paper/generated/: {stale}; run make paper-assets"


def test_benchmarks_readme_is_up_to_date() -> None:
    _assets()  # paper/assets.py puts the repository root on sys.path
    report = importlib.import_module("benchmarks.report")
    text = report.README.read_text()
    assert report.BEGIN in text and report.END in text
    assert report.update(text, report.render(report.load())) == text, (
        "benchmarks/README.md is stale: run python -m benchmarks.report"
    )


def _copy_inputs(dst: Path) -> None:
    for rel in (
        "proofs/results.json",
        "docs/laws.md",
        "docs/anomalies.md",
        "verdict_matrix/calibration.csv",
        "paper/data/locomo_ablations.json",
    ):
        if (ROOT / rel).exists():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / rel, dst / rel)
    shutil.copytree(ROOT / "benchmarks" / "results", dst / "benchmarks" / "results")


def test_a_changed_result_file_makes_the_assets_stale(tmp_path: Path) -> None:
    assets = _assets()
    _copy_inputs(tmp_path)
    out = tmp_path / "generated"
    assets.write(assets.build(tmp_path), out)
    assert assets.stale(assets.build(tmp_path), out) == []
    path = tmp_path / "proofs" / "results.json"
    if not path.exists():
        pytest.skip("proofs/results.json is not generated")
    res = json.loads(path.read_text())
    res[0]["seconds"] += 1.0
    path.write_text(json.dumps(res))
    assert "macros.tex" in assets.stale(assets.build(tmp_path), out)


def test_missing_result_files_say_how_to_make_them(tmp_path: Path) -> None:
    assets = _assets()
    built = assets.build(tmp_path)  # an empty tree: no result file at all
    proofs = built["tab_proofs.tex"]
    assert isinstance(proofs, str) and "not generated yet" in proofs and "toki prove" in proofs
    assert "toki matrix" in str(built["tab_matrix.tex"])
    assert "fig_calibration.pdf" not in built
    macros = str(built["macros.tex"])
    assert r"\newcommand{\tkCalibMAD}{\missing{toki calibrate}}" in macros


def test_a_number_in_the_text_is_a_macro_from_the_results() -> None:
    assets = _assets()
    macros = str(assets.build(ROOT)["macros.tex"])
    res = json.loads((ROOT / "proofs" / "results.json").read_text())
    assert rf"\newcommand{{\tkProofCount}}{{{len(res)}}}" in macros
    tex = (ROOT / "paper" / "toki.tex").read_text()
    used = {
        line.split("{\\tk", 1)[1].split("}", 1)[0]
        for line in macros.splitlines()
        if line.startswith("\\newcommand{\\tk")
    }
    for name in ("ProofCount", "CalibMAD", "LocomoTypedDiff", "CheckSeconds"):
        assert name in used and f"\\tk{name}" in tex


def test_every_macro_the_text_uses_is_generated() -> None:
    """Without TeX on the machine, this is what stands between a renamed result and a paper
    that does not build."""
    import re

    macros = str(_assets().build(ROOT)["macros.tex"])
    defined = set(re.findall(r"\\newcommand\{\\tk([A-Za-z]+)\}", macros))
    used = set(re.findall(r"\\tk([A-Za-z]+)", (ROOT / "paper" / "toki.tex").read_text()))
    assert used, "the pattern found no macro in the text"
    assert used <= defined, f"used but not generated: {sorted(used - defined)}"


def _figures(tex: str) -> list[str]:
    """The literal numbers of a LaTeX body: outside comments, math (formulas such as
    2p(1-p)), references, citations, file names and lengths, and not part of a word (N1, z3)."""
    import re

    body = tex[tex.find(r"\begin{document}") :]
    body = re.sub(r"(?<!\\)%.*", "", body)
    body = re.sub(r"\$[^$]*\$", " ", body)
    body = re.sub(r"\\(?:cite|ref|label|input|includegraphics|begin|end)(?:\[[^\]]*\])?\{[^}]*\}",
                  " ", body)  # fmt: skip
    body = re.sub(r"\{?\d+(?:\.\d+)?\\(?:linewidth|textwidth)\}?", " ", body)
    return re.findall(r"(?<![A-Za-z\\\d.{,])\d+(?:(?:\{,\}|,|\.)\d+)*(?![A-Za-z\d])", body)


def test_the_paper_types_no_number() -> None:
    """Every figure in toki.tex is a macro from paper/generated/macros.tex (quoted figures
    too: paper/data/cited.json), so a figure typed by hand, or left behind when the data
    moved, fails here."""
    tex = (ROOT / "paper" / "toki.tex").read_text()
    assert _figures(tex) == [], "numbers typed into paper/toki.tex: make them generated macros"


def test_the_literal_number_check_can_fail() -> None:
    """The check above on planted text: the stale SQLite figure and a quoted deviation typed
    by hand are caught; macros, formulas, references, lengths and comments are not."""
    planted = (
        r"\begin{document} appends 68{,}704 events/s; \TOKI{} reports 0.017 over 30 cells "
        r"($2p(1-p)$, $k=3$) in N1, z3, \tkCalibMAD{}, \S\ref{sec:2} and "
        r"{0.48\linewidth} % 99 in a comment"
    )
    assert _figures(planted) == ["68{,}704", "0.017", "30"]


def test_the_matrix_table_marks_the_rows_checked_on_real_code(tmp_path: Path) -> None:
    """R marks a model row exactly when agreement.csv has a real row beside it."""
    assets = _assets()
    _copy_inputs(tmp_path)
    for name in ("matrix.csv", "matrix.md", "matrix.toml", "agreement.csv"):
        shutil.copy(ROOT / "verdict_matrix" / name, tmp_path / "verdict_matrix" / name)
    path = tmp_path / "verdict_matrix" / "agreement.csv"
    rows = list(csv.DictReader(path.open()))
    checked = {r["model"] for r in rows}
    table = str(assets.build(tmp_path)["tab_matrix.tex"])
    marked = {
        line.split("}")[0].removeprefix(r"\texttt{")
        for line in table.splitlines()
        if line.startswith(r"\texttt{") and r"$^{\mathrm{R}}$ &" in line
    }
    assert marked and marked == checked
    kept = [r for r in rows if r["model"] != sorted(checked)[0]]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    table = str(assets.build(tmp_path)["tab_matrix.tex"])
    assert rf"\texttt{{{sorted(checked)[0]}}}$^{{\mathrm{{R}}}}$" not in table


def test_pdf_comparison_ignores_only_the_font_programs() -> None:
    """A figure's font program (fontTools' subset) may differ between installs; its drawing
    may not: changing a byte of the program is ignored, changing a byte of a page is not."""
    compare = _assets().comparable
    pdf = (ROOT / "paper" / "generated" / "fig_check.pdf").read_bytes()
    start = pdf.index(b"/Length1")
    program = pdf.index(b"stream\n", start) + len(b"stream\n")
    refont = pdf[:program] + bytes([pdf[program] ^ 0xFF]) + pdf[program + 1 :]
    assert compare("fig_check.pdf", refont) == compare("fig_check.pdf", pdf)
    page = pdf.index(b"stream\n") + len(b"stream\n")  # the first stream: page content
    assert page < start
    redrawn = pdf[:page] + bytes([pdf[page] ^ 0xFF]) + pdf[page + 1 :]
    assert compare("fig_check.pdf", redrawn) != compare("fig_check.pdf", pdf)
