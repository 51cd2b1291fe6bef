"""The system models' documented behaviour, checked by exploring schedules (DPOR) and running
the N1/N2/N3 checkers; plus a generic test over every registered model. Seeds are fixed."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from toki.check.anomalies import ANOMALIES, check_run
from toki.sim import DPOR, iter_runs
from toki.sim.workload import SimClaim, Workload, scenario
from toki.systems.base import (
    Records,
    SimJudge,
    SystemModel,
    abstentions,
    build_program,
    run_serially,
)
from toki.systems.memoryos import MemoryOSModel
from toki.systems.registry import SYSTEMS, get_system

BOB = SimClaim("alice:manager", "Bob", start=1, recorded=1, source="msg-1")
CAROL = SimClaim("alice:manager", "Carol", start=5, recorded=5, source="msg-2")
SEQUENTIAL = Workload("manager-sequential", ((BOB, CAROL),))
LISBON = SimClaim("user:city", "Lisbon", start=0, recorded=30, source="msg-1")
BERLIN = SimClaim("user:city", "Berlin", start=183, recorded=224, source="msg-2")

ALWAYS = SimJudge(1.0, 1)  # always sides with the challenger (the newer claim / last option)
NEVER = SimJudge(0.0, 1)  # never does


def found(
    system: SystemModel,
    workload: Workload,
    judge: SimJudge,
    recovery: SimJudge,
    budget: int = 200,
) -> tuple[int, Counter[str], Counter[str]]:
    """(runs explored, anomalies found per name, checks that abstained per name)."""
    program = build_program(system, workload, judge=judge)
    hits: Counter[str] = Counter()
    abstained: Counter[str] = Counter()
    runs = 0
    for run in iter_runs(program, DPOR(), budget=budget):
        runs += 1
        for name, verdict in check_run(system, workload, run, judge, recovery, ANOMALIES).items():
            hits[name] += verdict.found
            abstained[name] += not verdict.ran
    return runs, hits, abstained


def serial_state(system: SystemModel, workload: Workload, judge: SimJudge) -> dict[Any, Any]:
    return dict(run_serially(system, workload, workload.claims, judge))


# ---------------------------------------------------------------------------- mem0


def test_mem0_add_only_history_names_no_replaced_bob_and_bob_stays() -> None:
    """Bob → Carol through add(): no history entry records Bob as replaced (no UPDATE/DELETE,
    no old_memory, no link from Carol's memory to Bob's), yet Bob's point is still live — so
    the N3 checker (value unrecoverable) does not fire. The TOKI paper reports N3 here; the
    model, like the notes' matrix ('AE low'), does not reproduce it."""
    system = get_system("mem0-2.x")
    state = serial_state(system, SEQUENTIAL, NEVER)  # plain facts, no transition text
    history = [v for k, v in state.items() if k[0] == "hist"]
    assert [h["event"] for h in history] == ["ADD", "ADD"]
    assert all(h["old"] is None for h in history)
    carol = [h for h in history if h["new"] == "Carol"]
    assert carol and all("Bob" not in repr(h) for h in carol)
    assert system.beliefs(state, SEQUENTIAL.keys)["alice:manager"]["live"] == ["Bob", "Carol"]
    _, hits, _ = found(system, SEQUENTIAL, NEVER, SimJudge(0.5, 99))
    assert hits["N3"] == 0


def test_mem0_add_only_transition_supersedes_for_readers_but_keeps_bob() -> None:
    system = get_system("mem0-2.x")
    state = serial_state(system, SEQUENTIAL, ALWAYS)  # the LLM phrases a transition
    beliefs = system.beliefs(state, SEQUENTIAL.keys)["alice:manager"]
    assert beliefs["value"] == "Carol" and beliefs["stored"] == ["Bob", "Carol"]
    assert "Bob" in system.recoverable(state, "alice:manager")


