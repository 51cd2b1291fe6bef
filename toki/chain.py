"""The log's hash chain: each event's link covers the previous link, so a rewritten, deleted,
reordered or renumbered event breaks every link from it on.

A link is sha256 (or, keyed, HMAC-SHA256 under a key the user keeps outside the store) of
the previous link and the event's seq, per-key seq, id and payload hash (the id hashes the
kind and payload, so the link pins them too). `Digest` is (last seq, head link): saved
anywhere outside the store, it lets `verify` prove the log up to that seq unchanged.
What each mode detects and cannot is written down in docs/integrity.md.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from toki.errors import IntegrityError, InvalidInput
from toki.log import Event

__all__ = [
    "GENESIS",
    "ChainCheck",
    "Digest",
    "VerifyReport",
    "check_consumption",
    "check_seal",
    "consumption_link",
    "link",
    "verify",
]

GENESIS = ""
"""The link before the first event."""

_DIGEST = re.compile(r"^(?:(\d+):([0-9a-f]{64})|(0):())$")  # "0:" is the empty log's


def link(prev: str, event: Event, key: bytes | None = None) -> str:
    """The chain link of `event` after `prev` (unkeyed sha256, or HMAC-SHA256 under `key`)."""
    text = f"{prev}\n{event.seq}\n{event.key_seq}\n{event.event_id}\n{event.payload_hash}".encode()
    if key is None:
        return hashlib.sha256(text).hexdigest()
    return hmac.new(key, text, hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Digest:
    """(last seq, head link) of a log: its text form `seq:head` is what a user saves."""

    seq: int
    head: str

    def __str__(self) -> str:
        return f"{self.seq}:{self.head}"

    @classmethod
    def parse(cls, text: str) -> Digest:
        found = _DIGEST.match(text.strip()) if isinstance(text, str) else None
        if found is None:
            raise InvalidInput(
                "digest",
                f"{text!r} is not a toki digest",
                "use the 'seq:head' text that Memory.digest() or `toki verify` printed",
            )
        if found.group(1) is None:
            return cls(0, GENESIS)
        return cls(int(found.group(1)), found.group(2))


class ChainCheck:
    """Walks a log in seq order, incrementally: seqs must run 1, 2, 3 … without gaps, and a
    stored link (where the store keeps one) must equal the recomputed one. The first event
    that breaks either raises IntegrityError naming the store, the seq and what to do."""

    __slots__ = ("head", "key", "seq", "where")

    def __init__(self, where: str, key: bytes | None = None) -> None:
        self.where = where
        self.key = key
        self.seq = 0
        self.head = GENESIS

    def add(self, event: Event, stored: str | None = None) -> str:
        if event.seq != self.seq + 1:
            raise IntegrityError(self._gap(event.seq))
        new = link(self.head, event, self.key)
        if stored is not None and self.key is None and not hmac.compare_digest(stored, new):
            raise IntegrityError(
                f"{self.where}: event seq {event.seq}: its stored chain link does not match "
                "the events before it (an event at or before it was rewritten, deleted, "
                f"reordered or renumbered); {_ADVICE}"
            )
        self.seq = event.seq
        self.head = new
        return new

    def _gap(self, seq: int) -> str:
        if seq <= 0:
            what = f"event seq {seq} is not positive"
        elif seq <= self.seq:
            what = f"event seq {seq} repeats or goes back after seq {self.seq}"
        else:
            missing = f"seq {self.seq + 1}" + (f"–{seq - 1}" if seq - 1 > self.seq + 1 else "")
            what = f"event seq {seq} follows seq {self.seq}: {missing} is missing"
        return f"{self.where}: {what}; {_ADVICE}"

    def digest(self) -> Digest:
        return Digest(self.seq, self.head)


_ADVICE = (
    "the log was changed outside toki. Do not write to it: run `toki verify URL --digest D` "
    "with a digest saved earlier to find the first changed event, and restore the store "
    "from a backup taken before it"
)


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of `verify`: ok, or the first event that differs and why."""

    where: str
    events: int
    digest: Digest
    checked_against: Digest | None
    first_bad: int | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    def describe(self) -> str:
        if self.problem is not None:
            return self.problem
        text = f"{self.where}: {self.events} events, chain intact, digest {self.digest}"
        if self.checked_against is not None:
            text += f"; the log up to seq {self.checked_against.seq} equals the saved digest"
        return text


def consumption_link(prev: str, record_id: str, payload: str) -> str:
    """The chain link of a consumption record (toki.consumption) after `prev`: the records of
    named reads form a chain of their own, beside the event log's (docs/integrity.md)."""
    body = hashlib.sha256(payload.encode("utf-8")).hexdigest()
    return hashlib.sha256(f"{prev}\n{record_id}\n{body}".encode()).hexdigest()


