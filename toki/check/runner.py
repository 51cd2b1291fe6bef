"""Explore a system model's schedules and check every one: the engine behind `toki explore`
and `toki check`.

For each explored run it checks N1/RD/N2/N3 (through the model) and the Adya anomalies (from
the store's recorded transactions), counts anomalies by name and keeps the shortest witness
of each. Checks that could not decide a run (N2 with too many serial orders) are counted as
undecided, never as clean; checks the model abstains from are not counted at all.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toki.check import adya
from toki.check.anomalies import ANOMALIES, Verdict, check_run
from toki.check.witness import Witness
from toki.errors import InvalidInput
from toki.history import HistoryFile, parse_history, run_to_records, to_adya
from toki.isolation import Isolation
from toki.sim.explore import Run, Strategy, iter_runs
from toki.sim.workload import Workload, scenario, synthetic
from toki.systems.base import SimJudge, SystemModel, build_program

__all__ = ["ExploreReport", "adya_anomalies", "explore_system", "make_strategy", "make_workload"]


def make_strategy(
    name: str, seed: int = 0, depth: int = 3, preemptions: int | None = 2
) -> Strategy:
    from toki.sim.dpor import DPOR
    from toki.sim.explore import BoundedDFS, PCTStrategy, RandomStrategy

    if name == "dpor":
        return DPOR()
    if name == "random":
        return RandomStrategy(seed)
    if name == "pct":
        return PCTStrategy(seed, depth)
    if name == "bounded":
        return BoundedDFS(preemptions)
    if name == "exhaustive":
        return BoundedDFS(None)
    raise InvalidInput(
        "strategy", f"unknown strategy {name!r}", "use dpor, random, pct, bounded or exhaustive"
    )


def make_workload(
    name: str | None, agents: int, claims: int, seed: int, keys: int = 1, faults: Sequence[str] = ()
) -> Workload:
    base = scenario(name) if name else synthetic(agents, claims, keys=keys, seed=seed)
    if faults:
        base = Workload(base.name, base.inboxes, tuple(faults), base.params)
    return base


def adya_anomalies(run: Run) -> list[str]:
    """Adya anomaly names found in the run's committed transactions."""
    records = [{"format": "toki-history", "version": 1}, *run_to_records(run.history)]
    import json

    history = parse_history([json.dumps(r) + "\n" for r in records])
    return sorted({a.name for a in adya.check(to_adya(history))})


@dataclass(slots=True)
class ExploreReport:
    system: str
    isolation: str
    workload: str
    strategy: str
    schedules: int = 0
    distinct_states: int = 0
    steps: int = 0
    seconds: float = 0.0
    anomalies: Counter[str] = field(default_factory=Counter)
    witnesses: dict[str, Witness] = field(default_factory=dict)
    exhausted: bool = False
    checked: Counter[str] = field(default_factory=Counter)  # runs a check decided
    undecided: Counter[str] = field(default_factory=Counter)  # runs a check could not decide
    recovery_judge_calls: int = 0  # judge calls made by recoveries (fresh judge), all runs
    judged_runs: int = 0  # runs in which the live write path asked the judge
    rejudged_runs: int = 0  # runs whose fresh-judge recovery asked the judge
    crash_budget: int = 0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "isolation": self.isolation,
            "workload": self.workload,
            "strategy": self.strategy,
            "schedules": self.schedules,
            "distinct_states": self.distinct_states,
            "steps": self.steps,
            "steps_per_s": round(self.steps_per_s, 1),
            "seconds": round(self.seconds, 3),
            "exhausted": self.exhausted,
            "crash_budget": self.crash_budget,
            "anomalies": dict(sorted(self.anomalies.items())),
            "checked": dict(sorted(self.checked.items())),
            "undecided": dict(sorted(self.undecided.items())),
            "recovery_judge_calls": self.recovery_judge_calls,
            "judged_runs": self.judged_runs,
            "rejudged_runs": self.rejudged_runs,
            "witnesses": {k: w.size for k, w in sorted(self.witnesses.items())},
        }


def explore_system(
    system: SystemModel,
    workload: Workload,
    strategy: Strategy,
    *,
    level: Isolation | None = None,
    budget: int = 1000,
    check: bool = True,
    adya_check: bool = True,
    judge: SimJudge | None = None,
    recovery: SimJudge | None = None,
    progress: Callable[[int], None] | None = None,
    crash_budget: int = 0,
    anomalies: Sequence[str] = ANOMALIES,
) -> ExploreReport:
    """Explore `budget` schedules at most and check each run for `anomalies` (and Adya's)."""
    level = level or system.isolation
    judge = judge or SimJudge()
    recovery = recovery or SimJudge(judge.p, judge.seed + 1)
    live = SimJudge(judge.p, judge.seed, [0])  # the same answers, counting the questions
    program = build_program(system, workload, level=level, judge=live, crash_budget=crash_budget)
    report = ExploreReport(system.name, level.value, workload.name, strategy.name)
    report.crash_budget = crash_budget
    for name in ANOMALIES:
        report.anomalies[name] += 0
    states: set[str] = set()
    t0 = time.perf_counter()
    asked = 0
    for run in iter_runs(program, strategy, budget=budget):
        report.judged_runs += live.asked > asked
        asked = live.asked
        report.schedules += 1
        report.steps += len(run.schedule)
        states.add(run.state_hash)
        if check:
            _check(report, run, system, workload, strategy, judge, recovery, adya_check, anomalies)
        if progress is not None:
            progress(1)
    report.distinct_states = len(states)
    report.exhausted = report.schedules < budget and strategy.name.split("(")[0] in (
        "dpor",
        "exhaustive",
        "bounded",
        "dfs",
    )
    report.seconds = time.perf_counter() - t0
    return report


