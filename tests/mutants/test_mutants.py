"""Every planted defect is caught by its checker within the budget, and the correct
configuration shows no anomaly on the same budget (no false positives)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutants.catalog import MUTANTS, Mutant
from tests.mutants.make_table import render

DOC = Path(__file__).parents[2] / "docs" / "anomalies.md"


def test_there_are_at_least_twelve_mutants() -> None:
    assert len(MUTANTS) >= 12
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_mutant_is_caught_and_correct_configuration_is_clean(mutant: Mutant) -> None:
    result = mutant.run()
    assert result.caught, f"{mutant.name} escaped {mutant.checker}"
    assert result.correct_anomalies == 0, f"{mutant.checker} fired on the correct configuration"


@pytest.mark.slow
def test_anomalies_doc_table_is_up_to_date() -> None:
    text = DOC.read_text()
    begin, end = "<!-- mutants:begin -->", "<!-- mutants:end -->"
    assert begin in text and end in text
    table = text.split(begin, 1)[1].split(end, 1)[0].strip()
    assert table == render().strip(), "regenerate with: python -m tests.mutants.make_table"
