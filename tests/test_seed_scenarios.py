"""The failure cases listed in the seeds (../shared/seeds/000, 002), on every backend."""

from __future__ import annotations

from toki import UNKNOWN, BoundSource, FactKey, FactVersion, Lifecycle, Memory, Scope
from toki.log import EventKind

CITY = FactKey(tenant="t1", subject="u1", fact_key="city")


def _lisbon_berlin(mem: Memory) -> tuple[str, str]:
    v1 = mem.assert_fact(
        CITY,
        "Lisbon",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-02-01T00:00:00Z",
        source_id="msg-1",
    )
    v2 = mem.supersede(
        v1,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="msg-2",
    )
    return v1.id, v2.id


def test_supersede_keeps_both_and_answers_each_clock(mem: Memory) -> None:
    v1, v2 = _lisbon_berlin(mem)
    assert mem.current(CITY).value == "Berlin"
    # as known on 1 Aug, 20 July was still Lisbon; as known now, it was Berlin
    assert mem.resolve_at(CITY, "2026-07-20T00:00:00Z", "2026-08-01T00:00:00Z").value == "Lisbon"
    assert mem.resolve_at(CITY, "2026-07-20T00:00:00Z").value == "Berlin"
    assert mem.resolve_at(CITY, "2026-03-01T00:00:00Z").value == "Lisbon"
    assert mem.resolve_at(CITY, "2025-12-01T00:00:00Z").kind == "unknown"
    history = {h.version.id: h for h in mem.history(CITY)}
    assert history[v1].lifecycle is Lifecycle.SUPERSEDED
    assert history[v1].replaced_by == (v2,)
    assert history[v1].effective is not None
    assert history[v1].effective.end is not None
    assert history[v2].lifecycle is Lifecycle.ACTIVE


def test_fixed_valid_at_reproduces_what_was_known_each_time(mem: Memory) -> None:
    _lisbon_berlin(mem)
    (berlin,) = [h.version for h in mem.history(CITY) if h.version.value == "Berlin"]
    mem.revoke(berlin, recorded_at="2026-09-01T00:00:00Z", reason="typo: never moved")
    at = "2026-08-01T00:00:00Z"
    seen = {
        as_of: mem.resolve_at(CITY, at, as_of)
        for as_of in (
            "2026-01-15T00:00:00Z",
            "2026-03-01T00:00:00Z",
            "2026-08-20T00:00:00Z",
            "2026-09-02T00:00:00Z",
        )
    }
    assert seen["2026-01-15T00:00:00Z"].kind == "unknown"  # nothing recorded yet
    assert seen["2026-03-01T00:00:00Z"].value == "Lisbon"
    assert seen["2026-08-20T00:00:00Z"].value == "Berlin"
    assert seen["2026-09-02T00:00:00Z"].value == "Lisbon"  # the move never happened
    # the same questions asked of a replay cut at each system time agree
    for as_of, answer in seen.items():
        cut = Memory.replay(mem.events(), system_as_of=as_of)
        assert cut.resolve_at(CITY, at) == answer


def test_newer_july_value_arriving_before_older_june_value(make_memory) -> None:  # type: ignore[no-untyped-def]
    # Source order: June fact written 1 Aug, July move written 12 Aug. Delivery: July first.
    mem = make_memory()
    berlin = mem.assert_fact(
        CITY,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="msg-july",
    )
    lisbon = mem.assert_fact(
        CITY,
        "Lisbon",
        valid_from="2026-06-01T00:00:00Z",
        valid_to="2026-07-03T00:00:00Z",
        recorded_at="2026-08-01T00:00:00Z",
        source_id="msg-june",
    )
    assert mem.current(CITY).value == "Berlin"  # the late old value is not resurrected
    assert mem.resolve_at(CITY, "2026-06-15T00:00:00Z").value == "Lisbon"
    assert mem.open_conflicts(CITY) == []  # [June, July) and [July, ...) are adjacent
    # knowledge time is the source's: on 5 Aug we knew June but not July
    assert mem.resolve_at(CITY, "2026-06-15T00:00:00Z", "2026-08-05T00:00:00Z").value == "Lisbon"
    assert mem.resolve_at(CITY, "2026-07-20T00:00:00Z", "2026-08-05T00:00:00Z").kind == "unknown"
    # the other delivery order gives the same state
    other = make_memory()
    other.assert_fact(
        CITY,
        "Lisbon",
        valid_from="2026-06-01T00:00:00Z",
        valid_to="2026-07-03T00:00:00Z",
        recorded_at="2026-08-01T00:00:00Z",
        source_id="msg-june",
    )
    other.assert_fact(
        CITY,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="msg-july",
    )
    assert other.state_hash() == mem.state_hash()
    assert {lisbon.id, berlin.id} == {h.version.id for h in other.history(CITY)}


