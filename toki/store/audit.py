"""Checking a store without opening it as a Memory: what `toki verify` and `Memory.verify` run.

`open_existing` opens only a store that is there, read-only where the backend allows it, and
creates nothing (a missing SQLite file or PostgreSQL schema is a StoreError, exit 2).
`verify_store` walks the chain (seqs, stored links, the chain seal, a saved digest) and then
reconciles every projection table with a replay of the log, PostgreSQL's `toki_version`
included: a store passes only if the log is intact and everything derived from it agrees.
What each check catches is the table in docs/integrity.md (tests/test_threat_model.py).
"""

from __future__ import annotations

import dataclasses

from toki.chain import Digest, VerifyReport, check_consumption, verify
from toki.errors import IntegrityError, StoreError
from toki.log import Event
from toki.projection import reconcile
from toki.replay import gc_paused, replay
from toki.store.base import ALL_SEQS, EventStore, sqlite_path
from toki.store.open import open_store

__all__ = [
    "checkpoint_problem",
    "consumption_problem",
    "open_existing",
    "projection_problem",
    "verify_store",
    "verify_url",
]


def open_existing(url: str) -> EventStore:
    """The store at `url`, which must exist already; nothing is created or migrated."""
    if url in ("memory://", "memory", ":memory:"):
        raise StoreError(
            f"url: {url!r} is a new, empty in-process store: there is nothing to check "
            "(give a sqlite:/// or postgresql:// URL)"
        )
    if url.startswith("sqlite://"):
        from toki.store.sqlite import SQLiteStore

        path = sqlite_path(url)
        if path == ":memory:":
            raise StoreError(f"url: {url!r} is an in-memory SQLite store: nothing to check")
        return SQLiteStore(path, existing=True)
    if url.startswith(("postgresql://", "postgres://")):
        from toki.store.postgres import PostgresStore

        return PostgresStore(url, existing=True)
    return open_store(url)  # refuses any other scheme, naming the ones it knows


def verify_store(
    store: EventStore, digest: Digest | str | None = None, *, key: bytes | None = None
) -> VerifyReport:
    """Chain (with the seal: no downgrade), the saved digest if any, then the projection.
    digest: a Digest or its 'seq:head' text."""
    if digest is not None and not isinstance(digest, Digest):
        digest = Digest.parse(digest)  # refuses anything but the text form, as InvalidInput
    with gc_paused():  # the whole log decoded and replayed: the GC's passes were 42% of it
        return _verify(store, digest, key)


def _verify(store: EventStore, digest: Digest | None, key: bytes | None) -> VerifyReport:
    load_log = getattr(store, "load_log", None)
    try:
        events: list[Event]
        if load_log is None:
            events, seal = list(store.load(ALL_SEQS)), None
        else:
            events, seal = load_log()
    except IntegrityError as exc:  # an unreadable or altered row
        return VerifyReport(store.url, 0, Digest(0, ""), digest, None, str(exc))
    report = verify(
        store.url,
        ((e, e.chain) for e in events),
        digest=digest,
        key=key,
        seal=seal,
        sealed_store=hasattr(store, "set_links"),  # a store that keeps links
    )
    if not report.ok:
        return report
    index = getattr(store, "index_problem", None)  # SQLite's toki_key, PostgreSQL's toki_head
    problem = (
        projection_problem(store)
        or (index() if index is not None else None)
        or checkpoint_problem(store, events)
        or consumption_problem(store)
    )
    return report if problem is None else dataclasses.replace(report, problem=problem)


def checkpoint_problem(store: EventStore, events: list[Event]) -> str | None:
    """None if the store keeps no checkpoint or its record equals what a replay of the log
    up to its seq gives: the chain link there, each key's last per-key seq and the digest of
    each key's projection row then (toki.checkpoint). A record that differs would only be
    refused or named on use by open; `toki verify` names it now."""
    load = getattr(store, "load_checkpoint", None)
    found = None if load is None else load()
    if found is None:
        return None
    from toki.checkpoint import UNCHECKED, Checkpoint  # one store concept, read here only

    where = f"{store.url}: the checkpoint"
    try:
        checkpoint = Checkpoint.from_text(found[0], found[1], store.url)
    except IntegrityError as exc:
        return f"{exc} (open ignores it and replays the whole log)"
    if checkpoint is None:
        return None  # another format: open ignores it
    seq = checkpoint.seq
    if not 0 < seq <= len(events) or events[seq - 1].chain != checkpoint.head:
        return f"{where} at seq {seq} does not name the chain link the log holds there"
    prefix = replay(events[:seq])
    digest = store.projection_digest  # type: ignore[attr-defined]
    expected = {k: (s.last_key_seq, digest(k, s.summary())) for k, s in prefix.keys.items()}
    recorded = {  # an UNCHECKED row was left for open to check: the record vouches nothing
        k: (n, expected.get(k, (0, d))[1] if d == UNCHECKED else d)
        for k, _, n, d in checkpoint.keys
    }
    if recorded != expected:
        bad = sorted(
            k for k in expected.keys() | recorded.keys() if expected.get(k) != recorded.get(k)
        )
        return (
            f"{where} at seq {seq} differs from a replay of the log up to it for "
            f"{len(bad)} key(s), first {bad[0]} (changed outside toki: reads of those keys "
            "would raise IntegrityError; `toki checkpoint URL` writes a new one)"
        )
    return None


def consumption_problem(store: EventStore) -> str | None:
    """None if the consumption records chain up to their seal (toki.chain.check_consumption)."""
    load = getattr(store, "load_consumption_log", None)
    if load is None:
        return None
    try:
        records, seal = load()
    except IntegrityError as exc:
        return str(exc)
    return check_consumption(f"{store.url}: toki_consumption", records, seal)


def projection_problem(store: EventStore) -> str | None:
    """None if every projection table equals a replay of the log, else what differs."""
    try:
        events, unsequenced, watermark, stored = store.load_state()
    except IntegrityError as exc:
        return str(exc)
    snapshot = replay(events)
    for event in unsequenced:  # committed, not yet sequenced: the projection holds them
        snapshot.apply(event)
    snapshot.watermark = events[-1].seq if events else 0
    report = reconcile(stored, watermark, snapshot)
    if report.ok:
        return None
    return (
        f"{store.url}: the log's chain is intact but the stored projection differs from it: "
        f"{report.describe()}. Open it with repair_projection=True to rebuild the projection "
        "from the log (after checking the log against a digest saved earlier)"
    )


def verify_url(url: str, digest: Digest | None = None, *, key: bytes | None = None) -> VerifyReport:
    """`toki verify URL`: open the existing store read-only, verify it, close it."""
    store = open_existing(url)
    try:
        return verify_store(store, digest, key=key)
    finally:
        store.close()
