"""Real witnesses: the exact gate-point schedule that showed an anomaly on the real code,
and `replay_real`, which re-runs it and tells it step by step (`toki real replay`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from toki.check.anomalies import Verdict
from toki.errors import InvalidInput
from toki.real.adapter import Picker, RealSystem, ScriptedJudge
from toki.real.checks import check_real
from toki.real.driver import (
    RealRun,
    SerialCache,
    finish_run,
    open_session,
    real_program,
    unwrapped,
)
from toki.real.faults import plan_from_json
from toki.real.restart import FAULT_ANOMALIES, check_faults, injected, n2_acknowledged
from toki.real.systems import get_real_system
from toki.sim.explore import replay_schedule
from toki.sim.workload import Workload
from toki.systems.base import SimJudge

__all__ = ["RealWitness", "explain_real", "judge_from_json", "judge_to_json", "replay_real"]

FORMAT = "toki-real-witness"


def judge_to_json(judge: Picker) -> dict[str, Any]:
    if isinstance(judge, ScriptedJudge):
        return {
            "kind": "scripted",
            "script": [list(s) for s in judge.script],
            "default": judge.default,
            "p": judge.p,
            "seed": judge.seed,
        }
    return {"kind": "sim", "p": judge.p, "seed": judge.seed}


def judge_from_json(data: Mapping[str, Any]) -> Picker:
    if data.get("kind") == "scripted":
        return ScriptedJudge(
            tuple((str(a), str(b)) for a, b in data.get("script", ())),
            data.get("default"),
            float(data.get("p", 1.0)),
            int(data.get("seed", 0)),
        )
    return SimJudge(float(data.get("p", 0.5)), int(data.get("seed", 0)))


def _workload_from_json(data: Mapping[str, Any]) -> Workload:
    """A claims workload, or a program of the library's operations (`kind: program`,
    toki/real/program.py), which the driver runs as one."""
    if data.get("kind") == "program":
        from toki.real.program import program_from_json

        return cast(Workload, program_from_json(data))
    return Workload.from_json(data)


@dataclass(frozen=True, slots=True)
class RealWitness:
    system: str
    version: str
    anomaly: str
    workload: Workload
    schedule: tuple[Any, ...]
    judge: Mapping[str, Any]
    recovery: Mapping[str, Any]
    seed: int = 0
    crash_budget: int = 0
    strategy: str = "dpor"
    keys: tuple[str, ...] = ()
    expected: Any = None
    observed: Any = None
    details: Mapping[str, Any] = field(default_factory=dict)
    steps: tuple[str, ...] = ()  # the story, as told when it was found
    faults: str = ""  # the --faults spec of the run (crash, raise, restart, torn)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": 1,
            "system": self.system,
            "library_version": self.version,
            "anomaly": self.anomaly,
            "workload": self.workload.to_json(),
            "schedule": list(self.schedule),
            "judge": dict(self.judge),
            "recovery": dict(self.recovery),
            "seed": self.seed,
            "crash_budget": self.crash_budget,
            "strategy": self.strategy,
            "keys": list(self.keys),
            "expected": self.expected,
            "observed": self.observed,
            "details": dict(self.details),
            "steps": list(self.steps),
            **({"faults": self.faults} if self.faults else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RealWitness:
        if data.get("format") != FORMAT:
            raise InvalidInput(
                "witness",
                f"not a real witness (format != {FORMAT})",
                "model witnesses replay with `toki replay`",
            )
        return cls(
            system=str(data["system"]),
            version=str(data.get("library_version", "")),
            anomaly=str(data["anomaly"]),
            workload=_workload_from_json(data["workload"]),
            schedule=tuple(data["schedule"]),
            judge=dict(data.get("judge") or {}),
            recovery=dict(data.get("recovery") or {}),
            seed=int(data.get("seed", 0)),
            crash_budget=int(data.get("crash_budget", 0)),
            strategy=str(data.get("strategy", "dpor")),
            keys=tuple(data.get("keys", ())),
            expected=data.get("expected"),
            observed=data.get("observed"),
            details=dict(data.get("details") or {}),
            steps=tuple(data.get("steps", ())),
            faults=str(data.get("faults") or ""),
        )

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True, default=str) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> RealWitness:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInput("witness", f"cannot read {path}: {exc}") from exc
        try:
            return cls.from_json(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput("witness", f"{path} is malformed: {exc}") from exc


def replay_real(w: RealWitness, *, gate_timeout: float = 60.0) -> tuple[RealRun, Verdict]:
    """Re-run the witness's schedule on the real code and check its anomaly again."""
    system = get_real_system(w.system)
    judge, recovery = judge_from_json(w.judge), judge_from_json(w.recovery)
    with open_session(system, gate_timeout=gate_timeout) as session:
        plan = plan_from_json(w.faults, w.crash_budget)
        program, live = real_program(
            system, session, w.workload, judge, seed=w.seed, crash_budget=plan.crash, faults=plan
        )
        with unwrapped():
            run = replay_schedule(program, w.schedule)
        rr = finish_run(system, session, live, run, recovery, judge)
        serial = SerialCache(system, session, w.workload, judge, w.seed)
        if w.anomaly in FAULT_ANOMALIES:
            verdict = check_faults(system, w.workload, rr, (w.anomaly,))[w.anomaly]
        elif w.anomaly == "N2" and injected(rr):
            verdict = n2_acknowledged(system, w.workload, rr, serial)
        else:
            verdict = check_real(system, w.workload, rr, serial, recovery, (w.anomaly,))[w.anomaly]
    return rr, verdict


