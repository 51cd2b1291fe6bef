"""The fast EDN reader for Jepsen's subset reads exactly what edn_format reads (property test on
random operation maps), falls back to it outside the subset, and streams across chunks."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toki.check.edn as edn
from toki.check.elle import load, parse_edn, parse_json
from toki.errors import HistoryFormatError

KEYWORDS = st.sampled_from(["x", "y", "ok", "r", "append", "txn", "a-b", "ns/k", "x?", "nil2"])
SCALARS = st.one_of(
    st.integers(-(10**12), 10**12),
    st.sampled_from(["nil", "true", "false"]),
    KEYWORDS.map(lambda k: ":" + k),
    st.text(alphabet="ab :,[]{}x", max_size=6).map(lambda t: '"' + t + '"'),
)


def _form(depth: int) -> Any:
    if depth == 0:
        return SCALARS
    inner = _form(depth - 1)
    return st.one_of(
        SCALARS,
        st.lists(inner, max_size=4).map(lambda xs: ("[", xs, "]")),
        st.lists(inner, max_size=3).map(lambda xs: ("(", xs, ")")),
        st.lists(
            st.tuples(KEYWORDS.map(lambda k: ":" + k), inner),
            max_size=3,
            unique_by=lambda kv: kv[0],
        ).map(lambda kvs: ("{", [x for kv in kvs for x in kv], "}")),
    )


def render(form: Any, seps: list[str]) -> str:
    if not isinstance(form, tuple):
        return str(form)
    open_, items, close = form
    sep = seps[len(items) % len(seps)]
    return open_ + sep.join(render(x, seps) for x in items) + close


@settings(max_examples=40, derandomize=True, deadline=None)
@given(
    forms=st.lists(
        st.lists(st.tuples(KEYWORDS, _form(3)), max_size=5, unique_by=lambda kv: kv[0]),
        min_size=1,
        max_size=8,
    ),
    seps=st.lists(st.sampled_from([" ", ", ", ",", "  ", " ,\t"]), min_size=1, max_size=3),
    tagged=st.booleans(),
)
def test_fast_path_reads_what_edn_format_reads(
    forms: list[list[tuple[str, Any]]], seps: list[str], tagged: bool
) -> None:
    lines = []
    for kvs in forms:
        body = seps[0].join(f":{k} {render(v, seps)}" for k, v in kvs)
        lines.append(("#jepsen.history.Op" if tagged else "") + "{" + body + "}")
    text = "\n".join(lines) + "\n"
    assert edn.parse_chunk(text) == edn._slow(text)


def test_the_fast_path_takes_jepsens_lines_and_leaves_the_rest_to_edn_format() -> None:
    jepsen = "{:type :ok, :f :txn, :value [[:append 5 17] [:r 6 [1 2]] [:r 7 nil]], :time 1, :process 3, :index 7}\n"
    assert edn._fast(jepsen) is not None
    for outside in ["{:a \\c}\n", "{:a 12N}\n", '{:a #inst "2020-01-01"}\n', "{:a foo}\n"]:
        assert edn._fast(outside) is None
        assert edn.parse_chunk(outside) == edn._slow(outside)


def test_chunks_split_between_forms_and_never_inside_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edn, "_CHUNK_LINES", 2)
    text = (
        "; a comment\n"
        "{:type :invoke, :process 0, :index 0,\n :value [[:append :x 1]]}\n"
        "{:type :ok, :process 0, :index 1, :value [[:append :x 1]]}\n"
        "{:type :invoke, :process 1, :index 2, :value [[:r :x nil]]}\n"
        "{:type :ok, :process 1, :index 3,\n :value\n [[:r :x [1]]]}\n"
    )
    got = list(edn.read_forms(io.StringIO(text), "h.edn"))
    assert [line for line, _ in got] == [2, 4, 5, 6]
    assert [t.id for t in parse_edn(text).txns] == [1, 3]


def test_bad_edn_after_a_good_chunk_names_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(edn, "_CHUNK_LINES", 2)
    good = "{:type :ok :process 0 :value [[:r :x nil]]}\n" * 3
    with pytest.raises(HistoryFormatError) as err:
        parse_edn(good + "{:type :ok :process 0 :value [[:r :x [1 2]]}\n", source="h.edn")
    assert err.value.field == "h.edn line 4"


def test_json_lines_and_arrays_stream_the_same_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toki.check.elle as elle

    monkeypatch.setattr(elle, "_CHUNK", 3)
    ops = [
        f'{{"index":{2 * i + j},"process":{i},"type":"{t}","value":[["append","x",{i}]]}}'
        for i in range(5)
        for j, t in enumerate(("invoke", "ok"))
    ]
    lines = tmp_path / "h.jsonl"
    lines.write_text("\n".join(ops) + "\n")
    array = tmp_path / "h.json"
    array.write_text("[" + ",\n ".join(ops) + "]\n")
    one_line = tmp_path / "one.json"
    one_line.write_text("[" + ",".join(ops) + "]")
    a, b, c = load(lines), load(array), load(one_line)
    assert a == b == c and [t.id for t in a.txns] == [1, 3, 5, 7, 9]
    assert parse_json("\n".join(ops)) == a


def test_the_benchmarks_elle_shaped_history_reads_alike_in_every_format(tmp_path: Path) -> None:
    """bench_history's generator: concurrent processes, 1-4 micro-ops, whole-list reads; the
    three files it writes load to one history, which is strict serializable."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root
    from benchmarks.bench_history import write
    from toki.check.adya import verdict

    paths = write(400, tmp_path, seed=3)
    jl, ja, ed = (load(paths[f]) for f in ("jsonl", "json", "edn"))
    assert jl == ja == ed and len(jl.txns) == 400
    assert max(len(t.ops) for t in jl.txns) == 4
    overlapping = sum(
        1
        for a, b in zip(jl.txns, jl.txns[1:], strict=False)
        if b.start_index is not None and a.end_index is not None and b.start_index < a.end_index
    )
    assert overlapping > 50  # the processes really run concurrently
    assert verdict(jl).valid is True
