"""Elle's semantics that toki lacked before issue #22, each on a history from Elle's public test
suite or elle-cli's test data: three cycle-search bugs, the classes future-read, dirty-update,
cyclic-versions and duplicate-elements, the register options, the cycle-exists fallback, and
consistency models deciding what counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from toki.check.adya import History, Op, Txn, check, dependency_graph, verdict
from toki.check.adya.models import anomalies_prohibited_by, boundary, elle_name
from toki.check.elle import load, parse_edn

DATA = Path(__file__).resolve().parent / "elle_data" / "elle-cli"


def names(anomalies: list[object]) -> list[str]:
    return sorted({a.name for a in anomalies})  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- the three bugs


def test_bug_one_label_per_pair_hid_a_realtime_g_single() -> None:
    """elle-cli list-append-anomaly-g2-item: T1 -rw-> T3 and T1 -rt-> T3 link the same pair;
    keeping only the rw label lost the G-single-realtime T3 -rw-> T1 -rt-> T3, which Elle
    proves with strong-snapshot-isolation-cycle-exists."""
    h = load(DATA / "list-append-anomaly-g2-item.json")
    rels = {(u, v, r) for u, v, r in dependency_graph(h, realtime=True).edges(data="rel")}
    assert {(1, 3, "rw"), (1, 3, "realtime"), (3, 1, "rw")} <= rels
    found = check(h, realtime=True)
    assert names(found) == ["G-single-realtime", "G2-item"]
    [single] = [a for a in found if a.name == "G-single-realtime"]
    assert [(e.src, e.dst, e.rel) for e in single.cycle] == [(1, 3, "realtime"), (3, 1, "rw")]
    v = verdict(h)
    assert v.valid is False and v.not_ == ["repeatable-read", "strong-snapshot-isolation"]


def test_bug_a_read_inside_a_run_of_appends_anti_depends_on_its_writer() -> None:
    """Elle's G1b test (list_append_test.clj): T1 appends 1 then 2 to x, T2 reads [1]. T2 saw
    T1's first append and missed its second: wr T1 → T2 and rw T2 → T1, a G-single Elle
    reports beside the G1b. With versions grouped in runs per writer the rw edge was lost."""
    h = parse_edn(
        """{:index 0 :process 0 :type :invoke :value [[:append :x 1] [:append :x 2]]}
{:index 1 :process 0 :type :ok :value [[:append :x 1] [:append :x 2]]}
{:index 2 :process 0 :type :invoke :value [[:r :x nil]]}
{:index 3 :process 0 :type :ok :value [[:r :x [1]]]}"""
    )
    found = check(h)
    assert names(found) == ["G-single", "G1b"]
    [single] = [a for a in found if a.cycle]
    assert [(e.src, e.dst, e.rel) for e in single.cycle] == [(1, 3, "wr"), (3, 1, "rw")]
    assert verdict(h).anomaly_types == ["G-single-item", "G1b"]


def test_bug_writes_follow_reads_kept_when_the_read_version_has_no_writer() -> None:
    """Elle's wfr test (rw_register_test.clj): T1 reads y=1 (written before the history),
    writes x=1 and y=2; T2 reads x=1 and y=1. With wfr-keys, y: 1 < 2 gives T2 -rw-> T1 and
    T1 -wr-> T2: G-single. The order was dropped because 1 had no writer."""
    h = History(
        (
            Txn(0, 0, (Op("r", "y", 1), Op("w", "x", 1), Op("w", "y", 2))),
            Txn(1, 0, (Op("r", "x", 1), Op("r", "y", 1))),
        )
    )
    assert names(check(h, wfr_keys=True)) == ["G-single", "garbage-read"]
    assert names(check(h)) == ["garbage-read"]  # without wfr, as Elle: nothing orders 1, 2
    assert verdict(h, models=["serializable"]).valid is True
    assert verdict(h, models=["serializable"], wfr_keys=True).anomaly_types == ["G-single-item"]


# --------------------------------------------------------------------------- classes


def test_future_read_is_found_where_the_wr_edge_would_be_a_self_loop() -> None:
    h = load(DATA / "list-append-anomaly-future-read.json")
    assert names(check(h)) == ["future-read"]
    v = verdict(h)
    assert (v.valid, v.anomaly_types, v.not_) == (
        False,
        ["empty-transaction-graph", "future-read"],
        ["read-committed"],
    )
    # a read of one's own *earlier* append is fine
    ok = History((Txn(0, 0, (Op("append", "x", 1), Op("r", "x", (1,)))),))
    assert check(ok) == []


def test_dirty_update_direct_and_through_an_in_doubt_append() -> None:
    """Elle's dirty-update tests: a committed append after an aborted one in the order."""
    direct = History(
        (
            Txn(0, 0, (Op("append", "x", 1),), "fail"),
            Txn(1, 1, (Op("append", "x", 2),)),
            Txn(2, 2, (Op("r", "x", (1, 2)),)),
        )
    )
    assert names(check(direct)) == ["G1a", "dirty-update"]
    indirect = History(
        (
            Txn(0, 0, (Op("append", "x", 1),), "fail"),
            Txn(1, 1, (Op("append", "x", 2),), "info"),
            Txn(2, 2, (Op("append", "x", 3),)),
            Txn(3, 3, (Op("r", "x", (1, 2, 3)),)),
        )
    )
    [du] = [a for a in check(indirect) if a.name == "dirty-update"]
    assert du.txns == (0, 2)
    clean = History((Txn(0, 0, (Op("append", "x", 1),)), Txn(1, 1, (Op("r", "x", (1,)),))))
    assert check(clean) == []