def test_late_open_ended_old_claim_is_a_conflict_not_a_resurrection(mem: Memory) -> None:
    mem.assert_fact(
        CITY,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="msg-july",
    )
    mem.assert_fact(
        CITY,
        "Lisbon",
        valid_from="2026-06-01T00:00:00Z",
        recorded_at="2026-08-13T00:00:00Z",
        source_id="msg-late",
    )
    now = mem.current(CITY)
    assert now.kind == "conflict" and now.value is None
    assert mem.resolve_at(CITY, "2026-06-15T00:00:00Z").value == "Lisbon"


def test_duplicate_delivery_is_a_no_op(mem: Memory) -> None:
    kwargs = dict(
        valid_from="2026-01-01T00:00:00Z", recorded_at="2026-02-01T00:00:00Z", source_id="msg-1"
    )
    a = mem.assert_fact(CITY, "Lisbon", **kwargs)  # type: ignore[arg-type]
    before = (len(mem.events()), mem.state_hash())
    b = mem.assert_fact(CITY, "Lisbon", **kwargs)  # type: ignore[arg-type]
    assert a == b and a.id == b.id
    assert (len(mem.events()), mem.state_hash()) == before
    s1 = mem.supersede(
        a,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="msg-2",
    )
    n = len(mem.events())
    s2 = mem.supersede(
        a,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="msg-2",
    )
    assert s1.id == s2.id and len(mem.events()) == n


def test_concurrent_conflicting_assertions_stay_active_with_one_open_conflict(mem: Memory) -> None:
    a = mem.assert_fact(
        CITY,
        "Paris",
        valid_from="2026-03-01T00:00:00Z",
        recorded_at="2026-03-02T00:00:00Z",
        source_id="agent-a",
    )
    b = mem.assert_fact(
        CITY,
        "Rome",
        valid_from="2026-03-01T00:00:00Z",
        recorded_at="2026-03-02T00:00:00Z",
        source_id="agent-b",
    )
    assert mem.lifecycle(a) is Lifecycle.ACTIVE and mem.lifecycle(b) is Lifecycle.ACTIVE
    assert mem.open_conflicts(CITY) == [tuple(sorted((a.id, b.id)))]
    opens = [e for e in mem.events() if e.kind is EventKind.CONFLICT_OPEN]
    assert len(opens) == 1
    r = mem.current(CITY)
    assert r.kind == "conflict" and r.value is None
    assert set(r.version_ids) == {a.id, b.id}
    assert r.conflicts == (tuple(sorted((a.id, b.id))),)


def test_adjacent_intervals_do_not_conflict(mem: Memory) -> None:
    mem.assert_fact(
        CITY,
        "Oslo",
        valid_from="2026-01-01T00:00:00Z",
        valid_to="2026-02-01T00:00:00Z",
        recorded_at="2026-03-01T00:00:00Z",
        source_id="s1",
    )
    mem.assert_fact(
        CITY,
        "Bergen",
        valid_from="2026-02-01T00:00:00Z",
        valid_to="2026-03-01T00:00:00Z",
        recorded_at="2026-03-01T00:00:00Z",
        source_id="s2",
    )
    assert mem.open_conflicts(CITY) == []
    assert mem.resolve_at(CITY, "2026-01-31T23:59:59Z").value == "Oslo"
    assert mem.resolve_at(CITY, "2026-02-01T00:00:00Z").value == "Bergen"  # half-open
    assert mem.resolve_at(CITY, "2026-03-01T00:00:00Z").kind == "unknown"


LEAD = FactKey(tenant="crm", subject="lead-7", fact_key="status")


def test_status_change_closes_interval_but_wrong_entry_is_retracted(mem: Memory) -> None:
    warm = mem.assert_fact(
        LEAD,
        "warm",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-01-02T00:00:00Z",
        source_id="call-1",
    )
    cold = mem.supersede(
        warm,
        "cold",
        valid_from="2026-03-01T00:00:00Z",
        recorded_at="2026-03-02T00:00:00Z",
        source_id="call-2",
    )
    # world changed: warm held in January and is still history
    assert mem.resolve_at(LEAD, "2026-01-15T00:00:00Z").value == "warm"
    assert mem.lifecycle(warm) is Lifecycle.SUPERSEDED
    # a wrong entry: "won" was recorded by mistake and then retracted
    won = mem.supersede(
        cold,
        "won",
        valid_from="2026-04-01T00:00:00Z",
        recorded_at="2026-04-02T00:00:00Z",
        source_id="typo",
    )
    mem.revoke(won, recorded_at="2026-04-05T00:00:00Z", reason="clicked the wrong status")
    assert mem.lifecycle(won) is Lifecycle.REVOKED
    assert mem.current(LEAD).value == "cold"  # it never held, so cold was never closed
    # what did we believe before the correction?
    assert mem.resolve_at(LEAD, "2026-04-03T00:00:00Z", "2026-04-03T00:00:00Z").value == "won"
    assert mem.lifecycle(won, "2026-04-03T00:00:00Z") is Lifecycle.ACTIVE
    entry = next(h for h in mem.history(LEAD) if h.version.id == won.id)
    assert entry.revoke_reason == "clicked the wrong status"
    assert entry.revoked_at is not None


