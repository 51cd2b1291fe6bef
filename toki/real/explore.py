"""Explore a real system's schedules and check every one (`toki real run`)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toki.real.adapter import Picker, RealSystem
from toki.real.checks import ANOMALIES, check_real
from toki.real.driver import SerialCache, open_session, real_runs
from toki.real.faults import FaultPlan
from toki.real.restart import FAULT_ANOMALIES, check_faults, injected, n2_acknowledged
from toki.real.session import Session
from toki.real.witness import RealWitness, explain_real, judge_to_json
from toki.sim.explore import Stats, Strategy
from toki.sim.workload import Workload

__all__ = ["RealReport", "explore_real"]


@dataclass(slots=True)
class RealReport:
    system: str
    version: str
    library: str
    workload: str
    strategy: str
    budget: int
    seed: int
    crash_budget: int
    model: str | None = None
    schedules: int = 0
    steps: int = 0
    distinct_states: int = 0
    exhausted: bool = False
    seconds: float = 0.0
    serial_runs: int = 0
    anomalies: Counter[str] = field(default_factory=Counter)
    checked: Counter[str] = field(default_factory=Counter)  # runs each check decided
    undecided: Counter[str] = field(default_factory=Counter)  # runs it could not decide
    abstained: Counter[str] = field(default_factory=Counter)  # of those, the check abstained
    abstain_reasons: dict[str, str] = field(default_factory=dict)  # check -> its first reason
    checks: tuple[str, ...] = ANOMALIES  # what each run is checked for (`check_real`)
    recovery_judge_calls: int = 0  # questions the fresh-judge recoveries asked
    judged_runs: int = 0  # runs in which the live write path asked the judge
    witnesses: dict[str, RealWitness] = field(default_factory=dict)
    witness_files: dict[str, str] = field(default_factory=dict)
    notes: dict[str, int] = field(default_factory=dict)  # the strategy's counters (DPOR's)
    faults: str = ""  # the --faults spec beyond crashes ("" : none)
    fault_checks: bool = False  # injected errors or a death: the checks of toki.real.restart

    @property
    def _names(self) -> tuple[str, ...]:
        return self.checks + (FAULT_ANOMALIES if self.fault_checks else ())

    @property
    def schedules_per_s(self) -> float:
        return self.schedules / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "library": self.library,
            "version": self.version,
            "model": self.model,
            "workload": self.workload,
            "strategy": self.strategy,
            "budget": self.budget,
            "seed": self.seed,
            "crash_budget": self.crash_budget,
            **({"faults": self.faults} if self.faults else {}),
            "schedules": self.schedules,
            "steps": self.steps,
            "distinct_states": self.distinct_states,
            "exhausted": self.exhausted,
            "seconds": round(self.seconds, 3),
            "schedules_per_s": round(self.schedules_per_s, 2),
            "serial_runs": self.serial_runs,
            "anomalies": {a: self.anomalies.get(a, 0) for a in self._names},
            "checked": {a: self.checked.get(a, 0) for a in self._names},
            "undecided": {a: self.undecided.get(a, 0) for a in self._names},
            "recovery_judge_calls": self.recovery_judge_calls,
            "judged_runs": self.judged_runs,
            "witnesses": dict(sorted(self.witness_files.items())),
            "strategy_notes": dict(sorted(self.notes.items())),
        }


def explore_real(
    system: RealSystem,
    workload: Workload,
    strategy: Strategy,
    judge: Picker,
    recovery: Picker,
    *,
    budget: int = 100,
    seed: int = 0,
    crash_budget: int = 0,
    check: bool = True,
    out: Path | None = None,
    gate_timeout: float = 60.0,
    progress: Callable[[int], None] | None = None,
    session: Session | None = None,
    faults: FaultPlan | None = None,
    anomalies: Sequence[str] = ANOMALIES,
) -> RealReport:
    """Run `strategy` on the real system for at most `budget` schedules; with `check`,
    check N1/RD/N2/N3 on each (and, with `faults` beyond crashes, the checks of
    `toki.real.restart`) and keep the shortest witness of each anomaly (saved in `out`).
    `session`: a worker already open for the system (else one is started). `anomalies`:
    the checks of `check_real` to run (the derived-state classes too); a run on which a
    check abstains is undecided for it, and the report keeps the check's reason."""
    plan = faults if faults is not None else FaultPlan(crash=crash_budget)
    crash_budget = plan.crash
    extra = FaultPlan(
        raises=plan.raises, error=plan.error, restart=plan.restart, torn=plan.torn, tasks=plan.tasks
    )
    report = RealReport(
        system.name,
        system.version,
        system.library,
        workload.name,
        strategy.name,
        budget,
        seed,
        crash_budget,
        system.model,
        faults=plan.spec() if extra else "",
        fault_checks=bool(plan.raises or plan.dies),
        checks=tuple(anomalies),
    )
    states: set[str] = set()
    stats = Stats()
    t0 = time.perf_counter()
    with ExitStack() as stack:
        if session is None:
            session = stack.enter_context(open_session(system, gate_timeout=gate_timeout))
        report.version = report.version or str(session.info.get("version", ""))
        serial = SerialCache(system, session, workload, judge, seed)
        runs = real_runs(
            system,
            session,
            workload,
            strategy,
            judge,
            recovery,
            budget=budget,
            seed=seed,
            crash_budget=crash_budget,
            stats=stats,
            faults=plan,
        )
        for rr in runs:
            report.schedules += 1
            report.steps += len(rr.schedule)
            states.add(rr.state_digest)
            if rr.judge_calls:
                report.judged_runs += 1
            if check:
                verdicts = dict(check_real(system, workload, rr, serial, recovery, anomalies))
                if report.fault_checks:
                    verdicts.update(check_faults(system, workload, rr))
                    if injected(rr):  # a failure the call reported is no committed claim
                        verdicts["N2"] = n2_acknowledged(system, workload, rr, serial)
                for name, v in verdicts.items():
                    if name == "N1":
                        report.recovery_judge_calls += int(v.details.get("recovery_judge_calls", 0))
                    if v.abstained and name in FAULT_ANOMALIES:
                        continue  # nothing to check: no such fault in this run
                    if not v.ran:
                        report.undecided[name] += 1
                        if v.abstained:
                            report.abstained[name] += 1
                            report.abstain_reasons.setdefault(name, str(v.details["abstains"]))
                        continue
                    report.checked[name] += 1
                    if not v.found:
                        continue
                    report.anomalies[name] += 1
                    best = report.witnesses.get(name)
                    if best is None or len(rr.schedule) < len(best.schedule):
                        w = RealWitness(
                            system.name,
                            report.version,
                            name,
                            workload,
                            rr.schedule,
                            judge_to_json(judge),
                            judge_to_json(recovery),
                            seed,
                            crash_budget,
                            strategy.name,
                            v.keys,
                            v.expected,
                            v.observed,
                            dict(v.details),
                            faults=plan.spec(),
                        )
                        report.witnesses[name] = RealWitness(
                            **{
                                **{f: getattr(w, f) for f in RealWitness.__dataclass_fields__},
                                "steps": tuple(explain_real(w, rr, v)),
                            }
                        )
            if progress is not None:
                progress(1)
        report.serial_runs = serial.runs
    # an async agent's sibling tasks released in a fixed order: the agent-level schedule
    # space was enumerated, the (agent, task) orders inside an agent were not
    # (with tasks:<n> the space is the schedules with at most n task choices per agent:
    # `task_choices_spent` counts the moments orders beyond that bound may have existed)
    report.exhausted = stats.exhausted and not stats.notes.get("sibling_order_fixed")
    report.notes = dict(stats.notes)
    report.seconds = time.perf_counter() - t0
    report.distinct_states = len(states)
    if out is not None:
        for name, w in sorted(report.witnesses.items()):
            report.witness_files[name] = str(w.save(out / f"{system.name}-{name}.json"))
    return report
