"""The product's grid (toki.experiments.pg_product): Memory.write in writer processes on
PostgreSQL, N1/N2/N3 on the recorded history.

- at each operator's declared level, a fixed number of seeded rounds with racing writer
  processes shows no anomaly and loses no claim;
- below the level, the race the simulator turns into N2 for the model (two writers deciding
  from the same read of one key) is forced deterministically with the write's statement
  hook: the product retries it (the key's head row moved) and ends in a serial state;
- the checkers can fail: tampered histories are flagged, one anomaly each;
- the docs table is generated from verdict_matrix/pg_product.json.

Skips without a server (fixture `pg_dsn`, tests/conftest.py), fails with TOKI_REQUIRE_PG=1.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from toki import Memory
from toki.algebra import OPERATORS
from toki.canonical import canonical_json, digest
from toki.cli import main
from toki.experiments import pg_product as P
from toki.isolation import Isolation
from toki.sim.workload import SimClaim
from toki.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]
SEED = 7


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    name = f"toki_test_{uuid.uuid4().hex[:12]}"
    yield name
    store = PostgresStore(pg_dsn, schema=name)
    store.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
    store.close()


@pytest.mark.slow
def test_declared_levels_show_no_anomaly_over_seeded_rounds(pg_dsn: str) -> None:
    """Every operator at its declared level, 2 and 3 writer processes, 3 rounds each (seeds
    printed): no N1/N2/N3, no undecided N2, every claim committed; the races happened (the
    writers retried)."""
    rows = []
    for op in P.OPERATORS_ORDER:
        level = next(n for n, lv in P.LEVELS.items() if lv is OPERATORS[op].requires)
        rows += P.run_product(
            pg_dsn, operators=[op], levels=[level], writers=(2, 3), rounds=3, seed=SEED
        )
    print(f"seeds {SEED}..{SEED + 2}:", [(r["operator"], r["writers"], r["retries"]) for r in rows])
    for r in rows:
        assert r["relation"] == "declared"
        assert r["anomalies"] == {"N1": 0, "N2": 0, "N3": 0}, r
        assert r["n2_undecided"] == 0, r
        assert r["failed_writes"] == 0
        assert r["claims"] == r["rounds"] * r["writers"] * r["claims_per_writer"]
    assert sum(r["retries"] for r in rows) > 0  # writers did collide on the hot key


def _race(
    pg_dsn: str, schema: str, op: str, level: Isolation, monkeypatch: pytest.MonkeyPatch
) -> tuple[Memory, Memory, list[dict[str, Any]], list[SimClaim]]:
    """Writer A reads the key, then (before it moves the head) writer B writes the key and
    commits; A goes on. The interleaving behind the model's N2 below EWM's and RULE's level."""
    inboxes = [
        (SimClaim("user0:city", "Lisbon", start=1, recorded=2, weight=2.0, source="agent0"),),
        (SimClaim("user0:city", "Berlin", start=2, recorded=4, weight=0.5, source="agent1"),),
    ]
    every = [c for inbox in inboxes for c in inbox]
    admin = Memory(PostgresStore(pg_dsn, schema=schema))
    P._prepare(admin, op, P._keys(every))
    admin.close()
    a = Memory(PostgresStore(pg_dsn, schema=schema), isolation=level)
    b = Memory(PostgresStore(pg_dsn, schema=schema), isolation=level)
    store_a = a._store
    real_step = PostgresStore._step
    fired: list[dict[str, Any]] = []

    def step(self: PostgresStore, name: str, *args: Any) -> None:
        if self is store_a and name == "head" and not fired:
            d = b.write(P.to_claim(inboxes[1][0]), OPERATORS[op], judge=P._judge(op),
                        allow_weaker_isolation=True)  # fmt: skip
            fired.append(P.record(b, inboxes[1][0], d, every))
        real_step(self, name, *args)

    monkeypatch.setattr(PostgresStore, "_step", step)
    d = a.write(P.to_claim(inboxes[0][0]), OPERATORS[op], judge=P._judge(op),
                allow_weaker_isolation=True)  # fmt: skip
    monkeypatch.undo()
    results = []
    for i, (mem, writes) in enumerate(((a, [P.record(a, inboxes[0][0], d, every)]), (b, fired))):
        mem.refresh()
        results.append(
            {
                "writer": i,
                "writes": writes,
                "retries": mem.write_stats.retries,
                "final_hash": mem.state_hash(),
            }
        )
    return a, b, results, every


