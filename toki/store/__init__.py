"""Event-store backends behind one protocol: in-memory (default), SQLite, PostgreSQL."""

from toki.store.base import EventStore
from toki.store.memory import InMemoryStore
from toki.store.open import open_store

__all__ = ["EventStore", "InMemoryStore", "open_store"]
