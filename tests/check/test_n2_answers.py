"""The judge's answers enumerated: every answer tree is walked once per leaf, and the N2
classification by enumeration agrees with the sampled judge draws it replaces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from toki.check.anomalies import ScriptedJudge, every_answer, n2_origin_by_answers, serial_draws
from toki.check.witness import Witness, replay_witness
from toki.systems.registry import SYSTEMS, get_system

WITNESSES = Path(__file__).resolve().parents[2] / "verdict_matrix" / "witnesses"

# a question tree: a leaf (None) or (number of candidates, one subtree per answer)
trees = st.recursive(
    st.none(),
    lambda sub: st.integers(1, 3).flatmap(
        lambda n: st.tuples(st.just(n), st.lists(sub, min_size=n, max_size=n))
    ),
    max_leaves=12,
)


def _leaves(tree: object, path: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    if tree is None:
        return [path]
    n, children = tree  # type: ignore[misc]
    return [leaf for a in range(n) for leaf in _leaves(children[a], (*path, a))]


def _walk(tree: object, judge: ScriptedJudge) -> tuple[int, ...]:
    """Ask the tree's questions (named by their path), and the first one twice: an answer is
    the judge's for the whole run."""
    path: tuple[int, ...] = ()
    while tree is not None:
        n, children = tree  # type: ignore[misc]
        candidates = [str(i) for i in range(n)]
        answer = int(judge.pick(f"q{path}", candidates))
        assert int(judge.pick(f"q{path}", candidates)) == answer
        path, tree = (*path, answer), children[answer]
    return path


@seed(20261204)
@settings(max_examples=200, deadline=None)
@given(trees)
def test_every_answer_runs_each_leaf_of_the_answer_tree_once(tree: object) -> None:
    runs = list(every_answer(lambda judge: _walk(tree, judge)))
    assert sorted(runs) == sorted(_leaves(tree))


def _model_n2_witnesses() -> list[Path]:
    out = []
    for p in sorted(WITNESSES.glob("*-N2*.json")):
        data = json.loads(p.read_text())
        if data.get("system") in SYSTEMS and "library_version" not in data:  # not a real run
            out.append(p)
    return out


@pytest.mark.parametrize("path", _model_n2_witnesses(), ids=lambda p: p.name)
def test_enumeration_agrees_with_sampled_draws_on_committed_witnesses(path: Path) -> None:
    """A judge draw is one assignment of answers: a state some draw reaches serially is
    judge-induced by enumeration, and a state enumeration calls schedule-induced is reached
    under no draw."""
    data = json.loads(path.read_text())
    w = Witness.from_json(data)
    model = get_system(w.system)
    run, verdict = replay_witness(w, model)
    assert verdict.found, path.name
    label, runs = n2_origin_by_answers(model, w.workload, run, 20_000)
    hits = serial_draws(model, w.workload, run, list(range(10_000, 10_030)), w.judge_p)
    assert label in {"judge", "schedule"}, (path.name, label, runs)
    assert hits == 0 or label == "judge", (path.name, hits)  # and so schedule => no draw


def test_a_tiny_budget_claims_nothing() -> None:
    """With a budget too small to finish, the label is "bounded", never "schedule"."""
    schedule = []
    for p in _model_n2_witnesses():
        w = Witness.from_json(json.loads(p.read_text()))
        model = get_system(w.system)
        run, _ = replay_witness(w, model)
        label, runs = n2_origin_by_answers(model, w.workload, run, 20_000)
        if label == "schedule" and runs > 1:
            schedule.append((model, w, run, runs))
    if not schedule:
        pytest.skip("no committed schedule-induced N2 witness needs more than one run")
    model, w, run, runs = schedule[0]
    assert n2_origin_by_answers(model, w.workload, run, runs - 1)[0] == "bounded"
