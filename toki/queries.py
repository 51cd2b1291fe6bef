"""Queries: what held when, as known when (resolve_at, current, history, audit, …).

Reads never write the event log; they answer from the in-memory snapshot (the replay of the
log, or under a promoted configuration its fold, toki/shadow.py). A read that names a consumer
appends one record to the consumption log (toki/consumption.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from toki.algebra.provenance import AuditRow, Provenance
from toki.chain import ChainCheck, Digest, VerifyReport
from toki.errors import (
    InvalidInput,
)
from toki.log import Event
from toki.memory_base import MemoryBase, VersionRef
from toki.model import (
    FactKey,
    FactVersion,
    HistoryEntry,
    Lifecycle,
    Resolution,
    Scope,
    need_key,
)
from toki.projection import ReconcileReport, reconcile
from toki.replay import Snapshot, replay
from toki.store.audit import verify_store
from toki.time import TimeLike, parse_instant

__all__ = ["Queries"]


class Queries(MemoryBase):
    """The reading half of the `Memory` facade."""

    def audit(self, key: FactKey) -> list[AuditRow]:
        """The dual-row view's audit rows: every version that lost a decision, with the
        decision's provenance. Nothing a decision touched is ever overwritten or deleted."""
        state = self._state(need_key(key))
        if state is None:
            return []
        rows = []
        for decided, body in state.decisions:
            if body.get("decision") != "resolution":
                continue
            prov = Provenance.from_json(dict(body["provenance"]))
            for loser in prov.losers:
                rows.append(AuditRow("audit", state.versions[loser], prov, prov.operator, decided))
        return rows

    def resolve_at(
        self,
        key: FactKey,
        valid_at: TimeLike | None = None,
        system_as_of: TimeLike | None = None,
        *,
        scope_chain: Sequence[Scope | str] | None = None,
        consumer: str | None = None,
    ) -> Resolution:
        """What held at `valid_at` (default now), as known at `system_as_of` (default: all).

        With a scope chain, scopes are tried most specific first; the first answer that is
        not "unknown" wins (a conflict is an answer: it is never skipped over). With a
        consumer ("answer-17"), the read is recorded in the consumption log (docs/consumption.md);
        without one it costs nothing extra.
        """
        need_key(key)
        if consumer is not None:
            from toki.consumption import need_consumer

            need_consumer(consumer)
        at = self._now() if valid_at is None else parse_instant(valid_at, "valid_at")
        as_of = None if system_as_of is None else parse_instant(system_as_of, "system_as_of")
        keys = self._scope_keys(key, scope_chain)
        if consumer is None:
            return _resolve_in(self._view(as_of), keys, at, as_of)
        with self._writer:  # the answer and the log position it is recorded with agree
            result = _resolve_in(self._view(as_of), keys, at, as_of)
            self._record_read(consumer, key, at, as_of, keys, result)
        return result

    @staticmethod
    def _scope_keys(key: FactKey, chain: Sequence[Scope | str] | None) -> list[FactKey]:
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

    def current(
        self,
        key: FactKey,
        *,
        catch_up: bool = True,
        scope_chain: Sequence[Scope | str] | None = None,
        consumer: str | None = None,
    ) -> Resolution:
        """The answer now, as known now. If another writer moved the log past our watermark,
        catch up first, or with catch_up=False report kind "stale" rather than a wrong value
        (a stale answer is not recorded for a consumer: it consumed nothing)."""
        need_key(key)
        if self._store.last_seq() > self._log.last_seq:
            if not catch_up:
                return Resolution("stale")
            self.refresh()
        return self.resolve_at(key, None, None, scope_chain=scope_chain, consumer=consumer)

    def history(self, key: FactKey, system_as_of: TimeLike | None = None) -> list[HistoryEntry]:
        """Every version known at `system_as_of`: lifecycle, effective interval, successor."""
        as_of = None if system_as_of is None else parse_instant(system_as_of, "system_as_of")
        state = self._state(need_key(key))
        return [] if state is None else state.history(as_of)

    def lifecycle(self, version: VersionRef, system_as_of: TimeLike | None = None) -> Lifecycle:
        target = self._resolve_ref(version)
        as_of = None if system_as_of is None else parse_instant(system_as_of, "system_as_of")
        state = self._state(target.key)
        assert state is not None
        return state.lifecycle(target.id, as_of)

    def open_conflicts(self, key: FactKey) -> list[tuple[str, ...]]:
        state = self._state(need_key(key))
        return [] if state is None else state.open_conflicts()

    def version(self, version_id: str) -> FactVersion:
        return self._resolve_ref(version_id)

    def keys(self) -> list[FactKey]:
        return sorted(self._snapshot.keys)

    def events(self) -> tuple[Event, ...]:
        return self._log.events()

    @property
    def watermark(self) -> int:
        return self._log.last_seq

    def state_hash(self) -> str:
        return self._snapshot.state_hash()

    def digest(self, *, key: bytes | None = None) -> Digest:
        """(last seq, head link) of the log as this Memory has folded it: save its text
        (`str(digest)`) outside the store; `verify(digest)` later proves the log up to that seq
        unchanged. With `key` (bytes you keep, never stored), the chain is HMAC-SHA256."""
        if key is None and self._chain is not None:
            return self._chain.digest()
        check = ChainCheck(self._store.url, _chain_key(key))
        for event in self._log:
            check.add(event)
        return check.digest()

    def verify(
        self, digest: Digest | str | None = None, *, key: bytes | None = None
    ) -> VerifyReport:
        """Walk the stored log again: seqs dense from 1, stored links, the chain seal, and
        (given a digest saved earlier, or its 'seq:head' text; keyed if it was made with
        `key`) the log up to its seq unchanged; then every projection table and the
        consumption chain against the log (docs/integrity.md)."""
        return verify_store(self._store, digest, key=_chain_key(key))  # toki.store.audit

    def reconcile(self) -> ReconcileReport:
        """Compare the stored projection with a fresh replay of the stored log, per key."""
        watermark, stored = self._store.load_projection()
        return reconcile(stored, watermark, replay(self._store.load(0)))

    def render_history(self, key: FactKey, system_as_of: TimeLike | None = None) -> str:
        return "\n".join(entry.render() for entry in self.history(key, system_as_of))


def _resolve_in(
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


def _chain_key(key: object) -> bytes | None:
    if key is None or (isinstance(key, bytes) and key):
        return key
    raise InvalidInput("key", "must be non-empty bytes (read it from a file you keep)")
