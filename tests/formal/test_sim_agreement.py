"""z3 and the simulator agree, schedule for schedule (`toki.formal.simulate`,
`proofs/agreement.py`).

Every counterexample z3 finds for a false variant is replayed in the simulator event for
event: each read must see what z3 says, each write must do what z3 says, the commits and
aborts must happen, and the simulator's own N1–N3 must be z3's. Conversely, for each proved
statement DPOR explores the same kind of transactions to completion (`finished` asserted) and
finds none of the anomalies it excludes; DPOR one level lower finds them (so it can fail).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from proofs import agreement
from proofs.run import run_all
from toki.formal.simulate import ReplayError, Spec, explore, replay
from toki.isolation import Isolation

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = [
    r
    for r in run_all()
    if r.false_variant_of is not None and r.scenario is not None and "schedule" in r.scenario
]


def _agree(name: str, scenario: dict[str, Any]) -> dict[str, Any]:
    (row,) = agreement.replays([(name, scenario)])
    return row


def test_every_isolation_and_schema_variant_is_replayed() -> None:
    names = {r.name for r in VARIANTS}
    assert len(names) >= 9
    assert {
        "isolation_ewm@snapshot",
        "isolation_rule@snapshot",
        "schema_soundness@no_audit_write",
    } <= names


@pytest.mark.parametrize("result", VARIANTS, ids=[r.name for r in VARIANTS])
def test_z3_counterexample_replays_schedule_for_schedule(result: Any) -> None:
    row = _agree(result.name, result.scenario)
    assert row["agree"], row
    assert any(row["z3"].values())


@pytest.mark.slow
def test_one_counterexample_per_anomaly_replays() -> None:
    scenarios = agreement.targeted_counterexamples(VARIANTS)
    assert len(scenarios) > len(VARIANTS)
    rows = agreement.replays(scenarios)
    bad = [r for r in rows if not r["agree"]]
    assert not bad, bad


def test_a_doctored_counterexample_is_caught() -> None:
    """The comparison can fail: a changed anomaly flag, a changed read, or a commit where z3
    aborted each make the replay disagree or refuse."""
    base = next(r for r in VARIANTS if r.name == "isolation_ewm@snapshot").scenario
    flipped = copy.deepcopy(base)
    flipped["anomalies"]["N2"] = not flipped["anomalies"]["N2"]
    assert not _agree("flipped", flipped)["agree"]
    misread = copy.deepcopy(base)
    read = next(s for s in misread["schedule"] if s["op"] == "read" and s["head"] is not None)
    read["head"] = None
    assert not _agree("misread", misread)["agree"]
    seen = copy.deepcopy(base)  # the head the conditional update saw is compared too
    write = next(s for s in seen["schedule"] if s["op"] == "write" and s["update"])
    write["head_seen"] = "T9"
    assert not _agree("head_seen", seen)["agree"]
    sc = next(r for r in VARIANTS if r.name == "isolation_lww@read_uncommitted").scenario
    forced = copy.deepcopy(sc)
    for step in forced["schedule"]:
        if step["op"] == "abort":
            step["op"] = "commit"
    assert not _agree("forced", forced)["agree"]


def test_a_schedule_that_would_block_is_refused() -> None:
    """Two LWW claims at RC whose head updates both match: the second may not write while
    the first holds the head's lock; a schedule putting it there is not executable."""

    def claim(i: int) -> dict[str, Any]:
        return {
            "txn": f"T{i}",
            "id": i,
            "value": i,
            "weight": 1,
            "weight_q": [1, 1],
            "recorded_at": i,
            "source": 0,
            "valid": [0, 1],
        }

    events = [
        ("T0", "begin"),
        ("T0", "read"),
        ("T0", "write"),
        ("T1", "begin"),
        ("T1", "read"),
        ("T1", "write"),
        ("T0", "commit"),
        ("T1", "commit"),
    ]
    scenario = {
        "operator": "LWW",
        "level": "read_committed",
        "values": 2,
        "claims": [claim(0), claim(1)],
        "schedule": [{"t": t, "txn": x, "op": op} for t, (x, op) in enumerate(events)],
    }
    with pytest.raises(ReplayError, match="T1 would block at write"):
        replay(scenario)
    # the same claims with T1's write after T0's commit replay fine
    events[5], events[6] = events[6], events[5]
    scenario["schedule"] = [{"t": t, "txn": x, "op": op} for t, (x, op) in enumerate(events)]
    assert replay(scenario).belief == {"current": [1]}


FAST = [
    p
    for p in agreement.PROVED
    if not (p.operator == "RULE" and p.level is Isolation.READ_UNCOMMITTED)
]


@pytest.mark.parametrize("p", FAST, ids=lambda p: f"{p.name}-{p.operator}")
def test_dpor_finishes_and_finds_nothing_where_z3_proved(p: Any) -> None:
    for spec in agreement.workloads(p):
        runs, finished, bad = explore(spec, anomalies_of=p.anomalies)
        assert finished and runs > 1, (p, runs)
        assert not bad, (p, spec, bad[0].schedule)


@pytest.mark.slow
def test_dpor_schema_soundness_rule_at_read_uncommitted() -> None:
    (p,) = [q for q in agreement.PROVED if q not in FAST]
    for spec in agreement.workloads(p):
        _, finished, bad = explore(spec, anomalies_of=p.anomalies)
        assert finished and not bad


