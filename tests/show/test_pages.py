"""`toki show` without a browser: every kind of file toki writes becomes a page whose rows,
lanes, marks and cycles come from the checker's own results, whose explanation is the text
the matching command prints, and whose HTML is self-contained and escapes what it shows."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.cli import main
from toki.show import Page, Row, load_page, render_page, write_page
from toki.show.html import MAX_DRAWN, NEIGHBOURHOOD, SHOW_ALL_BELOW

ROOT = Path(__file__).resolve().parents[2]
WITNESSES = ROOT / "verdict_matrix" / "witnesses"
ELLE = ROOT / "tests" / "check" / "elle_data" / "elle-cli"


def test_a_model_witness_page_is_the_replay(capsys: pytest.CaptureFixture[str]) -> None:
    """One row per scheduler choice, a crash row per crash choice, and the explanation is
    exactly what `toki replay` prints."""
    source = WITNESSES / "mem0-1.0.11-N2-crash.json"
    page = load_page(source)
    schedule = json.loads(source.read_text())["schedule"]
    assert len(page.rows) == len(schedule) and page.lanes == ("agent 0", "agent 1")
    crashes = [r for r in page.rows if r.kind == "crash"]
    assert [r.index for r in crashes] == [
        i for i, c in enumerate(schedule) if str(c).startswith("crash:")
    ]
    assert main(["replay", str(source)]) == 0
    assert list(page.explanation) == capsys.readouterr().out.splitlines()
    marked = [r for r in page.rows if r.mark]
    assert any("decision" in r.mark for r in marked) and any("read" in r.mark for r in marked)
    assert all(s.outcome in ("committed", "aborted", "open") for s in page.spans)
    assert {s.level for s in page.spans} == {"read_committed"}
    # N2: the closest serial state, and how the observed one differs from it
    facts = dict(page.facts)
    assert "alice:manager=Bob" in facts["closest serial order"]
    assert json.loads(facts["observed vs serial"])["alice:manager"]["live"] == {
        "observed": ["Bob", "Carol"],
        "serial": json.loads(facts["its beliefs"])["alice:manager"]["live"],
    }
    # each step's record: its footprint (what DPOR knew it may touch) and its operations
    assert all(r.record["footprint"]["kind"] for r in page.rows)
    written = [
        op for r in page.rows for op in r.record.get("operations", ()) if op["kind"] == "write"
    ]
    assert written and all("value" in op and "version" in op for op in written)


def test_an_elle_page_draws_the_checkers_cycles(capsys: pytest.CaptureFixture[str]) -> None:
    source = ELLE / "list-append-anomaly-g-single-item.json"
    page = load_page(source)
    assert main(["check", str(source), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (anomaly,) = report["anomalies"]["G-single-item"]
    (cycle,) = page.cycles
    assert [(e.kind, e.explanation) for e in cycle.edges] == [
        (e["type"], e["explanation"]) for e in anomaly["cycle"]
    ]
    assert {r.txn for r in page.rows if r.mark} == {f"T{t}" for t in anomaly["txns"]}
    assert page.verdict.startswith("valid? false")


def test_an_explored_history_gets_its_agents_back(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    argv = ["explore", "--system", "mem0-1.0.11", "--workload", "manager", "--check", "--quiet"]
    assert main([*argv, "--history-out", str(path)]) == 1
    page = load_page(path)
    assert page.kind == "toki history" and page.lanes == ("agent 0", "agent 1")
    assert "valid? false" in page.explanation[-1] and "N2" in page.title
    assert any(r.mark for r in page.rows)
    assert {s.outcome for s in page.spans} <= {"committed", "aborted", "open"}


def test_a_history_without_a_model_uses_its_transactions_as_lanes(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    lines = [
        {"format": "toki-history", "version": 1},
        {"type": "op", "txn": 1, "kind": "begin", "at": 1},
        {"type": "op", "txn": 2, "kind": "begin", "at": 2},
        {"type": "op", "txn": 1, "kind": "write", "key": "x", "value": 1, "at": 3},
        {"type": "op", "txn": 2, "kind": "abort", "at": 4},
        {"type": "op", "txn": 1, "kind": "commit", "at": 5},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    page = load_page(path)
    assert page.lanes == ("T1", "T2")
    assert {(s.txn, s.outcome) for s in page.spans} == {("T1", "committed"), ("T2", "aborted")}


def test_a_real_witness_is_drawn_from_its_story_without_the_library() -> None:
    source = WITNESSES / "mem0-2.2.1-real-RD-crash.json"
    data = json.loads(source.read_text())
    page = load_page(source, replay_real=False)
    gate_lines = [s for s in data["steps"] if re.match(r"^\s*\d+ agent \d", s)]
    assert len(page.rows) == len(gate_lines) and page.explanation == tuple(data["steps"])
    assert [r.text for r in page.rows if r.kind == "crash"] == [
        "agent 1 CRASHES, parked before messages.get",
        "agent 0 CRASHES, parked before history.batch_add",
    ]
    assert page.verdict == "as saved (not re-run)" and page.notes


def test_a_real_witness_with_a_missing_environment_says_it_was_not_rerun(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TOKI_REAL_CACHE", str(tmp_path))  # no environment exists there
    page = load_page(WITNESSES / "mem0-2.2.1-real-N2.json")
    assert (
        page.notes
        and page.notes[0].startswith("not re-run:")
        and "toki real setup" in (page.notes[0])
    )
    assert page.rows and all(r.record.get("story") for r in page.rows)


@pytest.mark.real
def test_a_real_witness_rerun_on_the_real_code_has_each_gate_points_record(
    tmp_path: Path,
) -> None:
    """toki-memory runs in toki's own interpreter: its first DPOR schedule as a witness is
    re-run gate point by gate point (toki admits no N2, so it does not reproduce)."""
    from tests.real.conftest import require
    from toki.real import get_real_system, open_session
    from toki.real.driver import real_runs
    from toki.real.witness import RealWitness
    from toki.sim.dpor import DPOR
    from toki.sim.workload import scenario
    from toki.systems.base import SimJudge

    require("toki-memory")
    system, workload = get_real_system("toki-memory"), scenario("manager")
    with open_session(system) as session:
        first = next(
            real_runs(system, session, workload, DPOR(), SimJudge(), SimJudge(0.5, 1), budget=1)
        )
    witness = RealWitness(
        "toki-memory", "", "N2", workload, first.schedule, {"kind": "sim"}, {"kind": "sim"}
    )
    page = load_page(witness.save(tmp_path / "w.json"))
    assert page.verdict == "re-run on the real code: NOT reproduced"
    assert len(page.rows) == len(first.trace) and page.lanes == ("agent 0", "agent 1")
    records = [{k: v for k, v in r.record.items() if k != "reply, parsed"} for r in page.rows]
    assert records == [json.loads(json.dumps(t)) for t in first.trace]
    for r in page.rows:
        if "reply, parsed" in r.record:
            assert r.record["reply, parsed"] == json.loads(r.record["reply"])
    assert page.spans and {s.txn for s in page.spans} == {"claim 0"}


# ---------------------------------------------------------------- the HTML


def _rows(n: int, marked: set[int]) -> Page:
    rows = tuple(
        Row(i, f"agent {i % 2}", f"step {i}", "write", mark="why" if i in marked else "")
        for i in range(n)
    )
    return Page("t", "src", "model witness", "v", (), ("x",), rows, ("agent 0", "agent 1"))


def test_a_big_page_first_shows_the_anomalys_neighbourhood() -> None:
    n = SHOW_ALL_BELOW + 250
    html = render_page(_rows(n, {200}))
    far = re.findall(r'<tr id="s\d+" class="far">', html)
    assert len(far) == n - (2 * NEIGHBOURHOOD + 1)
    assert html.count('<tr class="gap">') == 2 and 'id="expand"' in html
    small = render_page(_rows(SHOW_ALL_BELOW, {3}))
    assert 'class="far"' not in small and 'id="expand"' not in small
    assert 'class="far"' not in render_page(_rows(n, set()))  # nothing marked: all shown
    huge = render_page(_rows(MAX_DRAWN + 1, {10}))
    assert huge.count("<tr id=") == 2 * NEIGHBOURHOOD + 1 and 'id="expand"' not in huge
    assert "not drawn (a page draws at most" in huge


def test_a_page_fetches_nothing() -> None:
    for source in (
        WITNESSES / "toki-ewm-nolog-N1.json",
        ELLE / "list-append-anomaly-g0-cycle.json",
    ):
        html = render_page(load_page(source))
        assert not re.search(r"""(?:src|href)\s*=\s*["']?(?!#)""", html), source
        assert "<link" not in html and "@import" not in html and "url(http" not in html
        assert "http://" not in html.replace("http://www.w3.org/", "") and "https://" not in html


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.in_summary = 0
        self.summaries: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "summary":
            self.in_summary += 1
            self.summaries.append("")
        self.scripts += tag == "script"

    def handle_endtag(self, tag: str) -> None:
        self.in_summary -= tag == "summary"

    def handle_data(self, data: str) -> None:
        if self.in_summary:
            self.summaries[-1] += data


