"""The append-only event log: the only authority on what the store knows.

Each event has a global sequence number, a per-key sequence number, the system time it was
recorded at, the version ids it concerns, a canonical JSON payload and its hash. The event
id is a hash of (kind, payload); the payload holds the key, the recording time and the event's
per-key position (`_key_seq`), never the global seq. So the same event delivered twice has
one id and is ignored, while two intentional operations can never share an id, however alike
(promote(C), rollback(), promote(C) at one instant are three positions on the config key).
"""

from __future__ import annotations

import enum
import functools
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toki.canonical import canonical_json, decode_json, digest
from toki.errors import IntegrityError
from toki.model import FactKey, FactVersion
from toki.time import format_instant, parse_instant

__all__ = [
    "CONFIG_KEY",
    "Event",
    "EventKind",
    "EventLog",
    "LazyEvent",
    "event_from_record",
    "event_to_record",
]


class EventKind(enum.Enum):
    ASSERT = "ASSERT"  # a version became known (body: the version payload, proposed flag)
    CONFIRM = "CONFIRM"  # a PROPOSED version was confirmed (body: version, token)
    SUPERSEDE = "SUPERSEDE"  # the world changed (body: old, new ids, closes_at)
    REVOKE = "REVOKE"  # we were wrong (body: version, reason)
    CONFLICT_OPEN = "CONFLICT_OPEN"  # body: left, right
    CONFLICT_RESOLVE = "CONFLICT_RESOLVE"  # body: left, right, winner, how
    DECISION = "DECISION"  # a keyed judge verdict or operator decision (body: provenance)
    POLICY = "POLICY"  # a RULE policy row came into force (body: policy)
    CHAIN = "CHAIN"  # an unchained log was chained on open (body: how many, head, rebuilt keys)
    CONFIG = "CONFIG"  # a configuration was promoted or rolled back (toki.shadow)


CONFIG_KEY = FactKey("__toki__", "__toki_config__", "config")
"""Reserved key of CONFIG events (promote / rollback): not part of the belief state's hash."""


@dataclass(frozen=True, slots=True)
class Event:
    """One logged fact about the store's knowledge. Never mutated, never deleted."""

    seq: int
    key_seq: int
    kind: EventKind
    key: FactKey
    recorded_at: datetime
    version_ids: tuple[str, ...]
    payload: str  # canonical JSON of `body`
    payload_hash: str
    event_id: str
    body: Mapping[str, Any] = field(compare=False, repr=False)
    version: FactVersion | None = field(default=None, compare=False, repr=False)
    chain: str | None = field(default=None, compare=False, repr=False)
    """The chain link the store keeps beside the event (toki.chain); None before it has one."""

    def verify(self) -> None:
        """Raise IntegrityError if the payload no longer matches its hash or id."""
        if digest(self.payload, 64) != self.payload_hash:
            raise IntegrityError(f"event seq {self.seq}: payload hash mismatch")
        if _event_id(self.kind, self.payload) != self.event_id:
            raise IntegrityError(f"event seq {self.seq}: event id does not match its payload")

    def describe(self) -> str:
        at = format_instant(self.recorded_at)
        return f"#{self.seq} {self.kind.value} {self.key} recorded at {at}: {self.payload}"


def _event_id(kind: EventKind, payload: str) -> str:
    return "e-" + digest(kind.value + "\x00" + payload)


def make_event(
    seq: int,
    key_seq: int,
    kind: EventKind,
    key: FactKey,
    recorded_at: datetime,
    version_ids: tuple[str, ...],
    body: Mapping[str, Any],
    version: FactVersion | None = None,
) -> Event:
    """Build an event; the payload includes key, recorded_at and the per-key position, so
    the id pins them too and two events of one store never share an id (issue #36)."""
    full = dict(body)
    full["_key"] = key.to_json()
    full["_key_seq"] = key_seq
    full["_recorded_at"] = format_instant(recorded_at)
    full["_version_ids"] = list(version_ids)
    payload = canonical_json(full)
    return Event(
        seq=seq,
        key_seq=key_seq,
        kind=kind,
        key=key,
        recorded_at=recorded_at,
        version_ids=version_ids,
        payload=payload,
        payload_hash=digest(payload, 64),
        event_id=_event_id(kind, payload),
        body=full,
        version=version,
    )


