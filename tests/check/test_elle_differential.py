"""toki against Elle's published verdicts (tests/check/elle_data): the same valid? and the same
models ruled out on every case; the anomaly types differ only where documented; and the table
in docs/anomalies.md is what the harness generates."""

from __future__ import annotations

import pytest

from tests.check.elle_differential import DOC, Outcome, render_doc, run_cases

OUTCOMES = run_cases()

# Where toki names more than Elle, by design (docs/anomalies.md, "Where toki and Elle differ"):
# two transactions linked by rw *and* realtime edges let toki name the realtime cycle that
# Elle's one-relation-per-step explanation rejects (Elle proves it with a cycle-exists
# anomaly, or not at all when another anomaly already rules its model out); and G0-realtime
# implies G1c-realtime, so the latter is not searched once the former is found.
NAMES_MORE = {
    "la-G-nonadjacent",
    "la-lost-update",
    "elle-cli/list-append-anomaly-g2-item",
    "elle-cli/list-append-anomaly-incompatible-order",
    "elle-cli/list-append-anomaly-lost-update",
    "elle-cli/rw-register-anomaly-g2-item",
}


@pytest.mark.parametrize("o", OUTCOMES, ids=lambda o: o.name)
def test_same_verdict_and_models_ruled_out(o: Outcome) -> None:
    assert o.agrees("valid?"), (o.expected, o.got)
    assert o.agrees("not") in (True, None), (o.expected, o.got)
    assert o.agrees("also-not") in (True, None), (o.expected, o.got)


def test_anomaly_types_differ_only_where_documented() -> None:
    differ = {o.name for o in OUTCOMES if o.agrees("anomaly-types") is False}
    assert differ == NAMES_MORE
    for o in OUTCOMES:
        if o.name in NAMES_MORE:  # what Elle names, toki names too (or proves more)
            want = {t for t in o.expected["anomaly-types"] if not t.endswith("-cycle-exists")}
            have = set(o.got["anomaly-types"])
            assert want - have <= {"G1c-realtime"}, o.name


def test_the_cases_cover_both_workloads_and_both_sources() -> None:
    names = [o.name for o in OUTCOMES]
    assert sum(n.startswith("elle-cli/") for n in names) == 19
    assert sum(n.startswith(("la-", "rw-")) for n in names) == 48
    assert any("rw-register" in n for n in names) and any("list-append" in n for n in names)


def test_doc_table_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert render_doc(text, OUTCOMES) == text, "run: python -m tests.check.elle_differential"