@settings(max_examples=60, database=None)
@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=5))
def test_what_a_page_shows_is_escaped(texts: list[str]) -> None:
    """Any text in a step (a value a library stored, say) comes back as the same text, and
    never as markup: the page has exactly its own one script."""
    rows = tuple(Row(i, "agent 0", t, "step", record={"v": t}) for i, t in enumerate(texts))
    html = render_page(
        Page(texts[0], "s", "k", "v", (("k", texts[0]),), tuple(texts), rows, ("agent 0",))
    )
    parser = _Text()
    parser.feed(html)
    assert parser.scripts == 1
    got = [s.replace("\r\n", "\n").replace("\r", "\n") for s in parser.summaries]
    assert got == [t.replace("\r\n", "\n").replace("\r", "\n") for t in texts]


# ---------------------------------------------------------------- the command


def test_toki_show_writes_one_page_for_each_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "run.jsonl"
    main(
        [
            "explore",
            "--system",
            "langgraph-store",
            "--workload",
            "manager",
            "--check",
            "--quiet",
            "--history-out",
            str(history),
        ]
    )
    capsys.readouterr()
    sources = {
        "model witness": WITNESSES / "langgraph-store-N3.json",
        "real witness": WITNESSES / "mem0-1.0.11-real-N2.json",
        "Elle history": ELLE / "list-append-anomaly-g1c-circular-information-flow.json",
        "toki history": history,
    }
    for kind, source in sources.items():
        out = tmp_path / f"{source.stem}.html"
        argv = ["show", str(source), "--out", str(out), "--json"]
        assert main([*argv, *(["--no-replay"] if kind == "real witness" else [])]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["kind"] == kind and data["out"] == str(out) and data["marked"] > 0
        assert out.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [history.name, *(f"{s.stem}.html" for s in sources.values())]
    )


