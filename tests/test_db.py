"""The state as a value (toki/db.py) and the planners as pure functions (toki/write.py,
toki/lifecycle.py): a Db never changes after it is taken, equals the replay of the log up to
its basis, and a plan is a function of its partition and request alone."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki import Claim, FactKey, FactVersion, Memory
from toki.algebra import EWM, LWW
from toki.db import Db
from toki.errors import TokiError
from toki.lifecycle import (
    plan_assert,
    plan_revoke,
    plan_revoke_source,
    plan_segment,
    plan_supersede,
)
from toki.partition import Partition
from toki.plan import interval, new_version
from toki.shadow import Config
from toki.write import WriteRequest, plan_write, write_keys

BASE = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = [FactKey("t", "u1", "city"), FactKey("t", "u2", "city")]
VALUES = ["Lisbon", "Berlin", "Prague"]


def day(n: int) -> datetime:
    return BASE + timedelta(days=n)


def _step(mem: Memory, rng: random.Random, versions: list[FactVersion], clock: int) -> None:
    op = rng.random()
    try:
        if op < 0.35 or not versions:
            start = rng.randint(0, 60)
            versions.append(
                mem.assert_fact(
                    rng.choice(KEYS),
                    rng.choice(VALUES),
                    valid_from=day(start),
                    recorded_at=day(clock),
                    source_id=f"s{rng.randint(0, 3)}",
                )
            )
        elif op < 0.6:
            claim = Claim(rng.choice(KEYS), rng.choice(VALUES), "w", day(rng.randint(0, 60)))
            mem.write(dataclasses.replace(claim, recorded_at=day(clock)), rng.choice([LWW, EWM]))
        elif op < 0.75:
            old = rng.choice(versions)
            start = (old.valid.start or BASE) + timedelta(days=rng.randint(0, 40))
            versions.append(
                mem.supersede(
                    old, rng.choice(VALUES), valid_from=start, recorded_at=day(clock), source_id="x"
                )
            )
        elif op < 0.9:
            mem.revoke(rng.choice(versions), recorded_at=day(clock), reason="wrong")
        else:
            start = rng.randint(0, 80)
            mem.insert_segment(
                rng.choice(KEYS),
                rng.choice(VALUES),
                valid_from=day(start),
                valid_to=day(start + rng.randint(1, 20)),
                recorded_at=day(clock),
                source_id="seg",
            )
    except TokiError:
        pass  # refused operations are covered by test_bad_input


def _answers(db: Db) -> list[object]:
    out: list[object] = [db.basis, db.state_hash()]
    for key in KEYS:
        out.append([db.resolve_at(key, day(d)) for d in (0, 20, 45, 90)])
        out.append([(h.version.id, h.lifecycle) for h in db.history(key)])
        out.append(db.open_conflicts(key))
        out.append([(r.version.id, r.decided_at) for r in db.audit(key)])
    return out


@settings(max_examples=40)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 30))
def test_a_db_never_changes_and_is_the_replay_up_to_its_basis(seed: int, steps: int) -> None:
    """Dbs taken between writes answer, after every later write, what they answered when
    taken, and what a replay of the log up to their basis answers."""
    rng = random.Random(seed)
    print(f"seed={seed} steps={steps}")
    mem = Memory(clock=lambda: day(400))
    versions: list[FactVersion] = []
    taken: list[tuple[Db, list[object]]] = []
    for n in range(steps):
        _step(mem, rng, versions, n)
        if rng.random() < 0.4:
            db = mem.db()
            taken.append((db, _answers(db)))
    events = mem.events()
    for db, then in taken:
        assert _answers(db) == then
        again = Memory.replay([e for e in events if e.seq <= db.basis], clock=lambda: day(400))
        assert _answers(again.db()) == then
    assert mem.db().state_hash() == mem.state_hash()


@settings(max_examples=25)
@given(seed=st.integers(0, 10**6), as_of=st.integers(-1, 30), valid=st.integers(-5, 100))
def test_a_db_as_of_answers_what_the_memory_answers_as_of(
    seed: int, as_of: int, valid: int
) -> None:
    rng = random.Random(seed)
    mem = Memory(clock=lambda: day(400))
    versions: list[FactVersion] = []
    for n in range(20):
        _step(mem, rng, versions, n)
    db = mem.db(day(as_of))
    assert db.as_of == day(as_of)
    for key in KEYS:
        assert db.resolve_at(key, day(valid)) == mem.resolve_at(key, day(valid), day(as_of))
        assert db.history(key) == mem.history(key, day(as_of))
    for v in versions:
        assert db.lifecycle(v) == mem.lifecycle(v, day(as_of))


def test_a_db_is_frozen() -> None:
    db = Memory().db()
    with pytest.raises(dataclasses.FrozenInstanceError):
        db.basis = 3  # type: ignore[misc]


def test_a_db_keeps_the_configuration_it_was_served_under() -> None:
    key = KEYS[0]
    mem = Memory(clock=lambda: day(10))
    mem.write(Claim(key, "Lisbon", "a", day(1), recorded_at=day(1)))
    mem.assert_fact(key, "Berlin", valid_from=day(2), recorded_at=day(2), source_id="b")
    mem.promote(Config(operators=(("city", "LWW"),)), recorded_at=day(3))
    served = mem.db()
    before = served.resolve_at(key, day(5))
    mem.rollback(recorded_at=day(4))
    mem.assert_fact(key, "Prague", valid_from=day(4), recorded_at=day(5), source_id="c")
    assert served.resolve_at(key, day(5)) == before
    assert mem.db().resolve_at(key, day(5)) != before


def test_a_plan_is_a_function_of_its_partition_and_request() -> None:
    """Planning twice from the same partition gives the same decision and events, and
    planning changes neither the partition nor the Memory it was read from."""
    key = KEYS[0]
    mem = Memory(clock=lambda: day(10))
    mem.assert_fact(key, "Lisbon", valid_from=day(0), recorded_at=day(1), source_id="a")
    mem.write(Claim(key, "Berlin", "b", day(3), recorded_at=day(4)), EWM)
    claim = new_version(key, "Prague", interval(day(2), None, day(5)), day(5), "c", None)
    request = WriteRequest(claim, LWW, mem.isolation)
    keys = write_keys(key, LWW)
    part = Partition.of_snapshot(keys, mem._snapshot, mem.watermark)
    hash_before, watermark = mem.state_hash(), mem.watermark
    first = plan_write(part, request)
    second = plan_write(part, request)
    assert first == second
    assert first[1], "a contradiction is decided and recorded"
    assert (mem.state_hash(), mem.watermark) == (hash_before, watermark)
    assert (
        Partition.of_snapshot(keys, mem._snapshot, mem.watermark).snapshot.state(key).summary()
        == part.snapshot.state(key).summary()
    )  # type: ignore[union-attr]


def _outcome(plan: Any) -> Any:
    try:
        return plan()
    except TokiError as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=30)
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 20))
def test_lifecycle_planners_are_pure(seed: int, steps: int) -> None:
    """Every lifecycle planner, run twice on the same partition, makes the same plan (or
    refuses the same way) and changes neither the partition nor the Memory."""
    rng = random.Random(seed)
    print(f"seed={seed} steps={steps}")
    mem = Memory(clock=lambda: day(400))
    versions: list[FactVersion] = []
    for n in range(steps):
        _step(mem, rng, versions, n)
    key = rng.choice(KEYS)
    part = Partition.of_snapshot([key], mem._snapshot, mem.watermark)
    before = (mem.state_hash(), mem.watermark, part.snapshot.state_hash())
    at = day(steps + 1)
    middle = new_version(key, "Oslo", interval(day(10), day(20), at), at, "p", None)
    mine = [v for v in versions if v.key == key] or [middle]
    target = rng.choice(mine)
    plans = {
        "assert": lambda: plan_assert(part, middle),
        "segment": lambda: plan_segment(part, middle),
        "revoke": lambda: plan_revoke(part, target.id, at, "wrong"),
        "supersede": lambda: plan_supersede(
            part, target.id, "Oslo", interval(None, None, at), at, "p", None, 1.0
        ),
        "revoke_source": lambda: plan_revoke_source(  # over keys the source touched
            part, [key] if part.snapshot.state(key) else [], target.source_id, "bad", at
        ),
    }
    for name, plan in plans.items():
        first, second = _outcome(plan), _outcome(plan)
        assert first == second, name
        assert (mem.state_hash(), mem.watermark, part.snapshot.state_hash()) == before, name
