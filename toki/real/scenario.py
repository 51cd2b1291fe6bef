"""Reproduced bug reports: one TOML file per report in `toki/real/scenarios/`, and the runner
behind `toki real scenarios` / `toki real scenario NAME` (docs/real.md, "Scenarios").

A scenario names the report it reproduces (`owner/repo#number`), the affected system and,
where a fix shipped, the fixed one; a program of the library's own operations per agent
(`toki/real/program.py`); how to explore it (strategy, budget, seed, faults, timeout); and
the anomalies that reproduce the report. Running it explores the affected system until one
schedule shows every expected anomaly, and saves that schedule as a witness per anomaly
(`toki real replay` re-runs it, record digest and all); `--fixed` explores the fixed system
over the whole budget, where none may show. A report toki cannot reproduce is a scenario
with `reproduced = false` and the reason.
"""

from __future__ import annotations

import dataclasses
import time
import tomllib
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from toki.errors import InvalidInput
from toki.real.adapter import Picker, ScriptedJudge
from toki.real.checks import ALL_CHECKS, check_real
from toki.real.derived import DERIVED
from toki.real.driver import SerialCache, open_session, real_runs
from toki.real.faults import FaultPlan, parse_faults
from toki.real.program import OpProgram, OpStep
from toki.real.restart import FAULT_ANOMALIES, check_faults
from toki.real.systems import get_real_system
from toki.real.witness import RealWitness, explain_real, judge_to_json
from toki.sim.explore import Stats
from toki.sim.workload import Workload
from toki.systems.base import SimJudge

__all__ = [
    "SCENARIOS_DIR",
    "Scenario",
    "get_scenario",
    "load_scenario",
    "load_scenarios",
    "run_corpus",
    "run_scenario",
    "runnable",
]

SCENARIOS_DIR = Path(__file__).parent / "scenarios"
KNOWN = (*DERIVED, *FAULT_ANOMALIES)  # what a scenario may expect (its steps are operations)
_FAMILIES = {
    "mem0": "mem0",
    "mem0_async": "mem0",
    "graphiti": "graphiti",
    "langchain": "store",
    "langgraph_ckpt": "checkpoint",
    "letta": "letta",
}  # worker adapter -> program family (toki/real/program.py)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    report: str  # "owner/repo#number"
    title: str
    system: str  # the affected real system
    reproduced: bool
    reason: str = ""  # why not, when not reproduced
    fixed: str | None = None  # the real system where the fix shipped
    strategy: str = "dpor"
    budget: int = 200
    seed: int = 0
    faults: FaultPlan = field(default_factory=FaultPlan)  # `[run] faults` (`--faults`)
    timeout_s: float = 300.0
    judge: str | None = None  # the stub LLM's verdict (ScriptedJudge default); None: SimJudge
    agents: tuple[tuple[Mapping[str, Any], ...], ...] = ()
    expect: tuple[str, ...] = ()
    path: str = field(default="", compare=False)

    def program(self) -> OpProgram:
        system = get_real_system(self.system)
        family = _FAMILIES.get(system.adapter)
        if system.name.startswith("langmem"):  # the langchain worker in LangMem's mode
            family = "langmem"
        if family is None:
            raise InvalidInput(
                "scenario", f"{self.name}: {self.system} has no operations as workload steps"
            )
        steps = [[OpStep.from_json(s) for s in agent] for agent in self.agents]
        return OpProgram.build(self.name, family, steps)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "report": self.report,
            "title": self.title,
            "system": self.system,
            "fixed": self.fixed,
            "reproduced": self.reproduced,
            "reason": self.reason or None,
            "expect": list(self.expect),
            "run": {
                "strategy": self.strategy,
                "budget": self.budget,
                "seed": self.seed,
                "faults": self.faults.spec(),
                "timeout_s": self.timeout_s,
            },
            "file": self.path,
        }


