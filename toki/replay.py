"""Fold the event log into a state that answers bitemporal questions.

`replay(events, cutoff)` folds events in sequence order, ignoring duplicates, and keeps only
events recorded at or before the cutoff, so any delivery order of the same events gives the
same state and `state_hash`. Every state answers "as of system time S" by consulting only
events recorded by S: that is the same answer a replay cut at S gives (tested), without
replaying.

Semantics (DESIGN §2):
- a SUPERSEDE closes the old version's valid interval at `closes_at` (None: all of it); a
  supersession whose every replacement was later revoked no longer closes anything, since
  a version that never held cannot have ended another;
- a REVOKE makes a version ineligible from the revocation's system time on;
- a PROPOSED version is ineligible until a CONFIRM;
- resolve: open conflict edges or distinct values among eligible versions → conflict,
  none eligible → unknown, otherwise the one value.
"""

from __future__ import annotations

import gc
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, MutableSet
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from operator import attrgetter
from typing import Any, NamedTuple

from toki.canonical import canonical_json, canonical_json_of_text, digest
from toki.conflicts import ConflictGroups
from toki.judge import JudgeLog, logged_verdict
from toki.log import CONFIG_KEY, Event, EventKind
from toki.model import FactKey, FactVersion, HistoryEntry, Lifecycle, Resolution
from toki.overlay import Appended, DictOverlay, SetOverlay, Sorted, SortedOverlay, TailOverlay
from toki.time import BoundSource, Interval, format_instant, parse_instant

