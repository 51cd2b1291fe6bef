"""Conflict groups: one event per contradicting assertion, not one per contradicted version.

A conflict group on a key is a set of versions asserted while contradicting one another
(different values over overlapping valid time). An assertion that contradicts standing
versions writes ONE `CONFLICT_OPEN` event

    {"version": V, "joins": [open groups of the contradicted versions], "with": [the
     contradicted versions that are in no group]}

V joins every listed group; a non-empty "with" starts a new group named V holding V and
them. So events per assertion are O(1) and the named ids are amortised O(1): a version is
named in "with" only while it is in no group. A version leaves a group by a
`CONFLICT_RESOLVE` {"group": G, "versions": [...], "winner": W, "how": ...} (it lost a
decision to W, a member of G) or by being revoked; leaving is final.

As of system time S, a member is *open* if it joined by S and neither left nor was revoked
by S (the earliest join and leave count, so delivery order does not matter), and a group is
*open* while its open members hold at least two different values. `open_conflicts` names
each open group as the sorted tuple of its open members; `resolve_at` names, per group, the
open members that hold at the queried point (a pair when two versions contest it).

Stores written before groups hold per-pair events ({"left", "right"}): those keep folding as
pairs in `KeyState` and are listed beside the groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from toki.overlay import DictOverlay

__all__ = ["ConflictGroups", "Group"]

IsRevoked = Callable[[str, "datetime | None"], bool]
ValueOf = Callable[[str], str]


def _known(at: datetime, as_of: datetime | None) -> bool:
    return as_of is None or at <= as_of


@dataclass(slots=True)
class Group:
    """Members with the system time they joined and, once they did, left."""

    joined: dict[str, datetime] = field(default_factory=dict)
    left: dict[str, datetime] = field(default_factory=dict)

    def is_open_member(self, vid: str, as_of: datetime | None) -> bool:
        joined = self.joined.get(vid)
        if joined is None or not _known(joined, as_of):
            return False
        left = self.left.get(vid)
        return left is None or not _known(left, as_of)


class ConflictGroups:
    """The groups of one key, and the groups each version joined (for point queries).

    `clone` is copy-on-write: a clone shares its groups until it changes one, so that a
    write on a key with n versions in conflict does not copy all n before it commits."""

    __slots__ = ("_owned", "groups", "of")

    def __init__(self) -> None:
        self.groups: MutableMapping[str, Group] = {}
        self.of: MutableMapping[str, tuple[str, ...]] = {}
        self._owned: set[str] | None = None  # None: every group is this object's own

    def __bool__(self) -> bool:
        return bool(self.groups)

    def clone(self) -> ConflictGroups:
        """An independent copy (a write folds into a clone of the key's state); from now on
        both sides copy a shared group before changing it."""
        copy = ConflictGroups()
        copy.groups = dict(self.groups)
        copy.of = dict(self.of)  # values are tuples: never changed in place
        copy._owned = set()
        self._owned = set()
        return copy

    def fork(self) -> ConflictGroups:
        """A write's scratch copy in O(1) (toki.overlay): it reads through to these groups,
        which must not change while it is used, and copies a group before changing it."""
        copy = ConflictGroups()
        copy.groups = DictOverlay(self.groups)
        copy.of = DictOverlay(self.of)
        copy._owned = set()
        return copy

    # -- folding ---------------------------------------------------------------------------

    def apply_open(self, body: Mapping[str, Any], at: datetime) -> None:
        vid = str(body["version"])
        for gid in body.get("joins", ()):
            self._join(str(gid), vid, at)
        others = body.get("with", ())
        if others:
            self._join(vid, vid, at)
            for other in others:
                self._join(vid, str(other), at)

    def apply_resolve(self, body: Mapping[str, Any], at: datetime) -> None:
        group = self._group(str(body["group"]))
        for vid in body["versions"]:
            left = group.left.get(vid)
            if left is None or at < left:
                group.left[vid] = at

    def _group(self, gid: str) -> Group:
        """The group to change: created, or copied first if it is shared with a clone."""
        group = self.groups.get(gid)
        owned = self._owned
        if group is None:
            group = self.groups[gid] = Group()
        elif owned is not None and gid not in owned:
            group = self.groups[gid] = Group(dict(group.joined), dict(group.left))
        if owned is not None:
            owned.add(gid)
        return group

    def _join(self, gid: str, vid: str, at: datetime) -> None:
        group = self._group(gid)
        joined = group.joined.get(vid)
        if joined is None:
            group.joined[vid] = at
            self.of[vid] = (*self.of.get(vid, ()), gid)
        elif at < joined:
            group.joined[vid] = at

    # -- questions ---------------------------------------------------------------------------

    def current_groups(self, vid: str) -> list[str]:
        """Groups `vid` is an open member of now (a new contradiction joins these)."""
        gids = self.of.get(vid)
        if gids is None:
            return []
        groups = self.groups
        return [g for g in gids if vid not in groups[g].left]

    def shared(self, vid: str, others: Iterable[str]) -> list[str]:
        """Groups `vid` is an open member of now that also hold one of `others` now."""
        wanted = set(others)
        return [
            gid
            for gid in self.current_groups(vid)
            if any(self.groups[gid].is_open_member(o, None) for o in wanted)
        ]

    def open_groups(
        self, as_of: datetime | None, is_revoked: IsRevoked, value_of: ValueOf
    ) -> list[tuple[str, ...]]:
        """Every group open as of `as_of`, as the sorted tuple of its open members."""
        out = []
        for group in self.groups.values():
            left = group.left
            members = [
                v
                for v, joined in group.joined.items()
                if (as_of is None or joined <= as_of)
                and (v not in left or (as_of is not None and left[v] > as_of))
                and not is_revoked(v, as_of)
            ]
            if len(members) > 1 and len({value_of(v) for v in members}) > 1:
                out.append(tuple(sorted(members)))
        return out

    def open_now(self, standing: AbstractSet[str], value_of: ValueOf) -> list[tuple[str, ...]]:
        """`open_groups(None, ...)` from the versions standing now (neither revoked nor
        closed entirely): set operations instead of a test per member."""
        out = []
        for group in self.groups.values():
            members = (group.joined.keys() - group.left.keys()) & standing
            if len(members) < 2:
                continue
            ordered = sorted(members)
            first = value_of(ordered[0])
            if any(value_of(v) != first for v in ordered):
                out.append(tuple(ordered))
        return out

    def among(
        self, ids: Iterable[str], as_of: datetime | None, value_of: ValueOf
    ) -> list[tuple[str, ...]]:
        """The open groups restricted to `ids` (eligible, so unrevoked, versions), where
        they still disagree: O(sum of groups per id) plus sorting."""
        buckets: dict[str, list[str]] = {}
        groups, of = self.groups, self.of
        for vid in ids:
            for gid in of.get(vid, ()):
                group = groups[gid]  # is_open_member, inlined: this loop runs per eligible id
                if as_of is not None and group.joined[vid] > as_of:
                    continue
                left = group.left.get(vid)
                if left is not None and (as_of is None or left <= as_of):
                    continue
                bucket = buckets.get(gid)
                if bucket is None:
                    buckets[gid] = [vid]
                else:
                    bucket.append(vid)
        return [
            tuple(sorted(members))
            for members in buckets.values()
            if len(members) > 1 and len({value_of(v) for v in members}) > 1
        ]
