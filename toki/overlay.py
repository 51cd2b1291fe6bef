"""Copy-on-write views of containers: a write's scratch state without copying the live one.

A write folds its events into a scratch copy of each key's state (the projection rows come
from it, and a refused or failed write must leave the live state untouched). Copying a
state is linear in the key's versions; an overlay instead reads through to the live
container and records only its own changes, so forking is O(1) and each change O(log k) in
the write's own changes (`KeyState.fork`). The base must not change while an overlay on it
is in use: a write forks under the writer lock and drops the fork before the live state
folds the committed events.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Hashable, Iterator, Mapping, MutableMapping, MutableSet, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Generic, Protocol, TypeVar, overload

__all__ = ["Appended", "DictOverlay", "SetOverlay", "Sorted", "SortedOverlay", "TailOverlay"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


Ord = TypeVar("Ord", bound=_Ordered)


class DictOverlay(MutableMapping[K, V]):
    """A dict's view: `own` entries shadow the base's, `gone` hides deleted base keys."""

    __slots__ = ("base", "gone", "own")

    def __init__(self, base: Mapping[K, V]) -> None:
        self.base = base
        self.own: dict[K, V] = {}
        self.gone: set[K] = set()

    def __getitem__(self, key: K) -> V:
        own = self.own
        if key in own:
            return own[key]
        if key in self.gone:
            raise KeyError(key)
        return self.base[key]

    def get(self, key: K, default: Any = None) -> Any:
        own = self.own
        if key in own:
            return own[key]
        if key in self.gone:
            return default
        return self.base.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.own or (key in self.base and key not in self.gone)

    def __setitem__(self, key: K, value: V) -> None:
        self.own[key] = value
        self.gone.discard(key)

    def __delitem__(self, key: K) -> None:
        if key not in self:
            raise KeyError(key)
        self.own.pop(key, None)
        if key in self.base:
            self.gone.add(key)

    def __iter__(self) -> Iterator[K]:
        own, gone = self.own, self.gone
        for key in self.base:  # in the base's order, as a copied dict would iterate
            if key not in gone:
                yield key
        for key in own:
            if key not in self.base:
                yield key

    def __len__(self) -> int:
        return len(self.base) - len(self.gone) + sum(1 for k in self.own if k not in self.base)


class SetOverlay(MutableSet[K]):
    """A set's view: `added` (never in the base) and `removed` (always in the base)."""

    __slots__ = ("added", "base", "removed")

    def __init__(self, base: AbstractSet[K]) -> None:
        self.base = base
        self.added: set[K] = set()
        self.removed: set[K] = set()

    def __contains__(self, item: object) -> bool:
        return item in self.added or (item in self.base and item not in self.removed)

    def add(self, item: K) -> None:
        if item in self.base:
            self.removed.discard(item)
        else:
            self.added.add(item)

    def discard(self, item: K) -> None:
        if item in self.base:
            self.removed.add(item)
        else:
            self.added.discard(item)

    def __iter__(self) -> Iterator[K]:
        removed = self.removed
        yield from (item for item in self.base if item not in removed)
        yield from self.added

    def __len__(self) -> int:
        return len(self.base) - len(self.removed) + len(self.added)


class Appended(Protocol[T]):
    """What a state's append-only logs (decisions, policies, configs) are used as."""

    def append(self, item: T, /) -> None: ...
    def __iter__(self) -> Iterator[T]: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> T: ...


class TailOverlay(Sequence[T]):
    """An append-only list's view: the base's items, then the ones appended here."""

    __slots__ = ("base", "tail")

    def __init__(self, base: Appended[T]) -> None:
        self.base = base
        self.tail: list[T] = []

    def append(self, item: T) -> None:
        self.tail.append(item)

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[T]: ...
    def __getitem__(self, index: int | slice) -> T | Sequence[T]:
        if isinstance(index, slice):
            return [*self.base, *self.tail][index]
        n = len(self.base)
        if index < 0:
            index += len(self)
        if index < 0:
            raise IndexError(index)
        return self.base[index] if index < n else self.tail[index - n]

    def __iter__(self) -> Iterator[T]:
        yield from self.base
        yield from self.tail

    def __len__(self) -> int:
        return len(self.base) + len(self.tail)