__all__ = [
    "KeyState",
    "KeySummary",
    "Snapshot",
    "gc_paused",
    "indexed_beyond_key",
    "is_built",
    "replay",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_MIN = -(2**62)
_MAX = 2**62
_INDEX_CACHE = 16
_SHORT_SUFFIX = 32


_ASSERT = EventKind.ASSERT  # enum attribute lookups are slow on the fold's hot path
_SUPERSEDE = EventKind.SUPERSEDE
_REVOKE = EventKind.REVOKE
_CONFIRM = EventKind.CONFIRM
_CONFLICT_OPEN = EventKind.CONFLICT_OPEN
_CONFLICT_RESOLVE = EventKind.CONFLICT_RESOLVE
_DECISION = EventKind.DECISION
_POLICY = EventKind.POLICY
_CONFIG = EventKind.CONFIG
_closing = tuple.__new__  # NamedTuple's own __new__ is Python code: 3x slower per event


def _us(at: datetime) -> int:
    return (at - _EPOCH) // _US


def _known(at: datetime, as_of: datetime | None) -> bool:
    return as_of is None or at <= as_of


class Closing(NamedTuple):
    """A supersession: `old` stops holding at `closes_at` (None: it is replaced entirely)."""

    new_ids: tuple[str, ...]
    closes_at: datetime | None
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class KeySummary:
    """What reconcile compares per key: never just row counts."""

    value_hash: str
    version_ids: tuple[str, ...]
    open_conflicts: int
    open_intervals: int
    # The adjudicated projection: ACTIVE versions that contradict no other ACTIVE version,
    # as (version id, value JSON, effective start, effective end) with RFC 3339 bounds.
    # Within a key no two different values overlap (two sources may agree on one value over
    # overlapping periods); PostgreSQL enforces it with EXCLUDE (… value WITH <>, range &&).
    segments: tuple[tuple[str, str, str | None, str | None], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "value_hash": self.value_hash,
            "version_ids": list(self.version_ids),
            "open_conflicts": self.open_conflicts,
            "open_intervals": self.open_intervals,
            "segments": [list(s) for s in self.segments],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> KeySummary:
        return cls(
            str(data["value_hash"]),
            tuple(data["version_ids"]),
            int(data["open_conflicts"]),
            int(data["open_intervals"]),
            tuple(
                (str(a), str(b), None if c is None else str(c), None if d is None else str(d))
                for a, b, c, d in data.get("segments", ())
            ),
        )


@dataclass(slots=True)
class _Index:
    """Eligible versions at one system-time epoch, sorted by start, with a prefix max of ends."""

    starts: list[int]
    ends: list[int]
    ids: list[str]
    prefix_max_end: list[int]

    def stab(self, at: int) -> list[str]:
        hits: list[str] = []
        i = bisect_right(self.starts, at) - 1
        while i >= 0 and self.prefix_max_end[i] > at:
            if self.ends[i] > at:
                hits.append(self.ids[i])
            i -= 1
        hits.reverse()
        return hits


@dataclass(slots=True)
class KeyState:
    """Everything the log says about one fact key."""

    key: FactKey
    # The containers are dicts, sets and lists, or in a write's fork overlays on those
    # (toki.overlay); values are immutable (tuples, frozensets), never changed in place.
    versions: MutableMapping[str, FactVersion] = field(default_factory=dict)
    proposed: MutableSet[str] = field(default_factory=set)
    settled: MutableSet[str] = field(default_factory=set)  # HOLD tokens confirmed or rejected
    confirmed: MutableMapping[str, datetime] = field(default_factory=dict)
    closings: MutableMapping[str, tuple[Closing, ...]] = field(default_factory=dict)
    revoked: MutableMapping[str, tuple[datetime, str]] = field(default_factory=dict)
    conflicts_opened: MutableMapping[tuple[str, str], datetime] = field(default_factory=dict)
    conflicts_resolved: MutableMapping[tuple[str, str], tuple[datetime, str | None]] = field(
        default_factory=dict
    )
    conflicts_of: MutableMapping[str, frozenset[tuple[str, str]]] = field(default_factory=dict)
    groups: ConflictGroups = field(default_factory=ConflictGroups)
    decisions: Appended[tuple[datetime, Mapping[str, Any]]] = field(default_factory=list)
    policies: Appended[tuple[datetime, Mapping[str, Any]]] = field(default_factory=list)
    configs: Appended[tuple[datetime, Mapping[str, Any]]] = field(default_factory=list)
    last_key_seq: int = 0
    times: Sorted[datetime] = field(default_factory=Sorted)
    # The latest epoch, maintained incrementally so that writes on a hot key stay O(log n):
    standing: MutableMapping[str, tuple[int, int]] = field(default_factory=dict)  # eff, µs
    by_end: Sorted[tuple[int, str]] = field(default_factory=Sorted)  # standing, by end
    active: MutableSet[str] = field(default_factory=set)
    proposed_pending: MutableSet[str] = field(default_factory=set)
    closed_by: MutableMapping[str, frozenset[str]] = field(default_factory=dict)  # new -> olds
    _built: bool = False  # latest-epoch structures are built on first use, then maintained
    _indexes: dict[int, _Index] = field(default_factory=dict)
    _fill: Callable[[], KeyState] | None = field(default=None, compare=False, repr=False)
    """Set only on a `LazyKeyState`: how to build this state on first use (toki.checkpoint)."""

    # -- folding ---------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        kind = event.kind
        body = event.body
        at = event.recorded_at
        touched: tuple[str, ...] = ()
        if kind is _ASSERT:
            version = event.version or FactVersion.from_payload(body["version"])
            vid = version.id
            self.versions[vid] = version
            if body.get("proposed"):
                self.proposed.add(vid)
            touched = (vid,)
        elif kind is _SUPERSEDE:
            closes = body.get("closes_at")
            # our own canonical RFC 3339 text (toki < 0.2 wrote unpadded years < 1000)
            new_ids = tuple(body["new"])
            old = body["old"]
            ends = None if closes is None else parse_instant(closes, "closes_at")
            closing = _closing(Closing, (new_ids, ends, at))
            self.closings[old] = (*self.closings.get(old, ()), closing)
            if self._built:
                self._closed_by(old, new_ids)
            touched = (old,)
        elif kind is _REVOKE:
            vid = body["version"]
            self.revoked[vid] = (at, str(body.get("reason", "")))
            if "token" in body:
                self.settled.add(str(body["token"]))
            touched = (vid, *sorted(self.closed_by.get(vid, ())))
        elif kind is _CONFIRM:
            self.confirmed[body["version"]] = at
            if "token" in body:
                self.settled.add(str(body["token"]))
            touched = (body["version"],)
        elif kind is _CONFLICT_OPEN:
            if "version" in body:
                self.groups.apply_open(body, at)
            else:  # a store written before conflict groups: one event per pair
                pair = _pair(body["left"], body["right"])
                self.conflicts_opened[pair] = at
                for vid in pair:
                    self.conflicts_of[vid] = self.conflicts_of.get(vid, frozenset()) | {pair}
        elif kind is _CONFLICT_RESOLVE:
            if "group" in body:
                self.groups.apply_resolve(body, at)
            else:
                pair = _pair(body["left"], body["right"])
                self.conflicts_resolved[pair] = (at, body.get("winner"))
        elif kind is _DECISION:
            self.decisions.append((at, body))
        elif kind is _POLICY:
            self.policies.append((at, body))
        elif kind is _CONFIG:
            self.configs.append((at, body))
        if self._built:
            for vid in touched:
                self._refresh(vid)
        if event.key_seq > self.last_key_seq:
            self.last_key_seq = event.key_seq
        if self.times.add(at):
            if self._indexes:
                self._indexes.pop(len(self.times) - 1, None)  # earlier epochs are unchanged
        else:  # a late arrival shifts every later epoch
            self._indexes.clear()

    def fork(self) -> KeyState:
        """A scratch state for a write, O(1): it reads through to this one and records only
        its own changes (toki.overlay), so this one must not change while the fork is used."""
        self._ensure_built()  # a cache this state then maintains per event
        return KeyState(
            key=self.key,
            versions=DictOverlay(self.versions),
            proposed=SetOverlay(self.proposed),
            settled=SetOverlay(self.settled),
            confirmed=DictOverlay(self.confirmed),
            closings=DictOverlay(self.closings),
            revoked=DictOverlay(self.revoked),
            conflicts_opened=DictOverlay(self.conflicts_opened),
            conflicts_resolved=DictOverlay(self.conflicts_resolved),
            conflicts_of=DictOverlay(self.conflicts_of),
            decisions=TailOverlay(self.decisions),
            policies=TailOverlay(self.policies),
            configs=TailOverlay(self.configs),
            last_key_seq=self.last_key_seq,
            times=SortedOverlay(self.times),
            standing=DictOverlay(self.standing),
            by_end=SortedOverlay(self.by_end),
            active=SetOverlay(self.active),
            proposed_pending=SetOverlay(self.proposed_pending),
            closed_by=DictOverlay(self.closed_by),
            groups=self.groups.fork(),
            _built=True,
        )

    def clone(self) -> KeyState:
        """An independent copy that outlives later changes to this one (a state a Db holds)."""
        return KeyState(
            key=self.key,
            versions=dict(self.versions),
            proposed=set(self.proposed),
            settled=set(self.settled),
            confirmed=dict(self.confirmed),
            closings=dict(self.closings),
            revoked=dict(self.revoked),
            conflicts_opened=dict(self.conflicts_opened),
            conflicts_resolved=dict(self.conflicts_resolved),
            conflicts_of=dict(self.conflicts_of),
            decisions=list(self.decisions),
            policies=list(self.policies),
            configs=list(self.configs),
            last_key_seq=self.last_key_seq,
            times=self.times.copy(),
            standing=dict(self.standing),
            by_end=self.by_end.copy(),
            active=set(self.active),
            proposed_pending=set(self.proposed_pending),
            closed_by=dict(self.closed_by),
            groups=self.groups.clone(),
            _built=self._built,
            _indexes=dict(self._indexes),
        )

    def _ensure_built(self) -> None:
        """Build the latest-epoch structures once; a bulk replay never pays for them per event."""
        if not self._built:
            self._built = True
            for old, closings in self.closings.items():
                for closing in closings:
                    self._closed_by(old, closing.new_ids)
            for vid in self.versions:
                self._refresh(vid)

    def _closed_by(self, old: str, new_ids: tuple[str, ...]) -> None:
        """Index a supersession by its replacements (a revoked replacement reopens `old`)."""
        closed_by = self.closed_by
        for new in new_ids:
            olds = closed_by.get(new)
            closed_by[new] = frozenset((old,)) if olds is None else olds | {old}

    def _refresh(self, vid: str) -> None:
        """Recompute one version's place in the latest-epoch structures."""
        old = self.standing.pop(vid, None)
        if old is not None:
            self.by_end.remove((old[1], vid))
        self.active.discard(vid)
        self.proposed_pending.discard(vid)
        if vid not in self.versions:
            return  # an event about a version whose ASSERT comes later in this replay
        life = self.lifecycle(vid)
        if life is Lifecycle.REVOKED:
            return
        eff = self.effective(vid)
        if eff is None:
            return
        bounds = (
            _MIN if eff.start is None else _us(eff.start),
            _MAX if eff.end is None else _us(eff.end),
        )
        self.standing[vid] = bounds
        self.by_end.add((bounds[1], vid))
        if life is Lifecycle.ACTIVE:
            self.active.add(vid)
        elif life is Lifecycle.PROPOSED:
            self.proposed_pending.add(vid)

    def overlapping(self, valid: Interval) -> list[str]:
        """Standing (incl. PROPOSED) versions whose effective interval overlaps `valid`, now."""
        self._ensure_built()
        start = _MIN if valid.start is None else _us(valid.start)
        end = _MAX if valid.end is None else _us(valid.end)
        standing = self.standing
        later = self.by_end.after((start, "\uffff"))  # every one ends after `start`
        if end == _MAX:  # and all of those start before an open end
            return [vid for _, vid in later]
        return [vid for _, vid in later if standing[vid][0] < end]

    # -- per-version questions ---------------------------------------------------------------

    def is_revoked(self, vid: str, as_of: datetime | None = None) -> bool:
        rev = self.revoked.get(vid)
        return rev is not None and _known(rev[0], as_of)

    def live_closings(self, vid: str, as_of: datetime | None = None) -> list[Closing]:
        """Supersessions of `vid` known by `as_of` that still stand (not voided by revokes)."""
        closings = self.closings.get(vid)
        if not closings:
            return []
        if not self.revoked:  # the common case, asked per version by every build and hash
            return [c for c in closings if c.new_ids and _known(c.recorded_at, as_of)]
        return [
            c
            for c in closings
            if _known(c.recorded_at, as_of)
            and not all(self.is_revoked(n, as_of) for n in c.new_ids)
        ]

    def effective(self, vid: str, as_of: datetime | None = None) -> Interval | None:
        """The valid interval left after supersessions known by `as_of`; None if none is left."""
        interval: Interval | None = self.versions[vid].valid
        for closing in self.live_closings(vid, as_of):
            if interval is None:
                break
            if closing.closes_at is None:
                return None
            interval = interval.clip_end(closing.closes_at, BoundSource.EVIDENCE)
        return interval

    def lifecycle(self, vid: str, as_of: datetime | None = None) -> Lifecycle:
        if self.is_revoked(vid, as_of):
            return Lifecycle.REVOKED
        if vid in self.proposed:
            confirmed = self.confirmed.get(vid)
            if confirmed is None or not _known(confirmed, as_of):
                return Lifecycle.PROPOSED
        if self.live_closings(vid, as_of):
            return Lifecycle.SUPERSEDED
        return Lifecycle.ACTIVE

    def known_versions(self, as_of: datetime | None = None) -> list[FactVersion]:
        return [v for v in self.versions.values() if _known(v.recorded_at, as_of)]

    def open_conflicts(self, as_of: datetime | None = None) -> list[tuple[str, ...]]:
        """Open conflict groups (toki.conflicts) and, from stores written before groups,
        open pairs; each a sorted tuple of version ids, the list sorted."""
        out: list[tuple[str, ...]] = list(self.open_pairs(as_of))
        if self.groups:
            if as_of is None and self._built:  # the latest epoch's structures know it
                out.extend(self.groups.open_now(self.standing.keys(), self._value_of))
            else:
                out.extend(self.groups.open_groups(as_of, self._settled_out, self._value_of))
        return sorted(out)

    def open_pairs(self, as_of: datetime | None = None) -> list[tuple[str, str]]:
        """Per-pair conflict edges (old stores) opened by `as_of`, not resolved by then,
        with both sides unrevoked."""
        return [pair for pair in self.conflicts_opened if self._pair_open(pair, as_of)]

    def _pair_open(self, pair: tuple[str, str], as_of: datetime | None) -> bool:
        opened = self.conflicts_opened.get(pair)
        if opened is None or not _known(opened, as_of):
            return False
        resolved = self.conflicts_resolved.get(pair)
        if resolved is not None and _known(resolved[0], as_of):
            return False
        if self.is_revoked(pair[0], as_of) or self.is_revoked(pair[1], as_of):
            return False
        # a supersession that closed one side where the other holds (a claim that lost, a
        # rejected one) settles the conflict, logged resolution or not
        left = self.effective(pair[0], as_of) if pair[0] in self.versions else None
        right = self.effective(pair[1], as_of) if pair[1] in self.versions else None
        return left is not None and right is not None and left.overlaps(right)

    def _settled_out(self, vid: str, as_of: datetime | None) -> bool:
        """A member no longer in its conflict: revoked, or closed entirely (a claim that
        lost everywhere, a rejected one), logged resolution or not."""
        return self.is_revoked(vid, as_of) or self.effective(vid, as_of) is None

    def _value_of(self, vid: str) -> str:
        return self.versions[vid].value_json

    # -- answering ---------------------------------------------------------------------------

    def _index(self, as_of: datetime | None) -> _Index:
        epoch = len(self.times) if as_of is None else self.times.count_to(as_of)
        cached = self._indexes.get(epoch)
        if cached is not None:
            return cached
        rows: list[tuple[int, int, str]] = []
        for vid, version in self.versions.items():
            if not _known(version.recorded_at, as_of):
                continue
            if self.lifecycle(vid, as_of) not in (Lifecycle.ACTIVE, Lifecycle.SUPERSEDED):
                continue
            eff = self.effective(vid, as_of)
            if eff is None:
                continue
            start = _MIN if eff.start is None else _us(eff.start)
            end = _MAX if eff.end is None else _us(eff.end)
            rows.append((start, end, vid))
        rows.sort()
        prefix: list[int] = []
        best = _MIN
        for _, end, _ in rows:
            best = max(best, end)
            prefix.append(best)
        index = _Index([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], prefix)
        if len(self._indexes) >= _INDEX_CACHE:
            self._indexes.pop(next(iter(self._indexes)))
        self._indexes[epoch] = index
        return index

    def eligible(self, valid_at: datetime, as_of: datetime | None = None) -> list[str]:
        """Versions that held at `valid_at` as known at `as_of`, sorted by (start, end, id) on
        both paths (the latest epoch's short suffix and the epoch index), so a current read
        and an as-of read of the same state list them in the same order."""
        at = _us(valid_at)
        last = self.times.last()
        if as_of is None or (last is not None and as_of >= last):
            self._ensure_built()
            after = (at, "\uffff")
            if len(self.by_end) - self.by_end.count_to(after) <= _SHORT_SUFFIX:  # e.g. "now"
                hits = [
                    (*self.standing[vid], vid)  # (start, end, id): the index's order
                    for _, vid in self.by_end.after(after)
                    if self.standing[vid][0] <= at and vid not in self.proposed_pending
                ]
                return [vid for _, _, vid in sorted(hits)]
        return self._index(as_of).stab(at)

    def resolve(self, valid_at: datetime, as_of: datetime | None = None) -> Resolution:
        """Distinct values among the eligible versions (or an open old-style pair between
        two of them) make a conflict, named by its groups/pairs there: O(n log n)."""
        ids = self.eligible(valid_at, as_of)
        if not ids:
            return Resolution("unknown")
        chosen = set(ids)
        contested: set[tuple[str, ...]] = set()
        for vid in ids:  # old-style pairs between two eligible versions
            for pair in self.conflicts_of.get(vid, ()):
                if pair[0] in chosen and pair[1] in chosen and self._pair_open(pair, as_of):
                    contested.add(pair)
        values = {self.versions[v].value_json for v in ids}
        if not contested and len(values) == 1:
            return Resolution("value", self.versions[ids[0]].value, tuple(ids))
        if self.groups:
            contested.update(self.groups.among(ids, as_of, self._value_of))
        if not contested:  # disagreeing versions no open conflict names: all of them
            contested.add(tuple(sorted(ids)))
        return Resolution("conflict", None, tuple(ids), tuple(sorted(contested)))

    def history(self, as_of: datetime | None = None) -> list[HistoryEntry]:
        entries = []
        for version in self.known_versions(as_of):
            vid = version.id
            closings = self.live_closings(vid, as_of)
            rev = self.revoked.get(vid) if self.is_revoked(vid, as_of) else None
            entries.append(
                HistoryEntry(
                    version=version,
                    lifecycle=self.lifecycle(vid, as_of),
                    effective=self.effective(vid, as_of),
                    superseded_at=min((c.recorded_at for c in closings), default=None),
                    replaced_by=tuple(n for c in closings for n in c.new_ids),
                    revoked_at=None if rev is None else rev[0],
                    revoke_reason=None if rev is None else rev[1],
                )
            )
        entries.sort(key=lambda e: (_start_us(e.version), e.version.recorded_at, e.version.id))
        return entries

    def summary(self) -> KeySummary:
        """The per-key figures reconcile compares; independent of the wall clock."""
        self._ensure_built()
        live = sorted(self.active)
        versions, by_end = self.versions, self.by_end
        values = [[vid, versions[vid].value_json] for vid in live]
        open_intervals = len(by_end) - by_end.count_before((_MAX, ""))
        if self.proposed_pending:
            pending = self.proposed_pending
            open_intervals -= sum(1 for _, vid in by_end.from_((_MAX, "")) if vid in pending)
        conflicts = self.open_conflicts()
        return KeySummary(
            value_hash=digest(canonical_json_of_text(values)),
            version_ids=tuple(live),
            open_conflicts=len(conflicts),
            open_intervals=open_intervals,
            segments=self._segments(live, conflicts),
        )

    def _segments(
        self, live: list[str], conflicts: list[tuple[str, ...]]
    ) -> tuple[tuple[str, str, str | None, str | None], ...]:
        """The live versions outside every open conflict that no live version of another
        value overlaps: one sweep over the live versions sorted by start, O(n log n)."""
        contested = {v for group in conflicts for v in group}
        if contested.issuperset(live):  # e.g. one key's many contradicting values
            return ()
        standing, versions = self.standing, self.versions
        rows = sorted((*standing[vid], versions[vid].value_json, vid) for vid in live)
        starts = [r[0] for r in rows]
        # next_other[i]: the first index >= i whose value differs from rows[i]'s
        next_other = [len(rows)] * len(rows)
        for i in range(len(rows) - 2, -1, -1):
            next_other[i] = i + 1 if rows[i + 1][2] != rows[i][2] else next_other[i + 1]
        # the latest end among the rows before i, and the latest among the other values
        best: tuple[int, str | None] = (_MIN, None)
        second = _MIN
        out = []
        lo = 0
        for start, end, value, vid in rows:
            while lo < len(rows) and starts[lo] < start:  # rows starting strictly earlier
                e, v = rows[lo][1], rows[lo][2]
                if v == best[1]:
                    best = (max(best[0], e), v)
                elif e > best[0]:
                    best, second = (e, v), best[0]
                elif e > second:
                    second = e
                lo += 1
            earlier = best[0] if best[1] != value else second
            if vid in contested or earlier > start:
                continue
            hi = bisect_left(starts, end, lo)  # rows starting in [start, end) overlap it
            if lo < hi and (rows[lo][2] != value or next_other[lo] < hi):
                continue
            out.append((vid, value, _fmt_us(start), _fmt_us(end)))  # the effective bounds
        out.sort()  # in version id order, as `live` is
        return tuple(out)

    def digest_parts(self) -> dict[str, Any]:
        """The canonical content of this key's state for `state_hash` (no sequence numbers)."""
        versions = []
        for vid in sorted(self.versions):
            eff = self.effective(vid)
            versions.append(
                [vid, self.lifecycle(vid).value, None if eff is None else eff.to_json()]
            )
        return {
            "key": self.key.to_json(),
            "versions": versions,
            "open_conflicts": [list(p) for p in self.open_conflicts()],
            "decisions": sorted(digest(canonical_json(dict(b))) for _, b in self.decisions),
            "policies": sorted(digest(canonical_json(dict(b))) for _, b in self.policies),
        }


FILL_LOCK = threading.RLock()
"""Held while a lazy state or index is built, so that a reader and the writer never see one
half built (toki.checkpoint)."""

_STATE_FIELDS = tuple(f for f in KeyState.__slots__ if f != "_fill")


class LazyKeyState(KeyState):
    """A key state not built yet: its fields are unset until the first attribute read, which
    builds it with `_fill` (under FILL_LOCK) and turns it into a plain KeyState. A Snapshot
    opened from a checkpoint holds these for every key the tail did not touch."""

    __slots__ = ()

    def __init__(self, key: FactKey, fill: Callable[[FactKey], KeyState]) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "_fill", fill)

    def __getattr__(self, name: str) -> Any:
        with FILL_LOCK:
            if type(self) is LazyKeyState:
                fill = object.__getattribute__(self, "_fill")
                full = fill(object.__getattribute__(self, "key"))
                for slot in _STATE_FIELDS:
                    object.__setattr__(self, slot, object.__getattribute__(full, slot))
                object.__setattr__(self, "_fill", None)
                object.__setattr__(self, "__class__", KeyState)
        return object.__getattribute__(self, name)


def build_lazy(states: Iterable[KeyState]) -> None:
    """Before reading every one of `states` (`state_hash`, `summaries`): the builder of the
    lazy ones (toki.checkpoint) builds all its keys in one pass over the log, instead of one
    read per key until its reads reach the log's length and then that pass."""
    builders: dict[int, Callable[[], None]] = {}
    for state in states:
        if type(state) is LazyKeyState:
            fill = object.__getattribute__(state, "_fill")
            build_all = getattr(fill, "build_all", None)
            if build_all is not None:
                builders.setdefault(id(fill), build_all)
    if builders:
        with FILL_LOCK:
            for build_all in builders.values():
                build_all()


def is_built(state: KeyState) -> bool:
    """Whether a key state is built (reading any field of a LazyKeyState builds it)."""
    return type(state) is not LazyKeyState


@lru_cache(maxsize=1 << 17)
def _fmt_us(us: int) -> str | None:
    """A standing bound (µs since the epoch; _MIN/_MAX: open) as its instant's text. Cached: a key's
    projection row formats both bounds of every segment on every write, and a key of many
    live versions (a series on one key) asks the same instants write after write."""
    return None if us in (_MIN, _MAX) else format_instant(_EPOCH + us * _US)


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


def _start_us(version: FactVersion) -> int:
    return _MIN if version.valid.start is None else _us(version.valid.start)


def indexed_beyond_key(event: Event) -> bool:
    """Whether folding `event` changes a Snapshot index besides its key's state: a HOLD's
    token or a judge's verdict (`Snapshot._decision`). A write's partition taken from the
    live snapshot can fold any other event into the key's state alone (Partition.extend)."""
    if event.kind is not _DECISION:
        return False
    return event.body.get("action") == "HOLD" or logged_verdict(event.body) is not None


class Snapshot:
    """The fold of a set of events: per-key states plus the version → key index."""

    __slots__ = ("holds", "judge_log", "keys", "seen", "version_key", "watermark")

    def __init__(self) -> None:
        self.keys: dict[FactKey, KeyState] = {}
        self.holds: dict[str, FactKey] = {}  # HOLD decision token -> key
        self.judge_log = JudgeLog()
        self.version_key: dict[str, FactKey] = {}
        self.seen: set[str] = set()
        self.watermark = 0

    def apply(self, event: Event, *, new: bool = False, folded: bool = False) -> bool:
        """Fold one event; False for a duplicate (already seen) event. new: the caller knows
        it is not a duplicate (a Memory's log admitted it), so `seen` is not asked (after an
        open from a checkpoint asking it is a query of the store per event). folded: the
        key's state holds the event already (a write's adopted copy): index it only."""
        if not new and event.event_id in self.seen:
            return False
        self.seen.add(event.event_id)
        if not folded:
            state = self.keys.get(event.key)
            if state is None:
                state = self.keys[event.key] = KeyState(event.key)
            state.apply(event)
        kind = event.kind
        if kind is _ASSERT:
            self.version_key[event.version_ids[0]] = event.key
        elif kind is _DECISION:
            self._decision(event)
        if event.seq > self.watermark:
            self.watermark = event.seq
        return True

    def _decision(self, event: Event) -> None:
        """Index a DECISION beyond its key's state (`indexed_beyond_key`)."""
        body = event.body
        if body.get("action") == "HOLD":
            self.holds[str(body["token"])] = event.key
        elif (logged := logged_verdict(body)) is not None:
            self.judge_log.put_digest(event.key, *logged)

    def fold(self, events: Iterable[Event]) -> None:
        """`apply` over events (any order, duplicates allowed), one key at a time.

        A key's state depends only on its own events in seq order (an event id names its
        key, so duplicates are per key too), so the fold buckets events by key, sorts each
        bucket by seq and folds it with that key's containers at hand: a bulk replay
        otherwise spends most of its time fetching a different key's state from memory per
        event. A batch of new, distinct events (the usual replay) is recorded as seen in one
        set operation instead of a check per event. ASSERT and SUPERSEDE into a state that
        has built no query structures yet are folded inline, as `KeyState.apply` would
        (tests hold the two paths to the same state); every other event goes through
        `apply` itself."""
        batch = events if isinstance(events, list) else list(events)
        ids = set(map(_id_of, batch))
        fresh = len(ids) == len(batch) and self.seen.isdisjoint(ids)
        if fresh:
            self.seen.update(ids)
        by_key: dict[FactKey, list[Event]] = {}
        for event in batch:
            bucket = by_key.get(event.key)
            if bucket is None:
                by_key[event.key] = [event]
            else:
                bucket.append(event)
        keys = self.keys
        watermark = self.watermark
        for key, bucket in by_key.items():
            bucket.sort(key=_seq_of)
            state = keys.get(key)
            if state is None:
                state = keys[key] = KeyState(key)
            last = self._fold_key(state, bucket, dedupe=not fresh)
            if last > watermark:
                watermark = last
        self.watermark = watermark

    def _fold_key(self, state: KeyState, events: list[Event], *, dedupe: bool) -> int:
        """Fold one key's events in order; the largest seq folded (0 if none was new).
        dedupe: skip (and record) seen events; False when the caller has done both."""
        seen, version_key, key = self.seen, self.version_key, state.key
        versions, proposed, closings = state.versions, state.proposed, state.closings
        times = state.times.items  # never an overlay: a fork is folded through `apply`
        ordered = True  # whether the inline path appended `times` in order
        top = key_seq = 0
        for event in events:
            if dedupe:
                event_id = event.event_id
                if event_id in seen:
                    continue
                seen.add(event_id)
            kind = event.kind
            if state._built or state._indexes or (kind is not _ASSERT and kind is not _SUPERSEDE):
                if not ordered:
                    times.sort()
                    ordered = True
                state.apply(event)
                if kind is _ASSERT:
                    version_key[event.version_ids[0]] = key
                elif kind is _DECISION:
                    self._decision(event)
            else:
                body = event.body
                at = event.recorded_at
                if kind is _ASSERT:
                    version = event.version
                    if version is None:
                        version = FactVersion.from_payload(body["version"])
                        vid = version.id
                    else:  # the same id (events are built with it), without touching version
                        vid = event.version_ids[0]
                    versions[vid] = version
                    if body.get("proposed"):
                        proposed.add(vid)
                    version_key[vid] = key
                else:
                    closes = body.get("closes_at")
                    if closes is not None:
                        closes = parse_instant(closes, "closes_at")
                    old = body["old"]
                    closing = _closing(Closing, (tuple(body["new"]), closes, at))
                    existing = closings.get(old)
                    closings[old] = (closing,) if existing is None else (*existing, closing)
                if event.key_seq > key_seq:
                    key_seq = event.key_seq
                times.append(at)  # sorted once at the end: a stable sort keeps equal times
                ordered = False
            if event.seq > top:
                top = event.seq
        if not ordered:
            times.sort()
        if key_seq > state.last_key_seq:
            state.last_key_seq = key_seq
        return top

    def copy(self) -> Snapshot:
        """A snapshot sharing this one's per-key states (clone a state before folding into
        it: `Memory` does, so that a `Db` holding this one never changes)."""
        other = Snapshot()
        other.keys = dict(self.keys)
        # .copy(), not dict(…)/set(…): a snapshot opened from a checkpoint holds lazy
        # containers (toki.checkpoint) whose copies must stay lazy, not load everything
        other.holds = self.holds.copy()
        other.judge_log = self.judge_log.copy()
        other.version_key = self.version_key.copy()
        other.seen = self.seen.copy()
        other.watermark = self.watermark
        return other

    def state(self, key: FactKey) -> KeyState | None:
        return self.keys.get(key)

    def version(self, vid: str) -> FactVersion | None:
        key = self.version_key.get(vid)
        return None if key is None else self.keys[key].versions[vid]

    def state_hash(self) -> str:
        """A hash of the belief state, independent of delivery order and sequence numbers.
        Which configuration serves reads (CONFIG events, toki.shadow) is not belief state."""
        build_lazy(self.keys.values())
        parts = [self.keys[k].digest_parts() for k in sorted(self.keys) if k != CONFIG_KEY]
        return digest(canonical_json(parts), 64)

    def summaries(self) -> dict[FactKey, KeySummary]:
        build_lazy(self.keys.values())
        return {k: s.summary() for k, s in self.keys.items()}


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many acyclic objects (decoding and
    folding a log create no reference cycles): on large logs its repeated scans of
    everything built so far cost as much as the building itself."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def replay(events: Iterable[Event], cutoff: datetime | None = None) -> Snapshot:
    """Fold events (any order, duplicates allowed) recorded at or before `cutoff`."""
    snapshot = Snapshot()
    with gc_paused():
        ordered = list(events) if cutoff is None else [e for e in events if e.recorded_at <= cutoff]
        snapshot.fold(ordered)
    return snapshot


_seq_of = attrgetter("seq")
_id_of = attrgetter("event_id")
