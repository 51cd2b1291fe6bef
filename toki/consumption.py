"""Consumption provenance: which versions a named consumer read, when, under which
configuration; and what a wrong source touched (`impact`) and what revoking it changes.

A read that names a consumer (`resolve_at(..., consumer="answer-17")`) appends one
`Consumption` record to the store's consumption log: a table beside the event log, append-only
like it, but outside the fact chain, so a read never moves the fact log's seq, chain or state
hash (docs/consumption.md says why). Each record pins the fact log it read by seq and chain
head, so `consumed_by` re-derives every recorded answer from the log prefix it saw.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toki.canonical import canonical_json, check_text, digest, shown
from toki.chain import ChainCheck
from toki.errors import IntegrityError, InvalidInput, InvalidTime, LifecycleError
from toki.lifecycle import LifecycleOps
from toki.log import Event, EventKind
from toki.model import FactKey, Resolution, Scope
from toki.partition import Partition
from toki.queries import Queries, _resolve_in
from toki.replay import Snapshot, replay
from toki.time import TimeLike, format_instant, parse_instant

__all__ = ["ConsumerImpact", "Consumption", "ConsumptionOps", "Impact", "need_consumer"]


def need_consumer(consumer: object, field: str = "consumer") -> str:
    """A consumer names an answer, a prompt, a run: a non-empty string."""
    if not isinstance(consumer, str) or not consumer.strip():
        raise InvalidInput(
            field, f"must be a non-empty string, got {shown(consumer)}", "name the answer"
        )
    check_text(consumer, field)
    return consumer


@dataclass(frozen=True, slots=True)
class Consumption:
    """One named read: the question, the answer, and the log and configuration it came from.

    log_seq is the last fact-log seq the reading Memory had folded: the answer is a function
    of the events with seq <= log_seq (not of a system time: a relay may later append events
    recorded earlier than the read). config_id is the promoted configuration in force (None:
    the log as decided); operators the fact_key -> operator routing of the reading Memory.
    """

    consumer: str
    read_at: datetime
    key: FactKey
    valid_at: datetime
    system_as_of: datetime | None
    scope_chain: tuple[str, ...] | None
    log_seq: int
    log_head: str
    config_id: str | None
    config: Mapping[str, Any] | None
    operators: Mapping[str, str]
    answer: Resolution

    def payload(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "read_at": format_instant(self.read_at),
            "key": self.key.to_json(),
            "valid_at": format_instant(self.valid_at),
            "system_as_of": None
            if self.system_as_of is None
            else format_instant(self.system_as_of),
            "scope_chain": None if self.scope_chain is None else list(self.scope_chain),
            "log_seq": self.log_seq,
            "log_head": self.log_head,
            "config_id": self.config_id,
            "config": None if self.config is None else dict(self.config),
            "operators": dict(sorted(self.operators.items())),
            "answer": resolution_json(self.answer),
        }

    @property
    def record_id(self) -> str:
        """A hash of the payload: the same read recorded twice is one record."""
        return "c-" + digest(canonical_json(self.payload()))

    def to_text(self) -> str:
        return canonical_json(self.payload())

    @classmethod
    def from_text(cls, text: str, record_id: str, where: str) -> Consumption:
        """Decode a stored record; a payload that no longer hashes to its id is refused."""
        try:
            data = json.loads(text)
            answer = data["answer"]
            record = cls(
                consumer=str(data["consumer"]),
                read_at=parse_instant(data["read_at"], "read_at"),
                key=FactKey.from_json(data["key"]),
                valid_at=parse_instant(data["valid_at"], "valid_at"),
                system_as_of=None
                if data["system_as_of"] is None
                else parse_instant(data["system_as_of"], "system_as_of"),
                scope_chain=None if data["scope_chain"] is None else tuple(data["scope_chain"]),
                log_seq=int(data["log_seq"]),
                log_head=str(data["log_head"]),
                config_id=data["config_id"],
                config=data["config"],
                operators=dict(data["operators"]),
                answer=Resolution(
                    str(answer["kind"]),
                    answer["value"],
                    tuple(answer["version_ids"]),
                    tuple(tuple(c) for c in answer["conflicts"]),
                ),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise IntegrityError(
                f"{where}: consumption record {record_id} is unreadable: {exc}"
            ) from exc
        if record.record_id != record_id:
            raise IntegrityError(
                f"{where}: consumption record {record_id} does not match its payload (it was "
                "changed outside toki); restore the store from a backup taken before it"
            )
        return record


def resolution_json(answer: Resolution) -> dict[str, Any]:
    return {
        "kind": answer.kind,
        "value": answer.value,
        "version_ids": list(answer.version_ids),
        "conflicts": [list(c) for c in answer.conflicts],
    }


def same_answer(a: Resolution, b: Resolution) -> bool:
    """Equal kind and value (canonical JSON): what a consumer would have been told."""
    return a.kind == b.kind and canonical_json(a.value) == canonical_json(b.value)


@dataclass(frozen=True, slots=True)
class ConsumerImpact:
    """One named read that consumed a version of the source: its answer then and now.

    now is the same question (key, valid_at, scope chain) asked of everything known now;
    status is "stale" when now's kind or value differs from then's, else "unchanged"."""

    read: Consumption
    now: Resolution

    @property
    def consumer(self) -> str:
        return self.read.consumer

    @property
    def then(self) -> Resolution:
        return self.read.answer

    @property
    def status(self) -> str:
        return "unchanged" if same_answer(self.read.answer, self.now) else "stale"

    def to_json(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "key": str(self.read.key),
            "valid_at": format_instant(self.read.valid_at),
            "read_at": format_instant(self.read.read_at),
            "then": resolution_json(self.then),
            "now": resolution_json(self.now),
            "status": self.status,
        }


@dataclass(frozen=True, slots=True)
class Impact:
    """What a source touched: its versions, the keys they are on, the versions whose standing
    depends on them (versions they superseded: those re-open when every replacement is
    revoked), and the named reads that consumed any of its versions."""

    source_id: str
    versions: tuple[str, ...]
    revoked: tuple[str, ...]  # of `versions`, those already revoked before this report
    keys: tuple[FactKey, ...]
    dependents: tuple[str, ...]
    consumers: tuple[ConsumerImpact, ...]

    @property
    def stale(self) -> tuple[ConsumerImpact, ...]:
        return tuple(c for c in self.consumers if c.status == "stale")

    def to_json(self) -> dict[str, Any]:
        return {
            "source_id": self.source_id,
            "versions": list(self.versions),
            "revoked": list(self.revoked),
            "keys": [str(k) for k in self.keys],
            "dependents": list(self.dependents),
            "consumers": [c.to_json() for c in self.consumers],
            "stale": len(self.stale),
        }

    def describe(self) -> str:
        lines = [
            f"source {self.source_id}: {len(self.versions)} versions on {len(self.keys)} keys, "
            f"{len(self.dependents)} dependent versions, {len(self.consumers)} reads "
            f"({len(self.stale)} stale)"
        ]
        for c in self.consumers:
            lines.append(
                f"  {c.consumer} read {c.read.key} at {format_instant(c.read.valid_at)}: "
                f"{_short(c.then)} -> {_short(c.now)} [{c.status}]"
            )
        return "\n".join(lines)


def _short(answer: Resolution) -> str:
    return canonical_json(answer.value) if answer.kind == "value" else answer.kind


def consumed_versions(records: Sequence[Consumption]) -> set[str]:
    return {v for r in records for v in r.answer.version_ids}


# -- the Memory half ----------------------------------------------------------------------


class ConsumptionOps(Queries, LifecycleOps):
    """consumed_by, impact and revoke_source (the `Memory` facade's provenance half)."""

    def consumed_by(self, consumer: str, *, verify: bool = True) -> list[Consumption]:
        """Every read `consumer` made, in the order made, with the answer it was given.

        verify (default) re-derives each answer from the fact log as it stood at the read
        (events with seq <= log_seq, under the configuration then in force) and checks the
        log prefix's chain head: a record that no longer follows from its log raises
        IntegrityError. Later corrections do not change what is returned."""
        need_consumer(consumer)
        records = self._consumption(consumer)
        if verify:
            cache: dict[tuple[int, str | None], Snapshot] = {}
            for record in records:
                again = self._reproduce(record, cache)
                if again != record.answer:
                    raise IntegrityError(
                        f"{self._store.url}: consumption record {record.record_id} of "
                        f"{consumer!r} says {resolution_json(record.answer)} but the log up to "
                        f"seq {record.log_seq} gives {resolution_json(again)}"
                    )
        return records

    def _consumption(self, consumer: str | None = None) -> list[Consumption]:
        load = getattr(self._store, "load_consumption", None)
        if load is None:
            return []
        return [Consumption.from_text(p, rid, self._store.url) for rid, p in load(consumer)]

    def _reproduce(
        self, record: Consumption, cache: dict[tuple[int, str | None], Snapshot]
    ) -> Resolution:
        """The answer the log prefix a record names gives to its question."""
        if record.log_seq > self._log.last_seq:
            self.refresh()
        slot = (record.log_seq, record.config_id)
        snapshot = cache.get(slot)
        if snapshot is None:
            prefix = [e for e in self._log if e.seq <= record.log_seq]
            if record.log_head:
                check = ChainCheck(self._store.url)
                for event in prefix:
                    check.add(event)
                if check.head != record.log_head:
                    raise IntegrityError(
                        f"{self._store.url}: the fact log up to seq {record.log_seq} is not the "
                        f"one consumption record {record.record_id} read (chain head differs); "
                        "run `toki verify URL --digest D`"
                    )
            snapshot = self._projection_of(prefix, record.config)
            cache[slot] = snapshot
        keys = [record.key.in_scope(Scope.from_resource(s)) for s in record.scope_chain or ()]
        return _resolve_in(snapshot, keys, record.valid_at, record.system_as_of)

    def _projection_of(self, events: Sequence[Event], config: Any) -> Snapshot:
        """The fold of `events` as decided (config None), or under a promoted config."""
        if config is None:
            return replay(events)
        from toki.shadow import Config, refold

        return refold(events, Config.from_json(config))._snapshot

    def impact(self, source_id: str) -> Impact:
        """What `source_id` touched: its versions (split pieces carry its source id), their
        keys, the versions they superseded, and the named reads that consumed any of them,
        each with its answer then and the same question's answer now."""
        source_id = _need_source(source_id)
        self.refresh()
        mine: list[str] = []
        revoked: list[str] = []
        keys: list[FactKey] = []
        dependents: set[str] = set()
        for key in sorted(self._snapshot.keys):
            state = self._snapshot.keys[key]
            ids = [vid for vid, v in state.versions.items() if v.source_id == source_id]
            if not ids:
                continue
            keys.append(key)
            mine.extend(ids)
            revoked.extend(vid for vid in ids if state.is_revoked(vid))
            wrong = set(ids)
            for old, closings in state.closings.items():
                if old not in wrong and any(wrong.intersection(c.new_ids) for c in closings):
                    dependents.add(old)
        return Impact(
            source_id,
            tuple(sorted(mine)),
            tuple(sorted(revoked)),
            tuple(keys),
            tuple(sorted(dependents)),
            self._consumers_of(set(mine)),
        )

    def _consumers_of(self, versions: set[str]) -> tuple[ConsumerImpact, ...]:
        return tuple(
            ConsumerImpact(record, self._answer_now(record))
            for record in self._consumption()
            if versions.intersection(record.answer.version_ids)
        )

    def _answer_now(self, record: Consumption) -> Resolution:
        """The record's question (key, valid time, scope chain) asked of all known now."""
        keys = [record.key.in_scope(Scope.from_resource(s)) for s in record.scope_chain or ()]
        return _resolve_in(self._view(None), keys, record.valid_at, None)

    def revoke_source(
        self, source_id: str, *, reason: str, recorded_at: TimeLike | None = None
    ) -> Impact:
        """The source itself was wrong: revoke every version from it in ONE atomic write
        (one REVOKE per version, on every key it touched), then report the impact with each
        consumer's answer then and now. The fold recomputes the affected keys: supersessions
        whose every replacement came from the source stop closing what they closed, conflicts
        it was part of lose it. Equal to revoking each version by hand (a property test)."""
        source_id = _need_source(source_id)
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("reason", "must be a non-empty string", "say why it was wrong")
        check_text(reason, "reason")
        recorded = self._recorded(recorded_at)
        before = self.impact(source_id)
        if not before.versions:
            raise LifecycleError(f"source_id: no version came from source {source_id!r}")
        if len(before.revoked) == len(before.versions):
            raise LifecycleError(f"source_id: every version from {source_id!r} is already revoked")

        def build(p: Partition) -> list[Event]:
            pending: list[Event] = []
            for key in before.keys:
                state = p.state(key)
                assert state is not None
                for vid in sorted(state.versions):
                    version = state.versions[vid]
                    if version.source_id != source_id or state.is_revoked(vid):
                        continue
                    if recorded < version.recorded_at:
                        raise InvalidTime(
                            "recorded_at",
                            f"{format_instant(recorded)} precedes the recording time "
                            f"{format_instant(version.recorded_at)} of {vid}",
                            "a revocation cannot be known before the version it revokes",
                        )
                    pending.append(
                        p.new(
                            EventKind.REVOKE,
                            key,
                            recorded,
                            (vid,),
                            {"version": vid, "reason": reason, "source": source_id},
                            pending=pending,
                        )
                    )
            return pending

        self._write(before.keys, build)
        return Impact(
            source_id,
            before.versions,
            before.revoked,
            before.keys,
            before.dependents,
            tuple(ConsumerImpact(c.read, self._answer_now(c.read)) for c in before.consumers),
        )


def _need_source(source_id: object) -> str:
    if not isinstance(source_id, str) or not source_id.strip():
        raise InvalidInput("source_id", f"must be a non-empty string, got {shown(source_id)}")
    check_text(source_id, "source_id")
    return source_id