class Sorted(Generic[Ord]):
    """A sorted list (duplicates allowed) with the few queries a key state asks of one."""

    __slots__ = ("items",)

    def __init__(self, items: list[Ord] | None = None) -> None:
        self.items: list[Ord] = [] if items is None else items

    def add(self, item: Ord) -> bool:
        """Insert `item`; whether it went last (nothing after it moved)."""
        items = self.items
        if not items or not item < items[-1]:
            items.append(item)
            return True
        insort(items, item)
        return False

    def remove(self, item: Ord) -> None:
        del self.items[bisect_left(self.items, item)]

    def last(self) -> Ord | None:
        return self.items[-1] if self.items else None

    def count_to(self, item: Ord) -> int:
        """How many are <= item."""
        return bisect_right(self.items, item)

    def count_before(self, item: Ord) -> int:
        """How many are < item."""
        return bisect_left(self.items, item)

    def after(self, item: Ord) -> list[Ord]:
        """Those > item, in order."""
        return self.items[bisect_right(self.items, item) :]

    def from_(self, item: Ord) -> list[Ord]:
        """Those >= item, in order."""
        return self.items[bisect_left(self.items, item) :]

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Ord]:
        return iter(self.items)

    def __eq__(self, other: object) -> bool:  # so that two KeyStates compare by content
        return isinstance(other, Sorted) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def copy(self) -> Sorted[Ord]:
        return Sorted(list(self.items))


class SortedOverlay(Sorted[Ord]):
    """A `Sorted`'s view: items added here (sorted) and base items removed here (a base
    item is removed at most once: the items a state removes are unique)."""

    __slots__ = ("added", "base", "removed")

    def __init__(self, base: Sorted[Ord]) -> None:  # no `items`: only the base has them
        self.base = base
        self.added: list[Ord] = []
        self.removed: list[Ord] = []  # sorted

    def add(self, item: Ord) -> bool:
        last = self.last()
        i = bisect_left(self.removed, item)
        if i < len(self.removed) and not item < self.removed[i]:
            del self.removed[i]  # back in the base's place
        else:
            insort(self.added, item)
        return last is None or not item < last

    def remove(self, item: Ord) -> None:
        added = self.added
        i = bisect_left(added, item)
        if i < len(added) and not item < added[i]:
            del added[i]
        else:
            insort(self.removed, item)

    def last(self) -> Ord | None:
        items, removed = self.base.items, self.removed
        best = self.added[-1] if self.added else None
        for i in range(len(items) - 1, -1, -1):  # past at most len(removed) removed ones
            item = items[i]
            j = bisect_left(removed, item)
            if j < len(removed) and not item < removed[j]:
                continue
            return item if best is None or best < item else best
        return best

    def count_to(self, item: Ord) -> int:
        return (
            self.base.count_to(item)
            - bisect_right(self.removed, item)
            + bisect_right(self.added, item)
        )

    def count_before(self, item: Ord) -> int:
        return (
            self.base.count_before(item)
            - bisect_left(self.removed, item)
            + bisect_left(self.added, item)
        )

    def after(self, item: Ord) -> list[Ord]:
        return self._merged(self.base.after(item), self.added[bisect_right(self.added, item) :])

    def from_(self, item: Ord) -> list[Ord]:
        return self._merged(self.base.from_(item), self.added[bisect_left(self.added, item) :])

    def _merged(self, kept: list[Ord], new: list[Ord]) -> list[Ord]:
        if self.removed:
            gone = self.removed
            kept = [x for x in kept if not _holds(gone, x)]
        return sorted(kept + new) if new else kept

    def __len__(self) -> int:
        return len(self.base) - len(self.removed) + len(self.added)

    def __iter__(self) -> Iterator[Ord]:
        return iter(self.copy().items)

    def copy(self) -> Sorted[Ord]:
        items = [x for x in self.base.items if not _holds(self.removed, x)]
        return Sorted(sorted(items + self.added))


def _holds(ordered: list[Ord], item: Ord) -> bool:
    i = bisect_left(ordered, item)
    return i < len(ordered) and not item < ordered[i]