def _short(value: Any, limit: int = 80) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _describe(entry: Mapping[str, Any]) -> str:
    """One gate point of the trace in words."""
    if "crash" in entry:
        return f"agent {entry['crash']} CRASHES, parked before {entry.get('before')}"
    if entry.get("fault") in ("restart", "torn"):
        torn = entry.get("torn")
        how = (
            f"during its last write of {torn['file']} ({torn['kept']} of {torn['bytes']} "
            "bytes reach disk)"
            if isinstance(torn, Mapping)
            else "before it wrote any of its files (nothing to tear)"
            if entry.get("fault") == "torn"
            else "between two gate points (the files stay as last written)"
        )
        return f"the PROCESS DIES {how}; agents {entry.get('killed')} stop where they are"
    if entry.get("fault") == "raise":
        return (
            f"agent {entry.get('agent')}'s call {entry.get('point')} FAILS: injected "
            f"{entry.get('error')} error (the call is not made)"
        )
    agent, point = entry.get("agent"), str(entry.get("point"))
    if entry.get("task"):  # a unit of the agent other than its main task (async libraries)
        agent = f"{agent} (unit {entry['task']})"
    raw = entry.get("detail")
    detail: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    reply = entry.get("reply")
    claim = detail.get("claim") if isinstance(detail.get("claim"), Mapping) else None
    what = f"{claim['key']}={claim['value']}" if claim else ""
    if point.startswith(("llm.", "judge.")):
        seen = [e.get("text") for e in detail.get("existing") or []] or [
            c.get("value") for c in detail.get("candidates") or []
        ]
        answer = reply
        if isinstance(reply, str):
            try:
                answer = json.loads(reply)
            except json.JSONDecodeError:
                answer = reply
        if isinstance(answer, Mapping) and "memory" in answer:
            answer = [f"{m.get('event', 'ADD')} {m.get('text')!r}" for m in answer["memory"]]
        return (
            f"agent {agent} asks the LLM ({point}) about {what or '-'}"
            f"{f', seeing {seen}' if seen else ''} -> {_short(answer)}"
        )
    if point == "clock.now":
        return f"agent {agent} reads the clock"
    if point == "vector.insert":
        return f"agent {agent} inserts {detail.get('texts')} into the vector store"
    if point in ("vector.update", "vector.delete", "vector.get"):
        return f"agent {agent} {point.split('.')[1]}s memory {str(detail.get('id'))[:8]}"
    if point.startswith("vector."):
        verb = point.split(".")[1]
        return f"agent {agent} {verb + 's' if verb.endswith('t') else verb + 'es'} the vector store"
    if point.startswith("history."):
        mid = detail.get("memory_id") or detail.get("memory_ids")
        return (
            f"agent {agent} writes history ({point}) {detail.get('event') or ''} {_short(mid, 40)}"
        )
    return f"agent {agent} at {point} {_short(detail, 60) if detail else ''}".rstrip()


