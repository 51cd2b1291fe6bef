"""Witnesses: a minimal, replayable run that shows an anomaly, and the story of its steps.

A `Witness` holds everything needed to re-run it exactly: the system, isolation level,
workload, schedule, seeds (judge, recovery judge) and faults, plus the keys involved and what
was expected beside what was observed. `replay_witness` re-runs it and checks it again;
`explain` tells it step by step, saying why each step matters (as Elle explains each edge of
a cycle); `shrink` delta-debugs the claims while the anomaly persists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toki.check.anomalies import Verdict, check_run
from toki.errors import InvalidInput
from toki.isolation import Isolation
from toki.sim.explore import Run, iter_runs, replay_schedule
from toki.sim.store import OpKind
from toki.sim.workload import Workload
from toki.systems.base import SimJudge, SystemModel, build_program

__all__ = [
    "Witness",
    "explain",
    "find_witness",
    "read_witness_json",
    "replay_witness",
    "shrink",
]


@dataclass(frozen=True, slots=True)
class Witness:
    system: str
    anomaly: str
    isolation: str
    workload: Workload
    schedule: tuple[Any, ...]
    strategy: str = "dpor"
    judge_seed: int = 0
    recovery_seed: int = 1
    judge_p: float = 0.5
    keys: tuple[str, ...] = ()
    expected: Any = None
    observed: Any = None
    details: Mapping[str, Any] = field(default_factory=dict)
    shrunk_from: Mapping[str, int] | None = None
    crash_budget: int = 0  # crashes per agent the program allowed (schedules name them)

    @property
    def size(self) -> dict[str, int]:
        return {
            "claims": len(self.workload.claims),
            "agents": sum(1 for inbox in self.workload.inboxes if inbox),
            "steps": len(self.schedule),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "toki-witness",
            "version": 1,
            "system": self.system,
            "anomaly": self.anomaly,
            "isolation": self.isolation,
            "workload": self.workload.to_json(),
            "schedule": list(self.schedule),
            "strategy": self.strategy,
            "judge_seed": self.judge_seed,
            "recovery_seed": self.recovery_seed,
            "judge_p": self.judge_p,
            "keys": list(self.keys),
            "expected": self.expected,
            "observed": self.observed,
            "details": dict(self.details),
            "size": self.size,
            "shrunk_from": None if self.shrunk_from is None else dict(self.shrunk_from),
            "crash_budget": self.crash_budget,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Witness:
        if data.get("format") != "toki-witness":
            raise InvalidInput("witness", "not a toki witness file (format != toki-witness)")
        _check_version(data)
        try:
            Isolation(str(data["isolation"]))
            return cls._from_json(data)
        except InvalidInput:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidInput(
                "witness", f"malformed witness: {type(exc).__name__} {exc}"
            ) from None

    @classmethod
    def _from_json(cls, data: Mapping[str, Any]) -> Witness:
        return cls(
            system=str(data["system"]),
            anomaly=str(data["anomaly"]),
            isolation=str(data["isolation"]),
            workload=Workload.from_json(data["workload"]),
            schedule=tuple(data["schedule"]),
            strategy=str(data.get("strategy", "dpor")),
            judge_seed=int(data.get("judge_seed", 0)),
            recovery_seed=int(data.get("recovery_seed", 1)),
            judge_p=float(data.get("judge_p", 0.5)),
            keys=tuple(data.get("keys", ())),
            expected=data.get("expected"),
            observed=data.get("observed"),
            details=dict(data.get("details", {})),
            shrunk_from=data.get("shrunk_from"),
            crash_budget=int(data.get("crash_budget", 0)),
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True, default=str) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Witness:
        return cls.from_json(read_witness_json(path))


WITNESS_VERSION = 1


def _check_version(data: Mapping[str, Any]) -> None:
    if data.get("version", WITNESS_VERSION) != WITNESS_VERSION:
        raise InvalidInput(
            "witness",
            f"unsupported version {data.get('version')!r}",
            f"this toki reads version {WITNESS_VERSION}",
        )


def read_witness_json(path: str | Path) -> dict[str, Any]:
    """A witness file's JSON object (`toki-witness` or `toki-relay-witness`), checked far
    enough to say in one line what is wrong with any other file."""
    from toki.history import WITNESS_FORMATS

    p = Path(path)
    hint = "give a file written by toki explore --witness-dir, toki matrix or toki relay"
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("witness", f"{p} is not a text file, so not a witness", hint) from None
    except OSError as exc:
        raise InvalidInput("witness", f"cannot read {p}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        first = text.lstrip().splitlines()[0] if text.strip() else ""
        if '"toki-history"' in first:
            raise InvalidInput(
                "witness", f"{p} is a history file, not a witness", f"use toki check {p}"
            ) from None
        why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise InvalidInput("witness", f"{p} is not JSON ({why})", hint) from None
    if not isinstance(data, dict) or data.get("format") not in WITNESS_FORMATS:
        raise InvalidInput(
            "witness", f'{p} is not a toki witness (no "format": "toki-witness")', hint
        )
    _check_version(data)
    return data


def _judges(w: Witness) -> tuple[SimJudge, SimJudge]:
    return SimJudge(w.judge_p, w.judge_seed), SimJudge(w.judge_p, w.recovery_seed)


def replay_witness(w: Witness, system: SystemModel) -> tuple[Run, Verdict]:
    """Re-run the witness's schedule exactly and check its anomaly again."""
    judge, recovery = _judges(w)
    program = build_program(
        system, w.workload, level=Isolation(w.isolation), judge=judge, crash_budget=w.crash_budget
    )
    run = replay_schedule(program, w.schedule)
    verdict = check_run(system, w.workload, run, judge, recovery, (w.anomaly,))[w.anomaly]
    return run, verdict


