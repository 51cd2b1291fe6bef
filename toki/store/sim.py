"""An event store on the simulator's `SimStore`, so that the scheduler interleaves the library's
own write path (`Memory.write_steps` → `Partition` → `write.plan_write` → the operator).

The transaction shell is PostgreSQL's (`toki/store/postgres.py`), one SimStore statement per
scheduler step, and the plan in the middle is the library's, unchanged:

1. `Begin()`; 2. the partition: one `Select` of the keys' event rows (one statement, so one
snapshot even at READ COMMITTED, like the PostgreSQL read); 3. the plan (library code, run
locally), then one `Local("judge")` step per judge verdict it logged; 4. per written key, the
conditional head update `UPDATE head SET pos = new WHERE pos = <read pos>` (`UpdateWhere`:
at READ COMMITTED it waits for a matching row another writer holds and re-checks it on the
newest version, as PostgreSQL does; no row updated: a concurrent writer won, retry from a
fresh read); 5. per written key, one insert of its batch of events; 6. per changed key, its
projection row; 7. `Commit()`. A refused statement or commit (serialization failure,
deadlock) retries the whole transaction, at most `MAX_RETRIES` times, then `WriteConflict`.

The judge step comes after the plan has asked the judge: the plan is a function of the
partition read alone (the judge is too: `SimJudge` answers from the question), so asking it
before or after the scheduling point between the read and the writes is the same run.

Rows (keys are tuples of strings, values JSON-able, so histories export and Adya checks run):
("toki:head", key) → the key's last key_seq; ("toki:events", key, first key_seq) → the batch of
event records one transaction appended (insert only: a new row per batch); ("toki:proj",
key) → the key's projection summary. Head rows are created with the store's keys
(`initial_rows`), as the PostgreSQL store creates them before its transaction.

There is no global sequence inside a transaction (a counter row would make every two writes
conflict, which PostgreSQL's non-transactional sequence does not): when a committed state is
opened (`SimEventStore.of_state`) its events are numbered key by key in key_seq order, RULE's
policy keys first. Replay is order-independent across keys, and re-adjudication picks the
policy in force by its recording time, so nothing depends on that order.

An agent's own `Memory` over this store never folds the shared log (`last_seq` is 0 inside a
run): its writes decide from the partition read inside their transaction, never from the
facade, and reading the shared state outside a step would be invisible to the scheduler.
`head_check=False` is an ablation for experiments: the head update is skipped, so the write
path is the read-then-append the proofs warn about (docs/proofs.md, "Findings").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Final

from toki.errors import StoreError, WriteConflict
from toki.isolation import Isolation
from toki.log import Event, EventKind, event_from_record, event_to_record
from toki.model import FactKey
from toki.plan import POLICY_SUBJECT
from toki.replay import KeySummary
from toki.sim.program import Abort, Begin, Commit, Local, Select, UpdateWhere, Write
from toki.store.base import Plan, Steps

__all__ = ["HEAD", "LOG", "MAX_RETRIES", "PROJ", "SimEventStore", "initial_rows", "key_row"]

HEAD: Final = "toki:head"
LOG: Final = "toki:events"
PROJ: Final = "toki:proj"
MAX_RETRIES: Final = 8

KeyRow = tuple[str, str, str, str, str]


def key_row(key: FactKey) -> KeyRow:
    """A fact key as a row key: (tenant, subject, scope_kind, scope_key, fact_key)."""
    return (key.tenant, key.subject, key.scope_kind, key.scope_key, key.fact_key)


def _fact_key(row: KeyRow) -> FactKey:
    tenant, subject, scope_kind, scope_key, fact_key = row
    return FactKey(tenant, subject, fact_key, scope_kind, scope_key)


_DECODED: dict[tuple[str, int], Event] = {}


def _decode(record: Mapping[str, Any]) -> Event:
    """An event row back as an Event (memoised: explorations read the same rows often)."""
    memo = (str(record["event_id"]), int(record["key_seq"]))
    event = _DECODED.get(memo)
    if event is None:
        if len(_DECODED) > 65536:
            _DECODED.clear()
        event = _DECODED[memo] = event_from_record(record)
    return event


def _record(event: Event) -> dict[str, Any]:
    return {**event_to_record(event), "seq": 0}  # the seq is given when a state is opened


def initial_rows(keys: Iterable[FactKey], events: Sequence[Event] = ()) -> dict[Hashable, Any]:
    """The rows of a fresh store holding `keys` (head rows at 0), plus `events` written before
    the run (e.g. RULE's policies, from a setup Memory), with their head and projection rows."""
    from toki.replay import replay

    rows: dict[Hashable, Any] = {(HEAD, key_row(k)): 0 for k in keys}
    by_key: dict[FactKey, list[Event]] = {}
    for e in events:
        by_key.setdefault(e.key, []).append(e)
    snap = replay(events)
    for key, batch in by_key.items():
        batch.sort(key=lambda e: e.key_seq)
        rows[(LOG, key_row(key), batch[0].key_seq)] = tuple(_record(e) for e in batch)
        rows[(HEAD, key_row(key))] = batch[-1].key_seq
    for key, summary in snap.summaries().items():
        rows[(PROJ, key_row(key))] = summary.to_json()
    return rows


class SimEventStore:
    """The EventStore whose transaction shell is a generator of SimStore statements.

    `level` is the level of the simulated store the agents run on (a SimStore has one level
    for every transaction); a write asking for another is refused rather than run at a level
    it did not ask for. `state` (a committed SimStore state) makes it a reader of that state:
    what `of_state` builds to observe or recover a finished run."""

    concurrent = True
    url = "sim://"

    def __init__(
        self,
        level: Isolation,
        *,
        head_check: bool = True,
        state: Mapping[Hashable, Any] | None = None,
    ) -> None:
        self.level = level
        self.head_check = head_check
        self._events: list[Event] = []
        self._projection: dict[FactKey, KeySummary] = {}
        if state is not None:
            self._events, self._projection = _read_state(state)

    @classmethod
    def of_state(cls, state: Mapping[Hashable, Any], level: Isolation) -> SimEventStore:
        """A read-only store over a committed state (to reopen it: `Memory(store)`)."""
        return cls(level, state=state)

    # -- the write shell, as statements -------------------------------------------------

    def transact(self, keys: frozenset[FactKey], level: Isolation, plan: Plan) -> int:
        raise StoreError(
            "store: the simulated store's writes are scheduler steps; run them in an agent "
            "with `yield from memory.write_steps(claim)`"
        )

    def transact_steps(self, keys: frozenset[FactKey], level: Isolation, plan: Plan) -> Steps[int]:
        """One write as statements (module docstring); returns the retries it took."""
        if level is not self.level:
            raise StoreError(
                f"level: this write asks for {level.value}, but the simulated store runs every "
                f"transaction at {self.level.value} (open the Memory with isolation="
                f"Isolation.{self.level.name}, or build the program at {level.value})"
            )
        wanted = frozenset(key_row(k) for k in keys)

        def in_partition(key: Any, value: Any) -> bool:
            return type(key) is tuple and key[0] == LOG and key[1] in wanted

        what = ", ".join(sorted(f"{k[1]}:{k[4]}" for k in wanted))
        read = Select(in_partition, name=f"partition {what}")
        last: object = None
        for attempt in range(MAX_RETRIES + 1):
            yield Begin()
            rows = yield read
            if isinstance(rows, Exception):
                last = rows
                continue
            partition = [_decode(r) for _, batch in sorted(rows.items()) for r in batch]
            try:
                events, summaries = plan(partition, 0)
            except Exception:
                yield Abort()  # a plan that raises (bad input) leaves nothing behind
                raise
            failed = yield from self._apply(partition, events, summaries)
            if failed is None:
                return attempt
            last = failed
        raise WriteConflict(
            f"write to {what} at {level.value} still conflicted after {MAX_RETRIES} retries "
            f"({last}); nothing was written"
        )

    def _apply(
        self,
        partition: Sequence[Event],
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
    ) -> Steps[object | None]:
        """Judge steps, head updates, event and projection rows, commit; None when committed,
        else why the transaction has to be retried (it is gone)."""
        for e in events:
            if e.kind is EventKind.DECISION and e.body.get("decision") == "judge":
                yield Local("judge", f"{e.key.subject}:{e.key.fact_key} {e.body['task']}")
        read_pos: dict[FactKey, int] = {}
        for e in partition:
            read_pos[e.key] = max(read_pos.get(e.key, 0), e.key_seq)
        batches: dict[FactKey, list[Event]] = {}
        for e in events:
            batches.setdefault(e.key, []).append(e)
        order = sorted(batches, key=key_row)
        if self.head_check:
            for key in order:
                moved = yield from _move_head(key, read_pos.get(key, 0), batches[key][-1].key_seq)
                if moved is not None:
                    return moved
        for key in order:
            batch = batches[key]
            row = (LOG, key_row(key), batch[0].key_seq)
            result = yield Write(row, tuple(_record(e) for e in batch))
            if isinstance(result, Exception):
                return result
        for key in sorted(summaries, key=key_row):
            result = yield Write((PROJ, key_row(key)), summaries[key].to_json())
            if isinstance(result, Exception):
                return result
        result = yield Commit()
        return result if isinstance(result, Exception) else None

    # -- reading a committed state (observation, recovery) ---------------------------------

    def write_lock(self) -> AbstractContextManager[None]:
        return nullcontext()

    def sequence(self) -> int:
        return 0

    def load_state(self) -> tuple[list[Event], list[Event], int, dict[FactKey, KeySummary]]:
        return list(self._events), [], len(self._events), dict(self._projection)

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
    ) -> None:
        raise StoreError(
            "store: a simulated store is written only by its transaction shell (or opened "
            "read-only over a finished run's state); nothing was written"
        )

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        return iter([e for e in self._events if e.seq > after_seq])

    def last_seq(self) -> int:
        return len(self._events)

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        return len(self._events), dict(self._projection)

    def close(self) -> None:
        pass


