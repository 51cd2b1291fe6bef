"""Every statement has its expected status and every false variant yields a counterexample
(an encoding that proved everything would fail here)."""

from __future__ import annotations

import importlib
import json

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
