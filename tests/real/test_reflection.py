"""LangMem 0.0.30's ReflectionExecutor under the controller (langchain-ai/langmem#11): the
executor's worker thread is a unit of the agent that made it, so the order in which the
application's next read and the background reflection run is a choice of the explorer.

The application (`toki/real/inenv/langchain.py`, mode "langmem-reflection") is one
conversation per agent: per message it reads its memories, then submits the whole
conversation (thread_id = the conversation) without waiting; the `with` block's exit waits.
What the real code does, on one agent with two messages (Oslo, then Rome):

* released oldest unit first, the read for the second message is served nothing: the first
  message's memory is not written yet (the "update delayed by one message");
* the second submission cancels the first one's future while the worker is already running
  it: `Future.cancel` succeeds (the executor never marks its futures running), the
  reflection goes on and writes anyway, and its `set_result` fails inside the worker with
  InvalidStateError, which the worker swallows (nothing logged, no unit error);
* four task choices fired while the application waits make that read serve Oslo (a
  targeted schedule: DPOR with tasks:4 and a budget of 400 did not reach it, depth first)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from toki.real import get_real_system
from toki.real.cli import make_real_workload
from toki.real.driver import finish_run, open_session, real_program, run_plan
from toki.real.faults import parse_faults
from toki.real.session import Session
from toki.systems.base import SimJudge

pytestmark = pytest.mark.real

JUDGE, RECOVERY = SimJudge(0.5, 0), SimJudge(0.5, 1)
TWO = make_real_workload(None, 1, 2, 1, 0)  # one agent: user0:city Oslo, then Rome
NAME = "langmem-0.0.30-reflection"


@pytest.fixture(scope="module")
def reflecting() -> Iterator[Session]:
    from .conftest import require

    require(NAME)
    with open_session(get_real_system(NAME)) as session:
        yield session


def _served(rr: Any) -> list[list[str]]:
    return [r["served"] for r in rr.observation["reflection"] if "served" in r]


def _futures(rr: Any) -> list[str]:
    return [r["future"] for r in rr.observation["reflection"] if "future" in r]


def test_oldest_first_the_next_read_misses_the_update_and_a_running_reflection_is_cancelled(
    reflecting: Session,
) -> None:
    system = get_real_system(NAME)
    assert [c.value for c in TWO.inboxes[0]] == ["Oslo", "Rome"]
    program, live = real_program(system, reflecting, TWO, JUDGE)
    digests = []
    for _ in range(2):
        rr = finish_run(system, reflecting, live, run_plan(program, [(0, None, None)]),
                        RECOVERY, JUDGE)  # fmt: skip
        digests.append(rr.digest)
    assert digests[0] == digests[1]  # same schedule, same units, same record
    assert _served(rr) == [[], []]  # the second message's read: Oslo not there yet
    assert _futures(rr) == ["cancelled", "done"]
    # the cancelled submission's reflection ran anyway: Oslo was written by a worker unit
    oslo = [t for t in rr.trace if t["point"] == "store.batch" and "Oslo" in str(t["detail"])
            and "memories" in str(t["detail"])]  # fmt: skip
    assert oslo and all(t.get("task", 0) > 0 for t in oslo)
    assert rr.observation["logged"] == [] and rr.observation["unit_errors"] == []
    assert [i["text"] for i in rr.observation["items"]] == ["user0:city is Rome"]


def test_task_choices_let_the_reflection_run_before_the_next_read(
    reflecting: Session,
) -> None:
    """The worker passes four gate points (two searches, the model, the put) before Oslo is
    written, and each task choice releases it for one: four choices, fired while the
    application waits at its second read, make that read serve Oslo."""
    from toki.real.driver import unwrapped
    from toki.sim.explore import Execution, record

    system = get_real_system(NAME)
    program, live = real_program(system, reflecting, TWO, JUDGE, faults=parse_faults("tasks:4"))
    prefix = [0, 0, *(["task:0", 0] * 4)]  # message 0 read and kept; then the worker, 4 steps
    with unwrapped():
        ex = Execution(program, track=True)
        for choice in prefix:
            ex.step(ex.pid(choice))
        while ex.pid(0) in ex.enabled():
            ex.step(ex.pid(0))
        run = record(ex, "replay")
    rr = finish_run(system, reflecting, live, run, RECOVERY, JUDGE)
    assert _served(rr) == [[], ["user0:city is Oslo"]]
    assert _futures(rr) == ["done", "done"]  # nothing was pending when the second came
    assert [i["text"] for i in rr.observation["items"]] == ["user0:city is Rome"]
