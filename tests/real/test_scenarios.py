"""The corpus of reproduced reports on the real libraries (toki/real/scenarios).

The default suite runs a representative fast subset: one FAISS report (mem0 1.0.5 against
its fix in 1.0.11) with the determinism check (same seed, byte-identical witness, replayed
to the same record digest), and the PostgresStore scope report against its fix. Every other
scenario runs under the `slow` marker (`pytest -m slow tests/real/test_scenarios.py`, and
`toki real scenarios --run`, which writes scenarios.json), except those in HEAVY, which run
with TOKI_HEAVY=1 (`make reproduce`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toki.real.cli import main
from toki.real.scenario import get_scenario, load_scenarios, run_scenario
from toki.real.witness import RealWitness, replay_real

from .conftest import require

pytestmark = pytest.mark.real

FAST = ("mem0-3787-faiss-delete-keeps-vector",)


def reproduce(name: str, out: Path) -> dict:  # type: ignore[type-arg]
    sc = get_scenario(name)
    require(sc.system)
    return run_scenario(sc, out=out)


def test_faiss_delete_keeps_the_vector_and_the_witness_is_byte_identical(tmp_path: Path) -> None:
    """mem0 1.0.5 deletes a memory from the docstore and the id map but not from the FAISS
    index (mem0ai/mem0#3787): index divergence, with the orphan vector named."""
    first = reproduce(FAST[0], tmp_path / "a")
    second = reproduce(FAST[0], tmp_path / "b")
    assert first["reproduced"] and first["anomalies"] == {"index-divergence": 1}
    a, b = (
        Path(first["witnesses"]["index-divergence"]),
        Path(second["witnesses"]["index-divergence"]),
    )
    assert a.read_bytes() == b.read_bytes()
    w = RealWitness.load(a)
    assert w.observed == [
        {"id": "vector_index~id_map", "vector_index": ["<no id: vector 0>"], "id_map": []}
    ]
    rr, verdict = replay_real(w)
    assert verdict.found and rr.digest == w.details["digest"] == first["digest"]


def test_faiss_delete_runs_clean_on_the_fixed_version(tmp_path: Path) -> None:
    sc = get_scenario(FAST[0])
    assert sc.fixed is not None
    require(sc.fixed)
    result = run_scenario(sc, fixed=True, out=tmp_path)
    assert result["clean"] and result["exhausted"] and result["witnesses"] == {}


@pytest.mark.postgres
def test_postgres_store_scope_leak_and_its_fix(tmp_path: Path) -> None:
    """langgraph-checkpoint-postgres 3.1.0 scopes search with LIKE '<path>%': john_doe's
    search serves john-doe's memory (langchain-ai/langgraph#8300); 3.2.0 does not."""
    name = "langgraph-8300-postgres-like-scope"
    result = reproduce(name, tmp_path)
    w = RealWitness.load(result["witnesses"]["scope-leak"])
    assert w.observed == [
        {
            "id": "users/john-doe/memories#m1",
            "asked": {"namespace": "users/john_doe/memories"},
            "served": {"namespace": "users/john-doe/memories"},
            "by": "search",
        }
    ]
    sc = get_scenario(name)
    assert sc.fixed is not None
    require(sc.fixed)
    assert run_scenario(sc, fixed=True, out=tmp_path / "fixed")["clean"]


def test_scenario_cli_writes_the_witness_into_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    require(get_scenario(FAST[0]).system)
    assert main(["scenario", FAST[0], "--json", "--out", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["reproduced"] and data["out"] == str(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [
        Path(data["witnesses"]["index-divergence"]).name
    ]


REPRODUCED = [s.name for s in load_scenarios() if s.reproduced and s.name not in FAST]


# scenarios whose exploration CI cannot afford (heavy: TOKI_HEAVY=1, `make reproduce`), each
# with the CI test that still checks its witness
HEAVY = {
    # DPOR over task choices (tasks:4) took 224 s of a 25-minute CI run; CI replays the
    # witness's schedule and its serial order (test_async_delete_all_... below)
    "mem0-5553-async-delete-all-entities",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.heavy) if n in HEAVY else n for n in REPRODUCED]
)
def test_every_reproduced_report_reproduces_deterministically_and_its_fix_is_clean(
    name: str, tmp_path: Path
) -> None:
    sc = get_scenario(name)
    first = reproduce(name, tmp_path / "a")
    assert first["reproduced"] and not first["timed_out"], first
    assert set(first["witnesses"]) == set(sc.expect)
    second = reproduce(name, tmp_path / "b")
    for anomaly, path in first["witnesses"].items():
        assert Path(path).read_bytes() == Path(second["witnesses"][anomaly]).read_bytes()
    if sc.fixed is not None:
        require(sc.fixed)
        fixed = run_scenario(sc, fixed=True, out=tmp_path / "fixed")
        assert fixed["clean"] and not fixed["timed_out"], fixed


# mem0ai/mem0#5553: the schedule DPOR found (tasks:4): unit 29 is between the delete and
# the insert of FAISS's update of the "alice" entity row when unit 30 lists the rows, so 30
# never sees its own id there and 29 writes the row back with it
ASYNC_DELETE_ALL = (*[0] * 30, *["task:0", 0] * 4, *[0] * 4)


def test_async_delete_all_leaves_the_deleted_memory_linked_only_when_its_units_interleave() -> None:
    """One AsyncMemory.delete_all (mem0 2.0.7): its gathered deletes are units of one agent;
    the witness's task choices leave a deleted memory in linked_memory_ids (index
    divergence), the serial order of the same units leaves the entity store empty."""
    from toki.real.driver import finish_run, open_session, real_program, unwrapped
    from toki.real.faults import parse_faults
    from toki.real.scenario import _judges
    from toki.real.systems import get_real_system
    from toki.sim.explore import replay_schedule

    sc = get_scenario("mem0-5553-async-delete-all-entities")
    require(sc.system)
    system = get_real_system(sc.system)
    judge, recovery = _judges(sc)
    serial = (*[0] * 39, *["task:0"] * 4)  # the same steps, the choices after the last
    with open_session(system) as session:
        program, live = real_program(system, session, sc.program(), judge, faults=sc.faults)
        got = {}
        for name, schedule in (("raced", ASYNC_DELETE_ALL), ("serial", serial)):
            with unwrapped():
                run = replay_schedule(program, schedule)
            rr = finish_run(system, session, live, run, recovery, judge)
            got[name] = rr.observation["derived"]["structures"]
            assert rr.observation["memories"] == []  # delete_all deleted both memories
    deleted = {e["returned"][0]["id"] for e in rr.observation["derived"]["steps"][:2]}
    [link] = got["raced"]["entity_links"]
    assert link.startswith("alice:alice->") and link.split("->")[1] in deleted
    assert got["raced"]["memory_entities"] == []
    assert got["serial"]["entity_links"] == [] == got["serial"]["memory_entities"]
    assert parse_faults("tasks:4") == sc.faults
