"""The checker's input: transactions of micro-operations, as plain frozen values.

Histories come from toki's simulator, from users' own systems and from Jepsen/Elle, so these
types know nothing about any of them. Values name versions (Elle's convention: every write of
a key writes a value no other write of that key writes), so a read says which version it saw.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from toki.errors import HistoryFormatError

__all__ = ["History", "Key", "Op", "OpKind", "Status", "Txn", "TxnId", "Value"]

Key = str | int
TxnId = str | int
Value = Hashable
OpKind = Literal["r", "w", "append"]
Status = Literal["ok", "fail", "info"]

_OP_KINDS: Final = frozenset(("r", "w", "append"))
_STATUSES: Final = frozenset(("ok", "fail", "info"))


@dataclass(frozen=True, slots=True)
class Op:
    """One micro-operation of a transaction.

    ``w`` writes a register, ``append`` appends one element to a list, ``r`` reads: a register
    read returns the value (``None`` is the initial state), a list read returns the whole list
    (a tuple; a list is converted). Written values must be unique per key, as in Elle: a
    value is how a read names the version it saw.
    """

    kind: OpKind
    key: Key
    value: Value = None

    def __post_init__(self) -> None:
        if self.kind not in _OP_KINDS:
            raise HistoryFormatError(
                "Op.kind", f"{self.kind!r} is not a micro-op kind", "use 'r', 'w' or 'append'"
            )
        if not isinstance(self.key, str | int) or isinstance(self.key, bool):
            raise HistoryFormatError(
                "Op.key", f"{self.key!r} is a {type(self.key).__name__}", "use a str or int key"
            )
        if isinstance(self.value, list):
            object.__setattr__(self, "value", tuple(self.value))
        try:
            hash(self.value)
        except TypeError:
            raise HistoryFormatError(
                "Op.value",
                f"{self.value!r} is not hashable",
                "use numbers, strings, or tuples of them: a value names a version",
            ) from None


@dataclass(frozen=True, slots=True)
class Txn:
    """A transaction as recorded: its micro-ops and how it ended.

    ``ok`` committed, ``fail`` aborted (its writes must never be seen), ``info`` unknown (it may
    have committed; its writes may be seen, its reads are not trusted). ``process`` may be
    ``None`` (then the transaction has no process order). ``start_index`` and ``end_index``
    are positions in one real-time order (e.g. Jepsen's :index of the invocation and
    completion); they are needed only for real-time edges.
    """

    id: TxnId
    process: Hashable
    ops: tuple[Op, ...]
    status: Status = "ok"
    start_index: int | None = None
    end_index: int | None = None

    def __post_init__(self) -> None:
        if self.status not in _STATUSES:
            raise HistoryFormatError(
                f"Txn {self.id!r}.status",
                f"{self.status!r} is not a completion status",
                "use 'ok', 'fail' or 'info'",
            )
        if not isinstance(self.ops, tuple):
            object.__setattr__(self, "ops", tuple(self.ops))


@dataclass(frozen=True, slots=True)
class History:
    """Transactions in history order, and optionally each key's committed version order.

    ``version_order[k]`` lists the values (register) or appended elements (list) of ``k`` in
    the order they were installed, committed versions only. Keys it does not name are inferred.
    """

    txns: tuple[Txn, ...]
    version_order: Mapping[Any, Sequence[Value]] | None = None  # keys are str | int

    def __post_init__(self) -> None:
        if not isinstance(self.txns, tuple):
            object.__setattr__(self, "txns", tuple(self.txns))
        if self.version_order is not None:
            object.__setattr__(
                self, "version_order", {k: tuple(v) for k, v in self.version_order.items()}
            )
