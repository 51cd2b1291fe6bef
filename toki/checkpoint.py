"""Checkpoints: open a long log by folding only what came after the last one (issue #37).

A checkpoint is a small record the store keeps beside the log: its format, a seq S, the
chain link at S, and per fact key its last per-key seq and a digest of its projection row at
S. It holds no copy of the replayed state: opening a store verifies the record against the
log (the stored link at S equals the recorded head, the tail's links chain on from it), folds
the tail (the events after S), and leaves every other key's state *lazy*. A lazy key is
built on its first use from its own events in the log (one partition read through the
`(key, key_seq)` index), each event's hash, id and chain link checked against the row
before it, so a state is only ever derived from the log itself; a checkpoint that disagrees
with the log raises IntegrityError before anything derived from it is served. The event
list, the event-id set, the version index and the judge log load the same way, on demand.

Why no serialised state: a serialised snapshot has to be decoded (at 10^6 events that took
longer than replaying from rows, measured with pickle) and it is a second copy an attacker
could forge consistently; the per-key partition read is what a write reads anyway. The cost
moves to the first read of each key (that key's events, not the log's). docs/integrity.md
says what open then detects and what only `toki verify` does.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

from toki.canonical import canonical_json, decode_json
from toki.chain import GENESIS, ChainCheck, link
from toki.errors import IntegrityError
from toki.judge import JudgeLog, Verdict, logged_verdict
from toki.log import Event, EventKind, EventLog
from toki.model import FactKey, fact_key_of_text
from toki.replay import FILL_LOCK, KeyState, KeySummary, LazyKeyState, Snapshot, gc_paused

__all__ = [
    "FORMAT",
    "MIN_TAIL",
    "UNCHECKED",
    "Checkpoint",
    "LazyLog",
    "Source",
    "due",
    "lazy_snapshot",
    "row_digest",
    "text_digest",
]

FORMAT = 2
"""The checkpoint record's format; another format is ignored (full replay), never misread.
Format 2 names each key by its text (as its projection row does) and digests rows faster
than format 1, whose records are ignored (the next open replays and writes a format-2 one)."""

MIN_TAIL = 1000
"""A checkpoint is written once the tail (events after the last one) holds max(MIN_TAIL,
number of keys) events: a record is O(keys), so the cost per event stays O(1) amortised and
the tail an open folds stays bounded."""

UNCHECKED = ""
"""The digest a record gives a key whose projection row its writer never checked against the
log (a key a tail touched that nobody used since the open): the next open checks that row
when the key is first used, as it does a tail key's, instead of trusting it. Writing the
record never builds such a key (that was a near-full replay: 14 s at 10^6 events for the
first checkpoint after an open whose 999-event tail touched ~630 keys)."""

K = TypeVar("K")
V = TypeVar("V")


def due(last_seq: int, checkpoint_seq: int, keys: int) -> bool:
    """Whether the tail is long enough to write a new checkpoint."""
    return last_seq - checkpoint_seq >= max(MIN_TAIL, keys)


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def row_digest(row: Sequence[object]) -> str:
    """sha256 of a projection row (a checkpoint records one per key): of its tuple's repr,
    which tells every str, int, float, bytes, None and list apart (unlike a join) and costs
    a fifth of a JSON encoding (an open digests every row)."""
    return hashlib.sha256(repr(tuple(row)).encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """(seq, chain head at seq, per key: the key, its text, its last per-key seq and its
    projection-row digest)."""

    seq: int
    head: str
    keys: tuple[tuple[FactKey, str, int, str], ...]

    def to_text(self) -> str:
        return canonical_json(
            {
                "format": FORMAT,
                "seq": self.seq,
                "head": self.head,
                "keys": [[t, n, d] for _, t, n, d in self.keys],
            }
        )

    @classmethod
    def from_text(cls, text: str, stored_digest: str | None, where: str) -> Checkpoint | None:
        """The record, or None for another format; IntegrityError if it is not one toki
        wrote (its digest, stored beside it, differs, or a field is malformed)."""
        if stored_digest is None or text_digest(text) != stored_digest:
            raise IntegrityError(f"{where}: the checkpoint record does not match its digest")
        try:
            data = decode_json(text)
            if data.get("format") != FORMAT:
                return None
            keys = []
            for t, n, d in data["keys"]:
                if not (type(t) is str and type(n) is int and type(d) is str):
                    raise ValueError(f"entry {[t, n, d]!r} is not [key text, seq, digest]")
                keys.append((fact_key_of_text(t), t, n, d))
            return cls(int(data["seq"]), str(data["head"]), tuple(keys))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise IntegrityError(f"{where}: the checkpoint record is malformed: {exc}") from exc


def check_key_events(
    where: str, key: FactKey, events: Sequence[Event], previous_links: Sequence[str | None],
    changed: str,
) -> None:
    """A key's events read from its own rows, each with the stored link of the event before it
    in the log: every event must be stored under its payload's key and chain on from that
    link (what a lazily built key is checked against; `changed` names the tables that were
    edited when the key does not match)."""
    for event, prev in zip(events, previous_links, strict=True):
        if event.seq == 1:
            prev = GENESIS
        if event.key != key:
            raise IntegrityError(
                f"{where}: event seq {event.seq} is stored under another fact key than its "
                f"payload's ({event.key}): {changed} was changed outside toki; run `toki "
                "verify URL`"
            )
        if prev is None or event.chain is None or link(str(prev), event) != event.chain:
            raise IntegrityError(
                f"{where}: event seq {event.seq}: its chain link does not follow from the "
                "event before it (an event at or before it was rewritten, deleted or "
                "renumbered outside toki); run `toki verify URL --digest D`"
            )


class Source(Protocol):
    """What a store offers a lazy snapshot: reads of the log up to the checkpoint's seq."""

    url: str

    def key_events(self, key: FactKey, upto: int) -> list[Event]:
        """The key's events with seq <= upto in per-key order, each checked (hash, id, and
        its chain link against the row before it): IntegrityError otherwise."""
        ...

    def has_event(self, event_id: str, upto: int) -> bool: ...

    def event_ids(self, upto: int) -> list[str]: ...

    def version_key(self, version_id: str, upto: int) -> FactKey | None:
        """The key of one version of the prefix (an indexed lookup), None if none."""
        ...

    def version_keys(self, upto: int) -> dict[str, FactKey]: ...

    def hold_key(self, token: str, upto: int) -> FactKey | None:
        """The key of the HOLD decision a token names in the prefix (an indexed lookup)."""
        ...

    def decision_events(self, upto: int) -> list[Event]: ...

    def prefix_events(self, upto: int) -> list[Event]:
        """Every event with seq <= upto, in seq order, with its stored link."""
        ...


