"""The protocol every backend implements, and the URL dispatcher.

A backend stores events (append-only) and the durable current-state projection (per-key
summaries plus a watermark). The Memory facade does all the semantics; a backend only has
to keep what it is given, atomically, and hand it back.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from toki.errors import IntegrityError, InvalidInput, StoreError
from toki.isolation import Isolation
from toki.log import Event, event_from_record, lazy_event, lazy_event_type
from toki.model import FactKey, fact_key_of_text
from toki.replay import KeySummary

__all__ = [
    "ALL_SEQS",
    "EventStore",
    "Operation",
    "Plan",
    "Steps",
    "drive",
    "lazy_events_from_rows",
    "sqlite_path",
    "transact_steps",
]

T = TypeVar("T")

Steps = Generator[Any, Any, T]
"""A write as a generator: it yields the statements of a simulated store's transaction shell
(`toki.store.sim`) to the simulator agent driving it, receives each one's result, and returns
its value. On every other store it yields nothing."""

Plan = Callable[[Sequence[Event], int], tuple[Sequence[Event], Mapping[FactKey, KeySummary]]]
"""A write's decision: (its partition's events, base seq) → (events to append, projection rows).

The transaction shell calls it with the partition it read inside the transaction; it may call
it again (with a fresh read) after a serialization failure, so it must not have side effects
beyond its return value (the last call's result is the one committed)."""


@dataclass(slots=True)
class Operation:
    """A write's operation id and its outcome as the caller records it (JSON text), stored
    in the write's own transaction (issue #36). A store that finds the id stored already
    runs nothing and sets `replayed` and `result` to the first run's."""

    op_id: str
    result: str = ""
    replayed: bool = False


MAX_OP_ID = 200
"""The longest operation id (characters); ids are the caller's, e.g. a uuid or a message id."""


def check_op_id(op_id: object) -> str:
    """An operation id: a non-empty printable string of at most MAX_OP_ID characters."""
    if (
        not isinstance(op_id, str)
        or not op_id.strip()
        or len(op_id) > MAX_OP_ID
        or any(ord(c) < 32 or 0xD800 <= ord(c) <= 0xDFFF for c in op_id)
    ):
        raise InvalidInput(
            "op_id",
            f"{op_id!r:.80} is not an operation id",
            f"use a non-empty printable string of at most {MAX_OP_ID} characters (a uuid)",
        )
    return op_id


class EventStore(Protocol):
    """Durable home of the event log and the projection."""

    url: str

    def write_lock(self) -> AbstractContextManager[None]:
        """Hold the single-writer lock: events appended inside are committed atomically."""
        ...

    def transact(self, keys: frozenset[FactKey], level: Isolation, plan: Plan) -> int:
        """Run one write: in one transaction (at `level` where the backend has levels), read
        the events of `keys`, call `plan`, append what it returns and commit; all or nothing.
        Returns how many times the transaction was retried after a serialization failure."""
        ...

    def sequence(self) -> int:
        """Give committed events their global seq if the backend defers it; returns how many."""
        ...

    def load_state(self) -> tuple[list[Event], list[Event], int, dict[FactKey, KeySummary]]:
        """One consistent read: (sequenced events, committed events not yet sequenced,
        projection watermark, projection rows)."""
        ...

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
    ) -> None:
        """Append events and upsert the projection rows (replace: all of them), atomically."""
        ...

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        """Events with seq > after_seq, in sequence order."""
        ...

    def last_seq(self) -> int: ...

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        """The stored projection: (watermark, per-key summaries)."""
        ...

    def close(self) -> None: ...