def test_mem0_judge_update_writes_old_value_to_history() -> None:
    system = get_system("mem0-1.0.11")
    state = serial_state(system, SEQUENTIAL, ALWAYS)  # the judge answers UPDATE
    events = sorted((v["event"], v["old"], v["new"]) for k, v in state.items() if k[0] == "hist")
    assert ("UPDATE", "Bob", "Carol") in events
    assert system.beliefs(state, SEQUENTIAL.keys)["alice:manager"]["value"] == "Carol"


def test_mem0_judge_history_is_listed_by_change_time_not_write_order() -> None:
    """Vector write and history insert are separate stores, so concurrent adds can write
    history rows in another order than the points were written; but `Memory.history` lists a
    memory's rows by the change's time, so re-applying them gives the live state (no RD; the
    model reported RD here until the real mem0 1.0.11 refuted it,
    tests/real/test_mem0.py::test_history_lists_the_change_time_not_the_write_order). Both
    agents see an empty store and ADD: a duplicate-value state no serial order gives (N2)."""
    system = get_system("mem0-1.0.11")
    runs, hits, _ = found(system, scenario("lisbon-berlin"), ALWAYS, SimJudge(0.5, 99))
    assert runs > 1 and hits["RD"] == 0 and hits["N2"] > 0 and hits["N1"] == 0


def test_mem0_add_only_dedup_race_duplicates() -> None:
    """Two concurrent deliveries of one fact both pass md5 dedup against their stale Phase-1
    snapshots (#6515): a permanent duplicate, which no serial order gives (N2)."""
    system = get_system("mem0-2.x")
    retry = Workload("retry", ((BERLIN,), (BERLIN,)))
    runs, hits, _ = found(system, retry, NEVER, NEVER, budget=60)
    assert 0 < hits["N2"] < runs and hits["N1"] == 0


# ---------------------------------------------------------------------------- graphiti / zep


def test_graphiti_unpinned_judge_gives_n1_for_some_seeds() -> None:
    system = get_system("graphiti")
    live = SimJudge(0.5, 1)
    verdicts = []
    for seed in range(12):
        _, hits, _ = found(system, SEQUENTIAL, live, SimJudge(0.5, seed))
        verdicts.append(hits["N1"] > 0)
    assert any(verdicts) and not all(verdicts)
    _, pinned, _ = found(system, SEQUENTIAL, live, live)  # the same seed: replay agrees
    assert pinned["N1"] == 0


def test_graphiti_keeps_invalidated_edges() -> None:
    system = get_system("graphiti")
    state = serial_state(system, SEQUENTIAL, ALWAYS)
    assert system.beliefs(state, SEQUENTIAL.keys)["alice:manager"]["value"] == "Carol"
    assert system.recoverable(state, "alice:manager") == {"Bob", "Carol"}
    _, hits, _ = found(system, SEQUENTIAL, ALWAYS, ALWAYS)
    assert hits["N3"] == 0


def test_zep_replay_clock_reorders_valid_time() -> None:
    """Zep CE stamps reference_time at ingestion: a replay in message-id order can give
    another valid-time order than the live worker's, so recovery diverges even with a judge
    that answers identically at replay (RD; with an identical judge there is no N1)."""
    system = get_system("zep")
    _, hits, _ = found(system, scenario("manager"), ALWAYS, ALWAYS, budget=300)
    assert hits["RD"] > 0 and hits["N1"] == 0


# ---------------------------------------------------------------------------- others


def test_worlddb_no_anomaly_and_no_resolution() -> None:
    system = get_system("worlddb")
    for name in ("manager", "lisbon-berlin", "duplicate-delivery", "evidence-race"):
        workload = scenario(name)
        runs, hits, _ = found(system, workload, SimJudge(0.5, 1), SimJudge(0.5, 99))
        assert runs >= 1 and sum(hits.values()) == 0, (name, hits)
    state = serial_state(system, SEQUENTIAL, ALWAYS)
    entry = system.beliefs(state, SEQUENTIAL.keys)["alice:manager"]
    assert entry == {"value": None, "live": ["Bob", "Carol"]}