def _check(
    report: ExploreReport,
    run: Run,
    system: SystemModel,
    workload: Workload,
    strategy: Strategy,
    judge: SimJudge,
    recovery: SimJudge,
    adya_check: bool,
    anomalies: Sequence[str],
) -> None:
    verdicts: Mapping[str, Verdict] = check_run(system, workload, run, judge, recovery, anomalies)
    for name, v in verdicts.items():
        if v.ran:
            report.checked[name] += 1
            if name == "N1":
                calls = int(v.details.get("recovery_judge_calls", 0))
                report.recovery_judge_calls += calls
                report.rejudged_runs += calls > 0
        elif v.undecided:
            report.undecided[name] += 1
        if v.found:
            report.anomalies[name] += 1
            _keep(report, name, run, system, workload, strategy, judge, recovery, v)
    if adya_check:
        for name in adya_anomalies(run):
            report.anomalies[name] += 1


def _keep(
    report: ExploreReport,
    name: str,
    run: Run,
    system: SystemModel,
    workload: Workload,
    strategy: Strategy,
    judge: SimJudge,
    recovery: SimJudge,
    v: Verdict,
) -> None:
    best = report.witnesses.get(name)
    if best is not None and len(best.schedule) <= len(run.schedule):
        return
    report.witnesses[name] = Witness(
        system.name,
        name,
        report.isolation,
        workload,
        run.schedule,
        strategy.name,
        judge.seed,
        recovery.seed,
        judge.p,
        v.keys,
        v.expected,
        v.observed,
        dict(v.details),
        crash_budget=report.crash_budget,
    )


def check_history_file(
    history: HistoryFile,
    *,
    models: Sequence[str] = ("strict-serializable",),
    anomalies: Sequence[str] = (),
    **options: Any,
) -> dict[str, Any]:
    """What `toki check FILE` reports: each check's result, or why it could not run, and
    ``valid?`` (False when any check found an anomaly; the Adya part is judged against
    ``models`` as Elle would)."""
    from toki.systems.registry import MODELS, SYSTEMS, get_system

    out: dict[str, Any] = {"checks": {}, "could_not_run": {}}
    if history.ops:
        v = adya.verdict(to_adya(history), models=models, anomalies=anomalies, **options)
        found = [a for t in v.anomaly_types for a in v.anomalies[t]]
        out["checks"]["adya"] = {
            "valid?": v.valid,
            "found": v.anomaly_types,
            "explanations": [a.explain() for a in found[:10]],
        }
    else:
        out["could_not_run"]["adya"] = "the file has no op records"
    out["valid?"] = _valid(out)
    header = history.header
    name = header.get("system")
    known = name in SYSTEMS or name in MODELS  # MODELS: histories of the retired TOKI model
    if known and header.get("workload") and header.get("schedule") is not None:
        from toki.check.witness import replay_witness

        system = get_system(str(name))
        workload = Workload.from_json(header["workload"])
        for anomaly in ANOMALIES:
            w = Witness(
                system.name,
                anomaly,
                str(header.get("isolation", system.isolation.value)),
                workload,
                tuple(header["schedule"]),
                judge_seed=int(header.get("judge_seed", 0)),
                recovery_seed=int(header.get("recovery_seed", 1)),
                judge_p=float(header.get("judge_p", 0.5)),
                crash_budget=int(header.get("crash_budget", 0)),
            )
            _, verdict = replay_witness(w, system)
            out["checks"][anomaly] = verdict.to_json()
        out["valid?"] = _valid(out)
        return out
    if history.final is not None and history.recovered is not None:
        keys = sorted(set(history.final) | set(history.recovered))
        differ = [k for k in keys if history.final.get(k) != history.recovered.get(k)]
        out["checks"]["N1"] = {
            "found": bool(differ),
            "keys": differ,
            "note": "the recorded recovery differs from the live state: N1 or RD (a recorded "
            "history does not say whether a fresh judge or something else caused it)",
        }
    else:
        out["could_not_run"]["N1"] = "needs 'final' and 'recovered' belief records"
    out["could_not_run"]["N2"] = (
        "needs a system model to re-run the claims serially "
        "(header 'system' naming a toki model, with workload and "
        "schedule)"
    )
    if history.beliefs and history.recoverable:
        erased = sorted(
            {
                (k, str(v))
                for _, k, v in history.beliefs
                if v is not None and str(v) not in history.recoverable.get(k, ())
            }
        )
        out["checks"]["N3"] = {"found": bool(erased), "erased": [list(e) for e in erased]}
    else:
        out["could_not_run"]["N3"] = "needs 'belief' records and 'recoverable' records"
    out["valid?"] = _valid(out)
    return out


def _valid(out: dict[str, Any]) -> bool | str:
    """False when any check found an anomaly, else the Adya verdict (True or "unknown")."""
    checks = out["checks"]
    if any(c.get("found") is True for c in checks.values()):
        return False
    adya_part = checks.get("adya")
    return True if adya_part is None else adya_part["valid?"]
