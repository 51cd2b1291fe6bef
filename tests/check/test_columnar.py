"""The checker's compiled paths against the step-by-step ones they replace: real-time order
in closed form (``realtime_pairs``) and the columnar check of Elle list-append histories
(``toki.check.columnar``), which must give exactly the verdicts of the exact path."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toki.check.adya.graph import realtime_order, realtime_pairs

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
