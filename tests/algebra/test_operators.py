"""The four operators on the seed scenarios, their preconditions, and their bad input."""

from __future__ import annotations

import pytest

from toki import Claim, FactKey, Lifecycle, Memory
from toki.algebra import AWAIT, EWM, LWW, RULE, Action, Operator, Policy, UnknownPolicy
from toki.errors import InvalidInput, IsolationViolation, UnknownProposal
from toki.isolation import Isolation
from toki.judge import JudgeQuestion, MalformedVerdict, PreferSourceJudge, Verdict
from toki.log import EventKind

CITY = FactKey("t1", "u1", "city")
PM = FactKey("t1", "repo", "package_manager")
LEAD = FactKey("crm", "lead-7", "status")


def claim(key: FactKey, value: str, day: int, rec: int, source: str = "m", w: float = 1.0) -> Claim:
    return Claim(
        key,
        value,
        source,
        valid_from=f"2026-{day:02d}-01T00:00:00Z",
        recorded_at=f"2026-{rec:02d}-02T00:00:00Z",
        weight=w,
    )


def test_lww_lisbon_berlin_keeps_the_loser_as_an_audit_row(mem: Memory) -> None:
    d1 = mem.write(claim(CITY, "Lisbon", 1, 2), LWW)
    d2 = mem.write(claim(CITY, "Berlin", 7, 8), LWW)
    assert (d1.action, d2.action) == (Action.INSERT, Action.SUPERSEDE)
    assert mem.current(CITY).value == "Berlin"
    assert mem.resolve_at(CITY, "2026-03-01T00:00:00Z").value == "Lisbon"  # prefix kept
    (row,) = mem.audit(CITY)
    assert row.row_kind == "audit" and row.version.value == "Lisbon" and row.strategy == "LWW"
    assert row.provenance.winner == d2.winner and row.provenance.precondition_held


def test_lww_late_older_claim_loses_where_a_newer_one_covers(mem: Memory) -> None:
    mem.write(claim(CITY, "Berlin", 7, 8), LWW)
    d = mem.write(claim(CITY, "Lisbon", 6, 3), LWW)  # about June, learned in March (relayed late)
    assert d.action is Action.REJECT
    assert mem.current(CITY).value == "Berlin"
    assert mem.resolve_at(CITY, "2026-06-15T00:00:00Z").value == "Lisbon"  # not covered: kept


def test_lww_npm_to_pnpm(mem: Memory) -> None:
    mem.write(claim(PM, "npm", 1, 1), LWW)
    mem.write(claim(PM, "pnpm", 7, 6), LWW)  # "from 1 July we use pnpm", said in June
    assert mem.resolve_at(PM, "2026-06-30T00:00:00Z").value == "npm"
    assert mem.resolve_at(PM, "2026-07-01T00:00:00Z").value == "pnpm"


def test_ewm_evidence_adds_up_across_claims(mem: Memory) -> None:
    mem.write(claim(CITY, "Lisbon", 1, 2, w=1.0), EWM)
    d = mem.write(claim(CITY, "Berlin", 1, 3, "a", w=0.6), EWM)
    assert d.action is Action.REJECT and mem.current(CITY).value == "Lisbon"
    d = mem.write(claim(CITY, "Berlin", 1, 4, "b", w=0.6), EWM)  # 1.2 > 1.0: now Berlin
    assert d.action is Action.SUPERSEDE and mem.current(CITY).value == "Berlin"
    assert "1.2" in d.provenance.reason
    losers = sorted(r.version.value for r in mem.audit(CITY))
    assert losers == ["Berlin", "Lisbon"]  # the first Berlin lost once, then Lisbon lost


def test_ewm_judge_scores_replace_weights(mem: Memory) -> None:
    judge = PreferSourceJudge(order=("crm",))
    mem.write(claim(CITY, "Lisbon", 1, 2, "chat", w=5.0), EWM, judge=judge)
    d = mem.write(claim(CITY, "Berlin", 1, 3, "crm", w=0.1), EWM, judge=judge)
    assert d.winner is not None and mem.version(d.winner).value == "Berlin"
    assert d.provenance.judge_key is not None
    judged = [
        e
        for e in mem.events()
        if e.kind is EventKind.DECISION and e.body.get("decision") == "judge"
    ]
    assert len(judged) == 1 and judged[0].body["theta"]["model"] == "rule"


