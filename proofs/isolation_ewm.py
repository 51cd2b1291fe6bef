"""EWM at its precondition (serializable) admits none of N1–N3 within the bound.

EWM's write set is the evidence register of the claim's own value (and the head only when
the head's value changes), so at snapshot isolation two claims for different values can
each read the other's total as it was and both commit: write skew, the head ends on a value
with less evidence. Its precondition is therefore SERIALIZABLE (the false variant at
snapshot is the counterexample)."""

from __future__ import annotations

from proofs._isolation import K, isolation
from toki.formal.result import ProofResult, Status
from toki.isolation import Isolation

NAME = "isolation_ewm"


def prove(k: int = K) -> ProofResult:
    return isolation(NAME, "EWM", Isolation.SERIALIZABLE, k=k)


def false_variants(k: int = K) -> list[ProofResult]:
    return [
        isolation(
            NAME + "@snapshot",
            "EWM",
            Isolation.SNAPSHOT,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            false_variant_of=NAME,
            notes="one level too low: write skew between claims for different values (each "
            "writes only its own value's evidence)",
        ),
        isolation(
            NAME + "@read_committed",
            "EWM",
            Isolation.READ_COMMITTED,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            false_variant_of=NAME,
            notes="two levels too low: lost evidence update (two writers read the same total)",
        ),
    ]