def _move_head(key: FactKey, read: int, new: int) -> Steps[object | None]:
    """The conditional head update; None when it moved the head, else the retry's reason."""
    head = (HEAD, key_row(key))

    def at_read(k: Any, pos: Any) -> bool:
        return bool(k == head and pos == read)

    def to_new(k: Any, pos: Any) -> int:
        return new

    result = yield UpdateWhere(at_read, to_new, name=f"head {key.subject}:{key.fact_key}")
    if isinstance(result, Exception):
        return result
    if not result:
        yield Abort()
        return (
            f"the head of {key} was no longer at {read} (a concurrent writer moved it; or the "
            "store has no head row for the key: build it with initial_rows(keys))"
        )
    return None


def _read_state(
    state: Mapping[Hashable, Any],
) -> tuple[list[Event], dict[FactKey, KeySummary]]:
    """The events of a committed state, numbered key by key (policy keys first), and its
    projection rows."""
    batches: list[tuple[tuple[bool, KeyRow, int], tuple[Mapping[str, Any], ...]]] = []
    projection: dict[FactKey, KeySummary] = {}
    for row, value in state.items():
        if type(row) is not tuple or not row:
            continue
        if row[0] == LOG:
            batches.append(((row[1][1] != POLICY_SUBJECT, row[1], row[2]), value))
        elif row[0] == PROJ:
            projection[_fact_key(row[1])] = KeySummary.from_json(value)
    batches.sort(key=lambda b: b[0])
    events: list[Event] = []
    for _, batch in batches:
        for record in batch:
            e = _decode(record)
            events.append(dataclasses.replace(e, seq=len(events) + 1))
    return events, projection