class LazyMap(dict[K, V]):
    """A dict whose entries from the log load on the first miss or full read, one loader at
    a time in order (the cheap ones first) until the key is there; entries set before a
    loader ran are kept. With `probe` (which must answer for one key exactly what the
    loaders would), a miss asks it instead (an indexed lookup); only a full read loads."""

    __slots__ = ("_loads", "_probe")

    def __init__(
        self, *loads: Callable[[], Mapping[K, V]], probe: Callable[[K], V | None] | None = None
    ) -> None:
        super().__init__()
        self._loads = list(loads)
        self._probe = probe

    def _ensure(self, key: object = None, every: bool = True) -> None:
        with FILL_LOCK:
            loads = self._loads
            while loads and (every or not dict.__contains__(self, key)):
                for k, v in loads.pop(0)().items():
                    dict.setdefault(self, k, v)

    def _missing(self, key: object) -> None:
        if self._loads and not dict.__contains__(self, key):
            probe = self._probe
            if probe is not None:
                with FILL_LOCK:
                    found = probe(cast(K, key))
                    if found is not None:
                        dict.setdefault(self, cast(K, key), found)
                return  # the probe answers for every loader: a miss is a miss
            self._ensure(key, every=False)

    def get(self, key: K, default: Any = None) -> Any:
        self._missing(key)
        return dict.get(self, key, default)

    def __getitem__(self, key: K) -> V:
        self._missing(key)
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        self._missing(key)
        return dict.__contains__(self, key)

    def __iter__(self) -> Iterator[K]:
        self._ensure()
        return dict.__iter__(self)

    def __len__(self) -> int:
        self._ensure()
        return dict.__len__(self)

    def keys(self) -> Any:
        self._ensure()
        return dict.keys(self)

    def values(self) -> Any:
        self._ensure()
        return dict.values(self)

    def items(self) -> Any:
        self._ensure()
        return dict.items(self)

    def copy(self) -> LazyMap[K, V]:
        with FILL_LOCK:
            other: LazyMap[K, V] = LazyMap(*self._loads, probe=self._probe)
            dict.update(other, self)
            return other