def check_consumption(
    where: str, records: Iterable[tuple[str, str, str | None]], seal: Digest | None
) -> str | None:
    """None if the consumption records (record id, payload, stored link; in append order)
    chain and reach the seal (position, link) the store keeps; else what is wrong. Records
    logged before toki chained them (no link) may only come first."""
    prev, position, linked = GENESIS, 0, False
    at_seal: str | None = None
    for record_id, payload, stored in records:
        position += 1
        if stored is None:
            if linked:
                return (
                    f"{where}: consumption record {position} ({record_id}) has no chain link "
                    "although records before it have one (its link was removed outside toki)"
                )
        else:
            expected = consumption_link(prev, record_id, payload)
            if not hmac.compare_digest(stored, expected):
                return (
                    f"{where}: consumption record {position} ({record_id}): its chain link "
                    "does not match the records before it (a record at or before it was "
                    "changed, deleted or reordered outside toki)"
                )
            prev, linked = stored, True
        if seal is not None and position == seal.seq:
            at_seal = stored
    if seal is not None and seal.seq > 0:
        if position < seal.seq:
            return (
                f"{where}: the consumption log ends at record {position}, before record "
                f"{seal.seq} that its seal records: records were deleted outside toki"
            )
        if at_seal is None or not hmac.compare_digest(at_seal, seal.head):
            return (
                f"{where}: the consumption record at position {seal.seq} is not the one its "
                "seal records (the consumption log was rewritten outside toki)"
            )
    return None


def check_seal(where: str, events: Sequence[Event], seal: Digest | None) -> None:
    """Refuse a downgraded chain (issue #36): once a store is chained it keeps a seal, the
    (seq, link) of its last chained event, in its meta table, written with every append.
    An event without a link after that, a log that ends before the seal's seq, or a link at
    that seq other than the sealed one is an IntegrityError. Without a seal (a log written
    before toki chained) an unlinked event whose payload pins its per-key seq (`_key_seq`,
    which only chaining toki writes) had its link stripped. `events`: in seq order, with
    their stored links; the links themselves are checked against the events by ChainCheck."""
    for event in events:
        if event.chain is None and (seal is not None or "_key_seq" in event.body):
            raise IntegrityError(
                f"{where}: event seq {event.seq} has no chain link although the store "
                f"{'is sealed at ' + str(seal.seq) if seal else 'chained it when written'} "
                f"(its link was removed outside toki: a chain-strip downgrade); {_ADVICE}"
            )
    if seal is None:
        return
    last = events[-1].seq if events else 0
    at = events[seal.seq - 1] if 0 < seal.seq <= len(events) else None  # seqs dense from 1
    if at is not None and at.seq == seal.seq and hmac.compare_digest(at.chain or "", seal.head):
        return
    walk = ChainCheck(where)  # a gap or a link that does not fit names its seq first
    for event in events:
        walk.add(event, event.chain)
    if last < seal.seq:
        raise IntegrityError(
            f"{where}: the log ends at seq {last}, before seq {seal.seq} that the store's "
            f"chain seal records: events were deleted; {_ADVICE}"
        )
    raise IntegrityError(
        f"{where}: the chain link at seq {seal.seq} is not the one the store's chain seal "
        f"records (the log was rewritten or renumbered below its sealed head); {_ADVICE}"
    )


def verify(
    where: str,
    events: Iterable[tuple[Event, str | None]],
    *,
    digest: Digest | None = None,
    key: bytes | None = None,
    seal: Digest | None = None,
    sealed_store: bool = False,
) -> VerifyReport:
    """Walk (event, stored link) pairs in seq order and check seqs, stored links and, given
    a digest saved earlier (keyed if `key`), that the log up to its seq is unchanged.
    sealed_store: the store keeps links and a seal, so `check_seal` applies (no downgrade)."""
    check = ChainCheck(where, key)
    n = 0
    at_digest: Digest | None = check.digest() if digest is not None and digest.seq == 0 else None
    try:
        pairs = list(events)
        if sealed_store:
            check_seal(where, [e for e, _ in pairs], seal)
        for event, stored in pairs:
            check.add(event, stored)
            n += 1
            if digest is not None and event.seq == digest.seq:
                at_digest = check.digest()
    except IntegrityError as exc:
        bad = check.seq + 1
        return VerifyReport(where, n, check.digest(), digest, bad, str(exc))
    if digest is not None:
        if at_digest is None:
            return VerifyReport(
                where,
                n,
                check.digest(),
                digest,
                check.seq + 1,
                f"{where}: the log ends at seq {check.seq}, before the saved digest's seq "
                f"{digest.seq}: events after seq {check.seq} were deleted; {_ADVICE}",
            )
        if not hmac.compare_digest(at_digest.head, digest.head):
            return VerifyReport(
                where,
                n,
                check.digest(),
                digest,
                None,
                f"{where}: the log up to seq {digest.seq} differs from the saved digest (an "
                f"event at or before seq {digest.seq} was rewritten, inserted, deleted or "
                "renumbered, with the chain recomputed to hide it; a digest saved earlier "
                f"narrows down where); {_ADVICE}",
            )
    return VerifyReport(where, n, check.digest(), digest)
