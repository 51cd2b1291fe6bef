"""Rows as a toki before issue #36 wrote them: payloads without the per-key seq they now pin
(`_key_seq`), so that tests of the old-log migrations start from a really old log."""

from __future__ import annotations

import json

from toki.canonical import digest
from toki.log import EventKind, _event_id


def unpinned(kind: str, payload: str) -> tuple[str, str, str]:
    """(payload, payload hash, event id) of an event as logged before `_key_seq` existed."""
    body = json.loads(payload)
    body.pop("_key_seq", None)
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text, digest(text, 64), _event_id(EventKind(kind), text)
