"""Schema soundness: no committed version ever leaves current ∪ audit (∪ held, for AWAIT),
for every operator, even at read uncommitted (the dual-row write does not depend on what
the decision read)."""

from __future__ import annotations

import time

from toki.formal.encoding import OPERATORS, History, Variant
from toki.formal.prover import refute
from toki.formal.result import ProofResult, Status
from toki.isolation import Isolation

NAME = "schema_soundness"
K = 3


def _check(name: str, variant: Variant, expected: Status, k: int, of: str | None) -> ProofResult:
    start = time.perf_counter()
    last: ProofResult | None = None
    for op in OPERATORS:
        h = History(k, Isolation.READ_UNCOMMITTED, op, policy_txn=op == "RULE", variant=variant)
        last = refute(
            name,
            "∀ committed version v: v ∈ current ∪ audit ∪ held (all operators, any level)",
            h.axioms,
            h.n3(),
            expected=expected,
            bounds={
                **h.bounds(),
                "operators": list(OPERATORS),
                "policy_txns": "1 (RULE)",
                "keys": "1-2",
            },
            describe=h.describe,
            false_variant_of=of,
        )
        if last.status is not Status.PROVED:
            break
    assert last is not None
    from dataclasses import replace

    return replace(last, seconds=time.perf_counter() - start)


def prove(k: int = K) -> ProofResult:
    return _check(NAME, Variant(), Status.PROVED, k, None)


def false_variants(k: int = K) -> list[ProofResult]:
    return [
        _check(
            NAME + "@no_audit_write",
            Variant(audit_write=False),
            Status.COUNTEREXAMPLE,
            k,
            NAME,
        )
    ]
