"""Every statement has its expected status and every false variant yields a counterexample
(an encoding that proved everything would fail here)."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

from proofs.run import MODULES
from toki.formal.result import Status


@pytest.mark.parametrize("name", MODULES)
def test_statement_has_expected_status(name: str) -> None:
    result = importlib.import_module(f"proofs.{name}").prove()
    assert result.status is result.expected, (result.name, result.notes, result.model)
    assert result.bounds, "every result prints its bounds"
    json.dumps(result.to_json())


@pytest.mark.parametrize("name", MODULES)
def test_every_false_variant_yields_a_counterexample(name: str) -> None:
    variants = importlib.import_module(f"proofs.{name}").false_variants()
    assert variants, f"{name} has no false variant: it could never fail"
    for v in variants:
        assert v.expected is Status.COUNTEREXAMPLE
        assert v.status is Status.COUNTEREXAMPLE, (v.name, v.notes)
        assert v.false_variant_of == name
        assert v.model is not None
        json.dumps(v.to_json())


def test_statements_include_proved_and_unbounded_ones() -> None:
    results = [importlib.import_module(f"proofs.{n}").prove() for n in MODULES]
    assert sum(r.status is Status.PROVED for r in results) >= 8
    assert any(r.bounds.get("unbounded") for r in results)


# -- vacuity (premise witnesses) -------------------------------------------------------


def test_every_proved_statement_has_a_premise_witness() -> None:
    for name in MODULES:
        r = importlib.import_module(f"proofs.{name}").prove()
        if r.status is Status.PROVED:
            assert r.premise_witness is not None and r.premise_witness["exists"], name


def test_isolation_witnesses_are_replayed_executions_with_a_truly_concurrent_pair() -> None:
    from proofs import isolation_await, isolation_ewm, isolation_lww, isolation_rule

    for mod in (isolation_lww, isolation_ewm, isolation_await, isolation_rule):
        w = mod.prove().premise_witness
        assert w is not None and w["exists"] and w["replayed_in_simulator"], mod.NAME
        assert w["truly_concurrent_conflicting_pairs"] >= 1 and w["committed"] >= 2, mod.NAME
    # SSI serializes two concurrent EWM claims on one key (each reads the evidence the other
    # writes): at SERIALIZABLE one of every truly concurrent pair aborts
    assert isolation_ewm.prove().premise_witness["both_committed"] is False  # type: ignore[index]
    assert isolation_rule.prove().premise_witness["both_committed"] is True  # type: ignore[index]


def test_an_over_constrained_premise_is_caught_as_vacuous() -> None:
    """A premise that makes every read come after the other transactions' ends (serial in
    effect, though the transactions still overlap in time) proves anything trivially; so
    does one that lets only one transaction commit. The witness check fails both."""
    import z3

    from proofs._isolation import isolation
    from toki.formal.encoding import History
    from toki.isolation import Isolation

    h = History(3, Isolation.READ_COMMITTED, "LWW")  # same function names as the proof's
    serial = tuple(
        z3.Or(h.end(i) < h.read(j), h.end(j) < h.read(i)) for i in h.txns for j in h.txns if i < j
    )
    overlap = z3.Or(
        *[
            z3.And(h.begin(j) < h.end(i), h.begin(i) < h.end(j))
            for i in h.txns
            for j in h.txns
            if i < j
        ]
    )
    r = isolation(
        "serial_reads", "LWW", Isolation.READ_COMMITTED, extra_premises=(*serial, overlap)
    )
    assert r.status is Status.VACUOUS and not r.ok
    assert r.premise_witness is not None and not r.premise_witness["exists"]
    only_one = (z3.Not(h.committed(1)), z3.Not(h.committed(2)))
    r = isolation("one_commit", "LWW", Isolation.READ_COMMITTED, extra_premises=only_one)
    assert r.status is Status.VACUOUS


def test_serializable_is_some_serial_order_not_the_commit_order() -> None:
    """SER admits a committed history whose dependency graph has an edge against the commit
    order (an rw anti-dependency into a transaction that committed first), and no cyclic
    one; snapshot isolation admits a cyclic one (EWM's write skew)."""
    import z3

    from toki.formal.dsg import cyclic, edges
    from toki.formal.encoding import History
    from toki.isolation import Isolation

    h = History(3, Isolation.SERIALIZABLE, "LWW")
    e = edges(h)
    s = z3.Solver()
    s.add(*h.axioms, z3.Or(*[z3.And(c, h.end(i) < h.end(j)) for (j, i), c in e.items()]))
    assert s.check() == z3.sat
    for level, expected in ((Isolation.SERIALIZABLE, z3.unsat), (Isolation.SNAPSHOT, z3.sat)):
        h = History(3, level, "EWM")
        s = z3.Solver()
        s.add(*h.axioms, cyclic(h))
        assert s.check() == expected, level


def test_robustness_verdicts_for_every_k() -> None:
    from toki.formal.robustness import robustness

    got = {
        op: {lvl: v["verdict"] for lvl, v in robustness(op).items()}
        for op in ("LWW", "AWAIT", "EWM", "RULE")
    }
    for op in ("LWW", "AWAIT"):
        assert got[op] == {
            "read_committed": "not robust",
            "snapshot": "robust",
            "serializable": "robust",
        }
    for op in ("EWM", "RULE"):
        assert got[op]["snapshot"] == got[op]["read_committed"] == "not robust"
    lww = robustness("LWW")
    assert lww["snapshot"]["static"] == "absent" and lww["snapshot"]["bounded_k3_cycle"] == "unsat"
    assert lww["read_committed"]["witness"]["replayed_in_simulator"]


# -- N3 over the rows written ----------------------------------------------------------


@pytest.mark.parametrize("op", ["LWW", "EWM", "AWAIT", "RULE"])
def test_n3_is_expressible_and_the_audit_row_is_written_by_a_transaction(op: str) -> None:
    """N3 is not a tautology: without the audit write it is satisfiable for every operator;
    with it, an audit row exists only because a committed transaction wrote it."""
    import z3

    from toki.formal.encoding import History, Variant
    from toki.isolation import Isolation

    broken = History(
        3, Isolation.READ_COMMITTED, op, policy_txn=op == "RULE", variant=Variant(audit_write=False)
    )
    s = z3.Solver()
    s.add(*broken.axioms, broken.n3())
    assert s.check() == z3.sat
    h = History(3, Isolation.SERIALIZABLE, op, policy_txn=op == "RULE")
    s = z3.Solver()
    # a committed claim with no audit row of its own (it is in the head or held instead)
    s.add(*h.axioms, z3.Or(*[z3.And(h.com(j), z3.Not(h.live["audited"][j])) for j in h.claims]))
    assert s.check() == z3.sat
    s = z3.Solver()  # and the audit rows of aborted transactions do not count
    s.add(*h.axioms, z3.Not(h.com(0)), h.live["steps"][0].audit == 1, z3.Not(h.live["audited"][1]))
    assert s.check() == z3.sat


# -- RULE's policy transaction, READ UNCOMMITTED ----------------------------------------


def test_rule_policy_transaction_may_see_no_claim() -> None:
    import z3

    from toki.formal.encoding import History
    from toki.isolation import Isolation

    h = History(3, Isolation.SERIALIZABLE, "RULE", policy_txn=True)
    P = h.P
    assert P is not None
    cases = {
        "sees no claim": z3.And(h.com(P), *[z3.Not(h.live["pv"](c, P)) for c in h.claims]),
        "commits before every claim begins": z3.And(
            h.com(P), *[h.end(P) < h.begin(c) for c in h.claims]
        ),
        "every claim aborted": z3.And(h.com(P), *[z3.Not(h.com(c)) for c in h.claims]),
    }
    for what, cond in cases.items():
        s = z3.Solver()
        s.add(*h.axioms, cond)
        assert s.check() == z3.sat, what


def test_read_uncommitted_is_modelled_as_the_simulator_does() -> None:
    """As in the simulator: at RU the conditional update evaluates its predicate on the
    newest (dirty) head and waits only for a matching row. The counterexamples z3 reports
    for LWW need an abort; with every transaction committed, LWW admits no
    anomaly at RU and AWAIT only N1 (a claim held behind a dirty head whose writer commits
    after it, so replay in commit order decides differently), never N2 or N3."""
    import z3

    from proofs import isolation_await, isolation_lww
    from toki.formal.encoding import History
    from toki.isolation import Isolation

    for r in (*isolation_lww.false_variants(), *isolation_await.false_variants()):
        if r.bounds["level"] != "read_uncommitted":
            continue
        assert r.scenario is not None
        aborts = any(step["op"] == "abort" for step in r.scenario["schedule"])
        assert aborts or (r.scenario["operator"] == "AWAIT" and r.scenario["anomalies"]["N1"])
    for op, anomalies in (("LWW", ("n1", "n2", "n3")), ("AWAIT", ("n2", "n3"))):
        h = History(3, Isolation.READ_UNCOMMITTED, op)
        s = z3.Solver()
        s.add(*h.axioms, *[h.com(i) for i in h.txns], z3.Or(*[getattr(h, a)() for a in anomalies]))
        assert s.check() == z3.unsat, op
    h = History(3, Isolation.READ_UNCOMMITTED, "AWAIT")
    s = z3.Solver()
    s.add(*h.axioms, *[h.com(i) for i in h.txns], h.n1())
    assert s.check() == z3.sat


# -- toki prove --k / --out --------------------------------------------------------------


def test_k_changes_the_bound(tmp_path: Any) -> None:
    from proofs.run import run_all

    results = run_all("isolation_lww", k=2)
    assert [r.bounds["k"] for r in results] == [2] * len(results)
    assert all(r.ok for r in results)


def test_k_below_what_a_variant_needs_is_raised_and_said(tmp_path: Any) -> None:
    from proofs.run import main, run_all
    from toki.errors import InvalidInput

    results = {r.name: r for r in run_all("isolation_ewm", k=2)}
    assert all(r.ok for r in results.values())
    # at SER a witness with two commits and a truly concurrent pair needs a third claim;
    # the write skew at snapshot needs one committed before the two concurrent ones
    for name in ("isolation_ewm", "isolation_ewm@snapshot"):
        assert results[name].bounds["k"] == 3 and results[name].bounds["k_asked"] == 2
        assert "needs 3 claim transactions" in results[name].notes
    assert results["isolation_ewm@read_committed"].bounds["k"] == 2
    with pytest.raises(InvalidInput, match="--k: 1 cannot express"):
        main(["--k", "1"])


def test_json_states_ser_axiom_k_witness_and_robustness(capsys: Any) -> None:
    from proofs.run import main

    assert main(["--only", "isolation_rule", "--k", "2", "--json"]) == 0
    (proved, *_) = json.loads(capsys.readouterr().out)
    assert proved["ser_axiom"].startswith("some serial order") and proved["k"] == 2
    assert proved["premise_witness"]["replayed_in_simulator"]
    assert proved["robustness"]["RULE"]["snapshot"]["verdict"] == "not robust"


def test_out_writes_where_asked_and_nothing_by_default(tmp_path: Any) -> None:
    from pathlib import Path

    from proofs.run import main

    tracked = Path(__file__).resolve().parents[2] / "proofs" / "results.json"
    before = tracked.read_bytes()
    assert main(["--only", "lift_ewm_monoid"]) == 0
    assert tracked.read_bytes() == before
    assert main(["--only", "lift_ewm_monoid", "--out", str(tmp_path / "o")]) == 0
    data = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [d["name"] for d in data] == ["lift_ewm_monoid", "lift_ewm_monoid@overwrite"]
    assert (tmp_path / "o" / "RESULTS.md").exists()


def test_paper_macros_are_generated_from_the_results() -> None:
    from pathlib import Path

    from proofs import macros

    here = Path(__file__).resolve().parents[2] / "proofs"
    data = [
        json.loads((here / f).read_text())
        for f in ("results.json", "agreement.json", "mutants.json")
    ]
    values = macros.macros(*data)
    assert values["tokiKIsolationEwm"] == str(data[0][4]["bounds"]["k"])
    assert values["tokiRobustLwwSI"] == "robust"
    assert (here / "macros.tex").read_text() == macros.render(values)
