"""Operation ids: what makes a write idempotent and its outcome knowable (issue #36).

Every write on a store with concurrent writers (PostgreSQL) carries an operation id, stored
in the write's own transaction with the write's outcome. After a lost connection the store
looks the id up before it reports anything (committed: success; absent: failure; lookup
impossible: `OutcomeUnknown`, naming the id). `Memory.write(..., op_id=...)` lets the caller
choose the id: a retry with the same id after any failure never stores the claim twice, and
returns the first run's decision. The outcome stored is the decision's JSON (`outcome_text`).
"""

from __future__ import annotations

import uuid
from typing import Any

from toki.algebra.provenance import Action, Decision, Provenance
from toki.canonical import canonical_json, decode_json
from toki.store.base import EventStore, Operation, check_op_id

__all__ = ["decision_of", "operation_for", "outcome_text"]


def operation_for(store: EventStore, op_id: object = None) -> Operation | None:
    """The Operation of one write: the caller's id, else a fresh one where the store has
    concurrent writers (their outcome after a lost connection is looked up by it), else None
    (memory and SQLite commit locally: there is no lost connection to resolve)."""
    if op_id is not None:
        return Operation(check_op_id(op_id))
    if getattr(store, "concurrent", False) and hasattr(store, "op_result"):
        return Operation("op-" + uuid.uuid4().hex)
    return None


def op_done(store: EventStore, op: Operation | None) -> bool:
    """Whether `op` committed already (then op.replayed and op.result are set)."""
    lookup = getattr(store, "op_result", None)
    if op is None or lookup is None:
        return False
    found = lookup(op.op_id)
    if found is None:
        return False
    op.result, op.replayed = found, True
    return True


def outcome_text(decision: Decision) -> str:
    """A write's decision as the JSON text stored with its operation id."""
    data: dict[str, Any] = {
        "action": decision.action.value,
        "winner": decision.winner,
        "losers": list(decision.losers),
        "provenance": decision.provenance.to_json(),
        "ranking": list(decision.ranking),
        "claim_id": decision.claim_id,
    }
    return canonical_json(data)


def decision_of(text: str) -> Decision:
    """The decision a committed operation recorded (a retried write returns it)."""
    data = decode_json(text)
    return Decision(
        action=Action(data["action"]),
        winner=data["winner"],
        losers=tuple(data["losers"]),
        provenance=Provenance.from_json(data["provenance"]),
        ranking=tuple(data["ranking"]),
        claim_id=data["claim_id"],
    )
