"""The lifecycle operations as pure planners: assert, supersede, revoke, insert a segment,
confirm or reject a held claim, revoke a whole source, change the configuration in force.

Each is a function of the partition its write read and a request whose instants the shell has
fixed; it returns the events to append (an empty plan: a duplicate delivery, a no-op) and
raises toki's errors for a request the state refuses. None reads a store or a clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from toki.algebra.provenance import Action, Decision, Provenance
from toki.canonical import shown
from toki.errors import InvalidInterval, InvalidTime, LifecycleError, UnknownProposal
from toki.log import CONFIG_KEY, Event, EventKind
from toki.model import FactKey, FactVersion, Lifecycle
from toki.partition import Partition
from toki.plan import (
    VersionRef,
    assert_events,
    check_standing,
    leave_groups,
    new_version,
    piece,
)
from toki.replay import KeyState
from toki.time import BoundSource, Interval, format_instant
from toki.write import close_losers

__all__ = [
    "plan_assert",
    "plan_config",
    "plan_revoke",
    "plan_revoke_source",
    "plan_segment",
    "plan_settle",
    "plan_supersede",
]


def plan_assert(p: Partition, version: FactVersion) -> list[Event]:
    """ASSERT a version (and the CONFLICT_OPEN it causes); a known version: nothing."""
    if p.version(version.id) is not None:
        return []  # duplicate delivery: no-op
    pending: list[Event] = []
    assert_events(p, version, pending)
    return pending


def plan_supersede(
    p: Partition,
    old: VersionRef,
    value: Any,
    valid: Interval,
    recorded: datetime,
    source_id: str,
    source_hash: str | None,
    weight: float,
) -> tuple[FactVersion, list[Event]]:
    """The world changed: the new version holds from valid.start, closing `old` there."""
    prior = p.resolve(old, "old")
    state = p.state(prior.key)
    assert state is not None
    check_standing(state, prior, "supersede")
    if recorded < prior.recorded_at:
        raise InvalidTime(
            "recorded_at",
            f"{format_instant(recorded)} precedes the superseded version's recording "
            f"time {format_instant(prior.recorded_at)}",
            "a supersession cannot be known before what it supersedes (clock rollback?)",
        )
    p_start = prior.valid.start
    if valid.start is not None and p_start is not None and valid.start < p_start:
        raise InvalidInterval(
            "valid_from",
            f"{format_instant(valid.start)} precedes the start "
            f"{format_instant(p_start)} of the version it supersedes",
            "use revoke (it never held) or insert_segment (a past piece) instead",
        )
    version = new_version(
        prior.key, value, valid, recorded, source_id, source_hash, prior.id, weight
    )
    if p.version(version.id) is not None:
        return version, []  # duplicate delivery: no-op
    pending: list[Event] = []
    assert_events(p, version, pending)
    closes = None if valid.start is None else format_instant(valid.start)
    pending.append(
        p.new(
            EventKind.SUPERSEDE,
            prior.key,
            recorded,
            (prior.id, version.id),
            {"old": prior.id, "new": [version.id], "closes_at": closes},
            pending=pending,
        )
    )
    return version, pending


def plan_revoke(p: Partition, ref: VersionRef, recorded: datetime, reason: str) -> list[Event]:
    """We were wrong: REVOKE the version and the split pieces that repeat its claim."""
    target = p.resolve(ref)
    state = p.state(target.key)
    assert state is not None
    if state.is_revoked(target.id):
        raise LifecycleError(f"version: {target.id} is already revoked")
    if recorded < target.recorded_at:
        raise InvalidTime(
            "recorded_at",
            f"{format_instant(recorded)} precedes the version's recording time "
            f"{format_instant(target.recorded_at)}",
            "a revocation cannot be known before the version it revokes",
        )
    pending: list[Event] = []
    for vid in _derived_pieces(state, target):
        if not state.is_revoked(vid):
            pending.append(
                p.new(
                    EventKind.REVOKE,
                    target.key,
                    recorded,
                    (vid,),
                    {"version": vid, "reason": reason},
                    pending=pending,
                )
            )
    return pending


def plan_segment(p: Partition, middle: FactVersion) -> list[Event]:
    """A past piece: each standing version `middle` cuts into is superseded by a left piece,
    `middle` and a right piece (all new versions)."""
    if p.version(middle.id) is not None:
        return []
    key, valid, recorded = middle.key, middle.valid, middle.recorded_at
    state = p.state(key)
    pending: list[Event] = []
    splits: list[tuple[FactVersion, list[FactVersion]]] = []
    if state is not None:
        for other in list(state.versions.values()):
            life = state.lifecycle(other.id)
            if life not in (Lifecycle.ACTIVE, Lifecycle.SUPERSEDED):
                continue
            eff = state.effective(other.id)
            if eff is None or not eff.overlaps(valid) or other.value_json == middle.value_json:
                continue
            if recorded < other.recorded_at:
                raise InvalidTime(
                    "recorded_at",
                    f"{format_instant(recorded)} precedes the recording of {other.id}",
                    "a segment cannot be known before the version it splits",
                )
            pieces = []
            assert valid.start is not None and valid.end is not None
            if eff.start is None or eff.start < valid.start:
                left = Interval(eff.start, valid.start, eff.start_source, BoundSource.EVIDENCE)
                pieces.append(piece(other, left, recorded))
            if eff.end is None or eff.end > valid.end:
                right = Interval(valid.end, eff.end, BoundSource.EVIDENCE, eff.end_source)
                pieces.append(piece(other, right, recorded))
            splits.append((other, pieces))
    split_ids = frozenset(o.id for o, _ in splits)
    assert_events(p, middle, pending, exclude=split_ids)
    for other, pieces in splits:
        for part in pieces:
            if p.version(part.id) is None:
                assert_events(p, part, pending, exclude=split_ids | {middle.id})
        new_ids = [part.id for part in pieces] + [middle.id]
        pending.append(
            p.new(
                EventKind.SUPERSEDE,
                key,
                recorded,
                (other.id, *new_ids),
                {"old": other.id, "new": sorted(new_ids), "closes_at": None},
                pending=pending,
            )
        )
    return pending


def _hold(p: Partition, key: FactKey, token: str) -> tuple[KeyState, dict[str, Any]]:
    state = p.state(key)
    if state is None:
        raise UnknownProposal(
            f"token: no held decision has token {shown(token)} (use Decision.token from write)"
        )
    for _, body in state.decisions:
        if body.get("token") == token and body.get("action") == "HOLD":
            return state, dict(body)
    raise UnknownProposal(f"token: no held decision has token {shown(token)}")  # pragma: no cover


def plan_settle(
    p: Partition, key: FactKey, token: str, accept: bool, recorded: datetime
) -> tuple[bool, list[Event]]:
    """Confirm (accept) or reject the claim held under `token`; (False, []) when the token
    was settled already (a repeated confirmation is a no-op)."""
    state, body = _hold(p, key, token)
    prov = body["provenance"]
    inputs = list(prov["inputs"])
    claim_id = str(body["claim"])
    if token in state.settled:
        return False, []
    others = [v for v in inputs if v != claim_id and not state.is_revoked(v)]
    pending: list[Event] = []
    if accept:
        pending.append(
            p.new(
                EventKind.CONFIRM,
                state.key,
                recorded,
                (claim_id,),
                {"version": claim_id, "token": token},
            )
        )
        decision = Decision(
            Action.SUPERSEDE,
            claim_id,
            tuple(others),
            Provenance.from_json(prov),
            (claim_id, *others),
        )
        close_losers(p, state.key, decision, recorded, pending, reason="AWAIT")
    else:
        pending.append(
            p.new(
                EventKind.REVOKE,
                state.key,
                recorded,
                (claim_id,),
                {"version": claim_id, "reason": "rejected", "token": token},
            )
        )
    for other in others:
        pair = tuple(sorted((claim_id, other)))
        if pair in state.conflicts_opened and pair not in state.conflicts_resolved:
            pending.append(
                p.new(
                    EventKind.CONFLICT_RESOLVE,
                    state.key,
                    recorded,
                    pair,
                    {
                        "left": pair[0],
                        "right": pair[1],
                        "winner": claim_id if accept else other,
                        "how": "AWAIT",
                        "token": token,
                    },
                    pending=pending,
                )
            )
    losers, winners = (others, [claim_id]) if accept else ([claim_id], others)
    for loser in losers:
        leave_groups(p, state, loser, winners, "AWAIT", recorded, pending, token=token)
    return True, pending


def plan_revoke_source(
    p: Partition, keys: Iterable[FactKey], source_id: str, reason: str, recorded: datetime
) -> list[Event]:
    """One REVOKE per standing version from `source_id` on `keys`, in one plan."""
    pending: list[Event] = []
    for key in keys:
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


def plan_config(p: Partition, body: Mapping[str, Any], recorded: datetime) -> list[Event]:
    """A CONFIG event (promote or rollback), in system-time order after the last one."""
    state = p.state(CONFIG_KEY)
    if state is not None and state.configs and recorded < state.configs[-1][0]:
        raise InvalidTime(
            "recorded_at",
            f"{format_instant(recorded)} precedes the last configuration change "
            f"({format_instant(state.configs[-1][0])})",
            "configuration changes are recorded in system-time order",
        )
    return [p.new(EventKind.CONFIG, CONFIG_KEY, recorded, (), body)]


def _derived_pieces(state: KeyState, root: FactVersion) -> list[str]:
    """`root` and, transitively, the split pieces that repeat its claim."""
    out = [root.id]
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for child in state.versions.values():
            if (
                child.supersedes == parent.id
                and child.value_json == parent.value_json
                and child.source_id == parent.source_id
                and child.id not in out
            ):
                out.append(child.id)
                frontier.append(child)
    return out