def event_to_record(event: Event) -> dict[str, Any]:
    """A JSON-able record (the storage and exchange form)."""
    return {
        "seq": event.seq,
        "key_seq": event.key_seq,
        "kind": event.kind.value,
        "payload": event.payload,
        "payload_hash": event.payload_hash,
        "event_id": event.event_id,
    }


@functools.lru_cache(maxsize=65536)
def shared_key(
    tenant: str, subject: str, fact_key: str, scope_kind: str, scope_key: str
) -> FactKey:
    """Loading shares one FactKey per key instead of validating a new one per event (or per
    projection row: a key read twice is checked once)."""
    return FactKey(tenant, subject, fact_key, scope_kind, scope_key)


_KINDS = {k.value: k for k in EventKind}


def event_from_record(
    record: Mapping[str, Any], *, verify: bool = True, deep: bool = False
) -> Event:
    """Rebuild an event from its stored record; key, time and ids come from the payload.

    verify checks the payload hash and event id (cheap); deep also re-hashes the version
    payload of an ASSERT against its id (canonical JSON of the version: slower).
    """
    payload = str(record["payload"])
    body = decode_json(payload)
    try:
        kind = _KINDS[record["kind"]]  # EventKind(text) without Enum's call machinery
    except (KeyError, TypeError):
        kind = EventKind(record["kind"])  # not a kind: its ValueError
    k = body["_key"]
    key = shared_key(k["tenant"], k["subject"], k["fact_key"], k["scope_kind"], k["scope_key"])
    version_ids = tuple(body["_version_ids"])
    version = (
        FactVersion.from_payload(body["version"], version_ids[0], key)
        if kind is EventKind.ASSERT
        else None
    )
    event = Event(
        seq=int(record["seq"]),
        key_seq=int(record["key_seq"]),
        kind=kind,
        key=key,
        recorded_at=parse_instant(body["_recorded_at"], "recorded_at"),
        version_ids=version_ids,
        payload=payload,
        payload_hash=str(record["payload_hash"]),
        event_id=str(record["event_id"]),
        body=body,
        version=version,
        chain=None if record.get("chain") is None else str(record["chain"]),
    )
    if verify:
        event.verify()
        pinned = body.get("_key_seq")  # absent in events logged before toki pinned it
        if pinned is not None and pinned != event.key_seq:
            raise IntegrityError(
                f"event seq {event.seq}: stored per-key seq {event.key_seq} differs from "
                f"the {pinned} its payload pins"
            )
    if deep and version is not None and version.computed_id() != version.id:
        raise IntegrityError(f"event seq {event.seq}: version id does not match its payload")
    return event


_PAYLOAD_FIELDS = frozenset({"recorded_at", "version_ids", "body", "version"})
_DECODE_LOCK = threading.RLock()


class LazyEvent(Event):
    """An event read back with what its row holds (seq, per-key seq, kind, payload, its hash,
    id, chain link) and the fact key the store filed it under; the payload is decoded and
    verified (hash, id, that it names this key and per-key seq) on the first read of a field
    only the payload gives. An open from a checkpoint chain-checks its tail with the row
    fields alone and leaves each event so until its key is used (issue #37). A payload
    that fails then raises IntegrityError naming the store (`lazy_event_type(where)`)."""

    __slots__ = ()
    where = "the store"

    def __getattr__(self, name: str) -> Any:  # only for fields not set yet: the payload's
        if name not in _PAYLOAD_FIELDS:
            raise AttributeError(name)
        self._decode()
        return object.__getattribute__(self, name)

    def _decode(self) -> None:
        with _DECODE_LOCK:
            if type(self) is Event:  # another thread decoded it meanwhile
                return
            where, seq = self.where, self.seq
            record = {
                "seq": seq,
                "key_seq": self.key_seq,
                "kind": self.kind.value,
                "payload": self.payload,
                "payload_hash": self.payload_hash,
                "event_id": self.event_id,
            }
            try:
                full = event_from_record(record)
            except (KeyError, ValueError, TypeError) as exc:
                raise IntegrityError(f"{where}: event seq {seq} is unreadable: {exc}") from exc
            except IntegrityError as exc:
                raise IntegrityError(
                    f"{where}: {exc} (the row was changed outside toki; run `toki verify URL` "
                    "and restore the store from a backup taken before it)"
                ) from exc
            if full.key != self.key:
                raise IntegrityError(
                    f"{where}: event seq {seq} is stored under another fact key than its "
                    f"payload's ({full.key}): toki_event or toki_key was changed outside "
                    "toki; run `toki verify URL`"
                )
            for name in _PAYLOAD_FIELDS:
                object.__setattr__(self, name, object.__getattribute__(full, name))
            object.__setattr__(self, "__class__", Event)

    def __eq__(self, other: object) -> bool:
        self._decode()
        return self == other

    def __hash__(self) -> int:
        self._decode()
        return hash(self)

    def __repr__(self) -> str:
        self._decode()
        return repr(self)

    def __reduce_ex__(self, protocol: Any) -> Any:
        self._decode()
        return self.__reduce_ex__(protocol)