def test_toki_show_without_out_writes_a_fresh_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["show", str(WITNESSES / "langgraph-store-N3.json")]) == 0
    (folder,) = (tmp_path / "toki-out").iterdir()
    assert folder.name.startswith("show-") and (folder / "langgraph-store-N3.html").is_file()
    assert "wrote toki-out/" in capsys.readouterr().out


def test_write_page_returns_what_it_drew(tmp_path: Path) -> None:
    page = write_page(WITNESSES / "langgraph-store-N3.json", tmp_path / "p.html")
    html = (tmp_path / "p.html").read_text()
    assert html.count('class="lane step') == len(page.rows)
    assert html.count("&#9650; anomaly:") == sum(1 for r in page.rows if r.mark) + 1  # + legend


def test_a_relay_witness_marks_the_lost_row_and_the_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = ["relay", "--rows", "2", "--levels", "rc", "--no-writer", "--on-failure", "skip"]
    assert main([*planted, "--out", str(tmp_path), "--quiet"]) == 0
    capsys.readouterr()
    source = tmp_path / "relay-read_committed.json"
    page = load_page(source)
    assert main(["replay", str(source)]) == 0
    assert list(page.explanation) == capsys.readouterr().out.splitlines()
    lost = json.loads(source.read_text())["details"]["lost_rows"]
    assert lost and page.lanes[-1] == "faults"
    read_lost = [r for r in page.rows if r.mark == "a row that is lost" and r.kind == "read"]
    assert {op["key"][-1] for r in read_lost for op in r.record["operations"]} == set(lost)
    assert all(r.mark for r in page.rows if r.kind in ("fault", "abort", "crash"))


def test_the_matrix_page_shows_each_cells_numbers_and_method() -> None:
    from toki.show.matrix_page import render_matrix

    def row(system: str, anomaly: str, verdict: str, **kw: object) -> dict[str, object]:
        base = {"system": system, "kind": "model", "version": "v", "faults": "none"}
        base.update(anomaly=anomaly, verdict=verdict, rate=float("nan"), ci_low=float("nan"))
        base.update(ci_high=float("nan"), mode="exhaustive", runs=100, draws=8, witness="")
        base.update(
            reason="no anomaly; DPOR exhaustive on manager, conflicts; sampled "
            "(random + PCT) on big; no faults; 8 judge draws"
        )
        base.update(kw)
        return base

    rows = [
        row("m", "N2", "admits", rate=0.25, ci_low=0.2, ci_high=0.3, witness="witnesses/m-N2.json"),
        row("m", "N3", "not found", ci_high=0.03, mode="sampled"),
        row("m (real)", "N2", "admits", kind="real", rate=0.5, ci_low=0.4, ci_high=0.6),
        row("m (real)", "N3", "excludes", kind="real", mode="check", rate=float("nan")),
    ]
    agree = {
        ("m (real)", "none", "N2"): {"agree": "yes", "model": "m"},
        ("m (real)", "none", "N3"): {
            "agree": "no",
            "model": "m",
            "model_verdict": "not found",
            "resolution": "The model is coarser. Details follow.",
        },
    }
    html = render_matrix(rows, ["a note"], {"witnesses/m-N2.json": "witnesses/m-N2.html"}, agree)
    cells = re.findall(r'<td class="cell ([^"]+)" data-verdict="([^"]+)"', html)
    assert [v for _, v in cells] == ["admits", "not found", "admits", "excludes"]
    assert "rate 0.250 [0.200, 0.300]" in html and "rate &lt; 0.030" in html
    assert "exhaustive on 2 of 3 workload(s)" in html and "n=100" in html
    assert 'href="witnesses/m-N2.html"' in html and "witness page" in html
    assert "agrees with model m" in html
    assert "DISAGREES with model m (not found): The model is coarser. …" in html
    assert html.count('<tr class="real"') == 1 and "a note" in html
    assert "<script" not in html  # the matrix page needs no script at all


