"""Jepsen/Elle histories in EDN and JSON: each anomaly from a hand-written history, and bad
input reported with the line (or entry) and the problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toki.check.adya import Txn, check
from toki.check.elle import history_from_ops, load, parse_edn, parse_json
from toki.errors import HistoryFormatError


def found(h: object, **options: bool) -> list[tuple[str, list[object]]]:
    from toki.check.adya import History

    assert isinstance(h, History)
    return [(a.name, [e.src for e in a.cycle]) for a in check(h, **options)]


# --------------------------------------------------------------------------- list-append

PAPER = """\
{:index 0 :process 1 :type :invoke :value [[:append 253 1] [:append 253 3] [:append 256 1]]}
{:index 1 :process 1 :type :ok     :value [[:append 253 1] [:append 253 3] [:append 256 1]]}
{:index 2 :process 1 :type :invoke, :value [[:append 255 8] [:r 253 nil]]}
{:index 3 :process 1 :type :ok,     :value [[:append 255 8] [:r 253 [1 3]]]}
; a comment line
{:index 4 :process 1 :type :invoke, :value [[:append 256 4] [:r 255 nil] [:r 256 nil]]}
{:index 5 :process 1 :type :ok,     :value [[:append 256 4] [:r 255 [8]] [:r 256 [1 4]]]}
{:index 6 :process 1 :type :invoke, :value [[:r 255 nil] [:append 256 3]]}
{:index 7 :process 1 :type :ok      :value [[:r 255 []] [:append 256 3]]}
"""


def test_edn_list_append_g_single_like_the_elle_paper() -> None:
    h = parse_edn(PAPER)
    assert [t.id for t in h.txns] == [1, 3, 5, 7]
    assert h.txns[1] == Txn(3, 1, h.txns[1].ops, "ok", 2, 3) and h.txns[1].ops[1].value == (1, 3)
    assert found(h) == [("G-single", [3, 5, 7])]


def test_edn_vector_of_maps_and_json_array_give_the_same_history() -> None:
    edn_lines = [line for line in PAPER.splitlines() if not line.startswith(";")]
    as_vector = parse_edn("[" + "\n".join(edn_lines) + "]")
    assert as_vector == parse_edn(PAPER)
    js = json.dumps(
        [
            {"index": 0, "process": 1, "type": "invoke", "value": [["append", "x", 1]]},
            {"index": 1, "process": 1, "type": "ok", "value": [["append", "x", 1]]},
            {"index": 2, "process": 2, "type": "invoke", "value": [["r", "x", None]]},
            {"index": 3, "process": 2, "type": "ok", "value": [["r", "x", [1]]]},
        ]
    )
    h = parse_json(js)
    assert [(t.id, t.status, t.start_index, t.end_index) for t in h.txns] == [
        (1, "ok", 0, 1),
        (3, "ok", 2, 3),
    ]
    assert check(h) == []


def test_g1a_aborted_read_list_append_json() -> None:
    js = """[{"index":0,"process":0,"type":"invoke","value":[["append",1,1]]},
 {"index":1,"process":0,"type":"fail","value":[["append",1,1]]},
 {"index":2,"process":1,"type":"invoke","value":[["r",1,null]]},
 {"index":3,"process":1,"type":"ok","value":[["r",1,[1]]]}]"""
    [a] = check(parse_json(js))
    assert (a.name, a.txns) == ("G1a", (3, 1))
    assert "appended by T1, which aborted" in a.reason


def test_g1b_intermediate_read_edn() -> None:
    edn = """{:type :invoke :process 0 :value [[:append :x 1] [:append :x 2]] :index 0}
{:type :ok :process 0 :value [[:append :x 1] [:append :x 2]] :index 1}
{:type :invoke :process 1 :value [[:r :x nil]] :index 2}
{:type :ok :process 1 :value [[:r :x [1]]] :index 3}"""
    assert [(n, c) for n, c in found(parse_edn(edn)) if n == "G1b"] == [("G1b", [])]


def test_g1c_and_g0_list_append_edn() -> None:
    g1c = """{:type :invoke :process 0 :value [[:append :x 1] [:r :y nil]] :index 0}
{:type :invoke :process 1 :value [[:append :y 1] [:r :x nil]] :index 1}
{:type :ok :process 0 :value [[:append :x 1] [:r :y [1]]] :index 2}
{:type :ok :process 1 :value [[:append :y 1] [:r :x [1]]] :index 3}"""
    assert found(parse_edn(g1c)) == [("G1c", [2, 3])]
    g0 = """{:type :invoke :process 0 :value [[:append :x 1] [:append :y 1]] :index 0}
{:type :invoke :process 1 :value [[:append :x 2] [:append :y 2]] :index 1}
{:type :ok :process 0 :value [[:append :x 1] [:append :y 1]] :index 2}
{:type :ok :process 1 :value [[:append :x 2] [:append :y 2]] :index 3}
{:type :invoke :process 2 :value [[:r :x nil] [:r :y nil]] :index 4}
{:type :ok :process 2 :value [[:r :x [1 2]] [:r :y [2 1]]] :index 5}"""
    assert found(parse_edn(g0)) == [("G0", [2, 3])]


def test_g2_item_and_lost_update_list_append_json_lines() -> None:
    skew = "\n".join(
        json.dumps(o)
        for o in [
            {"type": "invoke", "process": 0, "value": [["r", "x", None], ["append", "y", 1]]},
            {"type": "invoke", "process": 1, "value": [["r", "y", None], ["append", "x", 1]]},
            {"type": "ok", "process": 0, "value": [["r", "x", []], ["append", "y", 1]]},
            {"type": "ok", "process": 1, "value": [["r", "y", []], ["append", "x", 1]]},
            {"type": "invoke", "process": 2, "value": [["r", "x", None], ["r", "y", None]]},
            {"type": "ok", "process": 2, "value": [["r", "x", [1]], ["r", "y", [1]]]},
        ]
    )
    assert found(parse_json(skew)) == [("G2-item", [2, 3])]
    lost = """{:type :invoke :process 0 :value [[:r :x nil] [:append :x 1]] :index 0}
{:type :invoke :process 1 :value [[:r :x nil] [:append :x 2]] :index 1}
{:type :ok :process 0 :value [[:r :x []] [:append :x 1]] :index 2}
{:type :ok :process 1 :value [[:r :x []] [:append :x 2]] :index 3}
{:type :invoke :process 2 :value [[:r :x nil]] :index 4}
{:type :ok :process 2 :value [[:r :x [1 2]]] :index 5}"""
    assert found(parse_edn(lost)) == [("lost-update", []), ("G-single", [2, 3])]


def test_internal_inconsistency_edn() -> None:
    edn = """{:type :invoke :process 0 :value [[:append :x 1] [:r :x nil]] :index 0}
{:type :ok :process 0 :value [[:append :x 1] [:r :x [2]]] :index 1}
{:type :invoke :process 1 :value [[:append :x 2]] :index 2}
{:type :ok :process 1 :value [[:append :x 2]] :index 3}"""
    assert ("internal", []) in found(parse_edn(edn))


# --------------------------------------------------------------------------- rw-register


def test_rw_register_clean_and_garbage_json() -> None:
    js = """[{"type":"invoke","f":"txn","value":[["w","x",2]],"process":0,"index":1},
{"type":"ok","f":"txn","value":[["w","x",2]],"process":0,"index":2},
{"type":"invoke","f":"txn","value":[["r","x",null]],"process":0,"index":3},
{"type":"ok","f":"txn","value":[["r","x",3]],"process":0,"index":4},
{"type":"invoke","f":"txn","value":[["r","x",null]],"process":0,"index":5},
{"type":"ok","f":"txn","value":[["r","x",2]],"process":0,"index":6}]"""
    h = parse_json(js)
    assert [(a.name, a.txns) for a in check(h)] == [("garbage-read", (4,))]


def test_rw_register_g_single_and_g2_item_edn() -> None:
    single = """{:type :invoke :process 0 :f :txn :value [[:w :x 1] [:w :y 1]] :index 0}
{:type :ok :process 0 :f :txn :value [[:w :x 1] [:w :y 1]] :index 1}
{:type :invoke :process 1 :f :txn :value [[:r :x nil] [:w :x 2] [:w :y 2]] :index 2}
{:type :ok :process 1 :f :txn :value [[:r :x 1] [:w :x 2] [:w :y 2]] :index 3}
{:type :invoke :process 2 :f :txn :value [[:r :x nil] [:r :y nil]] :index 4}
{:type :ok :process 2 :f :txn :value [[:r :x 1] [:r :y 2]] :index 5}"""
    # T3 read x=1 then wrote x=2: with writes-follow-reads, 1 precedes 2, so T5's read of
    # x=1 anti-depends on T3; without it (Elle's default) nothing orders 1 and 2
    assert found(parse_edn(single), wfr_keys=True) == [("G-single", [3, 5])]
    assert found(parse_edn(single)) == []
    skew = """{:type :invoke :process 0 :f :txn :value [[:r :x nil] [:r :y nil] [:w :x 1]] :index 0}
{:type :invoke :process 1 :f :txn :value [[:r :x nil] [:r :y nil] [:w :y 1]] :index 1}
{:type :ok :process 0 :f :txn :value [[:r :x nil] [:r :y nil] [:w :x 1]] :index 2}
{:type :ok :process 1 :f :txn :value [[:r :x nil] [:r :y nil] [:w :y 1]] :index 3}"""
    assert found(parse_edn(skew)) == [("G2-item", [2, 3])]


def test_rw_register_g1a_with_info_and_unfinished_invocations() -> None:
    edn = """{:type :invoke :process 0 :f :txn :value [[:w :x 1]] :index 0}
{:type :fail :process 0 :f :txn :value [[:w :x 1]] :index 1}
{:type :invoke :process 1 :f :txn :value [[:w :x 2]] :index 2}
{:type :info :process 1 :f :txn :value [[:w :x 2]] :index 3}
{:type :invoke :process :nemesis :f :start :value nil :index 4}
{:type :invoke :process 2 :f :txn :value [[:r :x nil] [:r :y nil]] :index 5}
{:type :ok :process 2 :f :txn :value [[:r :x 1] [:r :y 3]] :index 6}
{:type :invoke :process 3 :f :txn :value [[:w :y 3]] :index 7}"""
    h = parse_edn(edn)
    assert [(t.id, t.status, t.end_index) for t in h.txns] == [
        (1, "fail", 1),
        (3, "info", None),
        (6, "ok", 6),
        (7, "info", None),
    ]
    # reading y=3 from the never-completed write is fine: it may have committed
    assert [(a.name, a.txns) for a in check(h)] == [("G1a", (6, 1))]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("{:type :ok :process 0 :value [[:r :x [1 2]]}\n", "line 1", "invalid EDN"),
        (
            "{:type :ok :process 0 :value [[:r :x nil]]}\n{:type :ok :process 0 :value [[:r :x",
            "line 2",
            "unexpected end of input",
        ),
        ("{:type :ok :process 0 :value [[:frob :x 1]]}", "line 1", "unknown function"),
        ("\n\n{:type :done :process 0 :value []}", "line 3", "is not one of invoke"),
        ("{:type :ok :process 0 :value [[:r]]}", "line 1", "is not [f key value]"),
        ("{:type :ok :process 0 :value [[:w :x [1]]]}", "line 1", "writes a list"),
        ("{:type :ok :process 0 :value 7}", "line 1", "is not a transaction"),
        ("{:type :ok :process 0 :f :read :value []}", "line 1", "is not :txn"),
        (
            "{:type :ok :process 0 :value [] :index 4}\n{:type :ok :process 1 :value [] :index 4}",
            "line 2",
            "already used",
        ),
    ],
)
def test_bad_edn_names_the_line(text: str, where: str, problem: str) -> None:
    with pytest.raises(HistoryFormatError) as err:
        parse_edn(text, source="h.edn")
    assert err.value.field == f"h.edn {where}"
    assert problem in err.value.problem


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ('[{"type": "ok", "process": 0, "value": []},\n {"type": ok}]', "line 2", "invalid JSON"),
        ('{"type": "ok", "process": 0, "value": []}\n\n{"type"', "line 3", "invalid JSON"),
        ('[{"type": "ok", "process": 0, "value": [["r", 1.5, 1]]}]', "entry 1", "not a string"),
        ("[3]", "entry 1", "not an operation map"),
        ('{"a": 1}', "line 1", "is not one of invoke"),
    ],
)
def test_bad_json_names_the_line_or_entry(text: str, where: str, problem: str) -> None:
    with pytest.raises(HistoryFormatError) as err:
        parse_json(text, source="h.json")
    assert err.value.field == f"h.json {where}"
    assert problem in err.value.problem


def test_load_picks_the_format_by_suffix_or_content(tmp_path: Path) -> None:
    edn = tmp_path / "h.edn"
    edn.write_text(PAPER)
    plain = tmp_path / "history"
    plain.write_text(PAPER)
    js = tmp_path / "h.json"
    js.write_text('[{"type": "ok", "process": 0, "value": [["w", "x", 1]]}]')
    assert load(edn) == load(plain) == parse_edn(PAPER)
    assert load(js).txns[0].ops[0].value == 1
    with pytest.raises(HistoryFormatError) as err:
        load(tmp_path / "missing.edn")
    assert "cannot be read" in err.value.problem


def test_history_from_ops_accepts_plain_dicts() -> None:
    h = history_from_ops(
        [
            (
                "a",
                {
                    "type": "ok",
                    "process": "p",
                    "f": None,
                    "value": [["append", "k", 1]],
                    "index": 9,
                },
            )
        ]
    )
    assert h.txns == (Txn(9, "p", h.txns[0].ops, "ok", None, 9),)


def test_ops_without_process_and_two_open_ops_on_one_process_are_read_as_elle_does() -> None:
    """Elle's own tests build such histories (e.g. unobserved-write-test, wr-process-test)."""
    edn = """{:type :invoke :process 0 :value [[:append :x 1]] :index 0}
{:type :invoke :process 0 :value [[:r :x]] :index 1}
{:type :ok :process 0 :value [[:append :x 1]] :index 2}
{:type :ok :process 0 :value [[:r :x [1]]] :index 3}
{:type :ok :value [[:r :x [1]]] :index 4}"""
    h = parse_edn(edn)
    # first in, first out per process; the process-less completion stands alone
    assert [(t.id, t.process, t.start_index, t.end_index) for t in h.txns] == [
        (2, 0, 0, 2),
        (3, 0, 1, 3),
        (4, None, None, 4),
    ]
    assert h.txns[1].ops[0].value == (1,)
    assert check(h, process=True, realtime=True) == []