class LazyIds(set[str]):
    """The ids of the events folded: the tail's in the set, the prefix's asked of the store
    one by one (an indexed lookup) until something needs them all."""

    __slots__ = ("_all", "_probe")

    def __init__(
        self, probe: Callable[[str], bool] | None, everything: Callable[[], list[str]] | None
    ) -> None:
        super().__init__()
        self._probe = probe
        self._all = everything

    def __contains__(self, item: object) -> bool:
        if set.__contains__(self, item):
            return True
        probe = self._probe
        return probe is not None and isinstance(item, str) and probe(item)

    def isdisjoint(self, other: Iterable[object]) -> bool:
        return not any(x in self for x in other)

    def _ensure(self) -> None:
        with FILL_LOCK:
            everything = self._all
            if everything is not None:
                set.update(self, everything())
                self._all = self._probe = None

    def __iter__(self) -> Iterator[str]:
        self._ensure()
        return set.__iter__(self)

    def __len__(self) -> int:
        self._ensure()
        return set.__len__(self)

    def copy(self) -> LazyIds:
        with FILL_LOCK:
            other = LazyIds(self._probe, self._all)
            set.update(other, self)
            return other


class LazyJudgeLog(JudgeLog):
    """The judge log of a snapshot opened from a checkpoint, loaded per key: a key's verdicts
    are its own DECISION events' (the first per θ wins), read from its state when the key is
    first asked about (a write asks only of its own keys, whose states it has built). Only a
    full read (len) loads every key's, from the prefix's DECISION events and the tail's
    (before, a first judged write after an open read all of them: 0.33 s at 10^6 events)."""

    __slots__ = ("_decisions_of", "_done", "_load")

    def __init__(
        self,
        load: Callable[[], Mapping[tuple[FactKey, str], Verdict]] | None,
        decisions_of: Callable[[FactKey], Iterable[tuple[Any, Mapping[str, Any]]]],
    ) -> None:
        super().__init__()
        self._load = load
        self._decisions_of = decisions_of
        self._done: set[FactKey] = set()

    def _ensure(self) -> None:
        with FILL_LOCK:
            load = self._load
            if load is not None:
                loaded = dict(load())
                for k, v in self._verdicts.items():  # logged after the open: later, so they
                    loaded.setdefault(k, v)  # win only where nothing was logged before
                self._verdicts = loaded
                self._load = None

    def _ensure_key(self, key: FactKey) -> None:
        """`key`'s verdicts from its DECISION events so far (its state includes the tail's
        and every one folded since the open; nothing was put for it before this ran)."""
        if self._load is None or key in self._done:
            return
        with FILL_LOCK:
            if self._load is None or key in self._done:
                return
            first: dict[tuple[FactKey, str], Verdict] = {}
            for _, body in self._decisions_of(key):
                logged = logged_verdict(body)
                if logged is not None:
                    first.setdefault((key, logged[0]), logged[1])
            self._verdicts.update(first)
            self._done.add(key)

    def __len__(self) -> int:
        self._ensure()
        return super().__len__()

    def verdict_of(self, key: FactKey, theta_digest: str) -> Verdict | None:
        self._ensure_key(key)
        return super().verdict_of(key, theta_digest)

    def put_digest(self, key: FactKey, theta_digest: str, verdict: Verdict) -> None:
        self._ensure_key(key)
        super().put_digest(key, theta_digest, verdict)

    def copy(self) -> LazyJudgeLog:
        with FILL_LOCK:
            other = LazyJudgeLog(self._load, self._decisions_of)
            other._verdicts = dict(self._verdicts)
            other._done = set(self._done)
            return other