def test_mirix_abstains_on_n1_and_hard_delete_erases() -> None:
    system = get_system("mirix")
    _, hits, abstained = found(system, SEQUENTIAL, ALWAYS, ALWAYS)
    assert abstained["N1"] > 0 and abstained["RD"] > 0 and hits["N1"] == hits["RD"] == 0
    assert hits["N3"] > 0  # semantic_memory_update hard-deletes Bob


def test_letta_shared_block_lost_update() -> None:
    """Two agents append different facts to one shared block from step-start snapshots:
    the later write drops the other's line (N2); replaying the recorded tool calls restores
    both, without asking the LLM (RD, not N1); the tool-call messages keep the dropped value,
    so no erasure (N3)."""
    system = get_system("letta")
    city = SimClaim("alice:city", "Lisbon", start=1, recorded=2, source="msg-3")
    workload = Workload("shared-block", ((BOB,), (city,)))
    runs, hits, _ = found(system, workload, NEVER, SimJudge(0.5, 99))
    assert 0 < hits["N2"] < runs and hits["RD"] > 0 and hits["N1"] == hits["N3"] == 0


def test_langgraph_store_overwrites() -> None:
    system = get_system("langgraph-store")
    _, hits, abstained = found(system, scenario("manager"), NEVER, NEVER)
    assert hits["N3"] > 0 and hits["N2"] == 0
    assert abstained["N1"] > 0 and abstained["RD"] > 0  # no op log: nothing to rebuild from


def test_memoryos_eviction_erases_only_when_the_deque_is_full() -> None:
    workload = Workload("lb", ((LISBON, BERLIN),))
    _, small, _ = found(MemoryOSModel(knowledge_capacity=1), workload, ALWAYS, ALWAYS)
    _, default, _ = found(MemoryOSModel(), workload, ALWAYS, ALWAYS)
    assert small["N3"] > 0 and default["N3"] == 0


def test_memos_hard_update_erases_fuse_archives() -> None:
    system = get_system("memos")
    _, cannot, abstained = found(system, SEQUENTIAL, NEVER, NEVER)
    _, fuse, _ = found(system, SEQUENTIAL, ALWAYS, ALWAYS)
    assert cannot["N3"] > 0 and fuse["N3"] == 0
    assert abstained["N1"] > 0 and abstained["RD"] > 0 and abstained["N2"] > 0


def test_a_mem_keeps_nothing_durable() -> None:
    system = get_system("a-mem")
    _, hits, _ = found(system, SEQUENTIAL, NEVER, NEVER)
    assert hits["RD"] > 0 and hits["N1"] == 0 and hits["N3"] == 0  # a restart starts empty


# ---------------------------------------------------------------------------- every model


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_describe_names_sources_and_release(name: str) -> None:
    info = get_system(name).describe()
    assert info["name"] == name or name == "toki"  # "toki" is the EWM configuration
    assert info["release"] and info["sources"] and info["encodes"]
    assert set(info["abstains"]) <= {"N1", "RD", "N2", "N3"}
    assert info["abstains"] == abstentions(Records(**info["records"]))  # the rule, not a hand
    if "N1" in info["abstains"] or "RD" in info["abstains"]:
        assert info["abstains"].get("N1") == info["abstains"].get("RD")


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_model_runs_and_serial_run_has_no_n2(name: str) -> None:
    system = get_system(name)
    workload = scenario("manager")
    program = build_program(system, workload, judge=SimJudge(0.5, 3))
    runs = 0
    for run in iter_runs(program, DPOR(), budget=25):
        runs += 1
        state = dict(run.state)
        beliefs = system.beliefs(state, workload.keys)
        recovered = system.recover(state, workload.keys, SimJudge(0.5, 4))
        assert set(beliefs) == set(recovered) == set(workload.keys)
        assert all(isinstance(v, str) for v in system.recoverable(state, "alice:manager"))
    assert runs >= 1
    single = Workload("single", (workload.claims,))
    program = build_program(system, single, judge=SimJudge(0.5, 3))
    for run in iter_runs(program, DPOR(), budget=5):
        verdict = check_run(system, single, run, SimJudge(0.5, 3), SimJudge(0.5, 4), ("N2",))
        assert not verdict["N2"].found