def find_witness(
    system: SystemModel,
    workload: Workload,
    anomaly: str,
    level: Isolation,
    *,
    strategy: Any = None,
    budget: int = 500,
    judge: SimJudge | None = None,
    recovery: SimJudge | None = None,
) -> tuple[Witness | None, int]:
    """Explore until a run shows the anomaly; returns (the shortest witness seen, runs)."""
    from toki.sim.dpor import DPOR

    judge = judge or SimJudge()
    recovery = recovery or SimJudge(judge.p, judge.seed + 1)
    program = build_program(system, workload, level=level, judge=judge)
    best: Witness | None = None
    runs = 0
    for run in iter_runs(program, strategy or DPOR(), budget=budget):
        runs += 1
        verdict = check_run(system, workload, run, judge, recovery, (anomaly,))[anomaly]
        if verdict.found and (best is None or len(run.schedule) < len(best.schedule)):
            best = Witness(
                system.name,
                anomaly,
                level.value,
                workload,
                run.schedule,
                getattr(strategy, "name", "dpor"),
                judge.seed,
                recovery.seed,
                judge.p,
                verdict.keys,
                verdict.expected,
                verdict.observed,
                dict(verdict.details),
            )
    return best, runs


def _subsets(workload: Workload) -> Iterator[Workload]:
    """Workloads with one claim removed (delta debugging at granularity one claim)."""
    positions = [(a, i) for a, inbox in enumerate(workload.inboxes) for i in range(len(inbox))]
    for drop in positions:
        keep = [
            [i for i in range(len(inbox)) if (a, i) != drop]
            for a, inbox in enumerate(workload.inboxes)
        ]
        yield workload.restricted(keep)


def shrink(w: Witness, system: SystemModel, *, budget: int = 300) -> Witness:
    """Remove claims one at a time while some schedule still shows the anomaly, then keep
    the shortest schedule found; records the size before and after."""
    judge, recovery = _judges(w)
    level = Isolation(w.isolation)
    current = w
    improved = True
    while improved:
        improved = False
        for smaller in _subsets(current.workload):
            if not smaller.claims:
                continue
            found, _ = find_witness(
                system, smaller, w.anomaly, level, budget=budget, judge=judge, recovery=recovery
            )
            if found is not None:
                current = found
                improved = True
                break
    return Witness(
        **{**{f: getattr(current, f) for f in Witness.__dataclass_fields__}, "shrunk_from": w.size}
    )


