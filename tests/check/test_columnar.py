"""The checker's compiled paths against the step-by-step ones they replace: real-time order
in closed form (``realtime_pairs``) and the columnar check of Elle list-append histories
(``toki.check.columnar``), which must give exactly the verdicts of the exact path."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.check.elle_differential import DATA, cases
from toki.check import columnar
from toki.check.adya import analyse, verdict
from toki.check.adya.graph import realtime_order, realtime_pairs
from toki.check.columnar import check_file, clean_verdict, json_batches
from toki.check.elle import _json_batches, load, parse_json
from toki.errors import HistoryFormatError

_index = st.one_of(st.none(), st.integers(0, 30))


@settings(max_examples=300, derandomize=True)
@given(st.lists(st.tuples(_index, _index), max_size=14))
def test_realtime_pairs_are_the_frontiers_pairs(spans: list[tuple[int | None, int | None]]) -> None:
    starts = [s for s, _ in spans]
    ends = [None if e is None else (e if s is None else s + e) for s, e in spans]
    ids = list(range(len(spans)))
    want = list(realtime_order(ids, starts, ends))
    src, dst = realtime_pairs(ids, starts, ends)
    got = list(zip(src.tolist(), dst.tolist(), strict=True))
    assert sorted(got) == sorted(want)
    assert len(got) == len(want)
    # grouped by destination in start order, as the frontier yields them
    assert [x for _, x in got] == [x for _, x in want]


# --------------------------------------------------------------------------- columnar path

MODELS = (
    ("strict-serializable",),
    ("serializable",),
    ("strong-session-snapshot-isolation",),
    ("read-committed",),
    ("none",),
)


FAULTS = (
    "fail",
    "dirty",
    "info",
    "never",
    "stale",
    "garbage",
    "reuse",
    "nemesis",
    "future",
    "internal",
    "dup",
)


def elle_ops(seed: int, n: int, faults: float, *, processes: int = 4, keys: int = 3) -> list[Any]:
    """An Elle list-append history of ``n`` txns over few keys (so txns often touch a key
    twice), applied atomically at completion; with probability ``faults`` per txn one of
    ``FAULTS``: an abort (its appends seen or not), in doubt (applied or not), never
    completed, a stale, garbage or duplicating read, a reused element, a nemesis op, reads
    that see the txn's later appends or miss its earlier ones."""
    rng = random.Random(seed)
    state: dict[int, list[int]] = {}
    count: dict[int, int] = {}
    open_: dict[int, list[list[Any]]] = {}
    out: list[dict[str, Any]] = []
    started = done = 0

    def emit(**op: Any) -> None:
        out.append({"index": len(out), "time": len(out), "f": "txn", **op})

    while done < n:
        idle = [p for p in range(processes) if p not in open_]
        if started < n and idle and (not open_ or rng.random() < 0.5):
            p = rng.choice(idle)
            txn = []
            for _ in range(rng.randint(1, 4)):
                k = rng.randrange(keys)
                if rng.random() < 0.5:
                    txn.append(["r", k, None])
                else:
                    count[k] = count.get(k, 0) + 1
                    txn.append(["append", k, count[k]])
            open_[p] = txn
            started += 1
            emit(type="invoke", process=p, value=txn)
            continue
        p = rng.choice(sorted(open_))
        txn = open_.pop(p)
        done += 1
        fault = rng.choice(FAULTS)
        if rng.random() >= faults:
            fault = ""
        if fault == "fail":
            emit(type="fail", process=p, value=txn)
            continue
        if fault == "dirty":  # aborted, yet its appends are seen
            for f, k, v in txn:
                if f == "append":
                    state.setdefault(k, []).append(v)
            emit(type="fail", process=p, value=txn)
            continue
        if fault == "never":
            if rng.random() < 0.5:
                continue
            fault = "info"
        if fault == "nemesis":
            out.append(
                {
                    "index": len(out),
                    "type": "info",
                    "process": "nemesis",
                    "f": "start",
                    "value": None,
                }
            )
        result = []
        before = {k: list(v) for k, v in state.items()}
        if fault == "future":  # reads see this txn's later appends too
            for f, k, v in txn:
                if f == "append":
                    state.setdefault(k, []).append(v)
        for f, k, v in txn:
            if f == "r":
                seen = list(state.get(k, ()))
                if fault == "internal":  # reads miss this txn's own appends
                    seen = before.get(k, [])
                elif fault == "dup" and seen:
                    seen = [*seen, seen[0]]
                elif fault == "stale" and seen:
                    seen = seen[: rng.randrange(len(seen))]
                elif fault == "garbage":
                    seen = [*seen, 10**6 + rng.randrange(3)]
                result.append(["r", k, seen])
            else:
                if fault == "reuse" and count[k] > 1:
                    v = rng.randint(1, count[k] - 1)
                if fault != "future":
                    state.setdefault(k, []).append(v)
                result.append([f, k, v])
        if fault == "info":
            emit(type="info", process=p, value=txn if rng.random() < 0.5 else result)
        else:
            emit(type="ok", process=p, value=result)
    return out