def test_await_holds_then_confirm_supersedes_and_repeat_is_a_no_op(mem: Memory) -> None:
    old = mem.write(claim(LEAD, "warm", 1, 1), AWAIT)
    d = mem.write(claim(LEAD, "cold", 3, 3), AWAIT)
    assert d.action is Action.HOLD
    assert mem.current(LEAD).value == "warm"  # the proposal is not served
    assert (
        mem.lifecycle(
            d.provenance.inputs[0]
            if d.provenance.inputs[0] != old.winner
            else d.provenance.inputs[1]
        )
        is Lifecycle.PROPOSED
    )
    assert len(mem.open_conflicts(LEAD)) == 1
    n = len(mem.events())
    assert mem.confirm(d.token, recorded_at="2026-03-05T00:00:00Z") is True
    assert mem.current(LEAD).value == "cold"
    assert mem.resolve_at(LEAD, "2026-02-01T00:00:00Z").value == "warm"
    assert mem.open_conflicts(LEAD) == []
    m = len(mem.events())
    assert m > n
    assert mem.confirm(d.token) is False and mem.reject(d.token) is False
    assert len(mem.events()) == m


def test_await_reject_revokes_the_claim(mem: Memory) -> None:
    mem.write(claim(LEAD, "warm", 1, 1), AWAIT)
    d = mem.write(claim(LEAD, "won", 3, 3), AWAIT)
    assert mem.reject(d.token, recorded_at="2026-03-05T00:00:00Z") is True
    assert mem.current(LEAD).value == "warm"
    assert mem.open_conflicts(LEAD) == []
    revoked = [h for h in mem.history(LEAD) if h.lifecycle is Lifecycle.REVOKED]
    assert [h.version.value for h in revoked] == ["won"]
    # before the rejection, the proposal was visible in history as PROPOSED
    before = mem.history(LEAD, "2026-03-04T00:00:00Z")
    assert {h.version.value: h.lifecycle for h in before}["won"] is Lifecycle.PROPOSED


def test_unknown_confirmation_token_is_refused_and_changes_nothing(mem: Memory) -> None:
    mem.write(claim(LEAD, "warm", 1, 1), AWAIT)
    before = (len(mem.events()), mem.state_hash())
    with pytest.raises(UnknownProposal, match="token"):
        mem.confirm("d-nope")
    assert (len(mem.events()), mem.state_hash()) == before


def test_rule_policies_and_policy_changes_are_replayed_as_of_then(mem: Memory) -> None:
    mem.set_policy(
        "crm",
        "status",
        Policy("prefer_source", ("sales-call", "email")),
        recorded_at="2026-01-01T00:00:00Z",
    )
    mem.write(claim(LEAD, "warm", 1, 2, "sales-call"), RULE)
    d = mem.write(claim(LEAD, "cold", 1, 3, "email"), RULE)
    assert d.action is Action.REJECT and mem.current(LEAD).value == "warm"
    mem.set_policy("crm", "status", Policy("newest_valid_time"), recorded_at="2026-04-01T00:00:00Z")
    d = mem.write(claim(LEAD, "lost", 4, 5, "email"), RULE)
    assert d.action is Action.SUPERSEDE and mem.current(LEAD).value == "lost"
    # re-adjudication uses the policy that was in force at each decision
    assert mem.readjudicate(RULE).state_hash() == mem.state_hash()
    assert Memory.replay(mem.events()).state_hash() == mem.state_hash()


def test_rule_manual_leaves_a_conflict_for_a_person(mem: Memory) -> None:
    mem.set_policy("crm", "status", Policy("manual"), recorded_at="2026-01-01T00:00:00Z")
    mem.write(claim(LEAD, "warm", 1, 2), RULE)
    d = mem.write(claim(LEAD, "cold", 1, 3), RULE)
    assert d.action is Action.HOLD and mem.current(LEAD).kind == "conflict"


def test_unknown_policy_is_refused_with_nothing_written(mem: Memory) -> None:
    mem.write(claim(LEAD, "warm", 1, 2), RULE)  # no contradiction: no policy needed
    before = (len(mem.events()), mem.state_hash())
    with pytest.raises(UnknownPolicy, match="set_policy"):
        mem.write(claim(LEAD, "cold", 1, 3), RULE)
    assert (len(mem.events()), mem.state_hash()) == before
    with pytest.raises(UnknownPolicy, match="unknown policy"):
        Policy("coin_flip")


class _BrokenJudge:
    name = "broken"
    model = "broken"
    prompt = "?"
    temperature = 0.0
    seed: int | None = 0

    def judge(self, question: JudgeQuestion) -> Verdict:
        return Verdict(winner="v-not-a-candidate")


def test_malformed_verdict_is_refused_with_nothing_written(mem: Memory) -> None:
    mem.write(claim(CITY, "Lisbon", 1, 2), EWM)
    before = (len(mem.events()), mem.state_hash())
    with pytest.raises(MalformedVerdict, match=r"verdict\.scores"):
        mem.write(claim(CITY, "Berlin", 1, 3), EWM, judge=_BrokenJudge())
    assert (len(mem.events()), mem.state_hash()) == before


