"""Interval-aware resolution: each valid-time point goes to the best-ranked version covering it.

An operator ranks the contradicting versions; `allocate` then paints their valid intervals
best first, so a version keeps exactly the points no better-ranked version with a different
value covers. This makes last-writer-wins pointwise (the latest claim about *that* time
wins), which is what makes it confluent; a single winner for the whole set would let a
claim about July overwrite June.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Span", "allocate", "subtract"]

Span = tuple[int, int]  # [start, end) in integer microseconds; ±2**62 stand for open ends


def subtract(spans: Sequence[Span], cut: Span) -> list[Span]:
    """The parts of `spans` outside `cut`."""
    out: list[Span] = []
    for s, e in spans:
        if cut[1] <= s or e <= cut[0]:
            out.append((s, e))
            continue
        if s < cut[0]:
            out.append((s, cut[0]))
        if cut[1] < e:
            out.append((cut[1], e))
    return out


def allocate(ranked: Sequence[tuple[str, str, Span]]) -> dict[str, list[Span]]:
    """ranked: (version id, value, effective span), best first → the spans each keeps."""
    kept: dict[str, list[Span]] = {}
    painted: list[tuple[str, Span]] = []  # (value, span) already owned by better versions
    for vid, value, span in ranked:
        mine = [span]
        for owner_value, owned in painted:
            if owner_value != value:
                mine = subtract(mine, owned)
        kept[vid] = sorted(mine)
        painted.extend((value, piece) for piece in mine)
    return kept
