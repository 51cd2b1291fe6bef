"""Schema soundness: every committed claim is in a row its transactions wrote (the head, an
audit row written by the transaction that displaced it or by itself, or a held row), for
every operator, even at read uncommitted: the audit row names the head the conditional
update saw at write time, so it does not depend on what the decision read."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from proofs._isolation import about
from toki.formal import witness as premise
from toki.formal.encoding import OPERATORS, History, Variant
from toki.formal.prover import refute
from toki.formal.result import ProofResult, Status
from toki.formal.scenario import describe
from toki.isolation import Isolation

NAME = "schema_soundness"
K = 3


def _check(name: str, variant: Variant, expected: Status, k: int, of: str | None) -> ProofResult:
    """All four operators; the first that is not proved is the result."""
    start = time.perf_counter()
    last: ProofResult | None = None
    witnesses = {}
    for op in OPERATORS:
        h = History(k, Isolation.READ_UNCOMMITTED, op, policy_txn=op == "RULE", variant=variant)
        last = refute(
            name,
            "∀ committed claim c: c is the head's claim, or a committed transaction wrote an "
            "audit row for c, or c is held (all operators, any level)",
            h.axioms,
            h.n3(),
            expected=expected,
            bounds={
                **h.bounds(),
                "operators": list(OPERATORS),
                "policy_txns": "1 (RULE)",
            },
            describe=partial(describe, h),
            false_variant_of=of,
            witness=lambda premises, h=h: premise.find(h, premises),
        )
        witnesses[op] = last.premise_witness
        if last.status is not Status.PROVED:
            break
    assert last is not None
    witness = None
    if last.status is Status.PROVED:
        witness = {
            "exists": all(w and w["exists"] for w in witnesses.values()),
            "per_operator": witnesses,
        }
    return replace(
        last,
        seconds=time.perf_counter() - start,
        premise_witness=witness,
        extra=about(OPERATORS, k) if expected is Status.PROVED else {},
    )


def prove(k: int = K) -> ProofResult:
    return _check(NAME, Variant(), Status.PROVED, k, None)


def false_variants(k: int = K) -> list[ProofResult]:
    return [
        _check(
            NAME + "@no_audit_write", Variant(audit_write=False), Status.COUNTEREXAMPLE, k, NAME
        ),
        _check(
            NAME + "@audit_from_read",
            Variant(audit_from_write=False),
            Status.COUNTEREXAMPLE,
            k,
            NAME,
        ),
    ]
