"""`open_store`: a URL -> a backend. Beside the protocol (toki/store/base.py), not inside
it: the backends import the protocol, and this module imports the backends, so neither
imports the other back."""

from __future__ import annotations

from toki.errors import StoreError
from toki.store.base import EventStore, sqlite_path

__all__ = ["open_store"]


def open_store(url: str) -> EventStore:
    """'memory://', 'sqlite:///path.db' or 'postgresql://…' → a backend."""
    if url in ("memory://", "memory", ":memory:"):
        from toki.store.memory import InMemoryStore

        return InMemoryStore()
    if url.startswith("sqlite://"):
        from toki.store.sqlite import SQLiteStore

        return SQLiteStore(sqlite_path(url))
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from toki.store.postgres import PostgresStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:  # pragma: no cover - until the backend lands
            raise StoreError(f"url: the PostgreSQL backend is not available ({exc})") from exc
        store: EventStore = PostgresStore(url)
        return store
    raise StoreError(
        f"url: cannot open {url!r} (use 'memory://', 'sqlite:///path.db' or 'postgresql://…')"
    )
