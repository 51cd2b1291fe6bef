"""A write folds into a fork of a hot key's state (toki.overlay) and into a copy of a small
key's, which becomes the live state once the write commits: the fork must give what the
clone-and-fold gives, both must leave the live state as it was until the commit, and the
adopted copies must be what folding the log gives."""

from __future__ import annotations

import contextlib
import random
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from tests.test_conflict_groups import workload
from tests.test_replay_properties import (
    _BUILT_FIELDS,
    _STATE_FIELDS,
    VALUES,
    _fields,
    day,
    scripted_memory,
)
from toki import FactVersion, Memory
from toki.errors import TokiError
from toki.overlay import DictOverlay, SetOverlay, Sorted, SortedOverlay, TailOverlay
from toki.replay import KeyState, Snapshot, replay
from toki.store.memory import InMemoryStore

ALL_FIELDS = (*_STATE_FIELDS, *_BUILT_FIELDS)


def _answers(state: KeyState, rng: random.Random) -> list[Any]:
    """Queries a write's planner and the projection ask, at seeded random points."""
    out: list[Any] = [state.summary(), state.digest_parts(), state.open_conflicts()]
    for _ in range(6):
        at, as_of = day(rng.randint(-5, 120)), rng.choice([None, day(rng.randint(-1, 60))])
        out.append(state.resolve(at, as_of))
        out.append([(h.version.id, h.lifecycle, h.effective) for h in state.history(as_of)])
    for version in list(state.versions.values())[:5]:
        out.append(state.overlapping(version.valid))
    return out


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), data=st.data())
def test_folding_into_a_fork_equals_folding_into_a_clone(seed: int, data: st.DataObject) -> None:
    """Any prefix of a random history replayed, then the rest of each key's events folded
    into a fork and into a clone of its state: every field, the summary, the digest and
    the answers agree, the forks' snapshot has the full replay's state hash, and the live
    state is field for field what it was."""
    note(f"seed={seed}")
    script = data.draw(st.sampled_from([scripted_memory, workload]), label="script")
    events = sorted(script(seed, 40).events(), key=lambda e: e.seq)
    cut = data.draw(st.integers(0, len(events)), label="cut")
    live = replay(events[:cut])
    forks = Snapshot()
    forks.keys = dict(live.keys)
    for key, state in live.keys.items():
        fork = state.fork()  # builds the live state's query structures first
        before = _fields(state, ALL_FIELDS)
        clone = state.clone()
        for event in events[cut:]:
            if event.key == key:
                fork.apply(event)
                clone.apply(event)
        assert _fields(fork, ALL_FIELDS) == _fields(clone, ALL_FIELDS), key
        assert _answers(fork, random.Random(seed)) == _answers(clone, random.Random(seed))
        assert _fields(state, ALL_FIELDS) == before, key
        forks.keys[key] = fork
    for event in events[cut:]:
        if event.key not in live.keys:
            forks.apply(event)
    assert forks.state_hash() == replay(events).state_hash()


def _live_fields(mem: Memory) -> dict[Any, Any]:
    return {k: _fields(s, ALL_FIELDS) for k, s in mem._snapshot.keys.items()}


