"""One exception hierarchy for everything toki refuses.

Every message names the offending field and says how to fix it, because the people who see
these errors are running experiments, not reading our source.
"""

from __future__ import annotations


class TokiError(Exception):
    """Base class of every error toki raises on purpose."""


class InvalidInput(TokiError, ValueError):
    """A value given to toki is malformed; the message names the field and the fix."""

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        message = f"{field}: {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)


class InvalidTime(InvalidInput):
    """A time is naive, unparseable, or of the wrong type."""


class InvalidInterval(InvalidInput):
    """An interval's end is not after its start, or a bound is inconsistent."""


class InvalidKey(InvalidInput):
    """A FactKey field is empty, of the wrong type, or names an unknown scope kind."""


class InvalidValue(InvalidInput):
    """A fact value cannot be represented as canonical JSON."""


class UnknownVersion(TokiError, KeyError):
    """A version id names no version this store knows."""

    def __init__(self, version_id: str, field: str = "version") -> None:
        self.version_id = version_id
        super().__init__(
            f"{field}: no version with id {version_id!r} is known to this store "
            "(pass the FactVersion or id returned by assert_fact/supersede/insert_segment)"
        )

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0])


class LifecycleError(TokiError):
    """An operation is not allowed in the version's current lifecycle (e.g. revoking twice)."""


class IntegrityError(TokiError):
    """A stored log violates an invariant: a changed event, a bad hash, a sequence gap."""


class IsolationViolation(TokiError):
    """An operator ran on a store whose isolation level does not dominate its precondition."""


class StoreError(TokiError):
    """A backend could not be opened or used (bad URL, unreachable server)."""


class DataError(TokiError):
    """A data set toki reads (e.g. LoCoMo) is missing, unreadable or not the expected file."""


class DataNotFound(DataError, FileNotFoundError):
    """No copy of a data file was found; the message lists where toki looked and how to get it."""


class ChecksumMismatch(DataError):
    """A downloaded or given data file does not have the published sha256; it was not used."""


class HistoryFormatError(InvalidInput):
    """A recorded history (toki's own, a user's, or a Jepsen/Elle file) is malformed.

    The field names the line or entry, so a user can open the file at the right place.
    """


class TransactionError(TokiError):
    """A simulated-store step named an unknown transaction or one that has already finished."""


class WouldBlock(TokiError):
    """A real database would make this step wait. Nothing changed: retry the same step later.

    `blockers` are the transactions it waits for; retry after one of them commits or aborts.
    """

    def __init__(self, txn: int, blockers: frozenset[int]) -> None:
        self.txn = txn
        self.blockers = blockers
        names = ", ".join(str(b) for b in sorted(blockers))
        super().__init__(
            f"txn {txn}: the step waits for transaction(s) {names}; nothing was changed "
            "(retry the same step after one of them commits or aborts)"
        )


class SerializationFailure(TokiError):
    """The store refused a step or a commit and aborted the transaction; retry the whole txn."""

    def __init__(self, txn: int, reason: str) -> None:
        self.txn = txn
        self.reason = reason
        super().__init__(
            f"txn {txn}: {reason}; the transaction was aborted (begin a new one to retry)"
        )


class Deadlock(SerializationFailure):
    """The step would close a cycle of waiting transactions; its transaction is the victim."""


class UnknownProposal(TokiError):
    """A confirmation or rejection names no held decision (AWAIT or manual)."""


class ProgramError(TokiError):
    """A simulated agent misused the engine (a statement outside a transaction, a non-Step
    value, returning with a transaction open) or raised; the message gives the schedule so far
    so that the run can be replayed."""


class ScheduleError(TokiError):
    """A recorded schedule does not fit the program it is replayed on (an unknown choice, a
    choice that is not enabled at that point, or a schedule that ends before the run does)."""


class WriteConflict(StoreError):
    """A write kept failing to serialize (or kept losing its key's head) after its retries."""


class StoreBusy(StoreError):
    """Another writer held the store's write lock for longer than the busy timeout; nothing
    was written. Retry the call."""


class ConstraintViolation(StoreError):
    """A database constraint refused a write (e.g. overlapping adjudicated rows of one key);
    the message names the key and the interval. Nothing of the write was kept."""


class OutcomeUnknown(StoreError):
    """The connection was lost inside a write and its outcome could not be looked up: retry
    with the same `op_id` (`Memory.write(..., op_id=...)`), which never stores twice."""

    def __init__(self, op_id: str, message: str) -> None:
        self.op_id = op_id
        super().__init__(
            f"{message}; the write's outcome is unknown: retry it with op_id={op_id!r}, "
            "which stores it once whether or not it had committed"
        )
