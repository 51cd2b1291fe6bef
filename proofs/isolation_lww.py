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
            notes="one level too low: the conditional update evaluates its predicate on a "
            "dirty head, skips it (an uncommitted newer claim) and that writer aborts",
        ),
        isolation(
            NAME + "@read_committed_blind_write",
            "LWW",
            Isolation.READ_COMMITTED,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            variant=Variant(locked_decision=False),
            false_variant_of=NAME,
            notes="axiom weakened: the decision uses the head read at r and writes the head "
            "unconditionally (no re-check under the lock): a lost update, an older claim ends "
            "in the head",
        ),
        isolation(
            NAME + "@no_audit_write",
            "LWW",
            Isolation.READ_COMMITTED,
            k=k,
            expected=Status.COUNTEREXAMPLE,
            variant=Variant(audit_write=False),
            false_variant_of=NAME,
            notes="the displaced head claim is overwritten without an audit row (N3)",
        ),
    ]