@settings(max_examples=30, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6))
def test_a_refused_or_failed_write_leaves_the_live_state_unchanged(seed: int) -> None:
    """A write the planner refuses, and one whose append fails after its events were folded
    into the fork for the projection rows, change no field of any live key state."""
    note(f"seed={seed}")
    mem = scripted_memory(seed)
    rng = random.Random(seed)
    versions: list[FactVersion] = [
        v for s in mem._snapshot.keys.values() for v in s.versions.values()
    ]
    before, digest = _live_fields(mem), mem.state_hash()
    target = rng.choice(versions)
    with pytest.raises(TokiError):  # refused: the valid time starts before the old version
        mem.supersede(
            target,
            "Oslo",
            valid_from=(target.valid.start or day(0)) - timedelta(days=1000),
            source_id="t",
        )
    assert _live_fields(mem) == before and mem.state_hash() == digest
    store = mem._store
    assert isinstance(store, InMemoryStore)
    real = store.append

    def boom(*args: Any, **kwargs: Any) -> None:
        raise TokiError("append failed")

    store.append = boom  # type: ignore[method-assign]
    with pytest.raises(TokiError, match="append failed"):
        mem.assert_fact(
            target.key, rng.choice(VALUES), valid_from=day(rng.randint(0, 90)), source_id="t"
        )
    assert _live_fields(mem) == before and mem.state_hash() == digest
    store.append = real  # type: ignore[method-assign]
    written = mem.assert_fact(
        target.key, "Oslo", valid_from=day(rng.randint(0, 90)), source_id="t"
    )
    assert mem.state_hash() == replay(mem.events()).state_hash()
    assert mem._snapshot.keys[target.key].versions[written.id] == written


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10**6), small=st.sampled_from([0, 1, 3, 64]))
def test_the_live_state_a_write_adopts_is_the_fold_of_the_log(seed: int, small: int) -> None:
    """Writes whose keys are copied (at most `small` versions) or forked, with Dbs taken
    between them: each live key state is field for field the replay of the log, and every
    Db still has the state hash it had when it was taken."""
    note(f"seed={seed} small={small}")
    rng = random.Random(seed)
    with mock.patch("toki.partition.SMALL_KEY", small):
        mem = scripted_memory(seed, 15)
        taken = []
        for _ in range(15):
            if rng.random() < 0.4:
                db = mem.db()
                taken.append((db, db.state_hash()))
            key = rng.choice(sorted(mem._snapshot.keys))
            with contextlib.suppress(TokiError):
                mem.assert_fact(
                    key, rng.choice(VALUES), valid_from=day(rng.randint(0, 90)), source_id="t"
                )
    replayed = replay(mem.events())
    assert mem._snapshot.keys.keys() == replayed.keys.keys()
    for key, state in replayed.keys.items():
        state._ensure_built()
        live = mem._snapshot.keys[key]
        live._ensure_built()
        assert _fields(live, ALL_FIELDS) == _fields(state, ALL_FIELDS), key
    assert mem.state_hash() == replayed.state_hash()
    assert [db.state_hash() for db, _ in taken] == [h for _, h in taken]


def test_overlays_read_through_and_record_only_their_own_changes() -> None:
    base_dict, base_set, base_list = {"a": 1, "b": 2}, {"x", "y"}, [1, 2]
    d, s, t = DictOverlay(base_dict), SetOverlay(base_set), TailOverlay(base_list)
    d["c"] = 3
    del d["a"]
    d["b"] = 20
    s.discard("x")
    s.add("z")
    t.append(3)
    assert dict(d) == {"b": 20, "c": 3} and len(d) == 2 and "a" not in d
    assert set(s) == {"y", "z"} and len(s) == 2 and "x" not in s
    assert list(t) == [1, 2, 3] and t[-1] == 3 and len(t) == 3
    with pytest.raises(KeyError):
        del d["a"]
    assert base_dict == {"a": 1, "b": 2} and base_set == {"x", "y"} and base_list == [1, 2]
    base = Sorted([(1, "a"), (5, "b"), (9, "c")])
    o = SortedOverlay(base)
    o.remove((9, "c"))
    assert o.add((7, "d")) and not o.add((3, "e"))  # went last; did not
    assert list(o) == [(1, "a"), (3, "e"), (5, "b"), (7, "d")] and o.last() == (7, "d")
    assert o.after((3, "e")) == [(5, "b"), (7, "d")] and o.from_((5, "b")) == [(5, "b"), (7, "d")]
    assert o.count_to((5, "b")) == 3 and o.count_before((5, "b")) == 2 and len(o) == 4
    assert list(base) == [(1, "a"), (5, "b"), (9, "c")]
