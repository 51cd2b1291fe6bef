"""The outbox relay as a simulated program: failures mid-batch, crashes and the writer's
transactions are scheduler choices; `relay_verdict` judges every final state.

The seeds (002) name the relay's mistakes: recording the relay's clock as knowledge time,
and carrying on after a failed row. Each is an option of `relay_program`; exploration must
find each, and must find nothing wrong in the correct relay on the same programs.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toki.check.relay import relay_verdict
from toki.errors import InvalidInput
from toki.isolation import Isolation
from toki.sim import (
    DPOR,
    BoundedDFS,
    OpKind,
    RandomStrategy,
    Run,
    explore,
    replay_schedule,
    trace_class,
)
from toki.sim.relay import (
    POSITION,
    RELAY_FAIL,
    SEED_OUTBOX,
    log_rows,
    outbox_rows,
    relay_program,
)

OUTBOX = list(SEED_OUTBOX)
K = OUTBOX[0].key


def verdicts(runs: list[Run]) -> list[Any]:
    return [relay_verdict(dict(r.state)) for r in runs]


def relay_index(run: Run) -> int:
    return len(run.outcomes) - 1  # the relay is the last agent


def failed_in_time(run: Run) -> bool:
    """The failure fired while the relay still had a step to take."""
    me = relay_index(run)
    last = max(i for i, c in enumerate(run.schedule) if c == me)
    return run.schedule.index(RELAY_FAIL) < last


def test_a_failed_batch_stops_and_the_next_pass_resumes_where_it_stopped() -> None:
    prog = relay_program(OUTBOX, writer=False, failures=1)
    result = explore(prog, DPOR())
    assert result.complete
    in_time = [r for r in result.runs if failed_in_time(r)]
    assert in_time, "the failure never struck a delivery"
    for run in result.runs:
        state = dict(run.state)
        assert state[POSITION] == len(OUTBOX)
        assert log_rows(state) == dict(enumerate(OUTBOX))  # source write time kept
        assert run.outcomes == (len(OUTBOX),)  # every row moved once: resumed, not restarted
        log_writes = [op for op in run.history if op.kind is OpKind.WRITE and op.key != POSITION]
        assert len(log_writes) == len(OUTBOX)
        assert not relay_verdict(state).found


@pytest.mark.parametrize("level", [Isolation.READ_COMMITTED, Isolation.SNAPSHOT])
def test_the_correct_relay_is_clean_with_a_concurrent_writer_failures_and_crashes(
    level: Isolation,
) -> None:
    prog = relay_program(OUTBOX[:1], level=level, failures=1, crash_budget=1)
    result = explore(prog, DPOR())
    assert result.complete
    found = [v for v in verdicts(result.runs) if v.found]
    assert found == []
    # the exploration did reach the interesting runs: the writer's crash losing its row, the
    # relay moving it, and the relay's own failure and crash before a delivery
    states = [dict(r.state) for r in result.runs]
    assert any(outbox_rows(s) == [] for s in states)
    assert any(log_rows(s) == {0: OUTBOX[0]} for s in states)
    assert any(failed_in_time(r) for r in result.runs)


def test_a_relay_at_read_uncommitted_moves_a_row_the_source_never_committed() -> None:
    """The writer crashes after writing its outbox row; a relay reading uncommitted data has
    already moved it: the log holds a change that never happened (a dirty read, G1a)."""
    prog = relay_program(OUTBOX[:1], level=Isolation.READ_UNCOMMITTED, failures=0, crash_budget=1)
    result = explore(prog, DPOR())
    bad = [(r, v) for r, v in zip(result.runs, verdicts(result.runs), strict=True) if v.found]
    assert bad
    run, verdict = bad[0]
    assert verdict.details["phantom_rows"] == [0]
    assert outbox_rows(dict(run.state)) == []
    assert "crash:0" in run.schedule
    again = replay_schedule(prog, run.schedule)
    assert again.history == run.history and relay_verdict(dict(again.state)).found


def test_recording_the_relay_clock_as_knowledge_time_is_caught() -> None:
    prog = relay_program(OUTBOX, writer=False, knowledge="relay")
    result = explore(prog, DPOR())
    found = [v for v in verdicts(result.runs) if v.found]
    assert len(found) == result.schedules  # the relay always moves at least one row
    verdict = found[0]
    assert verdict.details["relay_time_rows"] == [0, 1, 2]
    assert verdict.keys == (str(K),)
    # the seeds' symptom: between the source write and the relay the fact looks unknown
    assert verdict.details["as_of"]["mismatches"][0][3:] == ["Berlin", None]


def test_carrying_on_after_a_failed_row_is_caught_and_replays() -> None:
    prog = relay_program(OUTBOX, writer=False, on_failure="skip")
    result = explore(prog, DPOR())
    bad = [(r, v) for r, v in zip(result.runs, verdicts(result.runs), strict=True) if v.found]
    clean = [r for r in result.runs if not failed_in_time(r)]
    assert bad and clean
    assert all(failed_in_time(r) for r, _ in bad)  # only a failure that struck a row
    lost = {i for _, v in bad for i in v.details["lost_rows"]}
    assert lost == {0, 1, 2}  # whichever row the failure strikes is gone
    run, verdict = bad[0]
    assert replay_schedule(prog, run.schedule).state == run.state
    assert verdict.details["position"] == len(OUTBOX)


def test_dpor_reaches_what_exhaustive_search_reaches_on_the_relay() -> None:
    prog = relay_program(OUTBOX[:1], failures=1)
    full = explore(prog, BoundedDFS(track=True))
    dpor = explore(prog, DPOR())
    assert full.complete and dpor.complete
    assert dpor.finals == full.finals
    assert {trace_class(r) for r in dpor.runs} == {trace_class(r) for r in full.runs}
    assert dpor.schedules < full.schedules


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"outbox": []}, "empty"),
        ({"outbox": [("k", "v")]}, "OutboxRow"),
        ({"knowledge": "wall"}, "unknown"),
        ({"on_failure": "retry"}, "unknown"),
        ({"failures": -1}, ">= 0"),
        ({"passes": 0}, "at least one pass"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"outbox": OUTBOX, **kwargs}
    outbox = args.pop("outbox")
    with pytest.raises(InvalidInput, match=message):
        relay_program(outbox, **args)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.integers(1, 3),
    level=st.sampled_from(
        [
            Isolation.READ_COMMITTED,
            Isolation.REPEATABLE_READ,
            Isolation.SNAPSHOT,
            Isolation.SERIALIZABLE,
        ]
    ),
    writer=st.booleans(),
    failures=st.integers(0, 2),
    crashes=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_at_read_committed_and_above_no_schedule_loses_or_invents_history(
    rows: int, level: Isolation, writer: bool, failures: int, crashes: int, seed: int
) -> None:
    """The relay's invariant on random configurations and random schedules: whatever the
    failures, crashes and interleavings, the log is the committed outbox up to the relay's
    position, with the source write times."""
    prog = relay_program(
        OUTBOX[:rows], level=level, writer=writer, failures=failures, crash_budget=crashes
    )
    print(f"seed={seed} rows={rows} level={level.value} writer={writer} failures={failures}")
    result = explore(prog, RandomStrategy(seed), budget=60)
    for run in result.runs:
        state = dict(run.state)
        assert not run.truncated and not run.deadlock
        verdict = relay_verdict(state)
        assert not verdict.found, (run.schedule, verdict.details)
        log, committed = log_rows(state), outbox_rows(state)
        assert [log[i] for i in sorted(log)] == committed[: state[POSITION]]