def lazy_snapshot(
    checkpoint: Checkpoint,
    source: Source,
    tail: Sequence[Event] = (),
    row_of: Callable[[FactKey], KeySummary | None] | None = None,
) -> Snapshot:
    """The state at the checkpoint's seq plus `tail` (the events after it, chain-checked by
    the caller) with no key state built yet: each key fills on first use from its own events
    up to the checkpoint's seq (which must end at the per-key seq it recorded) and then its
    tail events. A key the tail touched, or one the record marks UNCHECKED, must then
    summarise to its stored projection row (`row_of`: as read with the tail), or its first
    use raises IntegrityError."""
    upto = checkpoint.seq
    snapshot = Snapshot()
    snapshot.seen = LazyIds(
        lambda event_id: source.has_event(event_id, upto), lambda: source.event_ids(upto)
    )
    asserts = [e for e in tail if e.kind is EventKind.ASSERT]  # their versions: on demand
    @functools.cache
    def tail_versions() -> dict[str, FactKey]:
        return {e.version_ids[0]: e.key for e in asserts}

    snapshot.version_key = LazyMap(  # one version's key: from the tail, else by the index
        tail_versions,
        lambda: source.version_keys(upto),
        probe=lambda vid: tail_versions().get(vid) or source.version_key(vid, upto),
    )
    tail_decisions = [e for e in tail if e.kind is EventKind.DECISION]

    @functools.cache
    def folded() -> Snapshot:  # holds and judge verdicts come from the DECISION events
        scratch = Snapshot()
        for event in (*source.decision_events(upto), *tail_decisions):
            scratch._decision(event)
        return scratch

    def decisions_of(key: FactKey) -> list[tuple[Any, Mapping[str, Any]]]:
        state = snapshot.keys.get(key)  # a state never loses events: copies clone first
        return [] if state is None else list(state.decisions)

    snapshot.holds = LazyMap(  # one token's key: the tail's are set below, else by the index
        lambda: folded().holds, probe=lambda token: source.hold_key(token, upto)
    )
    snapshot.judge_log = LazyJudgeLog(lambda: folded().judge_log._verdicts, decisions_of)
    snapshot.watermark = upto
    pending: dict[FactKey, list[Event]] = {}
    for event in tail:  # what Snapshot.apply records beside the key state, now
        set.add(snapshot.seen, event.event_id)
        if event.kind is EventKind.DECISION and event.body.get("action") == "HOLD":
            snapshot.holds[str(event.body["token"])] = event.key  # verdicts: per key
        pending.setdefault(event.key, []).append(event)
        snapshot.watermark = max(snapshot.watermark, event.seq)
    builder = _Builder(checkpoint, source, pending, row_of)
    keys = snapshot.keys
    for key in builder.seqs:
        keys[key] = LazyKeyState(key, builder)
    for key in pending:
        if key not in keys:
            keys[key] = LazyKeyState(key, builder)
    return snapshot


BULK_SHARE = 1.0
"""Keys are built one by one from their own rows until the rows read that way reach this
share of the prefix; then every key still unbuilt is built from one pass over the prefix (as
a full replay would). Whatever share of the keys a workload uses, that reads at most about
twice the rows the cheaper of the two ways would (rent until the rent reaches the price,
then buy): building every key after the first 64 (the rule before) cost a workload that used
300 of 1,000 keys a decode of the whole prefix, 0.27 s per first write at 10^6 events."""

QUERY_ROWS = 4
"""A per-key read counts as this many rows beyond the ones it returns (its index walk):
keys of one event each still switch to the one pass."""


