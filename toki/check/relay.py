"""Did the relay build the event log it must build? (a final state of `toki.sim.relay`)

The source served each committed outbox row from its write time on, so every row the relay
has passed (position below the relay's) must be recoverable from the event log as of that
time: folding the log into a `Memory` and asking `n3_as_of` is the audit-erasure check. The
verdict also names the cause: rows passed over but never moved (the relay carried on after a
failure), rows moved with a knowledge time other than the source write time (the relay's
clock), and rows moved that the source never committed (a dirty read of the outbox).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from toki.check.anomalies import Verdict
from toki.check.asof import n3_as_of
from toki.errors import InvalidInput
from toki.isolation import Isolation
from toki.memory import Memory
from toki.relay import Relay
from toki.sim.dpor import DPOR
from toki.sim.explore import Run, iter_runs, replay_schedule
from toki.sim.program import Program
from toki.sim.relay import POSITION, SEED_OUTBOX, log_rows, outbox_rows, relay_program
from toki.sim.store import OpKind

__all__ = ["CAUSES", "RelayWitness", "explore_relay", "relay_verdict"]

CAUSES = ("lost_rows", "relay_time_rows", "phantom_rows")


def relay_verdict(state: Mapping[Any, Any]) -> Verdict:
    """N3 for a relayed run: found when something the source served cannot be recovered."""
    committed = outbox_rows(state)
    log = log_rows(state)
    position = state.get(POSITION, 0)
    lost = [i for i in range(position) if i not in log]
    phantom = [
        i
        for i, row in sorted(log.items())
        if i >= len(committed) or _content(row) != _content(committed[i])
    ]
    relay_time = [
        i
        for i, row in sorted(log.items())
        if i not in phantom and row.written_at != committed[i].written_at
    ]
    memory = Memory()
    folded = Relay(memory, [log[i] for i in sorted(log)]).run()
    served = [
        (r.written_at, r.key, r.written_at if r.valid_from is None else r.valid_from, r.value)
        for r in committed[:position]
    ]
    as_of = n3_as_of(memory, served)
    found = bool(lost or phantom or relay_time or folded.failed or as_of.found)
    details = {
        "position": position,
        "committed_rows": len(committed),
        "moved_rows": len(log),
        "lost_rows": lost,
        "phantom_rows": phantom,
        "relay_time_rows": relay_time,
        "fold_failed": folded.failed,
        "as_of": dict(as_of.details),
    }
    return Verdict("N3", found, as_of.keys, as_of.expected, as_of.observed, details)


def _content(row: Any) -> tuple[Any, ...]:
    return (row.key, row.value, row.valid_from, row.source_id)


def explore_relay(
    program: Program,
    *,
    budget: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Explore a relay program with DPOR and judge every final state.

    Returns the schedules explored, whether the exploration finished within `budget`, how
    many final states lose or invent history (in total and by cause), and the shortest such
    schedule (replay it with `toki.sim.replay_schedule`), or None.
    """
    schedules = flagged = 0
    by_cause = dict.fromkeys(CAUSES, 0)
    shortest: tuple[Any, ...] | None = None
    for run in iter_runs(program, DPOR(), budget):
        schedules += 1
        verdict = relay_verdict(dict(run.state))
        if verdict.found:
            flagged += 1
            if shortest is None or len(run.schedule) < len(shortest):
                shortest = run.schedule
        for cause in CAUSES:
            by_cause[cause] += bool(verdict.details[cause])
        if progress is not None:
            progress(1)
    return {
        "program": program.name,
        "schedules": schedules,
        "complete": budget is None or schedules < budget,
        "flagged": flagged,
        **by_cause,
        "shortest_flagged": None if shortest is None else list(shortest),
    }


@dataclass(frozen=True, slots=True)
class RelayWitness:
    """A relay schedule that loses or invents history, with the program's settings, so that
    `toki replay` can re-run it exactly (the relay is a program of its own, not a system
    model, hence a witness format of its own: ``toki-relay-witness``)."""

    rows: int
    level: str
    schedule: tuple[Any, ...]
    writer: bool = True
    failures: int = 1
    crash_budget: int = 1
    knowledge: Literal["source", "relay"] = "source"
    on_failure: Literal["stop", "skip"] = "stop"
    details: Mapping[str, Any] = field(default_factory=dict)

    def program(self) -> Program:
        if not 1 <= self.rows <= len(SEED_OUTBOX):
            raise InvalidInput("witness", f"rows {self.rows}", f"use 1 to {len(SEED_OUTBOX)}")
        return relay_program(
            SEED_OUTBOX[: self.rows],
            level=Isolation(self.level),
            writer=self.writer,
            failures=self.failures,
            crash_budget=self.crash_budget,
            knowledge=self.knowledge,
            on_failure=self.on_failure,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "toki-relay-witness",
            "version": 1,
            "rows": self.rows,
            "level": self.level,
            "schedule": list(self.schedule),
            "writer": self.writer,
            "failures": self.failures,
            "crash_budget": self.crash_budget,
            "knowledge": self.knowledge,
            "on_failure": self.on_failure,
            "details": dict(self.details),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RelayWitness:
        if data.get("format") != "toki-relay-witness":
            raise InvalidInput("witness", "not a relay witness (format != toki-relay-witness)")
        try:
            knowledge, on_failure = (
                str(data.get("knowledge", "source")),
                str(data.get("on_failure", "stop")),
            )
            if knowledge not in ("source", "relay") or on_failure not in ("stop", "skip"):
                raise ValueError(f"knowledge {knowledge!r} / on_failure {on_failure!r}")
            return cls(
                rows=int(data["rows"]),
                level=Isolation(str(data["level"])).value,
                schedule=tuple(data["schedule"]),
                writer=bool(data.get("writer", True)),
                failures=int(data.get("failures", 1)),
                crash_budget=int(data.get("crash_budget", 1)),
                knowledge="relay" if knowledge == "relay" else "source",
                on_failure="skip" if on_failure == "skip" else "stop",
                details=dict(data.get("details", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput("witness", f"malformed relay witness: {exc}") from None

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True, default=str) + "\n")
        return path

    def replay(self) -> tuple[Run, Verdict]:
        """Re-run the schedule exactly and judge the final state again."""
        run = replay_schedule(self.program(), self.schedule)
        return run, relay_verdict(dict(run.state))

    def explain(self, run: Run, verdict: Verdict) -> list[str]:
        """The run step by step, then what was lost or invented."""
        lines = [
            f"relay at {self.level}: {self.rows} outbox row(s), {self.failures} failure(s), "
            f"{self.crash_budget} crash(es) per process, knowledge={self.knowledge}, "
            f"on failure {self.on_failure}",
            f"schedule: {json.dumps(list(self.schedule))}",
            "steps:",
        ]
        for op in run.history:
            what = op.kind.value
            if op.kind in (OpKind.READ, OpKind.WRITE):
                what += f" {op.key!r} = {json.dumps(op.value, default=str)[:80]}"
            elif op.key is not None:
                what += f" {op.key!r}"
            lines.append(f"  {op.step:3d} T{op.txn} {what}")
        d = verdict.details
        lines.append(
            f"lost rows {d.get('lost_rows')}, rows with the relay's clock "
            f"{d.get('relay_time_rows')}, invented rows {d.get('phantom_rows')}"
        )
        return lines
