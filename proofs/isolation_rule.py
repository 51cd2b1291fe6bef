"""RULE at its precondition (serializable) admits none of N1–N3 within the bound, with one
policy change (set the policy + re-adjudicate the key) among the transactions."""

from __future__ import annotations

from proofs._isolation import K, isolation
from toki.formal.result import ProofResult, Status
from toki.isolation import Isolation

NAME = "isolation_rule"


def prove(k: int = K) -> ProofResult:
    return isolation(NAME, "RULE", Isolation.SERIALIZABLE, k=k)


def false_variants(k: int = K) -> list[ProofResult]:
    return [
        isolation(
            NAME + "@snapshot",
            "RULE",
            Isolation.SNAPSHOT,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            false_variant_of=NAME,
            notes="one level too low: write skew between a claim (reads the old policy) and a "
            "policy change (re-adjudicates without the claim)",
        ),
    ]