class _Builder:
    """Builds the lazy keys of one snapshot: one key from its own rows, or, once the rows so
    read reach BULK_SHARE of the prefix, every key still unbuilt from one chain-walked pass
    over the prefix; a sweep of every key (`build_all`, from `toki.replay.build_lazy`) goes
    to that pass at once."""

    def __init__(
        self,
        checkpoint: Checkpoint,
        source: Source,
        tail: Mapping[FactKey, Sequence[Event]],
        row_of: Callable[[FactKey], KeySummary | None] | None,
    ) -> None:
        self.checkpoint = checkpoint
        self.source = source
        self.tail = tail
        self.row_of = row_of
        self.seqs = {k: n for k, _, n, _ in checkpoint.keys}
        self.unchecked = {k for k, _, _, d in checkpoint.keys if d == UNCHECKED}
        self.built: set[FactKey] = set()
        self.read = 0  # rows read one key at a time (QUERY_ROWS per read included)
        self.bulk: dict[FactKey, KeyState | IntegrityError] | None = None

    def __call__(self, key: FactKey) -> KeyState:
        """Key `key`'s state (the `fill` of its LazyKeyState)."""
        if self.read >= BULK_SHARE * self.checkpoint.seq:
            self.build_all()
        if self.bulk is not None:
            built = self.bulk.pop(key, None) or KeyState(key)
            if isinstance(built, IntegrityError):
                raise built
            return built
        self.built.add(key)
        upto = self.checkpoint.seq
        events = self.source.key_events(key, upto) if self.seqs.get(key) else []
        self.read += len(events) + QUERY_ROWS
        return self._build(key, events, self.tail.get(key, ()))

    def build_all(self) -> None:
        """Every key is about to be read (`build_lazy`): build the unbuilt ones in one pass
        now, rather than renting key by key first (an all-keys sweep paid about twice)."""
        if self.bulk is None:
            with gc_paused():  # the whole log decoded: no cycles among what it builds
                self.bulk = self._build_all()

    def _build_all(self) -> dict[FactKey, KeyState | IntegrityError]:
        """Every key from one pass over the prefix, its whole chain walked to the head."""
        upto, url = self.checkpoint.seq, self.source.url
        events = self.source.prefix_events(upto)
        walk = ChainCheck(url)
        by_key: dict[FactKey, list[Event]] = {}
        for event in events:
            walk.add(event, event.chain)
            by_key.setdefault(event.key, []).append(event)
        if walk.seq != upto or walk.head != self.checkpoint.head:
            raise IntegrityError(
                f"{url}: the log up to seq {upto} does not chain to the head its checkpoint "
                "recorded (changed outside toki); run `toki verify URL`"
            )
        out: dict[FactKey, KeyState | IntegrityError] = {}
        for key in (self.seqs.keys() | self.tail.keys()) - self.built:
            try:
                out[key] = self._build(key, by_key.get(key, []), self.tail.get(key, ()))
            except IntegrityError as exc:  # raised when that key is used, as one by one
                out[key] = exc
        return out

    def _build(self, key: FactKey, events: Sequence[Event], tail: Sequence[Event]) -> KeyState:
        key_seq, url = self.seqs.get(key, 0), self.source.url
        last = events[-1].key_seq if events else 0
        if last != key_seq or any(e.key_seq != i for i, e in enumerate(events, 1)):
            raise IntegrityError(
                f"{url}: key {key}: the log holds per-key seqs {_seqs(events)} up to seq "
                f"{self.checkpoint.seq}, the checkpoint recorded 1..{key_seq} (an event was "
                "deleted, inserted or renumbered, or the checkpoint was changed, outside "
                "toki); run `toki verify URL`"
            )
        scratch = Snapshot()
        scratch.fold([*events, *tail])
        state = scratch.keys.get(key) or KeyState(key)
        check = tail or key in self.unchecked
        if check and self.row_of is not None and state.summary() != self.row_of(key):
            raise IntegrityError(
                f"{url}: the stored projection row of {key} differs from the log (checked "
                "when the key was first used after an open from a checkpoint); nothing was "
                "changed. Run `toki verify URL --digest D`; if the log is intact, open with "
                "repair_projection=True to rebuild the projection from it"
            )
        return state


def _seqs(events: Sequence[Event]) -> str:
    shown = [e.key_seq for e in events[:5]]
    return ", ".join(map(str, shown)) + (", …" if len(events) > 5 else "") or "none"


class LazyLog(EventLog):
    """The event log of a Memory opened from a checkpoint: last seq and per-key seqs from the
    record, the tail in memory, the prefix loaded (and its whole chain walked to the
    checkpoint's head) only when something reads every event."""

    __slots__ = ("_base", "_head", "_prefix")

    def __init__(
        self, checkpoint: Checkpoint, prefix: Callable[[], list[Event]], where: str
    ) -> None:
        super().__init__()
        self._base = checkpoint.seq
        self._head = (checkpoint.head, where)
        self._key_seq = {k: n for k, _, n, _ in checkpoint.keys if n}
        self._prefix: Callable[[], list[Event]] | None = prefix

    @property
    def last_seq(self) -> int:
        return self._events[-1].seq if self._events else self._base

    def _ensure(self) -> None:
        with FILL_LOCK, gc_paused():  # the whole prefix decoded: acyclic objects
            load = self._prefix
            if load is None:
                return
            events = load()
            check = ChainCheck(self._head[1])
            for event in events:
                check.add(event, event.chain)
            if check.seq != self._base or check.head != self._head[0]:
                raise IntegrityError(
                    f"{self._head[1]}: the log up to seq {self._base} does not chain to the "
                    "head its checkpoint recorded (changed outside toki); run `toki verify URL`"
                )
            self._events[:0] = events
            self._by_id.update((e.event_id, e) for e in events)
            self._prefix = None

    def __len__(self) -> int:
        self._ensure()
        return super().__len__()

    def __iter__(self) -> Iterator[Event]:
        self._ensure()
        return super().__iter__()

    def contains(self, event_id: str) -> bool:
        if event_id in self._by_id:
            return True
        self._ensure()
        return super().contains(event_id)

    def events(self) -> tuple[Event, ...]:
        self._ensure()
        return super().events()
