"""`toki show` pages in a real browser (headless Chromium): the lanes, the marked steps and
the cycle edges are in the DOM, a click opens a step's record, a matrix cell opens its
witness's page, nothing is fetched from anywhere but file://, and a 500-gate-point witness
renders (its time is written beside the screenshots and, by `python -m
benchmarks.bench_show`, to benchmarks/results/show.json; no wall-clock assert here)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

from benchmarks.bench_show import big_real_witness, render_ms, requested_urls
from toki.show import write_page
from toki.show.matrix_page import write_matrix_page

ROOT = Path(__file__).resolve().parents[2]
WITNESSES = ROOT / "verdict_matrix" / "witnesses"
ELLE = ROOT / "tests" / "check" / "elle_data" / "elle-cli"


def _load(driver: Any, page: Path) -> list[str]:
    """Open `page` and return every URL the browser requested for it."""
    requested_urls(driver)  # drop what earlier pages requested
    driver.get(page.resolve().as_uri())
    driver.execute_script("return document.readyState")
    return requested_urls(driver)


def _local_only(urls: list[str]) -> None:
    assert urls, "the browser log recorded no request at all (the check would be empty)"
    outside = [u for u in urls if not u.startswith(("file://", "data:", "about:"))]
    assert outside == [], outside


def _texts(driver: Any, css: str) -> list[str]:
    return [e.text.strip() for e in driver.find_elements("css selector", css)]


def test_a_model_witness_page(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    source = WITNESSES / "mem0-1.0.11-N2-crash.json"
    page = write_page(source, tmp_path / "model.html")
    _local_only(_load(browser, tmp_path / "model.html"))
    assert _texts(browser, "th.lane-head") == ["agent 0", "agent 1"]
    marked = browser.find_elements("css selector", "td.step.marked")
    assert len(marked) == sum(1 for r in page.rows if r.mark) >= 2
    assert all("anomaly:" in m.text for m in marked)
    crashes = _texts(browser, "td.step.k-crash")
    assert len(crashes) == sum(
        1 for c in json.loads(source.read_text())["schedule"] if str(c).startswith("crash:")
    )
    assert browser.find_elements("css selector", "td.in-txn.t-committed")
    assert "reproduced: True" in browser.find_element("id", "explanation").text
    browser.execute_script("document.getElementById('why').scrollIntoView()")
    browser.save_screenshot(str(artifacts / "model-witness.png"))
    marked[0].find_element("css selector", "summary").click()  # the record panel fills
    record = json.loads(browser.find_element("css selector", "aside#record pre").text)
    assert record["operations"] and "choice" in record
    browser.find_element("css selector", "body").send_keys("n")  # keyboard: next marked step
    selected = browser.find_element("css selector", "td.step.selected")
    assert "marked" in (selected.get_attribute("class") or "")
    assert browser.find_element("css selector", "aside#record .what").text == (
        selected.get_attribute("title")
    )
    browser.save_screenshot(str(artifacts / "model-witness-record.png"))


def test_a_real_witness_page(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    """A committed real witness drawn from its saved story (no library started)."""
    write_page(
        WITNESSES / "mem0-2.2.1-real-RD-crash.json", tmp_path / "real.html", replay_real=False
    )
    _local_only(_load(browser, tmp_path / "real.html"))
    assert _texts(browser, "th.lane-head") == ["agent 0", "agent 1"]
    assert len(_texts(browser, "td.step.k-crash")) == 2
    assert len(browser.find_elements("css selector", "td.step.marked")) >= 2
    browser.save_screenshot(str(artifacts / "real-witness.png"))


def test_an_elle_g_single_history_draws_its_cycle(
    browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    source = ELLE / "list-append-anomaly-g-single-item.json"
    page = write_page(source, tmp_path / "elle.html")
    _local_only(_load(browser, tmp_path / "elle.html"))
    edges = browser.find_elements("css selector", "svg.cycle g.edge")
    assert sorted(e.get_attribute("data-kind") for e in edges) == ["rw", "ww"]
    explained = _texts(browser, "ol.edges li")
    assert [line.split(": ", 1)[1] for line in explained] == [
        e.explanation for e in page.cycles[0].edges
    ]
    assert _texts(browser, "th.lane-head") == ["process 0", "process 1", "process 2"]
    marked = {
        e.get_attribute("data-step")
        for e in browser.find_elements("css selector", "td.step.marked")
    }
    assert marked == {"0", "1"}  # T1 and T3, the cycle's transactions; T5 is not in it
    browser.save_screenshot(str(artifacts / "elle-g-single.png"))


def test_a_matrix_cell_opens_its_witness(browser: Any, tmp_path: Path, artifacts: Path) -> None:
    keep = {"toki", "toki-ewm-nolog", "mem0-1.0.11", "mem0-1.0.11 (real)"}
    with open(ROOT / "verdict_matrix" / "matrix.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["system"] in keep]
    (tmp_path / "witnesses").mkdir()
    for r in rows:
        if r["witness"]:
            shutil.copy(ROOT / "verdict_matrix" / r["witness"], tmp_path / r["witness"])
    shutil.copy(ROOT / "verdict_matrix" / "agreement.csv", tmp_path / "agreement.csv")
    matrix = write_matrix_page(tmp_path, rows, ["a note"])
    _local_only(_load(browser, matrix))
    cells = browser.find_elements("css selector", "td.cell")
    assert len(cells) == len(rows)
    verdicts = [c.get_attribute("data-verdict") for c in cells]
    assert sorted(verdicts) == sorted(r["verdict"] for r in rows)
    for cell in cells:  # colour is never alone: the verdict is written in the cell
        assert cell.text.split("\n")[0].lower() == cell.get_attribute("data-verdict").lower()
    assert any("agrees with model" in t or "DISAGREES" in t for t in _texts(browser, "tr.real td"))
    browser.save_screenshot(str(artifacts / "matrix.png"))
    link = browser.find_element("css selector", "td.cell a[data-witness*='mem0-1.0.11-N2']")
    target = link.get_attribute("href")
    link.click()
    assert browser.current_url == target and target.endswith(".html")
    assert "N2 in mem0-1.0.11" in browser.find_element("id", "title").text
    assert browser.find_elements("css selector", "td.step.marked")
    _local_only(requested_urls(browser))
    browser.find_element("link text", "← verdict matrix").click()
    assert browser.current_url == matrix.resolve().as_uri()


def test_a_500_gate_point_witness_renders_and_expands(
    browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    witness = big_real_witness(tmp_path / "big.json", 500)
    page = write_page(witness, tmp_path / "big.html", replay_real=False)
    assert len(page.rows) == 500
    ms = render_ms(browser, tmp_path / "big.html")
    (artifacts / "render.json").write_text(
        json.dumps({"gate_points": 500, "render_ms": ms}, indent=1) + "\n"
    )
    lanes = _texts(browser, "th.lane-head")
    assert lanes == [  # a crash takes the whole agent: its own lane beside the agent's tasks
        "agent 0 · task 0",
        "agent 0 · task 1",
        "agent 1",
        "agent 1 · task 0",
        "agent 1 · task 1",
    ]
    shown = [r for r in browser.find_elements("css selector", "tbody tr[id]") if r.is_displayed()]
    assert len(shown) == 500  # every point is near an anomaly step here: nothing hidden
    browser.save_screenshot(str(artifacts / "big-witness.png"))


def test_a_big_history_shows_the_neighbourhood_and_expands(browser: Any, tmp_path: Path) -> None:
    """An Elle history of 400 transactions with one G-single: only the cycle's neighbourhood
    shows until "show all" (a checkbox: works without the script too) is ticked."""
    ops = []
    for i in range(400):
        p = i % 4
        value = [["append", 100 + i, 1]]
        ops += [
            {"index": 2 * i, "process": p, "type": "invoke", "value": value},
            {"index": 2 * i + 1, "process": p, "type": "ok", "value": value},
        ]
    g_single = json.loads((ELLE / "list-append-anomaly-g-single-item.json").read_text())
    for op in g_single:
        op["index"] += 800
        op["process"] += 10
    (tmp_path / "big.json").write_text(json.dumps(ops + g_single))
    write_page(tmp_path / "big.json", tmp_path / "big.html")
    _load(browser, tmp_path / "big.html")
    rows = browser.find_elements("css selector", "tbody tr[id]")
    assert len(rows) == 403
    shown = [r for r in rows if r.is_displayed()]
    assert 3 <= len(shown) < 30
    assert browser.find_element("css selector", "tr.gap").is_displayed()
    browser.find_element("id", "expand").click()
    assert all(r.is_displayed() for r in rows)


def test_print_media_drops_the_panel_and_prints_every_step(browser: Any, tmp_path: Path) -> None:
    page = write_page(ELLE / "list-append-anomaly-g-single-item.json", tmp_path / "p.html")
    _load(browser, tmp_path / "p.html")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": "print"})
    try:
        assert not browser.find_element("css selector", "aside#record").is_displayed()
        rows = browser.find_elements("css selector", "tbody tr[id]")
        assert len(rows) == len(page.rows) and all(r.is_displayed() for r in rows)
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"media": ""})


def test_a_page_is_readable_without_javascript(
    browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    """Scripts off (a second browser; `browser` only brings the skip-or-fail rule): the
    records still open (native <details>) and "show all" still expands a folded history
    (a checkbox and CSS)."""
    from benchmarks.bench_show import open_browser

    ops = []
    for i in range(300):
        value = [["append", 100 + i, 1]]
        ops += [
            {"index": 2 * i, "process": i % 3, "type": "invoke", "value": value},
            {"index": 2 * i + 1, "process": i % 3, "type": "ok", "value": value},
        ]
    g_single = json.loads((ELLE / "list-append-anomaly-g-single-item.json").read_text())
    for op in g_single:
        op["index"] += 600
    (tmp_path / "h.json").write_text(json.dumps(ops + g_single))
    write_page(tmp_path / "h.json", tmp_path / "h.html")
    driver = open_browser(javascript=False)
    try:
        driver.get((tmp_path / "h.html").resolve().as_uri())
        assert "js" not in (driver.find_element("tag name", "html").get_attribute("class") or "")
        rows = driver.find_elements("css selector", "tbody tr[id]")
        assert sum(r.is_displayed() for r in rows) < len(rows)
        driver.find_element("css selector", "label[for=expand]").click()
        assert all(r.is_displayed() for r in rows)
        marked = driver.find_element("css selector", "td.step.marked")
        marked.find_element("css selector", "summary").click()
        record = json.loads(marked.find_element("css selector", "details pre").text)
        assert record["status"] == "ok" and record["ops"]
        driver.save_screenshot(str(artifacts / "no-javascript.png"))
    finally:
        driver.quit()