def transact_steps(
    store: EventStore,
    keys: frozenset[FactKey],
    level: Isolation,
    plan: Plan,
    op: Operation | None = None,
    known: Mapping[FactKey, int] | None = None,
) -> Steps[int]:
    """`store.transact(keys, level, plan)`, or its statements one by one when the store's
    shell is a generator (`transact_steps`: the simulator's store); returns the retries.
    op: the write's operation id, for a store that keeps them (PostgreSQL).
    known: per key, the per-key position the caller holds folded, for a store that reads
    only what came after it (`reads_after_known`: PostgreSQL); `plan` then gets only those
    events when `partition.extends(known, events)`, and must plan from what it holds with
    them folded in (`Partition.extend`); otherwise the whole partition."""
    steps = getattr(store, "transact_steps", None)
    if steps is None:
        if known is not None and getattr(store, "reads_after_known", False):
            return store.transact(keys, level, plan, op, known)  # type: ignore[call-arg]
        if op is not None and hasattr(store, "op_result"):
            return store.transact(keys, level, plan, op)  # type: ignore[call-arg]
        return store.transact(keys, level, plan)
    retries: int = yield from steps(keys, level, plan)
    return retries


def drive(steps: Steps[T]) -> T:
    """Run a write that yields no statement (every store but the simulator's) to its end."""
    try:
        step = next(steps)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    steps.close()
    raise StoreError(
        f"store: this write's store runs its statements as simulator steps ({step!r} was "
        "the first): drive it from an agent with `yield from memory.write_steps(...)` "
        "(toki.store.sim), not with memory.write(...)"
    )


def sqlite_path(url: str) -> str:
    """The file of a 'sqlite://' URL, by the usual convention (SQLAlchemy's): three slashes
    and a relative path ('sqlite:///memory.db' is ./memory.db), four for an absolute one
    ('sqlite:////var/toki.db'); 'sqlite://' or 'sqlite:///:memory:' is an in-memory file."""
    rest = url[len("sqlite://") :]
    if rest in ("", "/", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise StoreError(
            f"url: {url!r} has no path (use 'sqlite:///relative.db' or 'sqlite:////abs/path.db')"
        )
    return rest[1:]


ALL_SEQS = -(2**62)
"""`load(ALL_SEQS)` returns every stored event, those with a seq at or below 0 too (a log
that holds such a row was tampered with; the chain check names it)."""

EVENT_COLUMNS = "seq, key_seq, kind, payload, payload_hash, event_id"
"""The columns of an event row, in the order `events_from_rows` reads them."""

LOG_COLUMNS = EVENT_COLUMNS + ", chain"
"""An event row with its stored chain link (toki.chain)."""

_NAMES = EVENT_COLUMNS.split(", ")
_NAMES_CHAIN = LOG_COLUMNS.split(", ")


def events_from_rows(rows: Sequence[Sequence[object]], where: str) -> Iterator[Event]:
    """Decode stored event rows (`EVENT_COLUMNS`, or `LOG_COLUMNS` with the chain link); an
    unreadable or altered row names its store and seq."""
    for row in rows:
        record = dict(zip(_NAMES if len(row) == len(_NAMES) else _NAMES_CHAIN, row, strict=True))
        try:
            yield event_from_record(record)
        except (KeyError, ValueError) as exc:
            seq = record["seq"]
            raise IntegrityError(f"{where}: event seq {seq} is unreadable: {exc}") from exc
        except IntegrityError as exc:
            raise IntegrityError(
                f"{where}: {exc} (the row was changed outside toki; run `toki verify URL` "
                "and restore the store from a backup taken before it)"
            ) from exc


def lazy_events_from_rows(
    rows: Sequence[Sequence[Any]], where: str, known: Mapping[str, FactKey] | None = None
) -> list[Event]:
    """Stored event rows (`LOG_COLUMNS`, then the text of the fact key the row is filed
    under) as LazyEvents: the payload decoded and verified on
    first use (toki.log.LazyEvent), the key parsed once per key text (`known`: texts already
    parsed, e.g. a checkpoint record's)."""
    cls = lazy_event_type(where)
    keys: dict[str, FactKey] = dict(known or {})
    out: list[Event] = []
    for seq, key_seq, kind, payload, payload_hash, event_id, chain, text in rows:
        key = keys.get(text)
        if key is None:
            try:
                key = keys[text] = fact_key_of_text(str(text))
            except (ValueError, TypeError, AttributeError) as exc:
                raise IntegrityError(
                    f"{where}: event seq {seq} is filed under an unreadable fact key: {exc}"
                ) from exc
        out.append(lazy_event(cls, seq, key_seq, kind, key, payload, payload_hash, event_id, chain))
    return out
