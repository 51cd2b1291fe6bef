"""z3 and the simulator agree.

A counterexample z3 finds for an operator below its precondition is turned into a workload
(its claims, one agent each) and explored in the simulator with TOKI's model at the same
level: the matching checker must report the same anomaly. Conversely, at the precondition,
where z3 proved soundness for k = 3 claims, DPOR exploration of 3-claim workloads (to
completion, or 300 schedules where the level's retries make the space larger) finds none.
"""

from __future__ import annotations

from typing import Any

import pytest

from proofs import isolation_ewm
from tests.mutants.catalog import NoFirstUpdaterWins
from toki.check.anomalies import check_run
from toki.isolation import Isolation
from toki.sim import DPOR, iter_runs
from toki.sim.store import SimStore
from toki.sim.workload import SimClaim, Workload, synthetic
from toki.systems.base import SimJudge, build_program
from toki.systems.toki_model import TokiModel

JUDGE, RECOVERY = SimJudge(0.5, 1), SimJudge(0.5, 99)


def _workload(scenario: dict[str, Any]) -> Workload:
    claims = [
        SimClaim(
            "k0",
            str(c["value"]),
            start=0,
            recorded=int(c["recorded_at"]),
            weight=float(c["weight"]),
            source=str(c["source"]),
            cid=str(c["id"]),
        )
        for c in scenario["claims"]
    ]
    return Workload("z3-counterexample", tuple((c,) for c in claims))


def _found(
    model: TokiModel,
    workload: Workload,
    level: Isolation,
    anomaly: str,
    store: Any = SimStore,
    budget: int = 400,
) -> tuple[bool, bool]:
    """(anomaly found, exploration finished within the budget)."""
    program = build_program(model, workload, level=level, judge=JUDGE, store_factory=store)
    runs = 0
    for run in iter_runs(program, DPOR(), budget=budget):
        runs += 1
        if check_run(model, workload, run, JUDGE, RECOVERY, (anomaly,))[anomaly].found:
            return True, False
    return False, runs < budget


@pytest.mark.parametrize("variant", isolation_ewm.false_variants(), ids=lambda r: r.name)
def test_z3_counterexample_reproduces_in_the_simulator(variant: Any) -> None:
    scenario = variant.scenario
    assert scenario is not None and scenario["anomalies"]["N2"]
    level = Isolation(scenario["level"])
    store = NoFirstUpdaterWins if "without_noconflict" in variant.name else SimStore
    found, _ = _found(TokiModel("EWM"), _workload(scenario), level, "N2", store)
    assert found, f"the simulator did not reproduce {variant.name}"


@pytest.mark.parametrize("op", ["LWW", "EWM", "AWAIT", "RULE"])
@pytest.mark.parametrize("seed", [0, 1])
def test_exhaustive_simulation_finds_nothing_where_z3_proved_soundness(op: str, seed: int) -> None:
    model = TokiModel(op)
    workload = synthetic(agents=3, claims_per_agent=1, keys=1, seed=seed)
    for anomaly in ("N1", "N2", "N3"):
        found, _ = _found(model, workload, model.isolation, anomaly, budget=300)
        assert not found, (op, anomaly)
