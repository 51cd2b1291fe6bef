"""The mutation test of the z3 encoding (tests/mutants/encoding.py): the catalogue follows the
code, a fast subset is killed here, and the recorded full run (proofs/mutants.json, written
by `python -m tests.mutants.encoding`) kills at least 28 of the mutant kinds."""

from __future__ import annotations

import json

import pytest

from tests.mutants.encoding import FAST, MUTANTS, RESULTS, ROOT, kill

NAMED = ("ser-without-write-locks", "await-never-refuses-on-plain-read")


def test_catalogue_names_at_least_29_kinds_that_apply_to_the_code() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) >= 29 and len(set(names)) == len(names)
    assert set(NAMED) <= set(names) and set(FAST) <= set(names)
    for m in MUTANTS:
        for e in m.edits:
            assert (ROOT / e.path).read_text().count(e.old) == 1, (m.name, e.old)


@pytest.mark.parametrize("name", FAST)
def test_fast_subset_is_killed(name: str) -> None:
    (mutant,) = [m for m in MUTANTS if m.name == name]
    row = kill(mutant)
    assert row["killed"], row


def test_recorded_score_kills_at_least_28() -> None:
    data = json.loads(RESULTS.read_text())
    assert [r["name"] for r in data["rows"]] == [m.name for m in MUTANTS], "rerun the mutants"
    assert data["killed"] >= 28 and data["mutants"] == len(MUTANTS)
    by_name = {r["name"]: r for r in data["rows"]}
    assert all(by_name[n]["killed"] for n in NAMED)


def test_docs_show_the_recorded_score() -> None:
    from tests.mutants.encoding import DOC, render

    assert render(json.loads(RESULTS.read_text())) in DOC.read_text()