@functools.lru_cache(maxsize=256)
def lazy_event_type(where: str) -> type[LazyEvent]:
    """A LazyEvent class whose errors name `where` (a class, not a field: a decoded event
    turns into a plain Event in place, which needs the same slots)."""
    return type("LazyEvent", (LazyEvent,), {"__slots__": (), "where": where})


def lazy_event(
    cls: type[LazyEvent],
    seq: int,
    key_seq: int,
    kind: object,
    key: FactKey,
    payload: str,
    payload_hash: str,
    event_id: str,
    chain: str | None,
) -> LazyEvent:
    """A LazyEvent of class `cls` from its row's fields (an unknown kind: IntegrityError)."""
    event_kind = _KINDS.get(kind) if isinstance(kind, str) else None
    if event_kind is None:
        raise IntegrityError(f"{cls.where}: event seq {seq} is unreadable: kind {kind!r}")
    event = object.__new__(cls)
    setattr_ = object.__setattr__
    setattr_(event, "seq", int(seq))
    setattr_(event, "key_seq", int(key_seq))
    setattr_(event, "kind", event_kind)
    setattr_(event, "key", key)
    setattr_(event, "payload", payload)  # a str from a TEXT column; anything else fails
    setattr_(event, "payload_hash", payload_hash)  # the link or payload check on use
    setattr_(event, "event_id", event_id)
    setattr_(event, "chain", None if chain is None else str(chain))
    return event


class EventLog:
    """Assigns sequence numbers and refuses duplicates; holds events in sequence order."""

    __slots__ = ("_by_id", "_events", "_key_seq")

    def __init__(self, events: Iterable[Event] = ()) -> None:
        self._events: list[Event] = []
        self._by_id: dict[str, Event] = {}
        self._key_seq: dict[FactKey, int] = {}
        for event in events:
            self.add(event)

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self._events)

    @property
    def last_seq(self) -> int:
        return self._events[-1].seq if self._events else 0

    def contains(self, event_id: str) -> bool:
        return event_id in self._by_id

    def next_seqs(self, key: FactKey) -> tuple[int, int]:
        """The (global, per-key) sequence numbers the next event on `key` will get."""
        return self.last_seq + 1, self._key_seq.get(key, 0) + 1

    def new(
        self,
        kind: EventKind,
        key: FactKey,
        recorded_at: datetime,
        version_ids: tuple[str, ...],
        body: Mapping[str, Any],
        version: FactVersion | None = None,
        *,
        pending: list[Event] | None = None,
    ) -> Event:
        """Make the next event without appending it (numbers continue after `pending`)."""
        seq = self.last_seq + 1 + (len(pending) if pending else 0)
        key_seq = self._key_seq.get(key, 0) + 1
        if pending:
            key_seq += sum(1 for e in pending if e.key == key)
        return make_event(seq, key_seq, kind, key, recorded_at, version_ids, body, version)

    def add(self, event: Event) -> bool:
        """Append one event; False (no-op) for a duplicate id. Sequence numbers must grow."""
        if event.event_id in self._by_id:
            return False
        if event.seq <= self.last_seq:
            raise IntegrityError(
                f"event seq {event.seq} is not after the log's last seq {self.last_seq}"
            )
        last_key_seq = self._key_seq.get(event.key, 0)
        if event.key_seq <= last_key_seq:
            raise IntegrityError(
                f"event seq {event.seq}: per-key seq {event.key_seq} is not after {last_key_seq}"
            )
        self._events.append(event)
        self._by_id[event.event_id] = event
        self._key_seq[event.key] = event.key_seq
        return True

    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    def key_seqs(self) -> dict[FactKey, int]:
        """Each key's last per-key seq."""
        return dict(self._key_seq)
