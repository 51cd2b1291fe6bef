"""AWAIT at its precondition (read committed) admits none of N1–N3 within the bound."""

from __future__ import annotations

from proofs._isolation import K, isolation
from toki.formal.result import ProofResult, Status
from toki.isolation import Isolation

NAME = "isolation_await"


def prove(k: int = K) -> ProofResult:
    return isolation(NAME, "AWAIT", Isolation.READ_COMMITTED, k=k)


def false_variants(k: int = K) -> list[ProofResult]:
    return [
        isolation(
            NAME + "@read_uncommitted",
            "AWAIT",
            Isolation.READ_UNCOMMITTED,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            false_variant_of=NAME,
            notes="one level too low: a claim is held behind a head it read dirty from a "
            "transaction that then aborts (the head ends empty)",
        ),
    ]