def test_cyclic_versions_from_sequential_keys_and_the_source_left_out() -> None:
    """Elle's cyclic version order test: one process writes x=1, writes x=2, reads x=1."""
    h = History(
        (
            Txn(0, 0, (Op("w", "x", 1),), "ok", 0, 1),
            Txn(2, 0, (Op("w", "x", 2),), "ok", 2, 3),
            Txn(4, 0, (Op("r", "x", 1),), "ok", 4, 5),
        )
    )
    assert check(h) == []
    [cv] = check(h, sequential_keys=True)
    assert cv.name == "cyclic-versions" and "the order sequential-keys infers contradicts the rest" in cv.reason
    assert verdict(h, sequential_keys=True).not_ == ["read-uncommitted"]


def test_duplicate_elements_keep_the_reads_place_in_the_order() -> None:
    """Elle's duplicated-elements test: x = [1 2 1] repeats 1; the read is placed by its last
    element, as in Elle (so it also looks like a G-single, which Elle's test notes and avoids
    by checking read committed), and the G1c on y is found beside it."""
    h = History(
        (
            Txn(0, 0, (Op("append", "x", 1), Op("r", "y", (1,)))),
            Txn(1, 0, (Op("append", "x", 2), Op("append", "y", 1))),
            Txn(2, 0, (Op("r", "x", (1, 2, 1)),)),
        )
    )
    assert names(check(h)) == ["G-single", "G1c", "duplicate-elements"]
    v = verdict(h, models=["read-committed"])
    assert (v.anomaly_types, v.not_) == (["G1c", "duplicate-elements"], ["read-uncommitted"])


# --------------------------------------------------------------------------- options


def test_linearizable_keys_order_versions_by_real_time() -> None:
    """elle-cli rw-register-keys-linearizable-anomaly: read x=2 (never written) between a
    write of 1 and a read of 1: 1 < 2 < 1 by real time."""
    h = load(DATA / "rw-register-keys-linearizable-anomaly.json")
    assert "cyclic-versions" not in names(check(h))
    assert "cyclic-versions" in names(check(h, linearizable_keys=True))