@pytest.mark.parametrize(
    ("op", "level"),
    [
        ("EWM", Isolation.READ_COMMITTED),
        ("EWM", Isolation.SNAPSHOT),
        ("RULE", Isolation.READ_COMMITTED),
        ("RULE", Isolation.SNAPSHOT),
        ("LWW", Isolation.READ_UNCOMMITTED),
    ],
)
def test_below_the_level_the_forced_race_is_retried_not_an_anomaly(
    pg_dsn: str, schema: str, op: str, level: Isolation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model at these levels admits N2 (docs/postgres.md, the model grid); the product
    does not: A's conditional head update finds the head moved (READ COMMITTED: 0 rows;
    snapshot: 40001), A retries from a fresh read that includes B's claim, and the final
    beliefs are those of the serial order B, A."""
    a, b, results, every = _race(pg_dsn, schema, op, level, monkeypatch)
    assert a.write_stats.retries == 1 and b.write_stats.retries == 0
    found, undecided, details = P.check_round(pg_dsn, schema, op, [every[:1], every[1:]], results)
    assert found == {"N1": False, "N2": False, "N3": False}, details
    assert not undecided
    serial = P.serial_beliefs(op, [every[1], every[0]], every)
    live = digest(canonical_json(P.beliefs(a, P._keys(every), P._probes(every), op)))
    assert live == serial
    assert results[0]["writes"][0]["isolation"] == level.value  # it really ran at that level
    a.close()
    b.close()


def test_checkers_flag_tampered_histories(
    pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each checker can fail: a live state hash that is not the log's replay (N1), a commit a
    writer saw that the log lacks, or a claim in the store that no writer of the round made
    (N2), a value a writer believed that the store cannot produce (N3)."""
    a, b, results, every = _race(pg_dsn, schema, "EWM", Isolation.SERIALIZABLE, monkeypatch)
    inboxes = [every[:1], every[1:]]

    def check(res: list[dict[str, Any]]) -> dict[str, bool]:
        return P.check_round(pg_dsn, schema, "EWM", inboxes, res)[0]

    assert check(results) == {"N1": False, "N2": False, "N3": False}
    bad = json.loads(json.dumps(results))
    bad[0]["writes"][0]["state_hash"] = "0" * 64
    assert check(bad) == {"N1": True, "N2": False, "N3": False}
    bad = json.loads(json.dumps(results))
    key = str(P._keys(every)[0])
    bad[0]["writes"][0]["believed"] = {key: {"answers": [["value", "Atlantis"]]}}
    assert check(bad) == {"N1": False, "N2": False, "N3": True}
    bad = json.loads(json.dumps(results))
    bad[1]["writes"][0]["vid"] = "v-never-logged"  # B saw a commit the log does not hold
    assert check(bad) == {"N1": False, "N2": True, "N3": False}
    # a claim no writer of the round made (a foreign writer): no serial order of the
    # round's committed claims reaches the final beliefs
    intruder = SimClaim("user0:city", "Atlantis", start=3, recorded=9, weight=9.0, source="x")
    a.write(P.to_claim(intruder), OPERATORS["EWM"], judge=P._judge("EWM"))
    found = check(results)
    assert found["N2"] is True, found
    a.close()
    b.close()


def test_memory_open_runs_each_operator_at_its_declared_level(pg_dsn: str, schema: str) -> None:
    with Memory.open(f"{pg_dsn}?schema={schema}") as mem:
        for i, name in enumerate(P.OPERATORS_ORDER[:3]):
            c = SimClaim(f"u{i}:city", "Lisbon", start=1, recorded=1)
            d = mem.write(P.to_claim(c), OPERATORS[name])
            assert d.provenance.isolation is OPERATORS[name].requires


def test_btree_gist_outlives_the_schema_that_created_it(pg_dsn: str) -> None:
    """The extension lives in public: dropping a toki schema leaves it (and every other
    schema's EXCLUDE constraint) in place."""
    first, second = (f"toki_test_{uuid.uuid4().hex[:12]}" for _ in range(2))
    a, b = PostgresStore(pg_dsn, schema=first), PostgresStore(pg_dsn, schema=second)
    a.execute(f"DROP SCHEMA {first} CASCADE")
    rows = b.execute(
        "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
        "WHERE e.extname = 'btree_gist'"
    )
    assert rows == [("public",)]
    assert b.execute(
        "SELECT 1 FROM pg_constraint WHERE conname = 'toki_adjudicated_no_contradiction' "
        "AND connamespace = %s::regnamespace",
        (second,),
    )
    b.execute(f"DROP SCHEMA {second} CASCADE")
    a.close()
    b.close()


def test_cli_product_json_rows(
    pg_dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["pg-grid", "--product", "--operators", "LWW", "--levels", "RC", "--writers", "2",
         "--reps", "1", "--claims", "1", "--seed", str(SEED), "--out", str(tmp_path),
         "--json"]
    )  # fmt: skip
    out = tmp_path / "pg_product.json"
    assert code == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["operator"], r["level"], r["writers"], r["claims"]) for r in rows] == [
        ("LWW", "RC", 2, 2)
    ]
    assert set(rows[0]["anomalies"]) == {"N1", "N2", "N3"} and "retries" in rows[0]
    assert P.read_results(out)["rows"] == rows