@pytest.mark.parametrize(
    ("level", "op", "ok"),
    [
        (Isolation.READ_COMMITTED, LWW, True),
        (Isolation.READ_UNCOMMITTED, LWW, False),
        (Isolation.READ_COMMITTED, EWM, False),
        (Isolation.REPEATABLE_READ, EWM, False),  # incomparable with SNAPSHOT
        (Isolation.SNAPSHOT, EWM, False),  # write skew between totals (isolation_ewm)
        (Isolation.SERIALIZABLE, EWM, True),
        (Isolation.READ_COMMITTED, AWAIT, True),
        (Isolation.SNAPSHOT, RULE, False),
        (Isolation.SERIALIZABLE, RULE, True),
    ],
)
def test_precondition_gate(level: Isolation, op: object, ok: bool) -> None:
    mem = Memory(isolation=level)
    mem.set_policy("t1", "city", Policy("newest_valid_time"), recorded_at="2026-01-01T00:00:00Z")
    mem.write(claim(CITY, "Lisbon", 1, 2), op)  # type: ignore[arg-type]
    if ok:
        d = mem.write(claim(CITY, "Berlin", 2, 3), op)  # type: ignore[arg-type]
        assert d.provenance.precondition_held
        return
    before = len(mem.events())
    with pytest.raises(IsolationViolation, match="allow_weaker_isolation"):
        mem.write(claim(CITY, "Berlin", 2, 3), op)  # type: ignore[arg-type]
    assert len(mem.events()) == before
    d = mem.write(claim(CITY, "Berlin", 2, 3), op, allow_weaker_isolation=True)  # type: ignore[arg-type]
    assert d.provenance.precondition_held is False
    assert d.provenance.isolation is level
    logged = [
        e
        for e in mem.events()
        if e.kind is EventKind.DECISION and e.body.get("decision") == "resolution"
    ]
    assert logged[-1].body["provenance"]["precondition_held"] is False


def test_write_refuses_things_that_are_not_claims_or_operators(mem: Memory) -> None:
    with pytest.raises(InvalidInput, match="claim"):
        mem.write("Berlin")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="operator"):
        mem.write(claim(CITY, "Berlin", 1, 2), operator="LWW")  # type: ignore[arg-type]


def test_configured_operator_routes_claims_by_fact_key(mem: Memory) -> None:
    mem.configure("status", AWAIT)
    mem.write(claim(LEAD, "warm", 1, 1))
    assert mem.write(claim(LEAD, "cold", 2, 2)).action is Action.HOLD
    mem.write(claim(CITY, "Lisbon", 1, 1))
    assert mem.write(claim(CITY, "Berlin", 2, 2)).action is Action.SUPERSEDE  # default LWW


def test_duplicate_claim_is_a_noop(mem: Memory) -> None:
    c = claim(CITY, "Lisbon", 1, 2)
    mem.write(c, LWW)
    n = len(mem.events())
    assert mem.write(c, LWW).action is Action.NOOP
    assert len(mem.events()) == n


def test_pointwise_lww_keeps_both_parts_of_a_partial_overlap(mem: Memory) -> None:
    mem.write(
        Claim(
            CITY,
            "Oslo",
            "a",
            valid_from="2026-01-01T00:00:00Z",
            valid_to="2026-12-01T00:00:00Z",
            recorded_at="2026-01-02T00:00:00Z",
        ),
        LWW,
    )
    mem.write(
        Claim(
            CITY,
            "Bergen",
            "b",
            valid_from="2026-03-01T00:00:00Z",
            valid_to="2026-05-01T00:00:00Z",
            recorded_at="2026-06-02T00:00:00Z",
        ),
        LWW,
    )
    answers = [mem.resolve_at(CITY, f"2026-{m:02d}-15T00:00:00Z").value for m in (2, 4, 7)]
    assert answers == ["Oslo", "Bergen", "Oslo"]  # Oslo split around the newer claim
    assert mem.open_conflicts(CITY) == []


@pytest.mark.parametrize("op", [LWW, EWM, AWAIT], ids=lambda o: o.name)
def test_a_decision_names_the_version_its_claim_was_written_as(mem: Memory, op: Operator) -> None:
    first = mem.write(claim(CITY, "Lisbon", 1, 2), op)
    second = mem.write(claim(CITY, "Berlin", 7, 8), op)
    again = mem.write(claim(CITY, "Lisbon", 1, 2), op)
    by_id = {h.version.id: h.version.value for h in mem.history(CITY)}
    assert [by_id.get(d.claim_id or "") for d in (first, second)] == ["Lisbon", "Berlin"]
    assert again.action is Action.NOOP and again.claim_id == first.claim_id
    assert first.claim_id != second.claim_id