def explain_real(w: RealWitness, rr: RealRun, verdict: Verdict | None = None) -> list[str]:
    """The run gate point by gate point, then what the check found."""
    lines = [
        f"{w.anomaly} in {w.system} ({w.version or 'toki'}), workload {w.workload.name}: "
        f"keys {', '.join(w.keys) or '-'}",
        f"schedule ({len(w.schedule)} choices): {list(w.schedule)}",
        "gate points, in the order they ran:",
    ]
    lines += [f"  {i:3d} {_describe(e)}" for i, e in enumerate(rr.trace)]
    if rr.restart is not None:
        lines += _describe_restart(rr.restart)
    v = verdict
    lines.append(f"expected {_short(w.expected if v is None else v.expected, 200)}")
    lines.append(f"observed {_short(w.observed if v is None else v.observed, 200)}")
    lines.append(_moral(w.anomaly))
    return lines


def _describe_restart(restart: Mapping[str, Any]) -> list[str]:
    """The restart after a death: what was reopened, retried and answered."""
    view = restart.get("reopened") or {}
    live = [m.get("text") for m in view.get("memories", ())] if isinstance(view, Mapping) else []
    lines = [f"restart: the library reopened from its files serves {live}"]
    if restart.get("integrity_reopened"):
        lines.append(f"  its index after the reopen: {_index(restart['integrity_reopened'])}")
    for agent, claims in sorted((restart.get("retried") or {}).items()):
        what = [  # a workload's claims, or a program's steps
            f"{c['key']}={c['value']}"
            if "op" not in c
            else f"{c['op']}({', '.join(f'{k}={v!r}' for k, v in c.items() if k != 'op')})"
            for c in claims
        ]
        lines.append(f"  client {agent} retries what it was not acknowledged: {what}")
    for probe in restart.get("probes") or ():
        first = (probe.get("answers") or [{}])[0]
        lines.append(
            f"  search {probe['query']['text']!r} -> first {first.get('text')!r} "
            f"(score {first.get('score')})"
        )
    if restart.get("integrity"):
        lines.append(f"  its index at the end: {_index(restart['integrity'])}")
    return lines


def _index(integrity: Any) -> str:
    """An adapter's `integrity()`; a checkpointer's as its chain: each checkpoint's step
    and the writes stored on it."""
    saved = integrity.get("checkpoints") if isinstance(integrity, Mapping) else None
    if not isinstance(saved, list):
        return str(integrity)
    return "checkpoints " + " <- ".join(
        f"step {c.get('step')} ({c.get('writes')} writes"
        + (f": {', '.join(map(str, c['written']))}" if c.get("written") else "")
        + ")"
        for c in saved
    )


def _moral(anomaly: str) -> str:
    from toki.real.derived import MORALS

    if anomaly in MORALS:
        return MORALS[anomaly]
    if anomaly == "N1":
        return (
            "why: re-adjudicating what the library durably recorded with a fresh judge gives "
            "other beliefs than with the live judge pinned (a decision re-made differently)"
        )
    if anomaly == "RD":
        return (
            "why: rebuilding from what the library durably recorded, with the live judge "
            "pinned, gives other beliefs than the live state (an order, a change that never "
            "reached the record)"
        )
    if anomaly == "N2":
        return (
            "why: no serial run of the real code over the committed claims, in any order "
            "that keeps each agent's own order, ends with these beliefs"
        )
    if anomaly in FAULT_ANOMALIES:
        return f"why: {_FAULT_MORALS[anomaly]}"
    return (
        "why: a value a reader was served is in no current memory, history row or audit "
        "row any more: no query can produce it"
    )


_FAULT_MORALS = {
    "silent-failure": "a boundary call (store, LLM) failed, and the library's call returned "
    "normally: the application cannot tell the write did not happen",
    "lost-write": "a memory readers were served before the process died is not served after "
    "the library reopened its own files",
    "resurrection-after-restart": "a memory removed before the process died is served again "
    "after the reopen",
    "wrong-answer": "after the reopen, a search for a memory's exact text answers another memory",
    "index-after-restart": "after the reopen, the library's index disagrees with itself",
    "removed-after-restart": "a fact whose record was removed is still stated by a summary "
    "the reopened library serves",
    "reopen-failed": "the library cannot open the files the dead process left",
    "checkpoint-before-writes": "the process died with a checkpoint durable whose parent lacks "
    "the writes it was made from: the saver persisted the checkpoint before the task's writes",
    "reexecuted-after-restart": "a node whose side effect ran before the process died ran it "
    "again when the thread resumed",
}


def describe_system(system: RealSystem) -> dict[str, Any]:
    return system.describe()
