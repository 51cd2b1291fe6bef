"""The simulator's history vocabulary: operations, versions, what a predicate read saw, how a
transaction ended. The store (toki/sim/store.py) writes them; the engine, the checkers and
the history exchange format read them.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable, Container, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from toki.errors import TransactionError

__all__ = [
    "INITIAL_TXN",
    "Key",
    "Op",
    "OpKind",
    "Predicate",
    "Seen",
    "TxnStatus",
    "Updater",
    "Version",
    "not_active_error",
    "state_digest",
    "txn_status",
]

Key = Hashable
Predicate = Callable[[Any, Any], bool]
"""`where(key, value) -> bool`, evaluated on live rows only."""
Updater = Callable[[Any, Any], Any]
"""`fn(key, old_value) -> new_value` for `update_where`."""

INITIAL_TXN = 0
"""The transaction id that wrote the initial state (Adya's T_init)."""


class OpKind(enum.StrEnum):
    """What a history entry records."""

    BEGIN = "begin"
    READ = "read"
    WRITE = "write"
    DELETE = "delete"
    SELECT = "select"
    COMMIT = "commit"
    ABORT = "abort"


class TxnStatus(enum.StrEnum):
    ACTIVE = "active"
    COMMITTED = "committed"
    ABORTED = "aborted"


class Seen(NamedTuple):
    """One row a predicate read examined: the version it saw and whether it matched."""

    key: Key
    value: Any
    writer: int
    version: int
    matched: bool


@dataclass(frozen=True, slots=True)
class Version:
    """One committed version of a key.

    `version` is the history step of the write that produced it (0 for the initial state), so
    (key, version) names it uniquely; `writer` is the transaction id (0 = initial state);
    `commit_seq` is the writer's position in the commit order. A delete is a version with
    `deleted=True` and value None.
    """

    key: Key
    value: Any
    deleted: bool
    writer: int
    version: int
    commit_seq: int


@dataclass(frozen=True, slots=True)
class Op:
    """One history entry; `step` increases by one per entry (a logical clock).

    READ: `value` read, `writer`/`version` of the version read (None, None: key never existed).
    WRITE/DELETE: the value written; `version` = `step` (the id the version will carry if it
    commits; a later write by the same transaction to the same key supersedes it).
    SELECT: `predicate` and, in `items`, every row examined with the version seen; `value` is
    the result as a tuple of (key, value) pairs. Predicate writes (`update_where`,
    `delete_where`) record a SELECT followed by their WRITE/DELETE entries.
    ABORT: `note` says why (explicit abort, deadlock, serialization failure).
    """

    step: int
    txn: int
    kind: OpKind
    key: Key | None = None
    value: Any = None
    writer: int | None = None
    version: int | None = None
    predicate: Predicate | None = None
    items: tuple[Seen, ...] = ()
    note: str = ""


def state_digest(pairs: Iterable[tuple[str, str]]) -> str:
    """sha256 over (key text, value text) pairs in sorted order: one committed state, one hash,
    whichever store (simulated or PostgreSQL) holds it."""
    digest = hashlib.sha256()
    for k, v in sorted(pairs):
        digest.update(k.encode())
        digest.update(b"\x00")
        digest.update(v.encode())
        digest.update(b"\x01")
    return digest.hexdigest()


def txn_status(txn: int, active: Container[int], finished: Mapping[int, TxnStatus]) -> TxnStatus:
    """ACTIVE, or how the transaction ended; an id never begun is an error."""
    if txn in active:
        return TxnStatus.ACTIVE
    st = finished.get(txn)
    if st is None:
        raise not_active_error(txn, finished)
    return st


def not_active_error(txn: object, finished: Mapping[int, TxnStatus]) -> TransactionError:
    """The error for a statement on a transaction that is not running, saying why."""
    st = finished.get(txn) if isinstance(txn, int) else None
    if st is None:
        return TransactionError(
            f"txn: no transaction {txn!r} was begun on this store "
            "(pass the id that begin() returned)"
        )
    return TransactionError(
        f"txn: transaction {txn} already {st.value}; begin() a new transaction to continue"
    )