def _jsonl(ops: list[Any]) -> str:
    return "".join(json.dumps(op) + "\n" for op in ops)


def _array(ops: list[Any]) -> str:
    """elle-cli's layout: one JSON array, one op per line."""
    return "[" + ",\n ".join(json.dumps(op) for op in ops) + "]\n"


@settings(max_examples=60, derandomize=True, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(0, 25), block=st.integers(1, 400))
def test_byte_blocks_read_what_the_line_reader_reads(seed: int, n: int, block: int) -> None:
    """The columnar reader (whole lines of bytes, any block size) decodes the same records
    as the exact path's line reader, in both JSON layouts."""
    ops = elle_ops(seed, n, 0.2)
    for text in (_jsonl(ops), _array(ops), "\n\n" + _jsonl(ops) + "\n"):
        want = [op for _, d in _json_batches(io.StringIO(text), "h", lambda t=text: t) for op in d]
        with patch.object(columnar, "_BLOCK", block):
            got = [op for _, d in json_batches(io.BytesIO(text.encode())) for op in d]
        assert got == want


def _both(text: str, models: tuple[str, ...]) -> tuple[Any, Any, int]:
    """(columnar answer or None, exact verdict, exact transaction count)."""
    fast = clean_verdict(
        json_batches(io.BytesIO(text.encode())),
        models=models,
        anomalies=(),
        wfr_keys=False,
        sequential_keys=False,
        linearizable_keys=False,
    )
    try:
        history = parse_json(text)
        return fast, verdict(history, models=models), len(history.txns)
    except HistoryFormatError:
        return fast, None, 0


@settings(max_examples=400, derandomize=True, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    n=st.integers(1, 30),
    faults=st.sampled_from((0.0, 0.05, 0.2, 0.6)),
    models=st.sampled_from(MODELS),
    keys=st.integers(1, 5),
)
def test_columnar_answers_only_what_the_exact_path_says(
    seed: int, n: int, faults: float, models: tuple[str, ...], keys: int
) -> None:
    """Whenever the columnar path answers, the exact path found nothing at all and gives the
    same verdict, field for field; when the exact path finds anything, it does not answer."""
    ops = elle_ops(seed, n, faults, keys=keys)
    text = _jsonl(ops) if seed % 2 else _array(ops)
    fast, exact, count = _both(text, models)
    if exact is None:  # the exact path refuses the history: so must the columnar one
        assert fast is None
        return
    if fast is not None:
        assert exact.to_json() == fast[1].to_json()
        assert exact.render() == fast[1].render()
        assert fast[0] == count
    found = analyse(parse_json(text), process=exact.process_edges, realtime=exact.realtime_edges)
    if found.anomalies or found.edges == 0:
        assert fast is None