def test_sequential_keys_infer_a_ww_order_elle_finds_g0_with() -> None:
    """Elle's rw G0 test: T1 x=1 y=2 and T2 x=2 y=1 on two processes, then each process reads
    2: x 1 < 2 and y 1 < 2 by process order, so T1 and T2 wrote in opposite orders."""
    h = parse_edn(
        """{:index 0 :process 0 :type :invoke :value [[:w :x 1] [:w :y 2]]}
{:index 1 :process 0 :type :ok :value [[:w :x 1] [:w :y 2]]}
{:index 2 :process 1 :type :invoke :value [[:w :x 2] [:w :y 1]]}
{:index 3 :process 1 :type :ok :value [[:w :x 2] [:w :y 1]]}
{:index 4 :process 0 :type :invoke :value [[:r :x nil]]}
{:index 5 :process 0 :type :ok :value [[:r :x 2]]}
{:index 6 :process 1 :type :invoke :value [[:r :y nil]]}
{:index 7 :process 1 :type :ok :value [[:r :y 2]]}"""
    )
    assert "G0" not in names(check(h))
    assert "G0" in names(check(h, sequential_keys=True))


# --------------------------------------------------------------------------- fallback


def _ring(n: int) -> History:
    """A G-single ring of n txns (ww chain on a list, closed by an rw) with G2-item noise."""
    txns = [Txn(i, 0, (Op("append", "ring", i), Op("append", f"k{i}", 0))) for i in range(n)]
    txns[0] = Txn(0, 0, (Op("append", "ring", 0), Op("append", "anti", 0)))
    txns[-1] = Txn(n - 1, 0, (Op("append", "ring", n - 1), Op("r", "anti", ())))
    txns.append(Txn(n, 1, (Op("r", "ring", tuple(range(n))),)))
    return History(tuple(txns))


def test_a_search_out_of_budget_still_proves_a_cycle_exists() -> None:
    h = _ring(40)
    assert names(check(h)) == ["G-single"]
    tight = check(h, search_budget=5)
    assert "cycle-search-timeout" in names(tight)
    exists = [a for a in tight if a.name.endswith("-cycle-exists")]
    assert {a.name for a in exists} >= {"PL-SI-cycle-exists", "PL-3-cycle-exists"}
    assert "PL-1-cycle-exists" not in {a.name for a in exists}  # no ww-only cycle
    v = verdict(h, models=["snapshot-isolation"], search_budget=5)
    assert v.valid is False and "PL-SI-cycle-exists" in v.anomaly_types
    assert "snapshot-isolation" in v.not_


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize(
    ("models", "graphs"),
    [
        (["serializable"], (False, False)),
        (["strict-serializable"], (False, True)),
        (["strong-session-snapshot-isolation"], (True, False)),
        (["read-committed"], (False, False)),
    ],
)
def test_models_decide_the_graphs(models: list[str], graphs: tuple[bool, bool]) -> None:
    v = verdict(History((Txn(0, 0, (Op("w", "x", 1),)),)), models=models)
    assert (v.process_edges, v.realtime_edges) == graphs


def test_model_tables_match_elles_published_boundaries() -> None:
    """The `not` sets Elle published for these anomalies (elle-cli stored results)."""
    assert boundary(["G-single-item"])[0] == ["consistent-view", "repeatable-read"]
    assert boundary(["G2-item", "lost-update"])[0] == ["cursor-stability", "update-atomic"]
    assert boundary(["internal"])[0] == ["read-atomic"]
    assert "G2-item" not in anomalies_prohibited_by(["snapshot-isolation"])
    assert "G-nonadjacent-item" in anomalies_prohibited_by(["snapshot-isolation"])
    assert elle_name("G-nonadjacent-realtime") == "G-nonadjacent-item-realtime"
    with pytest.raises(Exception, match="unknown model"):
        verdict(History(()), models=["serialisable"])