def _table(data: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    got = data.get(name, {})
    if not isinstance(got, Mapping):
        raise InvalidInput("scenario", f"{where}: [{name}] must be a table")
    return got


def _faults(run: Mapping[str, Any], where: str) -> FaultPlan:
    """`[run] faults`: the text `--faults` takes (toki.real.faults), "" or absent for none."""
    spec = run.get("faults", "")
    if not isinstance(spec, str):
        raise InvalidInput(
            "scenario",
            f"{where}: [run] faults = {spec!r} is not a string",
            'write the --faults spec, e.g. faults = "raise:1" or "torn:1"',
        )
    try:
        return parse_faults(spec)
    except InvalidInput as exc:
        raise InvalidInput("scenario", f"{where}: [run] faults: {exc.problem}", exc.fix) from exc


def _faults_for(anomalies: tuple[str, ...], plan: FaultPlan, where: str) -> None:
    """A fault check is expected only where `[run] faults` can make its fault (else it
    abstains on every schedule and the scenario could never reproduce)."""
    if "silent-failure" in anomalies and not plan.raises:
        raise InvalidInput(
            "scenario",
            f"{where}: silent-failure needs an injected failure",
            'add faults = "raise:1" to [run]',
        )
    deaths = [a for a in anomalies if a in FAULT_ANOMALIES and a != "silent-failure"]
    if deaths and not plan.dies:
        raise InvalidInput(
            "scenario",
            f"{where}: {deaths} need a process death",
            'add faults = "restart:1" or "torn:1" to [run]',
        )


def load_scenario(path: str | Path) -> Scenario:
    """One scenario file, checked (InvalidInput naming the file and the field)."""
    path = Path(path)
    where = path.name
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput("scenario", f"cannot read {where}: {exc}") from exc
    head, run, expect = (_table(data, t, where) for t in ("scenario", "run", "expect"))
    for required in ("name", "report", "title", "system", "reproduced"):
        if required not in head:
            raise InvalidInput("scenario", f"{where}: [scenario] needs {required!r}")
    report = str(head["report"])
    if "/" not in report or "#" not in report:
        raise InvalidInput("scenario", f"{where}: report {report!r} is not 'owner/repo#number'")
    reproduced = bool(head["reproduced"])
    reason = str(head.get("reason", ""))
    if not reproduced and not reason:
        raise InvalidInput("scenario", f"{where}: a report not reproduced needs its `reason`")
    agents_raw = data.get("agents", [])
    if not isinstance(agents_raw, list):
        raise InvalidInput("scenario", f"{where}: [[agents]] must be an array of tables")
    agents = tuple(tuple(a.get("steps", [])) for a in agents_raw)
    anomalies = tuple(str(a) for a in expect.get("anomalies", []))
    if unknown := [a for a in anomalies if a not in (*ALL_CHECKS, *FAULT_ANOMALIES)]:
        raise InvalidInput(
            "scenario", f"{where}: unknown anomalies {unknown}", f"use one of {', '.join(KNOWN)}"
        )
    if claims_only := [a for a in anomalies if a not in KNOWN]:
        raise InvalidInput(
            "scenario",
            f"{where}: {claims_only} are defined over claims, and a scenario's steps are "
            "operations",
            f"expect one of {', '.join(KNOWN)}",
        )
    faults = _faults(run, where)
    _faults_for(anomalies, faults, where)
    if reproduced and not (agents and anomalies):
        raise InvalidInput(
            "scenario", f"{where}: a reproduced report needs [[agents]] steps and [expect]"
        )
    fixed = head.get("fixed")
    scenario = Scenario(
        name=str(head["name"]),
        report=report,
        title=str(head["title"]),
        system=str(head["system"]),
        reproduced=reproduced,
        reason=reason,
        fixed=None if fixed is None else str(fixed),
        strategy=str(run.get("strategy", "dpor")),
        budget=int(run.get("budget", 200)),
        seed=int(run.get("seed", 0)),
        faults=faults,
        timeout_s=float(run.get("timeout_s", 300.0)),
        judge=None if run.get("judge") is None else str(run["judge"]),
        agents=agents,
        expect=anomalies,
        path=str(path),
    )
    if scenario.name != path.stem:
        raise InvalidInput("scenario", f"{where}: name {scenario.name!r} is not the file's stem")
    if agents:
        scenario.program()  # every step checked now, not halfway through a run
    return scenario


def load_scenarios(folder: Path = SCENARIOS_DIR) -> list[Scenario]:
    return [load_scenario(p) for p in sorted(folder.glob("*.toml"))]


def get_scenario(name: str, folder: Path = SCENARIOS_DIR) -> Scenario:
    path = folder / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(p.stem for p in sorted(folder.glob("*.toml")))
        raise InvalidInput("scenario", f"unknown scenario {name!r}", f"use one of {known}")
    return load_scenario(path)


def _judges(scenario: Scenario) -> tuple[Picker, Picker]:
    judge: Picker = (
        SimJudge(0.5, scenario.seed)
        if scenario.judge is None
        else ScriptedJudge(default=scenario.judge)
    )
    return judge, SimJudge(0.5, scenario.seed + 1)


def runnable(scenario: Scenario, *, fixed: bool = False) -> str:
    """The system a run of the scenario uses (InvalidInput for a listed-only report, or
    for --fixed where no fix is known): checked before anything is written."""
    if not scenario.agents:
        raise InvalidInput(
            "scenario", f"{scenario.name} is listed, not runnable: {scenario.reason}"
        )
    target = scenario.fixed if fixed else scenario.system
    if target is None:
        raise InvalidInput("--fixed", f"{scenario.name}: no fixed version is known")
    return target


def run_scenario(
    scenario: Scenario,
    *,
    fixed: bool = False,
    out: Path | None = None,
    gate_timeout: float = 60.0,
) -> dict[str, Any]:
    """Explore the affected system (or, with `fixed`, the fixed one) and check the expected
    anomalies on every schedule. Affected: stops at the first schedule that shows all of
    them and saves it as a witness per anomaly. Fixed: explores the whole budget."""
    from toki.check.runner import make_strategy

    system = get_real_system(runnable(scenario, fixed=fixed))
    program = scenario.program()
    workload = cast(Workload, program)  # an OpProgram has what the driver uses of one
    strategy = make_strategy(scenario.strategy, scenario.seed)
    derived = [a for a in scenario.expect if a not in FAULT_ANOMALIES]
    faulted = [a for a in scenario.expect if a in FAULT_ANOMALIES]
    judge, recovery = _judges(scenario)
    counts: Counter[str] = Counter()
    abstained: dict[str, str] = {}
    witnesses: dict[str, str] = {}
    digest = None
    schedules = 0
    stats = Stats()
    t0 = time.perf_counter()
    timed_out = False
    with open_session(system, gate_timeout=gate_timeout) as session:
        version = system.version or str(session.info.get("version", ""))
        serial = SerialCache(system, session, workload, judge, scenario.seed)
        runs = real_runs(
            system,
            session,
            workload,
            strategy,
            judge,
            recovery,
            budget=scenario.budget,
            seed=scenario.seed,
            stats=stats,
            faults=scenario.faults,
        )
        for rr in runs:
            schedules += 1
            found = check_real(system, workload, rr, serial, recovery, derived)
            if faulted:
                found.update(check_faults(system, workload, rr, faulted))
            for name, v in found.items():
                if v.found:
                    counts[name] += 1
                elif v.abstained and name not in FAULT_ANOMALIES:  # those: no such fault here
                    abstained[name] = str(v.details["abstains"])
            if not fixed and all(v.found for v in found.values()):
                digest = rr.digest
                for name, v in sorted(found.items()):
                    w = RealWitness(
                        system.name,
                        version,
                        name,
                        workload,
                        rr.schedule,
                        judge_to_json(judge),
                        judge_to_json(recovery),
                        scenario.seed,
                        scenario.faults.crash,
                        scenario.strategy,
                        v.keys,
                        v.expected,
                        v.observed,
                        {**dict(v.details), "scenario": scenario.name, "digest": digest},
                        faults=scenario.faults.spec(),
                    )
                    w = dataclasses.replace(w, steps=tuple(explain_real(w, rr, v)))
                    if out is not None:
                        saved = w.save(out / f"{scenario.name}-{system.name}-{name}.json")
                        witnesses[name] = str(saved)
                break
            if time.perf_counter() - t0 > scenario.timeout_s:
                timed_out = True
                break
    shown = bool(digest)
    return {
        "scenario": scenario.name,
        "report": scenario.report,
        "system": system.name,
        "version": version,
        "fixed": fixed,
        "expect": list(scenario.expect),
        "reproduced": shown,
        "clean": (not any(counts.values())) if fixed else None,
        "schedules": schedules,
        "exhausted": stats.exhausted and not timed_out and not shown,
        "timed_out": timed_out,
        "seconds": round(time.perf_counter() - t0, 3),
        "anomalies": {a: counts.get(a, 0) for a in scenario.expect},
        "abstained": abstained,
        "witnesses": witnesses,
        "digest": digest,
    }


def run_corpus(
    scenarios: list[Scenario], out: Path, *, gate_timeout: float = 60.0
) -> dict[str, Any]:
    """Every scenario marked reproduced, on its affected version and (where a fix shipped)
    its fixed one; writes `out/scenarios.json`. `ok`: each reproduces, each fixed run is
    clean, each within its timeout."""
    import json

    runs = []
    for sc in scenarios:
        if not sc.reproduced:
            continue
        runs.append(run_scenario(sc, out=out, gate_timeout=gate_timeout))
        if sc.fixed is not None:
            runs.append(run_scenario(sc, fixed=True, out=out, gate_timeout=gate_timeout))
    ok = all((r["clean"] if r["fixed"] else r["reproduced"]) and not r["timed_out"] for r in runs)
    results = {
        "listed": len(scenarios),
        "reproduced": sum(1 for s in scenarios if s.reproduced),
        "runs": runs,
        "ok": ok,
    }
    (out / "scenarios.json").write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results