def test_toki_matrix_writes_matrix_html_and_the_witness_pages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's part (the run itself is tests/experiments'): after the run, matrix.html
    and a page beside each witness, listed among the files written."""
    import csv
    import shutil

    import toki.experiments.matrix as matrix

    with open(ROOT / "verdict_matrix" / "matrix.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["system"] in ("toki", "langgraph-store")]

    def run(*_: object, out: Path, **__: object) -> matrix.MatrixResult:
        (out / "witnesses").mkdir(parents=True, exist_ok=True)
        for r in rows:
            if r["witness"]:
                shutil.copy(ROOT / "verdict_matrix" / r["witness"], out / r["witness"])
        numbers = ("rate", "ci_low", "ci_high", "draw_min", "draw_max", "power")
        typed = [{**r, **{k: float(r[k] or "nan") for k in numbers}, "reason": ""} for r in rows]
        return matrix.MatrixResult(typed, [], 1.0)

    monkeypatch.setattr(matrix, "run_matrix", run)
    assert main(["matrix", "--out", str(tmp_path), "--quiet"]) == 0
    assert str(tmp_path / "matrix.html") in capsys.readouterr().out
    witnesses = sorted(p.stem for p in (tmp_path / "witnesses").glob("*.json"))
    assert witnesses and sorted(p.stem for p in (tmp_path / "witnesses").glob("*.html")) == (
        witnesses
    )
    html = (tmp_path / "matrix.html").read_text()
    assert all(f'href="witnesses/{w}.html"' in html for w in witnesses)


def test_a_crash_ends_its_agents_open_transaction_as_aborted() -> None:
    """zep's N1 witness: agent 1 crashes inside T3, which the page ends there, rolled back;
    every other transaction ends at its own commit or abort row."""
    page = load_page(WITNESSES / "zep-N1-crash.json")
    crash = {r.index: r.lane for r in page.rows if r.kind == "crash"}
    ended_by_crash = [s for s in page.spans if crash.get(s.last) == s.lane]
    assert [(s.txn, s.outcome) for s in ended_by_crash] == [("T3", "aborted")]
    by_index = {r.index: r for r in page.rows}
    for s in page.spans:
        if s not in ended_by_crash and s.outcome != "open":
            assert by_index[s.last].kind == {"committed": "commit", "aborted": "abort"}[s.outcome]


def test_a_steps_record_has_the_judges_answer_and_theta() -> None:
    """toki-ewm-nolog's N1: the live judge's answer appears in the record of the step that
    asked, with θ; it is the answer that judge gives that question."""
    from toki.systems.base import SimJudge

    source = WITNESSES / "toki-ewm-nolog-N1.json"
    data = json.loads(source.read_text())
    page = load_page(source)
    asked = [j for r in page.rows for j in r.record.get("judge", ())]
    assert asked
    for j in asked:
        assert j["θ"] == {"p": data["judge_p"], "seed": data["judge_seed"]}
        judge = SimJudge(data["judge_p"], data["judge_seed"])
        assert j["answer"] == judge.pick(j["question"], j["candidates"])


def test_a_witness_that_cannot_be_drawn_keeps_its_json_link(tmp_path: Path) -> None:
    from toki.show.matrix_page import write_matrix_page

    (tmp_path / "witnesses").mkdir()
    data = json.loads((WITNESSES / "langgraph-store-N3.json").read_text())
    (tmp_path / "witnesses" / "x-N3.json").write_text(json.dumps({**data, "system": "nosuch"}))
    row = {"system": "x", "kind": "model", "version": "", "faults": "none", "anomaly": "N3"}
    row.update(verdict="admits", rate=0.5, ci_low=0.4, ci_high=0.6, mode="exhaustive")
    row.update(runs=10, draws=2, witness="witnesses/x-N3.json", reason="")
    html = write_matrix_page(tmp_path, [row]).read_text()
    assert 'href="witnesses/x-N3.json"' in html and "witness (JSON)" in html
    assert "no page for witnesses/x-N3.json" in html
    assert not (tmp_path / "witnesses" / "x-N3.html").exists()
