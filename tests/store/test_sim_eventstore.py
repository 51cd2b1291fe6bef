"""The SimStore-backed event store: the library's write path as simulator statements.

The plan between the statements is the library's (WritePath + Partition + operator), so a
serial run through the simulated store must write exactly the events `Memory.write` writes on
the default store; the shell's own behaviour (retry on a moved head or a refused statement,
abort when the plan raises, clear errors) is driven here by hand, statement by statement.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from toki import Memory
from toki.algebra import OPERATORS, RULE
from toki.algebra.rule import UnknownPolicy
from toki.errors import IsolationViolation, SerializationFailure, StoreError, WriteConflict
from toki.isolation import Isolation
from toki.sim.engine import Execution
from toki.sim.program import Abort, Begin, Commit, Local, Select, UpdateWhere, Write
from toki.sim.workload import SimClaim, Workload
from toki.store.sim import HEAD, LOG, MAX_RETRIES, SimEventStore, key_row
from toki.systems.base import SimJudge, build_program
from toki.systems.toki_lib import (
    BASE,
    POLICY,
    TENANT,
    SimJudgeAsJudge,
    TokiLibrary,
    claim_of,
    fact_key,
)

SER = Isolation.SERIALIZABLE
CLAIM = SimClaim("user:city", "Lisbon", start=1, recorded=1, source="msg-1")


def _sim_memory(level: Isolation = SER) -> Memory:
    return Memory(SimEventStore(level), isolation=level)


def _serial_state(op: str, claims: Sequence[SimClaim], judge: SimJudge) -> dict[object, object]:
    """Run the claims in one agent through the simulated store, one step at a time."""
    system = TokiLibrary(op)
    program = build_program(system, Workload("serial", (tuple(claims),)), judge=judge)
    ex = Execution(program)
    while ex.enabled():
        ex.step(0)
    return dict(ex.store.snapshot())


def _by_key(events: Sequence[object]) -> dict[object, list[tuple[int, str]]]:
    out: dict[object, list[tuple[int, str]]] = {}
    for e in events:
        out.setdefault(e.key, []).append((e.key_seq, e.payload))  # type: ignore[attr-defined]
    return {k: sorted(v) for k, v in out.items()}


claims = st.lists(
    st.builds(
        SimClaim,
        key=st.sampled_from(["user:city", "lead7:status"]),
        value=st.sampled_from(["Lisbon", "Berlin", "Prague"]),
        start=st.integers(0, 6),
        recorded=st.integers(0, 6),
        weight=st.sampled_from([0.5, 1.0, 2.0]),
        source=st.sampled_from(["a", "b"]),
    ),
    min_size=1,
    max_size=5,
)


@seed(16)
@settings(max_examples=40, deadline=None)
@given(op=st.sampled_from(sorted(OPERATORS)), inbox=claims)
def test_serial_run_through_the_simulated_store_writes_what_memory_write_writes(
    op: str, inbox: list[SimClaim]
) -> None:
    judge = SimJudge(0.5, 7)
    state = _serial_state(op, inbox, judge)
    simulated = SimEventStore.of_state(state, SER).load(0)
    plain = Memory(isolation=OPERATORS[op].requires)  # the level the program ran at
    if op == "RULE":
        from datetime import timedelta

        for name in sorted({fact_key(c.key).fact_key for c in inbox}):
            plain.set_policy(TENANT, name, POLICY, recorded_at=BASE - timedelta(days=1))
    uses_judge = TokiLibrary(op).uses_judge
    for c in inbox:
        plain.write(
            claim_of(c), OPERATORS[op], judge=SimJudgeAsJudge(judge) if uses_judge else None
        )
    assert _by_key(list(simulated)) == _by_key(plain.events())
    reopened = Memory(SimEventStore.of_state(state, SER))  # reconcile on open: projection rows
    assert reopened.state_hash() == Memory.replay(plain.events()).state_hash()


def test_write_outside_an_agent_is_a_clear_error_and_changes_nothing() -> None:
    memory = _sim_memory()
    with pytest.raises(StoreError, match="write_steps"):
        memory.write(claim_of(CLAIM))
    assert memory.events() == () and memory.write_stats.writes == 0


def test_a_write_at_another_level_than_the_store_runs_is_refused() -> None:
    memory = Memory(SimEventStore(Isolation.SNAPSHOT), isolation=SER)
    steps = memory.write_steps(claim_of(CLAIM))
    with pytest.raises(StoreError, match="runs every transaction at snapshot"):
        next(steps)


def test_each_statement_is_one_step_in_postgres_order() -> None:
    memory = _sim_memory()
    steps = memory.write_steps(claim_of(CLAIM))
    assert isinstance(next(steps), Begin)
    assert isinstance(steps.send(None), Select)
    head = steps.send({})  # an empty partition: the key has no events yet
    assert isinstance(head, UpdateWhere)
    row = (HEAD, key_row(fact_key(CLAIM.key)))
    assert head.where(row, 0) and not head.where(row, 1)  # WHERE pos = <read pos>
    events = steps.send({row: 1})
    assert isinstance(events, Write) and events.key[:2] == (LOG, key_row(fact_key(CLAIM.key)))
    projection = steps.send(None)
    assert isinstance(projection, Write) and projection.key[0] == "toki:proj"
    assert isinstance(steps.send(None), Commit)
    with pytest.raises(StopIteration) as done:
        steps.send(None)
    assert done.value.value.action.value == "INSERT"
    assert memory.write_stats.writes == 1 and memory.write_stats.retries == 0


def test_a_moved_head_aborts_and_retries_from_a_fresh_read() -> None:
    memory = _sim_memory()
    steps = memory.write_steps(claim_of(CLAIM))
    next(steps)
    steps.send(None)
    steps.send({})
    assert isinstance(steps.send({}), Abort)  # 0 rows updated: a concurrent writer won
    assert isinstance(steps.send(None), Begin)
    assert isinstance(steps.send(None), Select)


def test_refused_statements_retry_then_give_up_with_write_conflict() -> None:
    memory = _sim_memory()
    steps = memory.write_steps(claim_of(CLAIM))
    step = next(steps)
    refused = SerializationFailure(1, "could not serialize access")
    with pytest.raises(WriteConflict, match=f"after {MAX_RETRIES} retries"):
        while True:
            step = steps.send(refused if isinstance(step, Select) else None)
    assert memory.events() == ()


def _partition(state: dict[object, object]) -> dict[object, object]:
    return {k: v for k, v in state.items() if isinstance(k, tuple) and k[0] == LOG}


RIVAL = SimClaim("user:city", "Berlin", start=1, recorded=2, source="msg-2")


def test_a_plan_that_raises_aborts_its_transaction_first() -> None:
    stored = _partition(_serial_state("LWW", [CLAIM], SimJudge(0.5, 0)))
    memory = _sim_memory()  # a contradiction under RULE with no policy in force: it raises
    steps = memory.write_steps(claim_of(RIVAL), RULE)
    next(steps)
    steps.send(None)
    assert isinstance(steps.send(stored), Abort)
    with pytest.raises(UnknownPolicy):
        steps.send(None)


def test_the_judge_is_a_step_between_the_read_and_the_writes() -> None:
    partition = _partition(_serial_state("EWM", [CLAIM], SimJudge(0.5, 0)))
    memory = _sim_memory()
    judge = SimJudgeAsJudge(SimJudge(0.5, 0))
    steps = memory.write_steps(claim_of(RIVAL), OPERATORS["EWM"], judge=judge)
    next(steps)
    steps.send(None)
    step = steps.send(partition)
    assert isinstance(step, Local) and step.name == "judge"
    assert isinstance(steps.send(None), UpdateWhere)


def test_a_level_below_the_operators_precondition_needs_the_explicit_experiment() -> None:
    memory = Memory(SimEventStore(Isolation.SNAPSHOT), isolation=Isolation.SNAPSHOT)
    with pytest.raises(IsolationViolation):
        next(memory.write_steps(claim_of(CLAIM), OPERATORS["EWM"]))
    steps = memory.write_steps(claim_of(CLAIM), OPERATORS["EWM"], allow_weaker_isolation=True)
    assert isinstance(next(steps), Begin)  # then it really runs at SNAPSHOT
