"""LWW at its precondition (read committed) admits none of N1–N3 within the bound."""

from __future__ import annotations

from proofs._isolation import K, isolation
from toki.formal.encoding import Variant
from toki.formal.result import ProofResult, Status
from toki.isolation import Isolation

NAME = "isolation_lww"


def prove(k: int = K) -> ProofResult:
    return isolation(NAME, "LWW", Isolation.READ_COMMITTED, k=k)


def false_variants(k: int = K) -> list[ProofResult]:
    return [
        isolation(
            NAME + "@read_uncommitted",
            "LWW",
            Isolation.READ_UNCOMMITTED,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            false_variant_of=NAME,
            notes="one level too low: a dirty read of an aborted winner rejects a claim",
        ),
        isolation(
            NAME + "@read_committed_unlocked",
            "LWW",
            Isolation.READ_COMMITTED,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            variant=Variant(locked_decision=False),
            false_variant_of=NAME,
            notes="axiom weakened: the decision reads rows without the key's write lock "
            "(two claims each supersede the same incumbent: two current values)",
        ),
    ]
