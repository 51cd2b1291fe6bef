"""The state as a value: `Db`, an immutable snapshot of the replayed log at a system time.

Every read is a function of it (resolve_at, current, history, lifecycle, audit,
open_conflicts, version, keys, state_hash; toki/consumption.py's `impact`): no I/O, no store,
no clock, no lock. `Memory.db()` hands one out; the Memory's own read methods answer through
one. A Db stays what it was when taken: the Memory folds later writes into a copy of any state
a Db still holds (copy on write), so a Db may be kept, compared and read from any thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from toki.algebra.provenance import AuditRow, Provenance
from toki.canonical import canonical_json
from toki.errors import InvalidInput, UnknownVersion
from toki.model import (
    FactKey,
    FactVersion,
    HistoryEntry,
    Lifecycle,
    Resolution,
    Scope,
    need_key,
)
from toki.plan import VersionRef, version_id
from toki.replay import Snapshot
from toki.time import TimeLike, parse_instant

__all__ = ["Db", "resolution_json", "resolve_in", "same_answer", "scope_keys"]


@dataclass(frozen=True, slots=True)
class Db:
    """The log as folded through seq `basis`, read as known at system time `as_of` (None:
    everything folded). `state` is the fold of the log as decided; `view` the state reads
    are served from: `state` itself, or under a promoted configuration its refold
    (toki/shadow.py). `now` is the valid time a read without one asks about (the shell's
clock when the Db was taken; None: every read must name its valid time)."""

    state: Snapshot
    view: Snapshot
    basis: int
    as_of: datetime | None
    now: datetime | None = None

    def resolve_at(
        self,
        key: FactKey,
        valid_at: TimeLike | None = None,
        *,
        scope_chain: Sequence[Scope | str] | None = None,
    ) -> Resolution:
        """What held at `valid_at` (default `now`); along a scope chain the first answer that
        is not "unknown" wins (a conflict is an answer: it is never skipped over)."""
        need_key(key)
        if valid_at is not None:
            at = parse_instant(valid_at, "valid_at")
        elif self.now is not None:
            at = self.now
        else:
            raise InvalidInput("valid_at", "this Db has no `now`", "pass valid_at")
        return resolve_in(self.view, scope_keys(key, scope_chain), at, self.as_of)

    def current(
        self, key: FactKey, *, scope_chain: Sequence[Scope | str] | None = None
    ) -> Resolution:
        """The answer at `now`."""
        return self.resolve_at(key, None, scope_chain=scope_chain)

    def history(self, key: FactKey) -> list[HistoryEntry]:
        """Every version known: lifecycle, effective interval, successor."""
        state = self.state.state(need_key(key))
        return [] if state is None else state.history(self.as_of)

    def render_history(self, key: FactKey) -> str:
        return "\n".join(entry.render() for entry in self.history(key))

    def version(self, ref: VersionRef, field: str = "version") -> FactVersion:
        vid = version_id(ref, field)
        version = self.state.version(vid)
        if version is None:
            raise UnknownVersion(vid, field)
        return version

    def lifecycle(self, ref: VersionRef) -> Lifecycle:
        target = self.version(ref)
        state = self.state.state(target.key)
        assert state is not None
        return state.lifecycle(target.id, self.as_of)

    def open_conflicts(self, key: FactKey) -> list[tuple[str, ...]]:
        state = self.state.state(need_key(key))
        return [] if state is None else state.open_conflicts(self.as_of)

    def audit(self, key: FactKey) -> list[AuditRow]:
        """The dual-row view's audit rows: every version that lost a decision, with the
        decision's provenance. Nothing a decision touched is ever overwritten or deleted."""
        state = self.state.state(need_key(key))
        if state is None:
            return []
        rows = []
        for decided, body in state.decisions:
            if body.get("decision") != "resolution":
                continue
            if self.as_of is not None and decided > self.as_of:
                continue
            prov = Provenance.from_json(dict(body["provenance"]))
            for loser in prov.losers:
                rows.append(AuditRow("audit", state.versions[loser], prov, prov.operator, decided))
        return rows

    def keys(self) -> list[FactKey]:
        return sorted(self.state.keys)

    def state_hash(self) -> str:
        """The hash of the belief state reads are served from."""
        return self.view.state_hash()


def resolve_in(
    snapshot: Snapshot, keys: Sequence[FactKey], at: datetime, as_of: datetime | None
) -> Resolution:
    """The first answer along the scope chain that is not "unknown" (resolve_at's rule)."""
    for scoped in keys:
        state = snapshot.state(scoped)
        if state is None:
            continue
        result = state.resolve(at, as_of)
        if result.kind != "unknown":
            return result
    return Resolution("unknown")


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


def scope_keys(key: FactKey, chain: Sequence[Scope | str] | None) -> list[FactKey]:
    """The keys a read tries, most specific first: the key's scope then global by default."""
    if chain is None:
        scopes = [key.scope] if key.scope_kind == "global" else [key.scope, Scope()]
    else:
        if isinstance(chain, str) or not isinstance(chain, Sequence):
            raise InvalidInput(
                "scope_chain",
                f"expected a list of scopes, got {type(chain).__name__}",
                "e.g. ['task:42', 'project:web', None]",
            )
        scopes = [s if isinstance(s, Scope) else Scope.from_resource(s) for s in chain]
        if not scopes:
            raise InvalidInput("scope_chain", "is empty", "omit it or name at least one scope")
    return [key.in_scope(s) for s in scopes]
