"""The current-state projection: a disposable cache of per-key summaries with a watermark.

The projection is what a database reader of the store would use for "what holds now". It is
never trusted: `reconcile` rebuilds the state from the log and compares, per key, the value
hash, the live version ids, the open conflict count and the open interval count, and names
every key that differs (row counts alone prove nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toki.model import FactKey
from toki.replay import KeySummary, Snapshot

__all__ = ["KeyDifference", "ReconcileReport", "compare", "reconcile", "rows_for"]

_FIELDS = ("value_hash", "version_ids", "open_conflicts", "open_intervals", "segments")


@dataclass(frozen=True, slots=True)
class KeyDifference:
    """One key whose projection disagrees with the replay, and in which fields."""

    key: FactKey
    fields: tuple[str, ...]
    projection: KeySummary | None
    replay: KeySummary | None

    def describe(self) -> str:
        if self.projection is None:
            return f"{self.key}: missing from the projection"
        if self.replay is None:
            return f"{self.key}: in the projection but not in the log"
        return f"{self.key}: differs in {', '.join(self.fields)}"


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    watermark: int
    replay_watermark: int
    keys_checked: int
    differences: tuple[KeyDifference, ...]
    opened_from: str = "full replay"
    """How open built the state: "full replay", "checkpoint at seq S (T tail events)", or
    why a checkpoint was refused before a full replay (toki.checkpoint)."""

    @property
    def ok(self) -> bool:
        return not self.differences and self.watermark == self.replay_watermark

    def describe(self) -> str:
        if self.ok:
            return f"projection matches the log on {self.keys_checked} keys"
        lines = [d.describe() for d in self.differences]
        if self.watermark != self.replay_watermark:
            lines.append(
                f"projection watermark {self.watermark} != log watermark {self.replay_watermark}"
            )
        return "\n".join(lines)


def rows_for(snapshot: Snapshot, keys: set[FactKey]) -> dict[FactKey, KeySummary]:
    """Fresh projection rows for the keys a write touched."""
    return {k: snapshot.keys[k].summary() for k in keys if k in snapshot.keys}


def reconcile(
    stored: Mapping[FactKey, KeySummary], stored_watermark: int, replayed: Snapshot
) -> ReconcileReport:
    """Compare a stored projection with a replay of the log, key by key."""
    return compare(stored, stored_watermark, replayed.summaries(), replayed.watermark)


def compare(
    stored: Mapping[FactKey, KeySummary],
    stored_watermark: int,
    fresh: Mapping[FactKey, KeySummary],
    replay_watermark: int,
) -> ReconcileReport:
    """`reconcile` against rows already derived from the log."""
    diffs = []
    for key in sorted(set(stored) | set(fresh)):
        a, b = stored.get(key), fresh.get(key)
        if a is None or b is None:
            diffs.append(KeyDifference(key, _FIELDS, a, b))
            continue
        fields = tuple(f for f in _FIELDS if getattr(a, f) != getattr(b, f))
        if fields:
            diffs.append(KeyDifference(key, fields, a, b))
    return ReconcileReport(stored_watermark, replay_watermark, len(fresh), tuple(diffs))
