"""The ablations: determinism, slices, controls, CLI; invented data and (when present) the
real file with a small --limit."""

from __future__ import annotations

import json

import pytest

from toki.locomo import LocomoDataset
from toki.locomo.ablations import (
    ABLATIONS,
    OverwriteMemory,
    ablate_audit_rows,
    ablate_operator,
    ablate_typed_layer,
    apply_holm,
    as_of_questions,
    check_row,
    gold_as_of,
    run_ablations,
)
from toki.locomo.cli import main
from toki.locomo.typed import RuleExtractor, build_typed_memory

REQUIRED = {"ablation", "variant", "category", "n", "score", "ci_low", "ci_high"}


def test_as_of_slices_on_invented_data(invented: LocomoDataset) -> None:
    tm = build_typed_memory(invented.conversations[0], extractor=RuleExtractor(n_words=1))
    qs = as_of_questions(tm)
    sup = [q for q in qs if q.slice == "superseded"]
    # Ada's "work" was stated in sessions 1, 2, 3: sessions 1 and 2 were superseded later
    assert sorted((q.key.fact_key, q.session) for q in sup) == [("work", 1), ("work", 2)]
    assert [q.gold for q in sorted(sup, key=lambda q: q.session)] == [
        "Ada works as a baker in Lyon.",
        "Ada works as a nurse in Paris.",
    ]
    latest = [q for q in qs if q.slice == "control_latest"]
    assert [(q.key.fact_key, q.session) for q in latest] == [("work", 3)]
    assert all(q.slice == "control_single" for q in qs if q.key.fact_key != "work")
    over = OverwriteMemory.from_typed(tm)
    for q in qs:
        toki = tm.memory.resolve_at(q.key, q.at, q.at).value
        assert toki == q.gold
        assert (over.resolve_at(q.key) == q.gold) == (q.slice != "superseded")


def test_ablations_on_invented_data_are_deterministic(invented: LocomoDataset) -> None:
    ds = invented
    a = run_ablations(ds, resamples=300)
    b = run_ablations(ds, resamples=300)
    assert a == b
    assert {r["ablation"] for r in a} == set(ABLATIONS)
    for r in a:
        assert r.keys() >= REQUIRED
        if r["kind"] == "check":
            assert r["ci_low"] is None and r["holds"] and r["score"] == r["expected"] == 1.0
        else:
            assert r["ci_low"] <= r["score"] <= r["ci_high"]


def _check_audit_rows(rows: list[dict[str, object]]) -> None:
    """As-of results true by construction are checks (no interval, no test) and hold."""
    by = {(r["variant"], r["slice"], r["kind"]): r for r in rows}
    for control in ("control_single", "control_latest"):
        if ("dual_row", control, "check") in by:
            d, o = by[("dual_row", control, "check")], by[("overwrite", control, "check")]
            assert d["holds"] and o["holds"] and d["n"] == o["n"]
    assert by[("dual_row", "superseded", "check")]["holds"]
    assert not [r for r in rows if r["kind"] == "comparison" and r["slice"] != "qa_superseded"]


def test_superseded_slice_only_holds_superseded_evidence(real_dataset: LocomoDataset) -> None:
    for conv in real_dataset.conversations[:2]:
        tm = build_typed_memory(conv)
        qs = as_of_questions(tm)
        assert any(q.slice == "superseded" for q in qs)
        for q in qs:
            versions = [f for f in tm.facts if f.key == q.key]
            later = [f for f in versions if f.session > q.session]
            stated_then = [f for f in versions if f.session == q.session]
            assert stated_then, "every as-of question asks about a session that stated the key"
            if q.slice == "superseded":
                assert any(f.claim.text != q.gold for f in later)
            else:
                assert not any(f.claim.text != q.gold for f in later)
            assert gold_as_of(tm, q.key, q.at) == q.gold


