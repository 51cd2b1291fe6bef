"""Did the relay build the event log it must build? (a final state of `toki.sim.relay`)

The source served each committed outbox row from its write time on, so every row the relay
has passed (position below the relay's) must be recoverable from the event log as of that
time: folding the log into a `Memory` and asking `n3_as_of` is the audit-erasure check. The
verdict also names the cause: rows passed over but never moved (the relay carried on after a
failure), rows moved with a knowledge time other than the source write time (the relay's
clock), and rows moved that the source never committed (a dirty read of the outbox).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from toki.check.anomalies import Verdict
from toki.check.asof import n3_as_of
from toki.memory import Memory
from toki.relay import Relay
from toki.sim.dpor import DPOR
from toki.sim.explore import iter_runs
from toki.sim.program import Program
from toki.sim.relay import POSITION, log_rows, outbox_rows

__all__ = ["CAUSES", "explore_relay", "relay_verdict"]

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
