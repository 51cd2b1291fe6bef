"""A scratch state: plans applied to a snapshot in memory, in order, with no store, no
clock and no lock. Re-adjudication and shadow projections build their states with it from the
core's planners, the same functions the shell (toki/memory.py) runs inside a transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from toki.algebra.base import Operator
from toki.algebra.lww import LWW
from toki.algebra.provenance import Decision
from toki.algebra.rule import Policy
from toki.canonical import shown
from toki.db import Db
from toki.errors import InvalidInput, UnknownProposal, UnknownVersion
from toki.isolation import Isolation
from toki.judge import Judge, JudgeLog
from toki.log import Event, EventKind
from toki.model import Claim, FactKey
from toki.partition import Partition
from toki.plan import claim_version
from toki.replay import Snapshot
from toki.time import parse_instant
from toki.write import WriteRequest, plan_policy, plan_write, write_keys

__all__ = ["Scratch", "rejudge"]


class Scratch:
    """A snapshot and the events applied to it: `run` plans from a partition of it (as the
    one-writer shell does, without cloning a store's read) and folds what the plan made."""

    __slots__ = ("events", "snapshot")

    def __init__(self) -> None:
        self.snapshot = Snapshot()
        self.events: list[Event] = []

    def db(self, now: datetime) -> Db:
        """The state the plans made, as a value (`now`: the valid time reads default to)."""
        return Db(self.snapshot, self.snapshot, self.snapshot.watermark, None, now)

    def run(self, keys: Iterable[FactKey], build: Callable[[Partition], list[Event]]) -> None:
        part = Partition.of_snapshot(keys, self.snapshot, self.snapshot.watermark)
        events = build(part)
        for event in events:
            self.snapshot.apply(event)
        self.events.extend(events)

    def claim(
        self, claim: Claim, operator: Operator, *, judge: Judge | None = None
    ) -> Decision:
        """`Memory.write` on an in-memory store: a claim carrying its recording time, at the
        one-writer stores' level (SERIALIZABLE)."""
        if claim.recorded_at is None:
            raise InvalidInput("recorded_at", "a scratch state has no clock", "give the claim one")
        recorded = parse_instant(claim.recorded_at, "recorded_at")
        version = claim_version(claim, recorded)
        return self.write(WriteRequest(version, operator, Isolation.SERIALIZABLE, judge=judge))

    def write(self, request: WriteRequest) -> Decision:
        made: list[Decision] = []

        def build(p: Partition) -> list[Event]:
            decision, events = plan_write(p, request)
            made.append(decision)
            return events

        self.run(write_keys(request.version.key, request.operator), build)
        return made[0]

    def set_policy(self, key: FactKey, policy: Policy, recorded: datetime) -> None:
        self.run([key], lambda p: plan_policy(p, key, policy, recorded))

    def key_of(self, vid: str, field: str = "version") -> FactKey:
        key = self.snapshot.version_key.get(vid)
        if key is None:
            raise UnknownVersion(vid, field)
        return key

    def hold_key(self, token: str) -> FactKey:
        key = self.snapshot.holds.get(token)
        if key is None:
            raise UnknownProposal(
                f"token: no held decision has token {shown(token)} (use Decision.token from write)"
            )
        return key


def rejudge(
    events: Iterable[Event],
    operators: Mapping[str, Operator],
    operator: Operator | None,
    *,
    judge: Judge | None,
    use_keyed_log: bool,
    level: Isolation,
) -> Scratch:
    """Re-run every logged claim (and POLICY) through the write path on a fresh state: the
    recovery of systems that log inputs, not decisions. With the keyed log each judge
    question is answered from the DECISION events; without it the judge is asked again."""
    ordered = sorted(events, key=lambda e: e.seq)
    keyed = JudgeLog.from_events(ordered) if use_keyed_log else None
    scratch = Scratch()
    for event in ordered:
        if event.kind is EventKind.POLICY:
            policy = Policy.from_json(event.body["policy"])
            scratch.set_policy(event.key, policy, event.recorded_at)
        elif event.kind is EventKind.ASSERT and event.body.get("claim"):
            version = event.version
            assert version is not None
            op = operator if operator is not None else operators.get(version.key.fact_key, LWW)
            scratch.write(
                WriteRequest(
                    version,
                    op,
                    level,
                    judge=judge,
                    log_judge=use_keyed_log,
                    allow_weaker_isolation=True,
                    judge_log=keyed,
                )
            )
    return scratch