@pytest.mark.parametrize("name", ABLATIONS)
def test_each_ablation_small_subset_is_deterministic(
    real_dataset: LocomoDataset, name: str
) -> None:
    fn = {
        "typed_layer": ablate_typed_layer,
        "audit_rows": ablate_audit_rows,
        "operator": ablate_operator,
    }[name]
    a = fn(real_dataset, limit=1, resamples=300)
    b = fn(real_dataset, limit=1, resamples=300)
    assert a == b
    assert a and all(r.keys() >= REQUIRED for r in a)
    variants = {r["variant"] for r in a if r["kind"] == "score"}
    expected = {
        "typed_layer": {"typed", "flat"},
        "audit_rows": {"dual_row", "overwrite"},
        "operator": {"LWW", "EWM", "AWAIT", "RULE"},
    }[name]
    assert variants == expected
    if name == "typed_layer":
        cats = {r["category"] for r in a}
        assert "all" in cats and cats <= {1, 2, 3, 4, "all"}
        n_all = next(r["n"] for r in a if r["category"] == "all" and r["kind"] == "score")
        conv = real_dataset.conversations[0]
        assert n_all == sum(1 for q in conv.qa if int(q.category) <= 4)
    if name == "audit_rows":
        _check_audit_rows(a)
        sup = next(r for r in a if r["slice"] == "superseded" and r["variant"] == "overwrite")
        assert sup["score"] == 0.0  # overwrite serves the later value: never the old belief
    if name == "operator":
        # on keys stated once no operator has anything to decide: checks, all hold
        single = [r for r in a if r["slice"] == "control_single"]
        assert len(single) == 4 and all(r["kind"] == "check" and r["holds"] for r in single)
        # the as-of gold follows recency, LWW's rule: LWW's rows are checks, never tested
        lww = [r for r in a if r["variant"] == "LWW" and r["slice"] != "answerable"]
        assert lww and all(r["kind"] == "check" for r in lww)
        assert not [r for r in a if r["kind"] == "comparison" and r["slice"] != "answerable"]


def test_cli_ablate_json_limit(
    real_dataset: LocomoDataset, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["ablate", "--json", "--limit", "1", "--ablation", "audit_rows", "--resamples", "200"])
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert {r["ablation"] for r in rows} == {"audit_rows"}
    assert all(r.keys() >= REQUIRED for r in rows)
    cmp = [r for r in rows if r["kind"] == "comparison"]
    assert cmp and all(
        {"mcnemar_p", "power_mcnemar", "baseline", "holm_p"} <= r.keys() for r in cmp
    )
    _check_audit_rows(rows)


def test_holm_is_applied_to_the_family_of_comparisons(invented: LocomoDataset) -> None:
    rows = run_ablations(invented, resamples=200)
    cmp = [r for r in rows if r["kind"] == "comparison"]
    assert cmp and all(r["family_size"] == len(cmp) for r in cmp)
    assert all(r["mcnemar_p"] <= r["holm_p"] <= 1.0 for r in cmp)
    assert not any("mcnemar_p" in r or "holm_p" in r for r in rows if r["kind"] != "comparison")


def test_apply_holm_matches_the_step_down_rule() -> None:
    rows = [{"kind": "comparison", "mcnemar_p": p} for p in (0.04, 0.01, 0.03)]
    rows.append({"kind": "check", "score": 1.0})
    out = apply_holm(rows)
    # sorted 0.01, 0.03, 0.04 -> 3*0.01, max(.03, 2*0.03), max(.06, 1*0.04)
    assert [r.get("holm_p") for r in out] == pytest.approx([0.06, 0.03, 0.06, None])
    assert out[3] == rows[3] and "holm_p" not in rows[0]  # input untouched


def test_a_failing_check_says_so() -> None:
    row = check_row("audit_rows", "dual_row", "superseded", [1.0, 0.0], 1.0, "why")
    assert row["score"] == 0.5 and row["holds"] is False and row["ci_low"] is None


def test_the_committed_ablations_test_at_the_conversation_level() -> None:
    """paper/data/locomo_ablations.json: every comparison has its conversation-level interval
    and permutation p, which cannot go below 2 / 2^k with k conversations (a question-level
    p can), and Holm adjusts the conversation-level p."""
    from pathlib import Path

    from toki.experiments.stats import holm

    path = Path(__file__).resolve().parents[2] / "paper" / "data" / "locomo_ablations.json"
    rows = [r for r in json.loads(path.read_text()) if r.get("kind") == "comparison"]
    assert rows
    for r in rows:
        k = r["conversations"]
        assert 2 <= k <= 10 and r["conv_p"] >= 2 / 2**k - 1e-12
        assert r["conv_ci_low"] <= r["score"] <= r["conv_ci_high"]
    assert [r["holm_p"] for r in rows] == pytest.approx(holm([r["conv_p"] for r in rows]))
    assert min(r["mcnemar_p"] for r in rows) < min(r["conv_p"] for r in rows)
