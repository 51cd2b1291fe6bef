"""The vocabulary every planner shares: requests as values (intervals, versions) and the
events an assertion, a lost contradiction or a split piece adds to a plan.

A planner is a pure function from a write's partition (the keys' state as its transaction
read them, toki/partition.py) and a request to the events to append; it reads no store and no
clock (the shell, toki/memory.py, fixes every instant before it plans). Events a plan builds
are numbered after the ones already in it (`pending`), so one plan is one atomic append.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from toki.canonical import check_json, check_text
from toki.errors import InvalidInput, LifecycleError
from toki.log import Event, EventKind
from toki.model import Claim, FactKey, FactVersion, Lifecycle, need_key, need_source_hash
from toki.model import source_hash_of as _source_hash_of
from toki.partition import Partition
from toki.replay import KeyState
from toki.time import BoundSource, Interval, TimeLike, parse_instant

__all__ = [
    "LOG_KEY",
    "POLICY_SUBJECT",
    "UNKNOWN",
    "VersionRef",
    "assert_events",
    "check_standing",
    "claim_version",
    "interval",
    "leave_groups",
    "new_version",
    "piece",
    "version_id",
]

POLICY_SUBJECT = "__toki_policy__"
"""Reserved subject under which RULE policies are logged (one key per tenant and fact_key)."""

LOG_KEY = FactKey("__toki__", "__toki_log__", "chain")
"""Reserved key under which events about the log itself (CHAIN) are logged."""

UNKNOWN = "unknown"
"""Pass as valid_from / valid_to when the source gives no bound and none may be assumed."""

VersionRef = FactVersion | str


def version_id(ref: VersionRef, field: str = "version") -> str:
    vid = ref.id if isinstance(ref, FactVersion) else ref
    if not isinstance(vid, str):
        raise InvalidInput(field, f"expected a FactVersion or version id, got {vid!r}")
    return vid


def interval(
    valid_from: TimeLike | None,
    valid_to: TimeLike | None,
    recorded: datetime,
    from_source: BoundSource | None = None,
    to_source: BoundSource | None = None,
) -> Interval:
    """A claim's valid interval: a missing start is the recording time, marked ASSUMED;
    UNKNOWN (or a missing end) is an unknown bound; a given bound is EVIDENCE."""
    if valid_from is None:
        start, s_src = recorded, from_source or BoundSource.ASSUMED
    elif isinstance(valid_from, str) and valid_from.strip().lower() == UNKNOWN:
        start, s_src = None, BoundSource.UNKNOWN
    else:
        start, s_src = (
            parse_instant(valid_from, "valid_from"),
            from_source or BoundSource.EVIDENCE,
        )
    if valid_to is None or (isinstance(valid_to, str) and valid_to.strip().lower() == UNKNOWN):
        end, e_src = None, BoundSource.UNKNOWN
    else:
        end, e_src = parse_instant(valid_to, "valid_to"), to_source or BoundSource.EVIDENCE
    return Interval(start, end, s_src, e_src)


def new_version(
    key: FactKey,
    value: Any,
    valid: Interval,
    recorded: datetime,
    source_id: str,
    source_hash: str | None,
    supersedes: str | None = None,
    weight: float = 1.0,
) -> FactVersion:
    """A checked FactVersion (its id is the hash of its payload)."""
    need_key(key)
    if not isinstance(source_id, str) or not source_id.strip():
        raise InvalidInput("source_id", "must be a non-empty string", "name the message/doc")
    check_text(source_id, "source_id")
    check_json(value)
    return FactVersion(
        key=key,
        value=value,
        valid=valid,
        recorded_at=recorded,
        source_id=source_id,
        source_hash=need_source_hash(source_hash) or _source_hash_of(source_id, value),
        supersedes=supersedes,
        weight=weight,
    )


def claim_version(claim: Claim, recorded: datetime) -> FactVersion:
    """The version a claim becomes when recorded at `recorded` (the write path's input)."""
    valid = interval(claim.valid_from, claim.valid_to, recorded)
    return new_version(
        claim.key,
        claim.value,
        valid,
        recorded,
        claim.source_id,
        claim.source_hash,
        None,
        claim.weight,
    )


def piece(original: FactVersion, valid: Interval, recorded: datetime) -> FactVersion:
    """The part of `original` that keeps holding over `valid` (a new version superseding it)."""
    return FactVersion(
        key=original.key,
        value=original.value,
        valid=valid,
        recorded_at=recorded,
        source_id=original.source_id,
        source_hash=original.source_hash,
        supersedes=original.id,
        weight=original.weight,
    )


def assert_events(
    p: Partition,
    version: FactVersion,
    pending: list[Event],
    *,
    proposed: bool = False,
    exclude: frozenset[str] = frozenset(),
    claim: bool = False,
) -> None:
    """ASSERT the version and, if it contradicts standing versions, one CONFLICT_OPEN
    joining their conflict groups (toki.conflicts).

    claim marks versions that entered through `write` (re-adjudication re-runs those)."""
    body: dict[str, Any] = {"version": version.payload(), "proposed": proposed}
    if claim:
        body["claim"] = True
    pending.append(
        p.new(
            EventKind.ASSERT,
            version.key,
            version.recorded_at,
            (version.id,),
            body,
            version,
            pending=pending,
        )
    )
    state = p.state(version.key)
    if state is None:
        return
    joins: set[str] = set()
    others: list[str] = []
    known = version.recorded_at
    value = version.value_json
    versions, groups, of = state.versions, state.groups.groups, state.groups.of
    for other_id in state.overlapping(version.valid):  # this loop runs per standing version
        other = versions[other_id]
        if other.value_json == value or other_id in exclude or other_id == version.supersedes:
            continue
        in_groups = [g for g in of.get(other_id, ()) if other_id not in groups[g].left]
        if in_groups:
            joins.update(in_groups)
        else:
            others.append(other_id)
        if other.recorded_at > known:
            known = other.recorded_at
    if joins or others:  # one event however many versions it contradicts
        pending.append(
            p.new(
                EventKind.CONFLICT_OPEN,
                version.key,
                known,
                (version.id, *sorted(others)),
                {"version": version.id, "joins": sorted(joins), "with": sorted(others)},
                pending=pending,
            )
        )


def leave_groups(
    p: Partition,
    state: KeyState | None,
    loser: str,
    winners: Sequence[str],
    how: str,
    recorded: datetime,
    pending: list[Event],
    **extra: str,
) -> None:
    """`loser` lost to one of `winners`: it leaves each conflict group it shares with one
    (once per plan; toki.conflicts)."""
    if state is None or not state.groups:
        return
    done = {
        (e.body["group"], v)
        for e in pending
        if e.kind is EventKind.CONFLICT_RESOLVE and "group" in e.body
        for v in e.body["versions"]
    }
    for gid in state.groups.shared(loser, winners):
        if (gid, loser) in done:
            continue
        group = state.groups.groups[gid]
        winner = next(w for w in winners if group.is_open_member(w, None))
        pending.append(
            p.new(
                EventKind.CONFLICT_RESOLVE,
                state.key,
                recorded,
                (loser, winner),
                {"group": gid, "versions": [loser], "winner": winner, "how": how, **extra},
                pending=pending,
            )
        )


def check_standing(state: KeyState, version: FactVersion, what: str) -> None:
    """Refuse to act on a revoked or still-proposed version."""
    life = state.lifecycle(version.id)
    if life is Lifecycle.REVOKED:
        raise LifecycleError(
            f"version: {version.id} was revoked; cannot {what} it (assert a new fact instead)"
        )
    if life is Lifecycle.PROPOSED:
        raise LifecycleError(
            f"version: {version.id} is PROPOSED; confirm or reject it before you {what} it"
        )