def explain(w: Witness, run: Run, system: SystemModel) -> list[str]:
    """The run step by step, with why each step matters for the anomaly."""
    lines = [
        f"{w.anomaly} in {w.system} at {w.isolation}: keys {', '.join(w.keys) or '-'}",
        f"expected {json.dumps(w.expected, default=str)}",
        f"observed {json.dumps(w.observed, default=str)}",
        "steps:",
    ]
    owner = _op_agents(w, system)
    committed: set[int] = set()
    for op in run.history:
        who = f"agent {owner.get(op.step, '?')} (T{op.txn})"
        if op.kind is OpKind.READ:
            why = ""
            if op.writer and op.writer != op.txn and op.writer not in committed:
                why = "  ← reads an uncommitted write (dirty read)"
            lines.append(f"  {op.step:3d} {who} reads {op.key!r} = {_short(op.value)}{why}")
        elif op.kind is OpKind.WRITE:
            lines.append(f"  {op.step:3d} {who} writes {op.key!r} = {_short(op.value)}")
        elif op.kind is OpKind.DELETE:
            lines.append(f"  {op.step:3d} {who} deletes {op.key!r}")
        elif op.kind is OpKind.COMMIT:
            committed.add(op.txn)
            lines.append(f"  {op.step:3d} {who} commits")
        elif op.kind is OpKind.ABORT:
            lines.append(f"  {op.step:3d} {who} aborts ({op.note or 'rolled back'}) → retried")
        elif op.kind is OpKind.SELECT:
            lines.append(f"  {op.step:3d} {who} runs a conditional statement on {op.key!r}")
    crashes = [(i, c) for i, c in enumerate(w.schedule) if str(c).startswith("crash:")]
    for i, c in crashes:
        lines.append(
            f"  schedule[{i}]: agent {str(c)[6:]} crashes (its open transaction "
            "rolls back; it processes nothing more)"
        )
    lines.append(_moral(w))
    return lines


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= 90 else text[:87] + "..."


def _moral(w: Witness) -> str:
    if w.anomaly == "N1":
        return (
            "why: recovery rebuilt the state from what was durably recorded and asked the "
            "judge again; a fresh judge decided differently from the pinned one"
        )
    if w.anomaly == "RD":
        return (
            "why: recovery rebuilt the state from what was durably recorded and, even with the "
            "live judge pinned, got another state (another order, or a record lost or half "
            "written by a crash)"
        )
    if w.anomaly == "N2":
        return (
            "why: two transactions decided from the same stale read of the key's partition "
            "and both committed; no serial order of these claims gives this state"
        )
    return (
        "why: a value the live system believed was overwritten or deleted without a history "
        "or audit row, so no as-of query can produce it any more"
    )


def witness_path(folder: Path, system: str, anomaly: str) -> Path:
    return folder / f"{system}-{anomaly}.json"


def _op_agents(w: Witness, system: SystemModel) -> dict[int, int]:
    """Which agent issued each store op (by history step), by re-running the schedule."""
    from toki.sim.engine import Execution

    judge, _ = _judges(w)
    program = build_program(
        system, w.workload, level=Isolation(w.isolation), judge=judge, crash_budget=w.crash_budget
    )
    ex = Execution(program)
    owner: dict[int, int] = {}
    for choice in w.schedule:
        pid = ex.pid(choice)
        if pid is None:
            raise InvalidInput("schedule", f"choice {choice!r} does not fit the program")
        before = ex.store.history_len()
        ex.step(pid)
        for op in ex.store.history()[before:]:
            owner[op.step] = pid if pid < ex.n else pid - ex.n
    return owner
