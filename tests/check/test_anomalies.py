"""N1/N2/N3 on TOKI's own model: none at the operators' preconditions, found below them."""

from __future__ import annotations

import pytest

from toki.check.anomalies import check_run, committed_snapshots
from toki.isolation import Isolation
from toki.sim import DPOR, iter_runs
from toki.sim.workload import SCENARIOS, SimClaim, Workload, scenario, synthetic
from toki.systems.base import SimJudge, build_program
from toki.systems.toki_model import TokiModel

JUDGE, RECOVERY = SimJudge(0.5, 1), SimJudge(0.5, 99)


def _counts(
    model: TokiModel, workload: Workload, level: Isolation, budget: int = 200
) -> dict[str, int]:
    counts = {"N1": 0, "RD": 0, "N2": 0, "N3": 0, "runs": 0}
    for run in iter_runs(
        build_program(model, workload, level=level, judge=JUDGE), DPOR(), budget=budget
    ):
        counts["runs"] += 1
        for name, v in check_run(model, workload, run, JUDGE, RECOVERY).items():
            counts[name] += v.found
    return counts


@pytest.mark.parametrize("op", ["LWW", "EWM", "AWAIT", "RULE"])
@pytest.mark.parametrize("name", ["manager", "evidence-race", "duplicate-delivery"])
def test_toki_at_its_precondition_admits_no_anomaly(op: str, name: str) -> None:
    model = TokiModel(op)
    counts = _counts(model, scenario(name), model.isolation)
    assert counts["runs"] > 1
    assert (counts["N1"], counts["RD"], counts["N2"], counts["N3"]) == (0, 0, 0, 0), counts


def test_ewm_below_snapshot_loses_evidence() -> None:
    """The precondition is tight: at read committed, concurrent evidence updates are lost."""
    counts = _counts(TokiModel("EWM"), scenario("evidence-race"), Isolation.READ_COMMITTED)
    assert counts["N2"] > 0


def test_rule_below_serializable_drifts() -> None:
    counts = _counts(TokiModel("RULE"), scenario("evidence-race"), Isolation.READ_COMMITTED)
    assert counts["N2"] > 0


def test_without_the_keyed_log_recovery_is_replay_inconsistent() -> None:
    counts = _counts(
        TokiModel("EWM", keyed_log=False), scenario("evidence-race"), Isolation.SNAPSHOT
    )
    assert counts["N1"] > 0 and counts["N2"] == 0  # isolation is fine, replay is not


def test_n2_reports_the_evidence_lost() -> None:
    model, wl = TokiModel("EWM"), scenario("evidence-race")
    program = build_program(model, wl, level=Isolation.READ_COMMITTED, judge=JUDGE)
    lost = [
        check_run(model, wl, run, JUDGE, RECOVERY)["N2"].details.get("evidence_lost", 0.0)
        for run in iter_runs(program, DPOR(), budget=200)
    ]
    assert max(lost) == 1.0  # one Berlin claim's weight went missing in some schedule


def test_committed_snapshots_follow_commit_order() -> None:
    model, wl = TokiModel("LWW"), scenario("manager")
    run = next(iter_runs(build_program(model, wl, judge=JUDGE), DPOR(), budget=1))
    snaps = committed_snapshots(run.history, model.initial(wl))
    assert len(snaps) == 2
    values = [s[("cur", "alice:manager")]["value"] for s in snaps]
    assert values[-1] == "Carol"


def test_synthetic_workloads_are_seeded_and_validated() -> None:
    a, b = synthetic(3, 2, keys=2, seed=4), synthetic(3, 2, keys=2, seed=4)
    assert a == b and len(a.claims) == 6 and len(a.inboxes) == 3
    assert synthetic(3, 2, keys=2, seed=5) != a
    with pytest.raises(ValueError, match="contradiction_rate"):
        synthetic(contradiction_rate=1.5)
    assert set(SCENARIOS) >= {"manager", "lisbon-berlin", "npm-pnpm", "lead-status"}


def test_n2_has_no_false_alarm_when_orders_are_sampled() -> None:
    """Three agents with three claims each: 1,680 interleavings of their own orders, more
    than the sample. A run at the precondition must not be reported, whatever order it is
    equivalent to: a state the sample missed is re-checked against every order."""
    model = TokiModel("EWM")
    wl = synthetic(agents=3, claims_per_agent=3, keys=1, seed=1)
    judge = SimJudge(0.5, 1)
    program = build_program(model, wl, judge=judge)
    verdicts = [check_run(model, wl, run, judge, RECOVERY, ("N2",))["N2"]
                for run in iter_runs(program, DPOR(), budget=20)]
    assert not any(v.found for v in verdicts)
    assert all(v.ran for v in verdicts)
    assert {v.details["serial_orders"] for v in verdicts} == {1680}


def test_n2_is_undecided_not_clean_when_orders_are_too_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With more orders than it may run, a state the sample does not reach is undecided
    (ran=False, neither an anomaly nor clean); a state the sample reaches is clean."""
    from toki.check import anomalies

    monkeypatch.setattr(anomalies, "ALL_ORDERS", 100)
    monkeypatch.setattr(anomalies, "SAMPLED_ORDERS", 2)
    anomalies._SERIAL_CACHE.clear()
    model = TokiModel("EWM")
    wl = synthetic(agents=3, claims_per_agent=3, keys=1, seed=1)
    judge = SimJudge(0.5, 1)
    program = build_program(model, wl, judge=judge)
    verdicts = [check_run(model, wl, run, judge, RECOVERY, ("N2",))["N2"]
                for run in iter_runs(program, DPOR(), budget=30)]
    anomalies._SERIAL_CACHE.clear()
    assert not any(v.found for v in verdicts)
    assert any(v.undecided for v in verdicts)
    assert all(v.undecided == (not v.ran) for v in verdicts)
    assert all("undecided" in v.details for v in verdicts if not v.ran)


def test_serial_cache_does_not_mix_workloads_that_share_claim_ids() -> None:
    """Two claims with the same id but different weights must not share serial outcomes."""
    light = Workload("w", ((SimClaim("k", "A", cid="a", weight=1.0),),
                           (SimClaim("k", "B", cid="b", weight=0.5),)))
    heavy = Workload("w", ((SimClaim("k", "A", cid="a", weight=1.0),),
                           (SimClaim("k", "B", cid="b", weight=5.0),)))
    model = TokiModel("EWM")
    results = []
    for wl in (light, heavy):
        program = build_program(model, wl, judge=JUDGE)
        run = next(iter_runs(program, DPOR(), budget=1))
        results.append(check_run(model, wl, run, JUDGE, RECOVERY, ("N2",))["N2"].found)
    assert results == [False, False]
