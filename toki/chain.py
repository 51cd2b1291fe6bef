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
from collections.abc import Iterable
from dataclasses import dataclass

from toki.errors import IntegrityError, InvalidInput
from toki.log import Event

__all__ = ["GENESIS", "ChainCheck", "Digest", "VerifyReport", "link", "verify"]

GENESIS = ""
"""The link before the first event."""

_DIGEST = re.compile(r"^(\d+):([0-9a-f]{64})$")


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


def verify(
    where: str,
    events: Iterable[tuple[Event, str | None]],
    *,
    digest: Digest | None = None,
    key: bytes | None = None,
) -> VerifyReport:
    """Walk (event, stored link) pairs in seq order and check seqs, stored links and, given
    a digest saved earlier (keyed if `key`), that the log up to its seq is unchanged."""
    check = ChainCheck(where, key)
    n = 0
    at_digest: Digest | None = None
    try:
        for event, stored in events:
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
