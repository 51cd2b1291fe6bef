"""Instants and half-open valid-time intervals whose bounds remember where they came from.

Every instant is timezone-aware UTC; output is RFC 3339 with `Z`. The store never invents
precision: a bound the source did not state is UNKNOWN (or ASSUMED when we defaulted it,
e.g. to the recording time), and the rendering says so.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from toki.errors import InvalidInterval, InvalidTime

__all__ = [
    "BoundSource",
    "Interval",
    "TimeLike",
    "format_instant",
    "parse_instant",
    "render_instant",
]

TimeLike = str | datetime


class BoundSource(enum.Enum):
    """Where an interval bound came from."""

    EVIDENCE = "evidence"  # the source stated it
    ASSUMED = "assumed"  # defaulted (e.g. to the recording time) because the source gave none
    UNKNOWN = "unknown"  # nobody knows; the bound is open in that direction


_SOURCES = {s.value: s for s in BoundSource}


def _source(text: object) -> BoundSource:
    """`BoundSource(text)` by a dict lookup (Enum's call costs ~1 µs; every stored version
    has two); anything else still raises BoundSource's ValueError."""
    try:
        return _SOURCES[text]  # type: ignore[index]
    except (KeyError, TypeError):
        return BoundSource(text)


def parse_instant(value: object, field: str = "time") -> datetime:
    """Parse an RFC 3339 string or an aware datetime into an aware UTC datetime.

    Naive datetimes are refused rather than guessed: a wrong time zone silently shifts every
    as-of answer.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
            raise InvalidTime(
                field,
                f"naive datetime {value.isoformat()} has no time zone",
                "pass an aware datetime, e.g. datetime(..., tzinfo=timezone.utc), or an RFC 3339 "
                "string ending in Z or an offset",
            )
        return _to_utc(value, field, value)
    if isinstance(value, str):
        if value[-1:] == "Z":  # toki's own form: the C parser reads it (3.11 takes Z as UTC)
            try:
                return datetime.fromisoformat(value)
            except ValueError:
                pass  # e.g. an unpadded year, written by toki < 0.2
        text = value.strip()
        if not text:
            raise InvalidTime(field, "empty time string", "use RFC 3339, e.g. 2026-07-03T00:00:00Z")
        if text[-1] in "zZ":
            text = text[:-1] + "+00:00"
        short = _SHORT_YEAR.match(text)
        if short:  # written by toki < 0.2, whose strftime("%Y") did not zero-pad years < 1000
            text = short.group(1).zfill(4) + text[short.end(1) :]
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidTime(
                field, f"cannot parse {value!r}", "use RFC 3339, e.g. 2026-07-03T00:00:00Z"
            ) from None
        if parsed.tzinfo is None:
            raise InvalidTime(
                field,
                f"{value!r} has no time zone",
                "append Z (UTC) or an offset such as +02:00",
            )
        return _to_utc(parsed, field, value)
    raise InvalidTime(
        field, f"expected an RFC 3339 string or aware datetime, got {type(value).__name__}"
    )


def _to_utc(at: datetime, field: str, given: object) -> datetime:
    """`at` in UTC; `given` (what the caller passed) is spelled only in the error (a write
    parses its instants on every call)."""
    try:
        return at.astimezone(UTC)
    except OverflowError:
        shown = given.isoformat() if isinstance(given, datetime) else repr(given)
        raise InvalidTime(
            field,
            f"{shown} is outside the calendar in UTC (years 1 to 9999)",
            "use an instant whose UTC time falls in years 1 to 9999",
        ) from None


_SHORT_YEAR = re.compile(r"^(\d{1,3})-\d\d-\d\dT")


def format_instant(at: datetime) -> str:
    """RFC 3339 UTC with `Z`, microseconds only when present (canonical: one text per instant).

    The year is always four digits (strftime("%Y") does not zero-pad years before 1000 on
    Linux, and RFC 3339 requires four; isoformat does)."""
    if at.tzinfo is not UTC:
        at = at.astimezone(UTC)
    # isoformat pads the year to four digits and shows microseconds only when present; in
    # UTC it ends in "+00:00" (a write formats several instants: this is its fast path)
    return at.isoformat()[:-6] + "Z"


def render_instant(at: datetime | None, source: BoundSource) -> str:
    """Human text for one bound, never a bare timestamp without its provenance."""
    if at is None:
        return "unknown" if source is BoundSource.UNKNOWN else "unbounded"
    text = format_instant(at)
    if source is BoundSource.ASSUMED:
        return f"{text} (assumed)"
    return text


@dataclass(frozen=True, slots=True)
class Interval:
    """A half-open valid-time interval [start, end); None means open in that direction.

    `start_source`/`end_source` record whether each bound was stated by evidence, assumed,
    or is unknown. An open bound with UNKNOWN source means "we do not know", which containment
    treats as open (the fact may have held) while rendering says "unknown".
    """

    start: datetime | None
    end: datetime | None
    start_source: BoundSource = BoundSource.EVIDENCE
    end_source: BoundSource = BoundSource.UNKNOWN

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise InvalidInterval(
                "valid_to",
                f"end {format_instant(self.end)} is not after start {format_instant(self.start)}",
                "intervals are half-open [valid_from, valid_to): valid_to must be later",
            )
        if self.start is None and self.start_source is BoundSource.EVIDENCE:
            object.__setattr__(self, "start_source", BoundSource.UNKNOWN)
        if self.end is None and self.end_source is BoundSource.EVIDENCE:
            object.__setattr__(self, "end_source", BoundSource.UNKNOWN)

    @classmethod
    def make(
        cls,
        valid_from: TimeLike | None,
        valid_to: TimeLike | None = None,
        *,
        from_source: BoundSource | None = None,
        to_source: BoundSource | None = None,
    ) -> Interval:
        """Build from user input: None bounds are UNKNOWN unless a source says otherwise."""
        start = None if valid_from is None else parse_instant(valid_from, "valid_from")
        end = None if valid_to is None else parse_instant(valid_to, "valid_to")
        s_src = from_source or (BoundSource.UNKNOWN if start is None else BoundSource.EVIDENCE)
        e_src = to_source or (BoundSource.UNKNOWN if end is None else BoundSource.EVIDENCE)
        return cls(start, end, s_src, e_src)

    def contains(self, at: datetime) -> bool:
        """Whether instant `at` lies in [start, end)."""
        return (self.start is None or self.start <= at) and (self.end is None or at < self.end)

    def overlaps(self, other: Interval) -> bool:
        """Whether the two half-open intervals share an instant ([a,b) and [b,c) do not)."""
        if self.end is not None and other.start is not None and self.end <= other.start:
            return False
        return not (other.end is not None and self.start is not None and other.end <= self.start)

    def clip_end(self, at: datetime, source: BoundSource = BoundSource.EVIDENCE) -> Interval | None:
        """This interval ending no later than `at`; None when nothing of it remains."""
        if self.end is not None and self.end <= at:
            return self
        if self.start is not None and at <= self.start:
            return None
        return Interval(self.start, at, self.start_source, source)

    def to_json(self) -> dict[str, str | None]:
        return {
            "start": None if self.start is None else format_instant(self.start),
            "end": None if self.end is None else format_instant(self.end),
            "start_source": self.start_source.value,
            "end_source": self.end_source.value,
        }

    @classmethod
    def from_json(cls, data: dict[str, str | None]) -> Interval:
        start = data.get("start")
        end = data.get("end")
        return cls(
            None if start is None else parse_instant(start, "valid.start"),
            None if end is None else parse_instant(end, "valid.end"),
            _source(data.get("start_source") or "evidence"),
            _source(data.get("end_source") or "unknown"),
        )

    def render(self) -> str:
        """'valid from X to Y' with each bound's meaning spelled out."""
        end = "open" if self.end is None else render_instant(self.end, self.end_source)
        return f"valid from {render_instant(self.start, self.start_source)} to {end}"