def test_revoked_replacement_leaves_history_explainable(mem: Memory) -> None:
    v1, v2 = _lisbon_berlin(mem)
    mem.revoke(v2, recorded_at="2026-08-13T00:00:00Z", reason="wrong entry")
    hist = {h.version.id: h for h in mem.history(CITY)}
    assert hist[v2].lifecycle is Lifecycle.REVOKED and hist[v2].revoke_reason == "wrong entry"
    assert hist[v1].lifecycle is Lifecycle.ACTIVE  # its only replacement never held
    assert mem.current(CITY).value == "Lisbon"
    before = {h.version.id: h for h in mem.history(CITY, "2026-08-12T12:00:00Z")}
    assert before[v1].lifecycle is Lifecycle.SUPERSEDED
    assert before[v1].replaced_by == (v2,)
    assert mem.resolve_at(CITY, "2026-08-01T00:00:00Z", "2026-08-12T12:00:00Z").value == "Berlin"
    assert "wrong entry" in mem.render_history(CITY)


def test_used_to_live_in_lisbon_keeps_its_start_unknown(mem: Memory) -> None:
    v = mem.assert_fact(
        CITY,
        "Lisbon",
        valid_from=UNKNOWN,
        valid_to="2026-05-01T00:00:00Z",
        recorded_at="2026-05-01T00:00:00Z",
        source_id="msg-used-to",
        to_source=BoundSource.ASSUMED,
    )
    assert v.valid.start is None and v.valid.start_source is BoundSource.UNKNOWN
    assert v.valid.end_source is BoundSource.ASSUMED
    text = mem.render_history(CITY)
    assert "valid from unknown" in text and "(assumed)" in text
    assert mem.current(CITY).kind == "unknown"  # it is a past fact


def test_missing_valid_from_is_assumed_to_be_the_recording_time(mem: Memory) -> None:
    v = mem.assert_fact(CITY, "Lisbon", recorded_at="2026-05-01T00:00:00Z", source_id="m")
    assert v.valid.start_source is BoundSource.ASSUMED
    assert v.valid.start == v.recorded_at


PM = FactKey(tenant="t1", subject="repo", fact_key="package_manager")


def test_task_scope_leaves_global_preference_intact(mem: Memory) -> None:
    npm = mem.assert_fact(
        PM,
        "npm",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-01-01T00:00:00Z",
        source_id="m1",
    )
    task = Scope.from_resource("task:42")
    mem.assert_fact(
        PM.in_scope(task), "pnpm", recorded_at="2026-06-10T00:00:00Z", source_id="m2"
    )  # "use pnpm this time"
    assert mem.current(PM).value == "npm"
    assert mem.lifecycle(npm) is Lifecycle.ACTIVE
    assert mem.current(PM, scope_chain=[task, Scope()]).value == "pnpm"
    assert mem.current(PM, scope_chain=["task:43", "global"]).value == "npm"
    assert mem.current(PM.in_scope(task)).value == "pnpm"  # default chain: task then global
    # "from 1 July we use pnpm" supersedes the global preference
    mem.supersede(
        npm,
        "pnpm",
        valid_from="2026-07-01T00:00:00Z",
        recorded_at="2026-06-20T00:00:00Z",
        source_id="m3",
    )
    assert mem.current(PM).value == "pnpm"
    assert mem.resolve_at(PM, "2026-06-25T00:00:00Z").value == "npm"


def test_stale_fact_that_would_rank_higher_is_filtered_by_validity(mem: Memory) -> None:
    # The superseded value repeats the query's words; validity, not similarity, decides.
    old = mem.assert_fact(
        CITY,
        "Lisbon, Portugal (Lisbon Lisbon)",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-01-01T00:00:00Z",
        source_id="m1",
    )
    mem.supersede(
        old,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="m2",
    )
    r = mem.current(CITY)
    assert r.value == "Berlin" and old.id not in r.version_ids


