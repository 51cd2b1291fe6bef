"""The derived-state checks on small hand-made observations (a model of what an adapter
reports), each with a case that shows the anomaly and one that must not; and their laws
as properties (a serial history never forks, a permutation of a structure never diverges)."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from toki.real.derived import (
    DERIVED,
    check_derived,
    duplicate,
    forked_history,
    index_divergence,
    lost_update,
    response_divergence,
    resurrection,
    scope_leak,
)

ALICE = {"user_id": "alice"}
BOB = {"user_id": "bob"}


def obs(**derived: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"records": [], "versions": {}, "steps": []}
    return {"derived": {**base, **derived}}


def add(agent: int, rid: str, text: str, scope: dict[str, str] = ALICE) -> dict[str, Any]:
    return {
        "agent": agent,
        "step": 0,
        "op": "add",
        "scope": scope,
        "returned": [{"id": rid, "event": "ADD", "text": text}],
    }


def update(agent: int, rid: str, text: str, basis: str) -> dict[str, Any]:
    return {
        "agent": agent,
        "step": 1,
        "op": "add",
        "scope": ALICE,
        "returned": [{"id": rid, "event": "UPDATE", "text": text, "previous": basis}],
    }


def row(event: str, old: str | None, new: str | None) -> dict[str, Any]:
    return {"event": event, "old": old, "new": new}


# ---------------------------------------------------------------------------- lost update


def test_lost_update_when_a_write_replaces_a_version_it_never_saw() -> None:
    """mem0 1.x: both decided UPDATE on Bob; the second history row reads Carol -> Dave."""
    o = obs(
        versions={
            "m": [
                row("ADD", None, "Bob"),
                row("UPDATE", "Bob", "Carol"),
                row("UPDATE", "Carol", "Dave"),
            ]
        },
        steps=[add(0, "m", "Bob"), update(0, "m", "Carol", "Bob"), update(1, "m", "Dave", "Bob")],
    )
    v = lost_update(o)
    assert v.found and v.keys == ("m",)
    assert v.observed == [
        {
            "id": "m",
            "decided_on": "Bob",
            "replaced": "Carol",
            "wrote": "Dave",
            "agent": 1,
            "step": 1,
        }
    ]


def test_no_lost_update_when_each_write_saw_the_version_it_replaced() -> None:
    o = obs(
        versions={
            "m": [
                row("ADD", None, "Bob"),
                row("UPDATE", "Bob", "Carol"),
                row("UPDATE", "Carol", "Dave"),
            ]
        },
        steps=[add(0, "m", "Bob"), update(0, "m", "Carol", "Bob"), update(1, "m", "Dave", "Carol")],
    )
    v = lost_update(o)
    assert v.ran and not v.found and v.details["checked"] == 2


def test_lost_update_abstains_when_no_update_reports_its_basis() -> None:
    bare = {
        "agent": 1,
        "step": 1,
        "op": "update",
        "scope": {},
        "returned": [{"id": "m", "event": "UPDATE", "text": "Dave"}],
    }
    o = obs(
        versions={"m": [row("ADD", None, "Bob"), row("UPDATE", "Bob", "Dave")]},
        steps=[add(0, "m", "Bob"), bare],
    )
    v = lost_update(o)
    assert not v.ran and "basis" in v.details["abstains"]


def test_no_update_at_all_is_no_lost_update() -> None:
    v = lost_update(obs(versions={"m": [row("ADD", None, "Bob")]}, steps=[add(0, "m", "Bob")]))
    assert v.ran and not v.found


# ---------------------------------------------------------------------------- forked history


def test_forked_history_two_successors_of_bob() -> None:
    o = obs(
        versions={
            "m": [
                row("ADD", None, "Bob"),
                row("UPDATE", "Bob", "Carol"),
                row("UPDATE", "Bob", "Dave"),
            ]
        }
    )
    v = forked_history(o)
    assert v.found and v.observed == [
        {"id": "m", "version": "Bob", "successors": ["Carol", "Dave"]}
    ]


def test_a_value_that_comes_back_is_not_a_fork() -> None:
    """Bob -> Carol -> Bob -> Carol is a chain: every row follows the one before it."""
    o = obs(
        versions={
            "m": [
                row("ADD", None, "Bob"),
                row("UPDATE", "Bob", "Carol"),
                row("UPDATE", "Carol", "Bob"),
                row("UPDATE", "Bob", "Carol"),
            ]
        }
    )
    assert not forked_history(o).found


@seed(31)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["Bob", "Carol", "Dave"]), min_size=1, max_size=8))
def test_a_serial_history_never_forks(values: list[str]) -> None:
    rows = [row("ADD", None, values[0])]
    rows += [row("UPDATE", a, b) for a, b in itertools.pairwise(values)]
    assert not forked_history(obs(versions={"m": rows})).found


# ---------------------------------------------------------------------------- response divergence


def test_response_divergence_an_update_reported_but_not_stored() -> None:
    o = obs(
        versions={"m": [row("ADD", None, "Bob")]},
        steps=[add(0, "m", "Bob"), update(1, "m", "Dave", "Bob")],
    )
    v = response_divergence(o)
    assert v.found and v.observed[0]["event"] == "UPDATE" and v.observed[0]["text"] == "Dave"


def test_no_response_divergence_when_history_holds_every_reported_write() -> None:
    o = obs(
        versions={"m": [row("ADD", None, "Bob"), row("UPDATE", "Bob", "Dave")]},
        steps=[add(0, "m", "Bob"), update(1, "m", "Dave", "Bob")],
    )
    v = response_divergence(o)
    assert v.ran and not v.found and v.details["checked"] == 2


# ---------------------------------------------------------------------------- index divergence


def structures(index: list[str], id_map: list[str]) -> dict[str, Any]:
    return obs(
        structures={"vector_index": index, "id_map": id_map}, agree=[["vector_index", "id_map"]]
    )


def test_index_divergence_a_vector_without_an_id() -> None:
    v = index_divergence(structures(["<no id: vector 0>", "b"], ["b"]))
    assert v.found and v.observed == [
        {"id": "vector_index~id_map", "vector_index": ["<no id: vector 0>"], "id_map": []}
    ]


def test_index_divergence_counts_copies() -> None:
    """Two vectors mapped to one id is a divergence although the id sets are equal."""
    assert index_divergence(structures(["a", "a"], ["a"])).found


@seed(31)
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from("abcde"), max_size=6), st.randoms(use_true_random=False))
def test_the_same_ids_in_any_order_never_diverge(ids: list[str], rnd: Any) -> None:
    shuffled = list(ids)
    rnd.shuffle(shuffled)
    assert not index_divergence(structures(ids, shuffled)).found


def test_index_divergence_abstains_on_a_structure_it_cannot_read() -> None:
    o = obs(structures={"vector_index": []}, agree=[["vector_index", "docstore"]])
    v = index_divergence(o)
    assert not v.ran and "docstore" in v.details["abstains"]


# ---------------------------------------------------------------------------- resurrection


def read(agent: int, *records: tuple[str, str]) -> dict[str, Any]:
    return {
        "agent": agent,
        "step": 2,
        "op": "get_all",
        "scope": ALICE,
        "returned": [{"id": i, "text": t, "scope": ALICE} for i, t in records],
    }


def delete(agent: int, rid: str) -> dict[str, Any]:
    return {
        "agent": agent,
        "step": 1,
        "op": "delete",
        "scope": {},
        "returned": [{"id": rid, "event": "DELETE"}],
    }


def test_resurrection_a_read_after_the_delete_serves_the_record() -> None:
    o = obs(steps=[add(0, "m", "Bob"), delete(0, "m"), read(1, ("m", "Bob"))])
    v = resurrection(o)
    assert v.found and v.observed == [{"id": "m", "text": "Bob", "served_by": [1, 2]}]


def test_resurrection_the_deleted_record_is_live_at_the_end() -> None:
    o = obs(steps=[add(0, "m", "Bob"), delete(0, "m")], records=[{"id": "m", "text": "Bob"}])
    assert resurrection(o).observed == [{"id": "m", "text": "Bob", "served_by": "final state"}]


def test_a_read_that_overlapped_the_delete_may_serve_the_record() -> None:
    """Invoked before the delete returned (one return logged: the add), returned after it:
    concurrent with the delete, so serving the record is allowed."""
    overlapping = {**read(1, ("m", "Bob")), "invoked": 1}
    o = obs(steps=[add(0, "m", "Bob"), delete(0, "m"), overlapping])
    assert not resurrection(o).found
    after = {**read(1, ("m", "Bob")), "invoked": 2}
    assert resurrection(obs(steps=[add(0, "m", "Bob"), delete(0, "m"), after])).found


def test_no_resurrection_when_the_read_came_before_the_delete() -> None:
    o = obs(steps=[add(0, "m", "Bob"), read(1, ("m", "Bob")), delete(0, "m")])
    assert not resurrection(o).found


# ---------------------------------------------------------------------------- scope leak


def test_scope_leak_a_read_serves_another_users_record() -> None:
    leak = {
        "agent": 1,
        "step": 1,
        "op": "search",
        "scope": BOB,
        "returned": [{"id": "m", "text": "alice:city is Paris", "scope": ALICE}],
    }
    o = obs(steps=[add(0, "m", "alice:city is Paris"), leak])
    v = scope_leak(o)
    assert v.found and v.observed == [{"id": "m", "asked": BOB, "served": ALICE, "by": "search"}]


def test_scope_leak_a_delete_of_one_user_removes_anothers_record() -> None:
    """mem0 1.0.5's delete_all(user_id=alice) resets the collection: Bob's record is gone,
    with no DELETE row of its own."""
    wipe = {
        "agent": 0,
        "step": 1,
        "op": "delete_all",
        "scope": ALICE,
        "returned": [{"event": "DELETE_ALL", "scope": ALICE}],
    }
    o = obs(
        steps=[add(0, "a", "alice:city is Paris"), add(1, "b", "bob:city is Rome", BOB), wipe],
        versions={
            "a": [row("ADD", None, "x"), row("DELETE", "x", None)],
            "b": [row("ADD", None, "bob:city is Rome")],
        },
    )
    v = scope_leak(o)
    assert v.found and v.keys == ("b",)


def test_no_scope_leak_when_each_call_stays_in_its_scope() -> None:
    wipe = {
        "agent": 0,
        "step": 1,
        "op": "delete_all",
        "scope": ALICE,
        "returned": [{"event": "DELETE_ALL", "scope": ALICE}],
    }
    o = obs(
        steps=[
            add(0, "a", "alice:city is Paris"),
            add(1, "b", "bob:city is Rome", BOB),
            wipe,
            read(0),
        ],
        versions={
            "a": [row("ADD", None, "x"), row("DELETE", "x", None)],
            "b": [row("ADD", None, "bob:city is Rome")],
        },
        records=[{"id": "b", "text": "bob:city is Rome", "scope": BOB}],
    )
    v = scope_leak(o)
    assert v.ran and not v.found


# ---------------------------------------------------------------------------- duplicate


def twice(text: str, scope: dict[str, str] = ALICE) -> dict[str, Any]:
    return obs(
        records=[
            {"id": "1", "text": text, "scope": scope},
            {"id": "2", "text": text, "scope": scope},
        ]
    )


def test_duplicate_when_no_serial_order_keeps_two() -> None:
    v = duplicate(twice("alice:drink is coffee"), lambda: [set(), set()])
    assert v.found and v.details["serial_runs"] == 2


def test_no_duplicate_when_a_serial_order_keeps_two_as_well() -> None:
    """The library keeps both copies serially too: that is its design, not a race."""
    key = "[('user_id', 'alice')] alice:drink is coffee"
    v = duplicate(twice("alice:drink is coffee"), lambda: [{key}, set()])
    assert v.ran and not v.found


def test_the_same_text_under_two_scopes_is_no_duplicate() -> None:
    o = obs(
        records=[{"id": "1", "text": "t", "scope": ALICE}, {"id": "2", "text": "t", "scope": BOB}]
    )
    assert not duplicate(o, None).found


def test_every_check_abstains_on_an_adapter_without_derived_state() -> None:
    for name in DERIVED:
        v = check_derived(name, {"memories": []}, lambda: [])
        assert not v.ran and v.abstained, name


# ---------------------------------------------------------------------------- reported states


def save(agent: int, rid: str, invalid_at: str | None) -> dict[str, Any]:
    return {
        "agent": agent,
        "step": 0,
        "op": "add_episode",
        "scope": {},
        "returned": [
            {"id": rid, "event": "SAVE", "text": "f", "state": {"invalid_at": invalid_at}}
        ],
    }


def test_response_divergence_the_last_reported_state_is_not_stored() -> None:
    """Graphiti: agent 1 saved Bob invalid from day 7 and returned; agent 0 returned last,
    reporting day 6; the graph holds day 7."""
    o = obs(
        steps=[save(1, "bob", "day 7"), save(0, "bob", "day 6")],
        records=[{"id": "bob", "text": "f", "state": {"invalid_at": "day 7"}}],
    )
    del o["derived"]["versions"]
    v = response_divergence(o)
    assert v.found and v.observed == [
        {
            "id": "bob",
            "returned": {"invalid_at": "day 6"},
            "stored": {"invalid_at": "day 7"},
            "agent": 0,
            "step": 0,
        }
    ]


def test_no_response_divergence_when_the_last_call_saw_the_stored_state_or_a_removal_followed() -> (
    None
):
    o = obs(
        steps=[
            save(0, "bob", "day 6"),
            save(1, "bob", "day 7"),
            save(1, "carol", None),
            delete(0, "episode-of-carol"),
        ],
        records=[{"id": "bob", "text": "f", "state": {"invalid_at": "day 7"}}],
    )
    del o["derived"]["versions"]
    v = response_divergence(o)
    assert v.ran and not v.found and v.details["checked"] == 2
