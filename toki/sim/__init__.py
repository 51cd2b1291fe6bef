"""The concurrency simulator: a multi-version transactional store (agents and scheduling
strategies live in sibling modules)."""

from toki.errors import Deadlock, SerializationFailure, TransactionError, WouldBlock
from toki.sim.store import Op, OpKind, Seen, SimStore, TxnStatus, Version

__all__ = [
    "Deadlock",
    "Op",
    "OpKind",
    "Seen",
    "SerializationFailure",
    "SimStore",
    "TransactionError",
    "TxnStatus",
    "Version",
    "WouldBlock",
]