def test_prague_segment_splits_left_new_right(mem: Memory) -> None:
    ivan = FactKey(tenant="crm", subject="people:ivan", fact_key="city")
    berlin = mem.assert_fact(
        ivan,
        "Berlin",
        valid_from="2026-09-01T00:00:00Z",
        recorded_at="2026-09-02T00:00:00Z",
        source_id="m1",
    )
    prague = mem.insert_segment(
        ivan,
        "Prague",
        valid_from="2026-10-01T00:00:00Z",
        valid_to="2026-10-15T00:00:00Z",
        recorded_at="2026-11-01T00:00:00Z",
        source_id="m2",
    )
    hist = mem.history(ivan)
    standing = [h for h in hist if h.lifecycle is Lifecycle.ACTIVE]
    spans = [(h.version.value, h.version.valid.start, h.version.valid.end) for h in standing]
    assert [s[0] for s in spans] == ["Berlin", "Prague", "Berlin"]
    assert spans[0][2] == spans[1][1] == prague.valid.start
    assert spans[1][2] == spans[2][1] == prague.valid.end
    assert spans[2][2] is None
    old = next(h for h in hist if h.version.id == berlin.id)
    assert old.lifecycle is Lifecycle.SUPERSEDED and old.effective is None
    assert len(old.replaced_by) == 3
    assert mem.resolve_at(ivan, "2026-10-14T23:00:00Z").value == "Prague"
    assert mem.resolve_at(ivan, "2026-10-15T00:00:00Z").value == "Berlin"
    assert mem.resolve_at(ivan, "2026-09-15T00:00:00Z").value == "Berlin"
    # before we learned of Prague, October was Berlin
    assert mem.resolve_at(ivan, "2026-10-05T00:00:00Z", "2026-10-20T00:00:00Z").value == "Berlin"
    # nothing was rewritten: the original version is untouched and still in the log
    asserts = [e for e in mem.events() if e.kind is EventKind.ASSERT]
    assert asserts[0].version == berlin
    assert mem.open_conflicts(ivan) == []


IVAN = FactKey(tenant="crm", subject="people:ivan", fact_key="city")


def _berlin_split_by_prague(mem: Memory) -> tuple[FactKey, FactVersion]:
    """Berlin from 1 Sep, then learned on 1 Nov: Prague 1-14 Oct (a segment split)."""
    berlin = mem.assert_fact(
        IVAN,
        "Berlin",
        valid_from="2026-09-01T00:00:00Z",
        recorded_at="2026-09-02T00:00:00Z",
        source_id="m1",
    )
    mem.insert_segment(
        IVAN,
        "Prague",
        valid_from="2026-10-01T00:00:00Z",
        valid_to="2026-10-15T00:00:00Z",
        recorded_at="2026-11-01T00:00:00Z",
        source_id="m2",
    )
    return IVAN, berlin


def test_retraction_by_value_finds_the_piece_that_now_holds_it(mem: Memory) -> None:
    ivan, berlin = _berlin_split_by_prague(mem)
    # the Berlin claim was wrong: the right-hand piece holds it now, not the original id
    revoked = mem.revoke_value(
        ivan,
        "Berlin",
        valid_at="2026-11-20T00:00:00Z",
        recorded_at="2026-11-21T00:00:00Z",
        reason="never lived there",
    )
    assert berlin.id not in revoked and len(revoked) == 1
    assert mem.current(ivan).kind == "unknown"
    assert mem.resolve_at(ivan, "2026-10-05T00:00:00Z").value == "Prague"


def test_revoking_the_original_also_revokes_its_split_pieces(mem: Memory) -> None:
    ivan, berlin = _berlin_split_by_prague(mem)
    mem.revoke(berlin, recorded_at="2026-11-21T00:00:00Z", reason="never lived there")
    assert mem.current(ivan).kind == "unknown"
    assert mem.resolve_at(ivan, "2026-09-15T00:00:00Z").kind == "unknown"
    assert mem.resolve_at(ivan, "2026-10-05T00:00:00Z").value == "Prague"


def test_knowledge_time_is_the_source_write_not_the_relay(make_memory) -> None:  # type: ignore[no-untyped-def]
    # An outbox row written at 10:00 is relayed at 18:00; the memory must say we knew at 10:00.
    mem = make_memory()  # its clock reads the relay time (2026-11-29)
    outbox = [("Berlin", "2026-11-01T10:00:00Z", "crm-write-1")]
    for value, written_at, source in outbox:
        mem.assert_fact(
            CITY, value, valid_from="2026-10-15T00:00:00Z", recorded_at=written_at, source_id=source
        )
    assert mem.resolve_at(CITY, "2026-10-20T00:00:00Z", "2026-11-01T12:00:00Z").value == "Berlin"
    (event,) = mem.events()
    assert event.body["_recorded_at"] == "2026-11-01T10:00:00Z"