def test_docs_product_table_is_generated_from_the_results_file() -> None:
    data = P.read_results(ROOT / "verdict_matrix" / "pg_product.json")
    text = (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
    block = text.split(P.BEGIN, 1)[1].split(P.END, 1)[0]
    assert block.strip() == P.doc_section(data).strip(), (
        "regenerate: toki pg-grid --product (see docs/postgres.md)"
    )


def test_docs_writers_table_is_generated_from_the_results_file() -> None:
    from benchmarks import bench_writers

    data = json.loads((ROOT / "benchmarks" / "results" / "writers.json").read_text())
    text = (ROOT / "docs" / "postgres.md").read_text(encoding="utf-8")
    block = text.split(bench_writers.BEGIN, 1)[1].split(bench_writers.END, 1)[0]
    assert block.strip() == bench_writers.doc_table(data).strip(), (
        "regenerate: python -m benchmarks.bench_writers"
    )
    assert {c["writers"] for c in data["cells"]} == set(bench_writers.WRITERS)
    assert {(c["path"], c["workload"]) for c in data["cells"]} == {
        (p, w) for p in bench_writers.PATHS for w in bench_writers.WORKLOADS
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["pg-grid", "--reps", "0"],  # the model grid: 0 is refused, not read as the default
        ["pg-grid", "--product", "--reps", "0"],
        ["pg-grid", "--product", "--operators", "XYZ"],
        ["pg-grid", "--product", "--levels", "RX"],
        ["pg-grid", "--product", "--writers", "two"],
    ],
)
def test_cli_refuses_bad_grid_arguments_before_any_work(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) != 0
    assert "error" in capsys.readouterr().err.lower()


@pytest.mark.parametrize("level", [Isolation.READ_COMMITTED, Isolation.SNAPSHOT])
def test_below_serializable_a_rule_write_racing_a_policy_change_is_still_serial(
    pg_dsn: str, schema: str, level: Isolation, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RULE reads the policy key without moving its head. Forced race: writer A has read the
    partition (policy newest_valid_time), then B's set_policy (prefer_source agent1) commits,
    then A commits. A decided under the policy it read; the final beliefs are those of the
    serial order "A, then the policy change", not of the other order (docs/postgres.md)."""
    from toki.algebra.rule import Policy

    incumbent = SimClaim("user0:city", "Lisbon", start=5, recorded=2, source="agent0")
    claim = SimClaim("user0:city", "Berlin", start=1, recorded=4, source="agent1")
    every = [incumbent, claim]
    keys, probes = P._keys(every), P._probes(every)
    change = Policy("prefer_source", ("agent1",))
    changed_at = P.BASE  # in force from before either claim was recorded

    def serial(policy_first: bool) -> str:
        mem = Memory()
        P._prepare(mem, "RULE", keys)
        mem.write(P.to_claim(incumbent), OPERATORS["RULE"])
        if policy_first:
            mem.set_policy(P.TENANT, "city", change, recorded_at=changed_at)
        mem.write(P.to_claim(claim), OPERATORS["RULE"])
        if not policy_first:
            mem.set_policy(P.TENANT, "city", change, recorded_at=changed_at)
        return digest(canonical_json(P.beliefs(mem, keys, probes, "RULE")))

    assert serial(True) != serial(False)  # the race matters: the two orders differ
    admin = Memory(PostgresStore(pg_dsn, schema=schema))
    P._prepare(admin, "RULE", keys)
    admin.write(P.to_claim(incumbent), OPERATORS["RULE"])
    a = Memory(PostgresStore(pg_dsn, schema=schema), isolation=level)
    b = Memory(PostgresStore(pg_dsn, schema=schema), isolation=level)
    store_a = a._store
    real_step = PostgresStore._step
    fired: list[bool] = []

    def step(self: PostgresStore, name: str, *args: Any) -> None:
        if self is store_a and name == "head" and not fired:
            b.set_policy(P.TENANT, "city", change, recorded_at=changed_at)
            fired.append(True)
        real_step(self, name, *args)

    monkeypatch.setattr(PostgresStore, "_step", step)
    d = a.write(P.to_claim(claim), OPERATORS["RULE"], allow_weaker_isolation=True)
    monkeypatch.undo()
    assert fired and a.write_stats.retries == 0  # the policy key's head is not moved by A
    assert d.provenance.policy == P.POLICY.id  # the decision names the policy it read
    final = Memory(PostgresStore(pg_dsn, schema=schema))
    assert digest(canonical_json(P.beliefs(final, keys, probes, "RULE"))) == serial(False)
    for m in (admin, a, b, final):
        m.close()
