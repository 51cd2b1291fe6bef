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
from toki.db import Db, resolution_json, resolve_in, same_answer
from toki.errors import IntegrityError, InvalidInput
from toki.log import Event
from toki.model import FactKey, Resolution, Scope
from toki.replay import Snapshot, replay
from toki.shadow import Config, fold_under
from toki.time import format_instant, parse_instant

__all__ = [
    "ConsumerImpact",
    "Consumption",
    "Impact",
    "answer_now",
    "impact",
    "need_consumer",
    "need_source",
    "reproduce",
    "resolution_json",
    "same_answer",
    "verify_reads",
]


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


# -- impact: a function of the state -------------------------------------------------------


def impact(db: Db, source_id: str, reads: Sequence[Consumption]) -> Impact:
    """What `source_id` touched in `db`: its versions (split pieces carry its source id),
    their keys, the versions they superseded, and the named `reads` that consumed any of
    them, each with its answer then and the same question's answer in `db`."""
    source_id = need_source(source_id)
    mine: list[str] = []
    revoked: list[str] = []
    keys: list[FactKey] = []
    dependents: set[str] = set()
    snapshot = db.state
    for key in sorted(snapshot.keys):
        state = snapshot.keys[key]
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
    versions = set(mine)
    return Impact(
        source_id,
        tuple(sorted(mine)),
        tuple(sorted(revoked)),
        tuple(keys),
        tuple(sorted(dependents)),
        tuple(
            ConsumerImpact(record, answer_now(db, record))
            for record in reads
            if versions.intersection(record.answer.version_ids)
        ),
    )


def answer_now(db: Db, record: Consumption) -> Resolution:
    """The record's question (key, valid time, scope chain) asked of all `db` knows."""
    return resolve_in(db.view, _chain(record), record.valid_at, None)


def reproduce(record: Consumption, prefix: Snapshot) -> Resolution:
    """The answer the fold of the log prefix a record names gives to its question."""
    return resolve_in(prefix, _chain(record), record.valid_at, record.system_as_of)


def same_read(a: Resolution, b: Resolution) -> bool:
    """The same answer with the same versions behind it. The order of `version_ids` is
    presentation: versions that start together were listed by id before the current and the
    as-of paths agreed on (start, end, id), so a record written before that still verifies."""
    return (a.kind, a.value, sorted(a.version_ids), a.conflicts) == (
        b.kind,
        b.value,
        sorted(b.version_ids),
        b.conflicts,
    )


def verify_reads(records: Sequence[Consumption], log: Sequence[Event], where: str) -> None:
    """Re-derive every record's answer from the log prefix it names (events with seq <=
    log_seq, under the configuration then in force) after checking that prefix's chain head;
    a record that no longer follows from its log raises IntegrityError."""
    cache: dict[tuple[int, str | None], Snapshot] = {}
    for record in records:
        slot = (record.log_seq, record.config_id)
        prefix_state = cache.get(slot)
        if prefix_state is None:
            prefix_state = cache[slot] = _prefix_state(record, log, where)
        again = reproduce(record, prefix_state)
        if not same_read(again, record.answer):
            raise IntegrityError(
                f"{where}: consumption record {record.record_id} of {record.consumer!r} says "
                f"{resolution_json(record.answer)} but the log up to seq {record.log_seq} "
                f"gives {resolution_json(again)}"
            )


def _prefix_state(record: Consumption, log: Sequence[Event], where: str) -> Snapshot:
    prefix = [e for e in log if e.seq <= record.log_seq]
    if record.log_head:
        check = ChainCheck(where)
        for event in prefix:
            check.add(event)
        if check.head != record.log_head:
            raise IntegrityError(
                f"{where}: the fact log up to seq {record.log_seq} is not the one consumption "
                f"record {record.record_id} read (chain head differs); run `toki verify URL "
                "--digest D`"
            )
    if record.config is None:
        return replay(prefix)
    return fold_under(prefix, Config.from_json(record.config))[0]


def _chain(record: Consumption) -> list[FactKey]:
    return [record.key.in_scope(Scope.from_resource(s)) for s in record.scope_chain or ()]


def need_source(source_id: object) -> str:
    if not isinstance(source_id, str) or not source_id.strip():
        raise InvalidInput("source_id", f"must be a non-empty string, got {shown(source_id)}")
    check_text(source_id, "source_id")
    return source_id