@settings(max_examples=100, derandomize=True, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(10, 60), models=st.sampled_from(MODELS))
def test_columnar_decides_serializable_histories(
    seed: int, n: int, models: tuple[str, ...]
) -> None:
    """Histories applied atomically in completion order are clean: the columnar path must
    decide them itself (else it would be no faster), with the exact path's verdict."""
    text = _jsonl(elle_ops(seed, n, 0.0, processes=5, keys=4))
    fast, exact, _ = _both(text, models)
    assert exact is not None and exact.valid is True
    assert fast is not None
    assert fast[1].to_json() == exact.to_json()


def test_a_planted_anomaly_goes_to_the_exact_path(tmp_path: Path) -> None:
    """Two txns that each read x empty and append to it: a lost update, explained."""
    ops = [
        {
            "index": 0,
            "type": "invoke",
            "process": 0,
            "value": [["r", "x", None], ["append", "x", 1]],
        },
        {
            "index": 1,
            "type": "invoke",
            "process": 1,
            "value": [["r", "x", None], ["append", "x", 2]],
        },
        {"index": 2, "type": "ok", "process": 0, "value": [["r", "x", []], ["append", "x", 1]]},
        {"index": 3, "type": "ok", "process": 1, "value": [["r", "x", []], ["append", "x", 2]]},
        {"index": 4, "type": "invoke", "process": 0, "value": [["r", "x", None]]},
        {"index": 5, "type": "ok", "process": 0, "value": [["r", "x", [1, 2]]]},
    ]
    path = tmp_path / "h.jsonl"
    path.write_text(_jsonl(ops))
    checked = check_file(path)
    assert checked.path == "exact"
    want = verdict(load(path))
    assert want.valid is False and "lost-update" in want.anomaly_types
    assert checked.verdict.to_json() == want.to_json()
    assert checked.transactions == 3


@pytest.mark.parametrize("case", cases(), ids=lambda c: c["name"])
def test_check_file_gives_the_exact_verdict_on_the_elle_corpus(
    case: dict[str, Any], tmp_path: Path
) -> None:
    opts = case["options"]
    if "file" in case:
        path = DATA / case["file"]
    else:
        path = tmp_path / "h.edn"
        path.write_text(case["edn"])
    kw = {
        "models": opts.get("consistency-models", ["strict-serializable"]),
        "anomalies": opts.get("anomalies", ()),
        "wfr_keys": opts.get("wfr-keys", False),
        "sequential_keys": opts.get("sequential-keys", False),
        "linearizable_keys": opts.get("linearizable-keys", False),
    }
    checked = check_file(path, **kw)
    history = load(path)
    want = verdict(history, **kw)
    assert checked.verdict.to_json() == want.to_json()
    assert checked.verdict.render() == want.render()
    assert checked.transactions == len(history.txns)
    if checked.path == "columnar":
        assert want.valid is True


def _sequential(txns: list[list[list[Any]]]) -> list[dict[str, Any]]:
    """One process after another, each txn completing before the next begins."""
    ops: list[dict[str, Any]] = []
    for i, value in enumerate(txns):
        ops.append({"index": 2 * i, "type": "invoke", "process": i % 7, "value": value})
        ops.append({"index": 2 * i + 1, "type": "ok", "process": i % 7, "value": value})
    return ops


@pytest.mark.parametrize("late_reader", [False, True])
def test_many_readers_of_the_last_version_go_through_a_hub(late_reader: bool) -> None:
    """70 readers of x=[1] and 70 appends nobody read: 4,900 rw pairs, more than the hub
    threshold, so both paths route them through one hub node. A reader that begins after
    the unread appends completed closes a cycle (realtime, then rw back through the hub)."""
    txns = [[["append", "x", 1]]]
    txns += [[["r", "x", [1]]] for _ in range(70)]
    txns += [[["append", "x", v]] for v in range(2, 72)]
    txns += [[["r", "y", []], ["append", "y", 1]], [["r", "y", [1]]]]  # y: no tail
    if late_reader:
        txns.append([["r", "x", [1]]])
    fast, exact, count = _both(_jsonl(_sequential(txns)), ("strict-serializable",))
    assert exact is not None
    if late_reader:
        assert exact.valid is False and fast is None
    else:
        assert exact.valid is True and fast is not None
        assert fast[1].to_json() == exact.to_json() and fast[0] == count
