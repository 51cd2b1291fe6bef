"""Event-store backends behind one protocol: in-memory (default), SQLite, PostgreSQL."""

from toki.store.base import EventStore, open_store
from toki.store.memory import InMemoryStore

__all__ = ["EventStore", "InMemoryStore", "open_store"]