# ---------------------------------------------------------------------------- issue #17


@pytest.mark.parametrize(
    ("records", "abstains"),
    [
        (Records(), set()),
        (Records(inputs=False), set()),  # recovery re-applies decisions
        (Records(decisions=False), set()),  # recovery replays inputs
        (Records(inputs=False, decisions=False), {"N1", "RD"}),  # rows read back as they are
        (Records(inputs=False, decisions=False, durable_state=False), set()),  # restart: empty
        (Records(concurrency=False), {"N2"}),
        (Records(inputs=False, decisions=False, concurrency=False), {"N1", "RD", "N2"}),
    ],
)
def test_abstention_follows_from_what_a_model_records(records: Records, abstains: set[str]) -> None:
    assert set(abstentions(records)) == abstains
    assert "N3" not in abstentions(records)  # N3 asks the final store only: always runs


def test_capacity_workload_crosses_the_limit_and_keeps_n2_decidable() -> None:
    from toki.check.anomalies import serial_orders
    from toki.sim.workload import capacity

    wl = capacity(5)
    assert [len(inbox) for inbox in wl.inboxes] == [6, 1]
    assert len({c.value for c in wl.claims}) == 7 and wl.keys == ("user:city",)
    orders, complete = serial_orders(wl.inboxes, 5040)
    assert complete and len(orders) == 7  # where the racer goes among agent 0's six claims
    assert capacity(100).params == {"capacity": 100}


def test_memoryos_deque_erases_serially_once_the_capacity_is_crossed() -> None:
    """MemoryOS's knowledge deque holds 100 entries: with 101 values of one key the first is
    evicted and no longer recoverable, with no interleaving at all (the committed matrix
    said 'excludes' for N3 before it had a workload this large)."""
    from toki.sim.workload import capacity

    system = get_system("memoryos")
    assert system.capacities == {"knowledge deque": 100}
    wl = capacity(100)
    single = Workload("serial", (wl.inboxes[0],))  # the 101 claims of agent 0
    program = build_program(system, single, judge=ALWAYS)  # the profile takes each new value
    run = next(iter_runs(program, DPOR(), budget=1))
    verdict = check_run(system, single, run, ALWAYS, ALWAYS, ("N3",))["N3"]
    assert verdict.found and verdict.details["erased"] == {"user:city": ["v000"]}
    below = Workload("serial", (capacity(98).inboxes[0],))
    run = next(iter_runs(build_program(system, below, judge=ALWAYS), DPOR(), budget=1))
    assert not check_run(system, below, run, ALWAYS, ALWAYS, ("N3",))["N3"].found


@pytest.mark.parametrize(("name", "limit"), [("mem0-1.0.11", 5), ("mem0-2.x", 10)])
def test_mem0_search_returns_at_most_top_k(name: str, limit: int) -> None:
    """The judge (or the dedup) sees at most top_k of a key's memories."""
    from toki.sim.engine import Execution
    from toki.sim.program import program as make_program
    from toki.systems.mem0 import _search

    system = get_system(name)
    assert system.capacities == {"search top_k": limit}
    rows = {("mem", "k", f"a0.{i}"): {"value": f"v{i}"} for i in range(limit + 3)}
    seen: list[dict[Any, Any]] = []

    def agent() -> Any:
        seen.append((yield from _search("k", limit)))
        return "ok"

    ex = Execution(make_program("search", system.isolation, rows, [agent]))
    while ex.enabled():
        ex.step(0)
    assert len(seen[0]) == limit
    assert sorted(seen[0]) == sorted(rows, key=lambda k: (len(k[2]), k[2]))[:limit]
