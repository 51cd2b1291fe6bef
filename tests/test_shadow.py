"""Shadow projections, classified differences, promote / rollback (issue 20)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import fixed_clock
from toki import Claim, FactKey, Memory
from toki.algebra import Policy
from toki.cli import main
from toki.errors import InvalidInput, InvalidTime, LifecycleError, TokiError
from toki.shadow import Config, refold

CITY = FactKey("acme", "ana", "city")


def _late_old_claim(mem: Memory) -> None:
    """Berlin from July, then a relay delivers an older 'Lisbon from January' claim later:
    LWW (latest system time) lets the old claim win."""
    mem.write(Claim(CITY, "Berlin", "crm", "2025-07-01T00:00:00Z", None, "2026-01-01T00:00:00Z"))
    mem.write(Claim(CITY, "Lisbon", "relay", "2025-01-01T00:00:00Z", None, "2026-01-02T00:00:00Z"))


def test_each_class_of_difference() -> None:
    mem = Memory(clock=fixed_clock)
    _late_old_claim(mem)
    assert mem.current(CITY).value == "Lisbon"
    newest = Config(
        operators=(("city", "RULE"),),
        policies=(("acme", "city", Policy("newest_valid_time")),),
    )
    (d,) = mem.shadow(newest).differences
    assert (d.kind, d.before.value, d.after.value) == ("corrected", "Lisbon", "Berlin")
    manual = Config(operators=(("city", "RULE"),), policies=(("acme", "city", Policy("manual")),))
    (d,) = mem.shadow(manual).differences
    assert (d.kind, d.before.value, d.after.kind) == ("conflict found", "Lisbon", "conflict")

    task = CITY.in_scope(CITY.scope.from_resource("task:42"))
    mem.assert_fact(task, "Porto", recorded_at="2026-01-03T00:00:00Z", source_id="trip")
    scoped = Config(scope_chains=(("city", ("task:42", "global")),))
    diffs = {d.key: d for d in mem.shadow(scoped).differences}
    assert diffs[CITY].kind == "scope change" and diffs[CITY].after.value == "Porto"

    # EWM: two sources say Rome from February, one later says Oslo from March: the new
    # winner has more evidence but states no later change: nothing logged explains it
    job = FactKey("acme", "bo", "city")
    for i, src in enumerate(["a", "b"]):
        mem.write(
            Claim(job, "Rome", src, "2025-02-01T00:00:00Z", None, f"2026-01-0{i + 1}T00:00:00Z")
        )
    mem.write(Claim(job, "Oslo", "c", "2025-03-01T00:00:00Z", None, "2026-01-05T00:00:00Z"))
    report = mem.shadow(Config(operators=(("city", "EWM"),)))
    kinds = {d.key: d.kind for d in report.differences}
    assert kinds[job] == "unexplained" and not report.ok
    assert report.counts["unexplained"] == 1
    assert json.loads(json.dumps(report.to_json()))["counts"] == report.counts


def test_a_revocation_the_old_projection_ignored_is_a_correction() -> None:
    """Serving a promoted configuration whose fold kept a claim that the log later revokes
    cannot happen (the fold reads the revocation); the class exists for projections built
    outside toki, so check the rule on the shadow side: a revoked live winner is corrected."""
    mem = Memory(clock=fixed_clock)
    v = mem.assert_fact(CITY, "Lisbon", recorded_at="2026-01-01T00:00:00Z", source_id="a")
    live = Memory.replay(mem.events())
    mem.revoke(v, reason="wrong", recorded_at="2026-01-02T00:00:00Z")
    mem.assert_fact(CITY, "Paris", recorded_at="2026-01-03T00:00:00Z", source_id="b")
    from toki.shadow import _classify

    d = _classify(
        live._snapshot,
        mem._snapshot,
        CITY,
        (("global/*",), ("global/*",)),
        datetime(2026, 6, 1, tzinfo=UTC),
    )
    assert d is not None and d.kind == "corrected" and "revoked" in d.why


def test_promote_rollback_and_as_of_reads_under_the_configuration_in_force(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    newest = Config(
        operators=(("city", "RULE"),),
        policies=(("acme", "city", Policy("newest_valid_time")),),
        name="newest",
    )
    with Memory.open(url, clock=fixed_clock) as mem:
        _late_old_claim(mem)
        before = mem.state_hash()
        events = len(mem.events())
        mem.promote(newest, recorded_at="2026-02-01T00:00:00Z")
        assert mem.current(CITY).value == "Berlin" and mem.state_hash() != before
        assert mem.resolve_at(CITY, system_as_of="2026-01-15T00:00:00Z").value == "Lisbon"
        assert mem.current(CITY, consumer="q").value == "Berlin"
    with Memory.open(url, clock=fixed_clock) as mem:  # the configuration is durable
        assert mem.config_in_force() == newest and mem.operator_for(CITY).name == "RULE"
        # a claim written now is decided under the promoted RULE policy (no POLICY event)
        mem.write(
            Claim(CITY, "Madrid", "chat", "2025-09-01T00:00:00Z", None, "2026-02-02T00:00:00Z")
        )
        assert mem.current(CITY).value == "Madrid"
        (read,) = mem.consumed_by("q")  # reproduced under the configuration it was read in
        assert read.config_id == newest.id and read.answer.value == "Berlin"
        assert mem.rollback(recorded_at="2026-03-01T00:00:00Z") is None
        assert mem.resolve_at(CITY, system_as_of="2026-02-15T00:00:00Z").value == "Madrid"
        assert mem.config_in_force() is None and mem.operator_for(CITY).name == "LWW"
        with pytest.raises(LifecycleError, match="no promoted configuration"):
            mem.rollback(recorded_at="2026-03-02T00:00:00Z")
        with pytest.raises(InvalidTime, match="precedes the last configuration change"):
            mem.promote(newest, recorded_at="2026-02-15T00:00:00Z")
        kinds = [e.kind.value for e in mem.events()[events:]]
        assert kinds.count("CONFIG") == 2  # nothing deleted: both changes are in the log


def test_bad_configurations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="unknown operator"):
        Config(operators=(("city", "MAJORITY"),))
    with pytest.raises(TokiError):
        Config(scope_chains=(("city", ("planet:3",)),))
    bad = tmp_path / "bad.toml"
    bad.write_text("[operators\ncity = 'EWM'\n")
    with pytest.raises(InvalidInput, match="not valid TOML"):
        Config.from_toml(bad)
    with pytest.raises(InvalidInput, match="cannot read"):
        Config.from_toml(tmp_path / "missing.toml")
    with pytest.raises(InvalidInput, match="config"):
        Memory().shadow({"operators": {}})  # type: ignore[arg-type]


def test_the_shadow_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with Memory.open(url, clock=fixed_clock) as mem:
        _late_old_claim(mem)
    good = tmp_path / "newest.toml"
    good.write_text(
        '[operators]\ncity = "RULE"\n\n[policies.acme]\ncity = { kind = "newest_valid_time" }\n'
    )
    assert (
        main(["shadow", url, "--config", str(good), "--json", "--valid-at", "2026-06-01T00:00:00Z"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["corrected"] == 1 and out["ok"] is True
    ewm = tmp_path / "ewm.toml"
    ewm.write_text('[operators]\ncity = "EWM"\n')
    with Memory.open(url, clock=fixed_clock) as mem:
        bo = FactKey("acme", "bo", "city")
        for i, src in enumerate(["a", "b"]):
            mem.write(
                Claim(bo, "Rome", src, "2025-02-01T00:00:00Z", None, f"2026-01-0{i + 1}T00:00:00Z")
            )
        mem.write(Claim(bo, "Oslo", "c", "2025-03-01T00:00:00Z", None, "2026-01-05T00:00:00Z"))
    assert main(["shadow", url, "--config", str(ewm), "--valid-at", "2026-06-01T00:00:00Z"]) == 1
    assert "[unexplained]" in capsys.readouterr().out
    assert main(["shadow", url, "--config", str(tmp_path / "nope.toml")]) == 2
    assert "cannot read" in capsys.readouterr().err


# -- properties ------------------------------------------------------------------------------

KEYS = [FactKey("t", "u", "k0"), FactKey("t", "u", "k1"), FactKey("t", "v", "k0")]
BASE = datetime(2026, 1, 1, tzinfo=UTC)
OPERATORS = ["LWW", "EWM", "AWAIT", "RULE"]
POLICIES = [Policy("newest_valid_time"), Policy("prefer_source", ("s1", "s0")), Policy("manual")]

step = st.tuples(
    st.sampled_from(["assert", "write", "write", "supersede", "segment", "revoke", "settle"]),
    st.integers(0, len(KEYS) - 1),
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from(["s0", "s1", "s2"]),
    st.integers(0, 20),
    st.integers(1, 10),
)
routing = st.fixed_dictionaries(
    {"k0": st.sampled_from(OPERATORS), "k1": st.sampled_from(OPERATORS)}
)


def _history(
    route: dict[str, str], policy: int, steps: list[tuple[str, int, str, str, int, int]]
) -> Memory:
    from toki.algebra import OPERATORS as OPS

    mem = Memory(clock=fixed_clock)
    for fact_key, name in route.items():
        mem.configure(fact_key, OPS[name])
        mem.set_policy("t", fact_key, POLICIES[policy], recorded_at=BASE - timedelta(days=1))
    tokens: list[str] = []
    for i, (kind, k, value, source, start, length) in enumerate(steps):
        key = KEYS[k]
        recorded = BASE + timedelta(hours=i)
        valid = BASE - timedelta(days=40) + timedelta(days=start)
        try:
            if kind == "assert":
                mem.assert_fact(
                    key, value, valid_from=valid, recorded_at=recorded, source_id=source
                )
            elif kind == "write":
                decision = mem.write(Claim(key, value, source, valid, None, recorded))
                if decision.action.value == "HOLD":
                    tokens.append(decision.token)
            elif kind == "segment":
                mem.insert_segment(
                    key,
                    value,
                    valid_from=valid,
                    valid_to=valid + timedelta(days=length),
                    recorded_at=recorded,
                    source_id=source,
                )
            elif kind == "settle":
                if tokens:
                    token = tokens.pop(start % len(tokens))
                    (mem.confirm if length % 2 else mem.reject)(token, recorded_at=recorded)
            else:
                standing = [h for h in mem.history(key) if h.lifecycle.value == "ACTIVE"]
                if not standing:
                    continue
                target = standing[(start + length) % len(standing)].version
                if kind == "revoke":
                    mem.revoke(target, reason="r", recorded_at=recorded)
                else:
                    mem.supersede(
                        target,
                        value,
                        valid_from=max(valid, target.valid.start or valid),
                        recorded_at=recorded,
                        source_id=source,
                    )
        except TokiError:
            continue
    return mem


@settings(max_examples=80)
@given(routing, st.integers(0, len(POLICIES) - 1), st.lists(step, min_size=1, max_size=14))
def test_the_shadow_of_the_current_configuration_has_no_difference(
    route: dict[str, str], policy: int, steps: list[tuple[str, int, str, str, int, int]]
) -> None:
    mem = _history(route, policy, steps)
    report = mem.shadow(mem.current_config(), valid_at=BASE)
    assert report.differences == () and report.notes == (), report.describe()
    later = mem.shadow(mem.current_config(), valid_at=BASE - timedelta(days=25))
    assert later.differences == ()
    # stronger: the refold reproduces the whole belief state (every version's lifecycle,
    # effective interval, conflicts, decisions)
    assert refold(mem.events(), mem.current_config()).state_hash() == mem.state_hash()


@settings(max_examples=60)
@given(
    routing,
    st.integers(0, len(POLICIES) - 1),
    st.lists(step, min_size=1, max_size=12),
    routing,
    st.integers(0, len(POLICIES) - 1),
)
def test_promote_then_rollback_restores_the_state_hash(
    route: dict[str, str],
    policy: int,
    steps: list[tuple[str, int, str, str, int, int]],
    new_route: dict[str, str],
    new_policy: int,
) -> None:
    mem = _history(route, policy, steps)
    before = mem.state_hash()
    answers = [mem.current(k) for k in KEYS]
    config = Config(
        operators=tuple(new_route.items()),
        policies=tuple(("t", f, POLICIES[new_policy]) for f in new_route),
    )
    mem.promote(config, recorded_at=BASE + timedelta(days=30))
    assert mem.state_hash() == refold(mem.events(), config).state_hash()
    assert [mem.current(k) for k in KEYS] == [
        refold(mem.events(), config, clock=fixed_clock).current(k) for k in KEYS
    ]
    mem.rollback(recorded_at=BASE + timedelta(days=31))
    assert mem.state_hash() == before
    assert [mem.current(k) for k in KEYS] == answers
    assert mem.resolve_at(KEYS[0], system_as_of=BASE + timedelta(days=30, hours=1)) == (
        refold(mem.events(), config, clock=fixed_clock).resolve_at(KEYS[0])
    )


claim_spec = st.lists(
    st.tuples(st.sampled_from(["s0", "s1", "s2"]), st.sampled_from(["a", "b", "c", "d"])),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60)
@given(claim_spec)
def test_promoting_a_rule_policy_is_the_proofs_policy_transaction(
    claims: list[tuple[str, str]],
) -> None:
    """One key, one valid-time point (the encoding's model): under π0 the claims are decided
    as they arrive; set_policy(π1) re-decides nothing; promote(π1) serves the best claim
    under π1 (source rank, then recorded_at, then id), what the policy transaction leaves."""
    from toki.algebra import RULE

    pi0, pi1 = Policy("prefer_source", ("s0", "s1")), Policy("prefer_source", ("s1", "s0"))
    mem = Memory(clock=fixed_clock)
    mem.configure("city", RULE)
    mem.set_policy("acme", "city", pi0, recorded_at=BASE - timedelta(days=1))
    for i, (source, value) in enumerate(claims):
        mem.write(
            Claim(CITY, value, source, "2025-01-01T00:00:00Z", None, BASE + timedelta(hours=i))
        )
    served = mem.current(CITY)
    mem.set_policy("acme", "city", pi1, recorded_at=BASE + timedelta(days=1))
    assert mem.current(CITY) == served
    rank = {"s1": 0, "s0": 1}
    best = max(
        (
            mem.version(e.version_ids[0])
            for e in mem.events()
            if e.kind.value == "ASSERT" and e.body.get("claim")
        ),
        key=lambda v: (-rank.get(v.source_id, 2), v.recorded_at, v.id),
    )
    mem.promote(
        Config(operators=(("city", "RULE"),), policies=(("acme", "city", pi1),)),
        recorded_at=BASE + timedelta(days=2),
    )
    assert mem.current(CITY).value == best.value


def test_promote_and_rollback_on_every_backend(mem: Memory) -> None:
    _late_old_claim(mem)
    before = mem.state_hash()
    newest = Config(
        operators=(("city", "RULE"),), policies=(("acme", "city", Policy("newest_valid_time")),)
    )
    mem.promote(newest, recorded_at="2026-02-01T00:00:00Z")
    assert mem.current(CITY, consumer="q").value == "Berlin"
    mem.rollback(recorded_at="2026-03-01T00:00:00Z")
    assert mem.current(CITY).value == "Lisbon" and mem.state_hash() == before
    assert mem.resolve_at(CITY, system_as_of="2026-02-15T00:00:00Z").value == "Berlin"
    (read,) = mem.consumed_by("q")
    assert read.config_id == newest.id and read.answer.value == "Berlin"
    again = Memory(mem._store, clock=fixed_clock)  # what another process opening it sees
    assert again.config_in_force() is None
    assert again.config_in_force("2026-02-15T00:00:00Z") == newest


def test_a_correction_with_no_counterpart_in_the_fold_is_reported() -> None:
    """LWW cut Lisbon around Berlin's two months; a person then revoked the right-hand piece.
    Under AWAIT Berlin is only held, nothing is cut, and that revocation has no counterpart:
    the shadow lists it and the gate fails (rather than silently dropping a correction)."""
    mem = Memory(clock=fixed_clock)
    mem.write(Claim(CITY, "Lisbon", "a", "2025-01-01T00:00:00Z", None, "2026-01-01T00:00:00Z"))
    mem.write(
        Claim(
            CITY,
            "Berlin",
            "b",
            "2025-03-01T00:00:00Z",
            "2025-05-01T00:00:00Z",
            "2026-01-02T00:00:00Z",
        )
    )
    (piece,) = mem.revoke_value(
        CITY,
        "Lisbon",
        valid_at="2025-06-01T00:00:00Z",
        reason="moved",
        recorded_at="2026-01-03T00:00:00Z",
    )
    assert mem.version(piece).supersedes is not None  # a piece LWW cut
    report = mem.shadow(Config(operators=(("city", "AWAIT"),)), valid_at="2025-06-01T00:00:00Z")
    assert not report.ok and len(report.notes) == 1 and piece in report.notes[0][1]
    assert mem.shadow(mem.current_config()).notes == ()  # under LWW the piece exists again


def test_a_configuration_file_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    for text in (
        'operators = "EWM"\n',
        "policies = 3\n",
        '[scope_chains]\ncity = "global"\n',
        "[operators]\ncity = 7\n",
        '[policies.acme]\ncity = "newest"\n',
    ):
        path = tmp_path / "c.toml"
        path.write_text(text)
        with pytest.raises(TokiError):
            Config.from_toml(path)


@settings(max_examples=25)
@given(st.integers(0, 10_000), st.lists(st.sampled_from(["a", "b", "c"]), min_size=2, max_size=6))
def test_a_judged_store_shadows_without_difference_given_its_judge(
    seed: int, values: list[str]
) -> None:
    """EWM with an LLM-like judge (fresh randomness per call): the shadow under the current
    configuration reads every verdict from the keyed log, so nothing differs."""
    from toki.algebra import EWM
    from toki.judge import StochasticJudge

    mem = Memory(clock=fixed_clock)
    mem.configure("city", EWM)
    live_judge = StochasticJudge(0.5, stream_seed=seed)
    for i, value in enumerate(values):
        at = BASE + timedelta(hours=i)
        mem.write(Claim(CITY, value, f"s{i}", "2025-01-01T00:00:00Z", None, at), judge=live_judge)
    again = StochasticJudge(0.5, stream_seed=seed + 1)  # other randomness: must not be asked
    report = mem.shadow(mem.current_config(), valid_at=BASE, judge=again)
    assert report.differences == () and again.calls == 0
    assert live_judge.calls > 0 or len(set(values)) == 1
    # the verdicts are part of the state (the decisions' provenance): reproduced exactly
    assert refold(mem.events(), mem.current_config(), judge=again).state_hash() == (
        mem.state_hash()
    )