@pytest.mark.parametrize(
    ("op", "level", "k"),
    [
        pytest.param("EWM", Isolation.SNAPSHOT, 3, marks=pytest.mark.slow),
        ("LWW", Isolation.READ_UNCOMMITTED, 2),
        ("AWAIT", Isolation.READ_UNCOMMITTED, 2),
        ("RULE", Isolation.SNAPSHOT, 2),
    ],
)
def test_dpor_one_level_lower_finds_the_anomaly(op: str, level: Isolation, k: int) -> None:
    p = agreement.Proved("below", op, level, k)
    found = 0
    for spec in agreement.workloads(p):
        _, finished, bad = explore(spec)
        assert finished
        found += len(bad)
    assert found > 0


def test_docs_show_the_generated_agreement_counts() -> None:
    data = json.loads((ROOT / "proofs" / "agreement.json").read_text())
    text = (ROOT / "docs" / "proofs.md").read_text()
    assert agreement.render(data) in text
    s = data["summary"]
    assert s["counterexamples_agreeing"] == s["counterexamples_replayed"] > 0
    assert s["proved_checks_clean"] == s["proved_checks"] > 0


def _committed_run(seconds: float) -> dict[str, Any]:
    """What `agreement.run()` returns, rebuilt from the committed files, every wall-clock
    field set to `seconds`."""
    data = json.loads((ROOT / "proofs" / "agreement.json").read_text())
    rows = [
        json.loads(line)
        for line in (ROOT / "proofs" / "agreement_workloads.jsonl").read_text().splitlines()
    ]
    data["two_way"]["rows"] = [{**r, "seconds": seconds} for r in rows]
    data["dpor"] = [{**d, "seconds": seconds} for d in data["dpor"]]
    data["summary"]["seconds"] = seconds
    return data


def test_a_rerun_leaves_the_tracked_results_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m proofs.agreement --out proofs --docs docs/proofs.md` (a documented command)
    must not change tracked files when only the timings changed: the seconds go to the
    untracked agreement.timings.json. The committed files hold none."""
    doc = tmp_path / "proofs.md"
    doc.write_text((ROOT / "docs" / "proofs.md").read_text())
    tracked = ("agreement.json", "agreement_workloads.jsonl")
    for seconds in (1.5, 99.25):
        monkeypatch.setattr(agreement, "run", lambda s=seconds: _committed_run(s))
        assert agreement.main(["--out", str(tmp_path), "--docs", str(doc)]) == 0
        for name in tracked:
            assert (tmp_path / name).read_bytes() == (ROOT / "proofs" / name).read_bytes(), name
        assert doc.read_text() == (ROOT / "docs" / "proofs.md").read_text()
        timings = json.loads((tmp_path / agreement.TIMINGS).read_text())
        assert timings["seconds"] == seconds and {d["seconds"] for d in timings["dpor"]} == {
            seconds
        }
        assert len(timings["two_way"]) == len(agreement.pinned_workloads())
        assert f"total {seconds} s" in capsys.readouterr().out
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    assert "*.timings.json" in ignored
    for name in tracked:
        assert '"seconds"' not in (ROOT / "proofs" / name).read_text(), name


def test_spec_of_a_scenario_keeps_claims_and_ends() -> None:
    sc = VARIANTS[0].scenario
    spec = Spec.of(sc)
    assert [t.name for t in spec.txns][: len(sc["claims"])] == [c["txn"] for c in sc["claims"]]
    ends = {s["txn"]: s["op"] == "commit" for s in sc["schedule"] if s["op"] in ("commit", "abort")}
    assert {t.name: t.commit for t in spec.txns} == ends


# -- two-way agreement on pinned workloads -----------------------------------------------

SAMPLE = [
    agreement.pinned_workload(op, level, 2, False, ends, 0)
    for op, level, ends in (
        ("LWW", Isolation.READ_UNCOMMITTED, "last aborts"),
        ("AWAIT", Isolation.READ_UNCOMMITTED, "all commit"),
        ("EWM", Isolation.READ_COMMITTED, "all commit"),
        ("EWM", Isolation.SERIALIZABLE, "all commit"),
        ("RULE", Isolation.SNAPSHOT, "first aborts"),
    )
] + [agreement.pinned_workload("RULE", Isolation.READ_COMMITTED, 2, True, "all commit", 0)]


@pytest.mark.parametrize("spec", SAMPLE, ids=lambda s: f"{s.operator}-{s.level.value}")
def test_two_way_agreement_on_a_pinned_workload(spec: Any) -> None:
    from toki.formal.twoway import compare

    row = compare(spec)
    assert row["agree"], row
    assert row["finished"] and row["z3"] == row["sim"] and not row["mismatches"]


def test_two_way_agreement_can_fail(monkeypatch: Any) -> None:
    """An encoding whose RC update sees the head as of the read (no re-check) disagrees
    with the simulator on a pinned workload."""
    from toki.formal.encoding import History
    from toki.formal.twoway import compare

    def stale(self: History, j: int, i: int) -> Any:
        import z3

        return z3.And(self.com(j), self.end(j) < self.read(i))

    monkeypatch.setattr(History, "_locked_view", stale)
    spec = agreement.pinned_workload("LWW", Isolation.READ_COMMITTED, 2, False, "all commit", 0)
    assert not compare(spec)["agree"]


def test_the_pinned_workloads_are_at_least_500() -> None:
    specs = agreement.pinned_workloads()
    assert len(specs) >= 500
    assert {s.level for s in specs} == set(agreement.LEVELS)
    data = json.loads((ROOT / "proofs" / "agreement.json").read_text())
    t = data["two_way"]["summary"]
    assert t["workloads"] == len(specs) and t["disagreements"] == 0
    rows = (ROOT / "proofs" / "agreement_workloads.jsonl").read_text().splitlines()
    assert len(rows) == len(specs) and all(json.loads(r)["agree"] for r in rows)
