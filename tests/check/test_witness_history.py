"""Witnesses replay exactly and shrink; history files validate line by line; the CLI agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toki.check.runner import check_history_file, explore_system, make_strategy
from toki.check.witness import Witness, explain, find_witness, replay_witness, shrink
from toki.cli import main
from toki.errors import HistoryFormatError
from toki.history import parse_history, read_history, run_to_records, to_adya, write_history
from toki.isolation import Isolation
from toki.sim import DPOR, iter_runs
from toki.sim.workload import SimClaim, Workload, scenario
from toki.systems.base import SimJudge, build_program
from toki.systems.toki_model import TokiModel

JUDGE = SimJudge(0.5, 1)


def _n2_witness() -> Witness:
    w, runs = find_witness(
        TokiModel("EWM"),
        scenario("evidence-race"),
        "N2",
        Isolation.READ_COMMITTED,
        judge=JUDGE,
        recovery=SimJudge(0.5, 9),
    )
    assert w is not None and runs >= 1
    return w


def test_witness_round_trips_and_replays_exactly(tmp_path: Path) -> None:
    w = _n2_witness()
    path = w.save(tmp_path / "w.json")
    again = Witness.load(path)
    assert again == w
    run, verdict = replay_witness(again, TokiModel("EWM"))
    assert verdict.found and verdict.keys == w.keys
    story = explain(again, run, TokiModel("EWM"))
    assert any("commits" in line for line in story) and story[-1].startswith("why:")


def test_shrinking_removes_claims_while_the_anomaly_persists() -> None:
    bigger = Workload(
        "padded",
        (
            (
                SimClaim("user:city", "Berlin", recorded=1, source="a"),
                SimClaim("other:city", "Oslo", recorded=4, source="a"),
            ),
            (SimClaim("user:city", "Berlin", recorded=2, source="b"),),
            (SimClaim("user:city", "Lisbon", recorded=3, weight=1.5, source="c"),),
        ),
    )
    w, _ = find_witness(
        TokiModel("EWM"), bigger, "N2", Isolation.READ_COMMITTED, judge=JUDGE, budget=150
    )
    assert w is not None
    small = shrink(w, TokiModel("EWM"), budget=150)
    assert small.shrunk_from == w.size
    assert small.size["claims"] < w.size["claims"]
    assert replay_witness(small, TokiModel("EWM"))[1].found


def test_history_file_round_trip_and_adya(tmp_path: Path) -> None:
    model, wl = TokiModel("EWM"), scenario("evidence-race")
    program = build_program(model, wl, level=Isolation.READ_COMMITTED, judge=JUDGE)
    run = next(r for r in iter_runs(program, DPOR(), budget=50) if len(r.history) > 30)
    header = {
        "system": model.name,
        "isolation": "read_committed",
        "workload": wl.to_json(),
        "schedule": list(run.schedule),
        "judge_seed": 1,
        "recovery_seed": 2,
    }
    path = write_history(tmp_path / "h.jsonl", header, run_to_records(run.history))
    history = read_history(path)
    assert len(history.ops) == len([op for op in run.history if op.kind.value != "select"])
    adya_history = to_adya(history)
    assert all(t.status in ("ok", "fail", "info") for t in adya_history.txns)
    result = check_history_file(history)
    assert set(result["checks"]) >= {"adya", "N1", "N2", "N3"}


BAD = [
    ("missing header", ['{"type": "op", "txn": 1, "kind": "begin", "at": 1}\n'], "missing header"),
    (
        "unknown version",
        [
            '{"format": "toki-history", "version": 1}\n',
            '{"type": "op", "txn": 1, "kind": "begin", "at": 1}\n',
            '{"type": "op", "txn": 1, "kind": "read", "key": "x", "version": 99, "at": 2}\n',
        ],
        "line 3: read of unknown version 99",
    ),
    (
        "times out of order",
        [
            '{"format": "toki-history", "version": 1}\n',
            '{"type": "op", "txn": 1, "kind": "begin", "at": 5}\n',
            '{"type": "op", "txn": 1, "kind": "commit", "at": 2}\n',
        ],
        "line 3: times out of order",
    ),
    (
        "truncated last line",
        [
            '{"format": "toki-history", "version": 1}\n',
            '{"type": "op", "txn": 1, "kind": "begin", "at": 1}\n',
            '{"type": "op", "txn": 1, "kin',
        ],
        "line 3: truncated last line",
    ),
    (
        "duplicate transaction ids",
        [
            '{"format": "toki-history", "version": 1}\n',
            '{"type": "op", "txn": 1, "kind": "begin", "at": 1}\n',
            '{"type": "op", "txn": 1, "kind": "commit", "at": 2}\n',
            '{"type": "op", "txn": 1, "kind": "begin", "at": 3}\n',
        ],
        "line 4: duplicate transaction id 1",
    ),
]


@pytest.mark.parametrize(("name", "lines", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_history_files_name_the_line(name: str, lines: list[str], message: str) -> None:
    with pytest.raises(HistoryFormatError, match=message):
        parse_history(lines)


def test_partially_valid_file_reports_every_problem() -> None:
    lines = [
        '{"format": "toki-history", "version": 1}\n',
        '{"type": "op", "txn": 1, "kind": "begin", "at": 1}\n',
        '{"type": "op", "txn": 2, "kind": "read", "at": 2}\n',
        '{"type": "nonsense"}\n',
    ]
    with pytest.raises(HistoryFormatError) as info:
        parse_history(lines)
    text = str(info.value)
    assert "line 3" in text and "line 4" in text


def test_external_file_says_what_could_not_run(tmp_path: Path) -> None:
    path = write_history(
        tmp_path / "ext.jsonl",
        {"system": "my-memory"},
        [
            {"type": "op", "txn": "a", "kind": "begin", "at": 1},
            {"type": "op", "txn": "a", "kind": "write", "key": "x", "value": 1, "at": 2},
            {"type": "op", "txn": "a", "kind": "commit", "at": 3},
            {"type": "belief", "at": 3, "key": "x", "value": "Bob"},
            {"type": "recoverable", "key": "x", "values": ["Carol"]},
        ],
    )
    result = check_history_file(read_history(path))
    assert result["checks"]["N3"]["found"] is True
    assert "N2" in result["could_not_run"] and "N1" in result["could_not_run"]


def test_explore_cli_json_counts_anomalies(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "explore",
            "--system",
            "toki-lib-ewm-nohead",  # "toki-ewm" is the library since issue #38: no anomaly
            "--workload",
            "evidence-race",
            "--isolation",
            "read_committed",
            "--check",
            "--budget",
            "40",
            "--json",
            "--witness-dir",
            str(tmp_path),
        ]
    )
    assert code == 1  # --check found an anomaly: exit 1, like toki check
    data = json.loads(capsys.readouterr().out)
    assert data["schedules"] == 40 and data["anomalies"]["N2"] > 0
    assert {"N1", "N2", "N3"} <= set(data["anomalies"])
    assert main(["replay", data["witness_files"]["N2"]]) == 0


def test_explore_without_check_reports_exploration_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "explore",
                "--system",
                "toki",
                "--strategy",
                "dpor",
                "--agents",
                "2",
                "--claims",
                "1",
                "--seed",
                "1",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert "anomalies" not in data and data["schedules"] >= 1 and data["distinct_states"] >= 1


def test_explore_strategies_agree_on_final_states() -> None:
    model, wl = TokiModel("LWW"), scenario("manager")
    exhaustive = explore_system(model, wl, make_strategy("exhaustive"), budget=2000, check=False)
    dpor = explore_system(model, wl, make_strategy("dpor"), budget=2000, check=False)
    assert exhaustive.exhausted and dpor.exhausted
    assert dpor.distinct_states == exhaustive.distinct_states
    assert dpor.schedules <= exhaustive.schedules
