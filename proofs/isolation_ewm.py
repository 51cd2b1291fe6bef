"""EWM at its precondition (snapshot isolation) admits none of N1–N3 within the bound."""

from __future__ import annotations

from proofs._isolation import K, isolation
from toki.formal.encoding import Variant
from toki.formal.result import ProofResult, Status
from toki.isolation import Isolation

NAME = "isolation_ewm"


def prove(k: int = K) -> ProofResult:
    return isolation(NAME, "EWM", Isolation.SNAPSHOT, k=k)


def false_variants(k: int = K) -> list[ProofResult]:
    return [
        isolation(
            NAME + "@read_committed",
            "EWM",
            Isolation.READ_COMMITTED,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            false_variant_of=NAME,
            notes="one level too low: lost evidence update (two writers read the same total)",
        ),
        isolation(
            NAME + "@snapshot_without_noconflict",
            "EWM",
            Isolation.SNAPSHOT,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            variant=Variant(no_conflict=False),
            false_variant_of=NAME,
            notes="axiom weakened: SI without first-committer-wins",
        ),
    ]
