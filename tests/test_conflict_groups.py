"""Conflict groups (toki.conflicts) against a naive reference, and old per-pair stores.

The reference recomputes, by brute force over the raw events, which versions are open
members of which group as of a system time, and over every version which ones hold at a
valid time (per-version lifecycle/effective come from KeyState: what is under test is the
conflict representation and the indexed eligibility, not the supersession rules).
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from hypothesis import given, note, settings
from hypothesis import strategies as st

from toki import Claim, FactKey, Lifecycle, Memory
from toki.algebra import AWAIT, EWM, LWW, Operator
from toki.errors import TokiError
from toki.log import Event, EventKind, EventLog
from toki.model import FactVersion, Resolution
from toki.replay import KeyState, replay
from toki.time import BoundSource, Interval

BASE = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = [FactKey("t", "u1", "task"), FactKey("t", "u2", "task")]
VALUES = ["a", "b", "c", "d"]
OPS: list[Operator] = [LWW, EWM, AWAIT]


def day(n: int) -> datetime:
    return BASE + timedelta(days=n)


def workload(seed: int, steps: int) -> Memory:
    """Mostly contradicting assertions, with supersessions, revocations, operator writes
    (losers leave groups) and AWAIT holds confirmed or rejected."""
    rng = random.Random(seed)
    mem = Memory(clock=lambda: day(300))
    versions: list[FactVersion] = []
    tokens: list[str] = []
    clock = 0
    for _ in range(steps):
        clock += rng.randint(0, 2)
        op = rng.random()
        key = rng.choice(KEYS)
        start = rng.randint(0, 40)
        end = None if rng.random() < 0.5 else start + rng.randint(1, 30)
        try:
            if op < 0.5 or not versions:
                versions.append(
                    mem.assert_fact(
                        key,
                        rng.choice(VALUES),
                        valid_from=day(start),
                        valid_to=None if end is None else day(end),
                        recorded_at=day(clock - rng.randint(0, 2)),
                        source_id=f"s{rng.randint(0, 9)}",
                    )
                )
            elif op < 0.6:
                versions.append(
                    mem.supersede(
                        rng.choice(versions),
                        rng.choice(VALUES),
                        valid_from=day(start),
                        recorded_at=day(clock),
                        source_id="sup",
                    )
                )
            elif op < 0.7:
                mem.revoke(rng.choice(versions), recorded_at=day(clock), reason="wrong")
            elif op < 0.9:
                claim = Claim(
                    key,
                    rng.choice(VALUES),
                    f"w{rng.randint(0, 9)}",
                    valid_from=day(start),
                    valid_to=None if end is None else day(end),
                    recorded_at=day(clock),
                    weight=rng.choice([0.5, 1.0, 2.0]),
                )
                decision = mem.write(claim, rng.choice(OPS))
                if decision.token and decision.action.value == "HOLD":
                    tokens.append(decision.token)
            elif tokens:
                token = tokens.pop(rng.randrange(len(tokens)))
                settle = mem.confirm if rng.random() < 0.5 else mem.reject
                settle(token, recorded_at=day(clock))
        except TokiError:
            pass  # refused operations (e.g. superseding a revoked version) are tested elsewhere
    return mem


def _open_members(events: list[Event], key: FactKey, as_of: datetime | None) -> dict[str, set[str]]:
    known = [e for e in events if e.key == key and (as_of is None or e.recorded_at <= as_of)]
    revoked = {e.body["version"] for e in known if e.kind is EventKind.REVOKE}
    joined: dict[str, set[str]] = {}
    left: set[tuple[str, str]] = set()
    for e in known:
        if e.kind is EventKind.CONFLICT_OPEN:
            v = e.body["version"]
            for g in e.body["joins"]:
                joined.setdefault(g, set()).add(v)
            if e.body["with"]:
                joined.setdefault(v, set()).update([v, *e.body["with"]])
        elif e.kind is EventKind.CONFLICT_RESOLVE:
            for v in e.body["versions"]:
                left.add((e.body["group"], v))
    return {
        g: {v for v in members if (g, v) not in left and v not in revoked}
        for g, members in joined.items()
    }


def naive_open_conflicts(
    events: list[Event], state: KeyState, as_of: datetime | None
) -> list[tuple[str, ...]]:
    groups = _open_members(events, state.key, as_of)
    # a member closed entirely (it lost everywhere, or was rejected) is out of its conflict
    standing = {
        g: {v for v in m if state.effective(v, as_of) is not None} for g, m in groups.items()
    }
    return sorted(
        tuple(sorted(m))
        for m in standing.values()
        if len(m) > 1 and len({state.versions[v].value_json for v in m}) > 1
    )


def naive_resolve(
    events: list[Event], state: KeyState, at: datetime, as_of: datetime | None
) -> Resolution:
    ids = [
        v.id
        for v in state.versions.values()
        if (as_of is None or v.recorded_at <= as_of)
        and state.lifecycle(v.id, as_of) in (Lifecycle.ACTIVE, Lifecycle.SUPERSEDED)
        and (eff := state.effective(v.id, as_of)) is not None
        and eff.contains(at)
    ]
    if not ids:
        return Resolution("unknown")
    value_of = {v: state.versions[v].value_json for v in ids}
    if len(set(value_of.values())) == 1:
        return Resolution("value", state.versions[ids[0]].value, tuple(sorted(ids)))
    named = set()
    for members in _open_members(events, state.key, as_of).values():
        here = sorted(members & set(ids))
        if len(here) > 1 and len({value_of[v] for v in here}) > 1:
            named.add(tuple(here))
    if not named:
        named.add(tuple(sorted(ids)))
    return Resolution("conflict", None, tuple(sorted(ids)), tuple(sorted(named)))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), steps=st.integers(5, 40))
def test_groups_answer_like_the_naive_reference(seed: int, steps: int) -> None:
    note(f"seed={seed} steps={steps}")
    mem = workload(seed, steps)
    events = list(mem.events())
    snap = replay(events)
    times: list[datetime | None] = [None, *sorted({e.recorded_at for e in events})[::3]]
    for key in KEYS:
        state = snap.state(key)
        if state is None:
            continue
        assert mem.open_conflicts(key) == naive_open_conflicts(events, state, None)
        current = mem.current(key)
        expected = naive_resolve(events, state, day(300), None)
        assert (current.kind, current.value, current.conflicts) == (
            expected.kind,
            expected.value,
            expected.conflicts,
        )
        assert tuple(sorted(current.version_ids)) == expected.version_ids
        for as_of in times:
            assert state.open_conflicts(as_of) == naive_open_conflicts(events, state, as_of)
            for d in (0, 5, 12, 20, 33, 50, 80):
                got = mem.resolve_at(key, day(d), as_of)
                want = naive_resolve(events, state, day(d), as_of)
                assert (got.kind, got.value, got.conflicts) == (
                    want.kind,
                    want.value,
                    want.conflicts,
                ), (d, as_of)
                assert tuple(sorted(got.version_ids)) == want.version_ids
                if got.kind == "conflict":
                    assert got.value is None  # never served as a value


def test_events_per_contradicting_assertion_are_constant() -> None:
    mem = Memory(clock=lambda: day(100))
    key = KEYS[0]
    for i in range(60):
        mem.assert_fact(key, f"v{i}", valid_from=day(i % 7), recorded_at=day(1), source_id="s")
    kinds = [e.kind for e in mem.events()]
    assert kinds.count(EventKind.ASSERT) == 60
    assert kinds.count(EventKind.CONFLICT_OPEN) == 59  # one per assertion after the first
    (group,) = mem.open_conflicts(key)
    assert len(group) == 60
    r = mem.current(key)
    assert r.kind == "conflict" and r.conflicts == (group,) and r.value is None


def _legacy_store() -> tuple[list[Event], list[str]]:
    """Events as a store written before conflict groups holds them: one event per pair."""
    log = EventLog()
    key = KEYS[0]
    ids = []
    for i, value in enumerate(["a", "b", "c"]):
        v = FactVersion(
            key,
            value,
            Interval(day(i), None, BoundSource.EVIDENCE, BoundSource.UNKNOWN),
            day(10 + i),
            f"s{i}",
            f"h{i}",
        )
        log.add(
            log.new(
                EventKind.ASSERT,
                key,
                v.recorded_at,
                (v.id,),
                {"version": v.payload(), "proposed": False},
                v,
            )
        )
        for other in ids:
            left, right = sorted((other, v.id))
            log.add(
                log.new(
                    EventKind.CONFLICT_OPEN,
                    key,
                    v.recorded_at,
                    (left, right),
                    {"left": left, "right": right},
                )
            )
        ids.append(v.id)
    a, b, _ = ids
    left, right = sorted((a, b))
    log.add(
        log.new(
            EventKind.CONFLICT_RESOLVE,
            key,
            day(20),
            (left, right),
            {"left": left, "right": right, "winner": a, "how": "test"},
        )
    )
    return list(log), ids


def test_old_per_pair_events_keep_folding_as_pairs() -> None:
    events, (a, b, c) = _legacy_store()
    mem = Memory.replay(events, clock=lambda: day(30))
    key = KEYS[0]
    pair = lambda x, y: tuple(sorted((x, y)))  # noqa: E731
    assert mem.open_conflicts(key) == sorted([pair(a, c), pair(b, c)])
    assert mem.resolve_at(key, day(5)).conflicts == tuple(sorted([pair(a, c), pair(b, c)]))
    # as of before the resolution all three pairs were open, and at day 1 only a held
    assert mem.resolve_at(key, day(5), day(15)).conflicts == tuple(
        sorted([pair(a, b), pair(a, c), pair(b, c)])
    )
    assert mem.resolve_at(key, day(0), day(15)).value == "a"
    # a new contradicting claim on the old store joins no group: it starts one
    d = mem.assert_fact(key, "z", valid_from=day(0), recorded_at=day(25), source_id="new")
    groups = [g for g in mem.open_conflicts(key) if d.id in g]
    assert groups == [tuple(sorted((a, b, c, d.id)))]
    assert mem.reconcile().ok
