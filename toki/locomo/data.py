"""Loading the LoCoMo benchmark file into frozen values.

LoCoMo (Maharana et al., ACL 2024; https://github.com/snap-research/locomo) is CC BY-NC 4.0,
so toki never ships it: `load_locomo` finds a copy on disk and `fetch_locomo` downloads the
pinned upstream file and checks its sha256. The file has known defects (malformed evidence
ids, ids naming no turn, empty evidence lists, surplus session dates); the parser repairs
what it can, keeps going, and lists every defect in `LocomoDataset.problems` so that an
experiment can say exactly which questions it scored against what.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from enum import IntEnum
from pathlib import Path
from typing import Any, Literal

from toki.errors import ChecksumMismatch, DataError, DataNotFound

LOCOMO_FILENAME = "locomo10.json"
LOCOMO_COMMIT = "cbfbc1d"
LOCOMO_URL = (
    f"https://raw.githubusercontent.com/snap-research/locomo/{LOCOMO_COMMIT}/data/{LOCOMO_FILENAME}"
)
LOCOMO_SHA256 = "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
ENV_VAR = "TOKI_LOCOMO"
FETCH_HINT = "run `toki locomo fetch` (or `python -m toki.locomo fetch`) to download it"


class Category(IntEnum):
    """LoCoMo question categories, numbered as in the file's `category` field."""

    MULTI_HOP = 1
    TEMPORAL = 2
    OPEN_DOMAIN = 3
    SINGLE_HOP = 4
    ADVERSARIAL = 5


ProblemKind = Literal[
    "malformed_evidence",  # an evidence string is not of the form D<session>:<turn>
    "missing_turn",  # a well-formed id names no turn of the conversation
    "empty_evidence",  # a question lists no evidence at all
    "bad_date",  # a session or event date does not parse
    "malformed_turn_id",  # a turn's own dia_id is not of the form D<session>:<turn>
]


@dataclass(frozen=True, slots=True)
class Problem:
    """One defect found while parsing; `recovered` holds the turn ids salvaged from it."""

    sample_id: str
    source: Literal["qa", "observation", "session", "event", "turn"]
    location: str  # e.g. "qa[37]" or "session_22_observation/Deborah[3]"
    kind: ProblemKind
    raw: str
    detail: str
    recovered: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    """One utterance. Image turns keep the caption the benchmark generated (BLIP)."""

    dia_id: str
    session: int
    speaker: str
    text: str
    blip_caption: str | None = None
    img_url: tuple[str, ...] = ()
    query: str | None = None


@dataclass(frozen=True, slots=True)
class Session:
    """A session; `date_time` is the stated local time, taken as UTC (the file has no zone)."""

    index: int
    date_time: datetime | None
    date_time_raw: str | None
    turns: tuple[Turn, ...]
    summary: str | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """A benchmark-provided fact about one speaker, with the turn(s) it was drawn from."""

    session: int
    speaker: str
    text: str
    evidence: tuple[str, ...]
    evidence_raw: str


@dataclass(frozen=True, slots=True)
class EventSummary:
    """One event in a speaker's event graph, dated by the file's per-session `date`."""

    session: int
    speaker: str
    text: str
    date: date | None
    date_raw: str | None


@dataclass(frozen=True, slots=True)
class QA:
    """A question. Category 5 (adversarial) usually has `adversarial_answer`, not `answer`."""

    index: int
    question: str
    answer: str | None
    category: Category
    evidence: tuple[str, ...]
    evidence_raw: tuple[str, ...]
    adversarial_answer: str | None = None


@dataclass(frozen=True, slots=True)
class Conversation:
    """One LoCoMo sample: two speakers, their sessions, and everything annotated on them."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    observations: tuple[Observation, ...]
    events: tuple[EventSummary, ...]
    qa: tuple[QA, ...]
    _turns: Mapping[str, Turn] = field(default_factory=dict, repr=False, compare=False)

    def turns(self) -> Iterator[Turn]:
        """All turns in session order."""
        for session in self.sessions:
            yield from session.turns

    def turn(self, dia_id: str) -> Turn | None:
        """The turn with this dia_id, or None."""
        return self._turns.get(dia_id)

    def session(self, index: int) -> Session | None:
        """The session with this 1-based index, or None."""
        for s in self.sessions:
            if s.index == index:
                return s
        return None


@dataclass(frozen=True, slots=True)
class LocomoDataset:
    """The parsed benchmark plus every defect the parser found and repaired or skipped."""

    conversations: tuple[Conversation, ...]
    problems: tuple[Problem, ...]
    path: Path | None = None
    sha256: str | None = None

    def conversation(self, sample_id: str) -> Conversation:
        """The conversation with this sample_id (KeyError if absent)."""
        for c in self.conversations:
            if c.sample_id == sample_id:
                return c
        raise KeyError(sample_id)

    def questions(self) -> Iterator[tuple[Conversation, QA]]:
        """Every (conversation, question) pair in file order."""
        for c in self.conversations:
            for q in c.qa:
                yield c, q

    def problems_of(self, kind: ProblemKind, source: str | None = None) -> tuple[Problem, ...]:
        """Problems of one kind, optionally from one source ("qa", "observation", ...)."""
        return tuple(
            p for p in self.problems if p.kind == kind and (source is None or p.source == source)
        )

    def is_reference_copy(self) -> bool:
        """True when the file read is byte-identical to the pinned upstream file."""
        return self.sha256 == LOCOMO_SHA256


# ----------------------------------------------------------------------------- locating


def cache_dir() -> Path:
    """`$XDG_CACHE_HOME/toki`, else `~/.cache/toki`: where `fetch_locomo` puts the file."""
    base = os.environ.get("XDG_CACHE_HOME")
    root = Path(base) if base else Path.home() / ".cache"
    return root / "toki"


def candidate_paths() -> list[Path]:
    """The implicit places `load_locomo` looks, in order (explicit path and env var first)."""
    rel = Path("..") / "shared" / "data" / "locomo" / LOCOMO_FILENAME
    repo_root = Path(__file__).resolve().parents[2]
    out: list[Path] = []
    for p in (Path.cwd() / rel, repo_root / rel, cache_dir() / LOCOMO_FILENAME):
        q = p.resolve()
        if q not in out:
            out.append(q)
    return out


def locate_locomo(path: str | Path | None = None) -> Path:
    """Resolve the data file: explicit path, `$TOKI_LOCOMO`, ../shared/…, then the cache.

    An explicit path or the environment variable is a statement of intent, so if it does not
    exist we fail there rather than silently reading some other copy.
    """
    if path is not None:
        p = _as_file(Path(path))
        if p.is_file():
            return p
        raise DataNotFound(f"LoCoMo file not found at the given path {p} ({FETCH_HINT})")
    env = os.environ.get(ENV_VAR)
    if env:
        p = _as_file(Path(env))
        if p.is_file():
            return p
        raise DataNotFound(
            f"${ENV_VAR} is set to {env!r} but no LoCoMo file is there "
            f"(fix or unset ${ENV_VAR}, or {FETCH_HINT})"
        )
    tried = candidate_paths()
    for p in tried:
        if p.is_file():
            return p
    looked = "\n  ".join(str(p) for p in tried)
    raise DataNotFound(
        f"LoCoMo data file {LOCOMO_FILENAME} not found. Looked in:\n  {looked}\n"
        f"Set ${ENV_VAR} to a copy, pass a path, or {FETCH_HINT} "
        f"(CC BY-NC 4.0 data from https://github.com/snap-research/locomo)."
    )


def _as_file(p: Path) -> Path:
    return p / LOCOMO_FILENAME if p.is_dir() else p


# ----------------------------------------------------------------------------- integrity


def sha256_of(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_sha256(path: str | Path, expected: str = LOCOMO_SHA256) -> bool:
    """True when the file's sha256 equals `expected` (the pinned upstream file by default)."""
    return sha256_of(path) == expected.lower()


def fetch_locomo(
    dest: str | Path | None = None,
    *,
    url: str = LOCOMO_URL,
    expected_sha256: str = LOCOMO_SHA256,
    timeout: float = 60.0,
) -> Path:
    """Download the pinned LoCoMo file to `dest` (default: the cache dir) and verify it.

    The download goes to a temporary file beside `dest` and is only moved into place when the
    sha256 matches; on a mismatch the temporary file is deleted and `ChecksumMismatch` raised,
    so a corrupted or changed upstream file is never read by accident. An existing `dest` with
    the right hash is kept without downloading.
    """
    target = Path(dest) if dest is not None else cache_dir() / LOCOMO_FILENAME
    target = _as_file(target)
    if target.is_file() and verify_sha256(target, expected_sha256):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".locomo-", suffix=".part", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        h = hashlib.sha256()
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            for block in iter(lambda: resp.read(1 << 20), b""):
                h.update(block)
                out.write(block)
        got = h.hexdigest()
        if got != expected_sha256.lower():
            raise ChecksumMismatch(
                f"downloaded {url} has sha256 {got}, expected {expected_sha256}; "
                "the file was deleted and not used (check the URL or the pinned commit)"
            )
        os.replace(tmp, target)
    except OSError as e:
        raise DataError(f"could not download LoCoMo from {url}: {e} ({FETCH_HINT} later)") from e
    finally:
        tmp.unlink(missing_ok=True)
    return target


# ----------------------------------------------------------------------------- loading


def load_locomo(path: str | Path | None = None, *, verify: bool = False) -> LocomoDataset:
    """Find (see `locate_locomo`), read and parse LoCoMo; `verify` refuses a non-pinned copy."""
    p = locate_locomo(path)
    digest = sha256_of(p)
    if verify and digest != LOCOMO_SHA256:
        raise ChecksumMismatch(
            f"{p} has sha256 {digest}, expected {LOCOMO_SHA256} (the upstream file at commit "
            f"{LOCOMO_COMMIT}); {FETCH_HINT}, or pass verify=False to read it anyway"
        )
    try:
        with open(p, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {p} as JSON: {e} ({FETCH_HINT})") from e
    ds = parse_locomo(raw)
    return LocomoDataset(ds.conversations, ds.problems, path=p, sha256=digest)


def parse_locomo(raw: Any) -> LocomoDataset:
    """Parse the decoded JSON (a list of samples) into a `LocomoDataset`.

    Structural errors that leave nothing sensible to parse (not a list, a sample without
    `conversation`) raise `DataError`; defects inside the annotations are collected instead.
    """
    if not isinstance(raw, list):
        raise DataError(f"LoCoMo: expected a JSON list of samples, got {type(raw).__name__}")
    problems: list[Problem] = []
    convs = tuple(_parse_sample(i, s, problems) for i, s in enumerate(raw))
    return LocomoDataset(convs, tuple(problems))


_SESSION_KEY = re.compile(r"session_(\d+)")
_STRICT_ID = re.compile(r"D(\d+):(\d+)")
_LENIENT_ID = re.compile(r"D\W*(\d+)\W+(\d+)")
_SPLIT = re.compile(r"[;,\s]+")
_MONTHS = {
    m: i + 1
    for i, m in enumerate(
        (
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        )
    )
}
_DATE_TIME = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s*(\d{4})\s*", re.I
)
_DATE = re.compile(r"\s*(\d{1,2})\s*([A-Za-z]+),?\s*(\d{4})\s*")


def parse_session_datetime(raw: str) -> datetime:
    """Parse "1:56 pm on 8 May, 2023" (`%I:%M %p on %d %B, %Y`) as an aware UTC datetime.

    Parsed by hand rather than with strptime because %p and %B depend on the process locale.
    The file gives no zone; UTC is an assumption, recorded here once.
    """
    m = _DATE_TIME.fullmatch(raw)
    if m is None:
        raise ValueError(f"not a LoCoMo session time: {raw!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour)
    if not 1 <= h <= 12:
        raise ValueError(f"hour out of range in {raw!r}")
    h = h % 12 + (12 if ampm.lower() == "p" else 0)
    return datetime(int(year), _month(month, raw), int(day), h, int(minute), tzinfo=UTC)


def parse_event_date(raw: str) -> date:
    """Parse an event-summary date such as "8 May, 2023"."""
    m = _DATE.fullmatch(raw)
    if m is None:
        raise ValueError(f"not a LoCoMo date: {raw!r}")
    day, month, year = m.groups()
    return date(int(year), _month(month, raw), int(day))


def _month(name: str, raw: str) -> int:
    try:
        return _MONTHS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown month {name!r} in {raw!r}") from None


def _parse_sample(i: int, s: Any, problems: list[Problem]) -> Conversation:
    if not isinstance(s, dict) or not isinstance(s.get("conversation"), dict):
        raise DataError(f"LoCoMo sample [{i}]: expected an object with a 'conversation' object")
    sid = str(s.get("sample_id", f"sample-{i}"))
    conv: dict[str, Any] = s["conversation"]
    summaries = s.get("session_summary") or {}

    # Sessions are counted from the `session_N` turn lists, never from `session_N_date_time`
    # (conv-26 carries 35 date keys for 19 sessions).
    indices = sorted(
        int(m.group(1))
        for k, v in conv.items()
        if (m := _SESSION_KEY.fullmatch(k)) is not None and isinstance(v, list)
    )
    sessions: list[Session] = []
    by_id: dict[str, Turn] = {}
    for n in indices:
        raw_dt = conv.get(f"session_{n}_date_time")
        dt: datetime | None = None
        if isinstance(raw_dt, str):
            try:
                dt = parse_session_datetime(raw_dt)
            except ValueError as e:
                problems.append(
                    Problem(sid, "session", f"session_{n}_date_time", "bad_date", raw_dt, str(e))
                )
        else:
            problems.append(
                Problem(
                    sid,
                    "session",
                    f"session_{n}_date_time",
                    "bad_date",
                    repr(raw_dt),
                    "session has no date_time",
                )
            )
        turns = []
        for j, t in enumerate(conv[f"session_{n}"]):
            turn = _parse_turn(t, n)
            if _STRICT_ID.fullmatch(turn.dia_id) is None:
                problems.append(
                    Problem(
                        sid,
                        "turn",
                        f"session_{n}[{j}]",
                        "malformed_turn_id",
                        turn.dia_id,
                        "turn id is not of the form D<session>:<turn>",
                    )
                )
            turns.append(turn)
            by_id.setdefault(turn.dia_id, turn)
        summary = summaries.get(f"session_{n}_summary") if isinstance(summaries, dict) else None
        sessions.append(
            Session(
                n,
                dt,
                raw_dt if isinstance(raw_dt, str) else None,
                tuple(turns),
                summary if isinstance(summary, str) else None,
            )
        )

    observations = _parse_observations(sid, s.get("observation") or {}, by_id, problems)
    events = _parse_events(sid, s.get("event_summary") or {}, problems)
    qa = tuple(_parse_qa(sid, k, q, by_id, problems) for k, q in enumerate(s.get("qa") or []))
    return Conversation(
        sample_id=sid,
        speaker_a=str(conv.get("speaker_a", "")),
        speaker_b=str(conv.get("speaker_b", "")),
        sessions=tuple(sessions),
        observations=observations,
        events=events,
        qa=qa,
        _turns=by_id,
    )


def _parse_turn(t: Any, session: int) -> Turn:
    if not isinstance(t, dict):
        raise DataError(f"LoCoMo session_{session}: a turn is {type(t).__name__}, not an object")
    urls = t.get("img_url") or ()
    if isinstance(urls, str):
        urls = (urls,)
    caption = t.get("blip_caption")
    query = t.get("query")
    return Turn(
        dia_id=str(t.get("dia_id", "")),
        session=session,
        speaker=str(t.get("speaker", "")),
        text=str(t.get("text", "")),
        blip_caption=caption if isinstance(caption, str) else None,
        img_url=tuple(str(u) for u in urls),
        query=query if isinstance(query, str) else None,
    )


def parse_evidence(
    raw: Sequence[str] | str,
    turns: Mapping[str, Any],
    *,
    sample_id: str = "",
    source: Literal["qa", "observation"] = "qa",
    location: str = "",
    problems: list[Problem] | None = None,
) -> tuple[str, ...]:
    """Turn ids named by raw evidence strings, repaired where the intent is unambiguous.

    Each raw string is split on ';', ',' and whitespace ("D8:6; D9:17" → two ids); a piece
    that is not D<s>:<t> is read leniently ("D:11:26" → D11:26) or dropped ("D"). A
    well-formed id that names no turn is tried once more without zero padding ("D30:05" →
    D30:5). Every string that needed any of this is reported in `problems`; the result
    holds only ids that name turns, deduplicated in order.
    """
    sink = problems if problems is not None else []
    items = [raw] if isinstance(raw, str) else list(raw)
    out: list[str] = []

    def report(kind: ProblemKind, r: str, detail: str, rec: Sequence[str] = ()) -> None:
        sink.append(Problem(sample_id, source, location, kind, r, detail, tuple(rec)))

    def resolve(a: str, b: str, r: str, literal: str) -> str | None:
        if literal in turns:
            return literal
        canonical = f"D{int(a)}:{int(b)}"
        if canonical in turns:
            report("missing_turn", r, f"no turn {literal}; resolved to {canonical}", [canonical])
            return canonical
        report("missing_turn", r, f"no turn {literal} in this conversation")
        return None

    if not items:
        report("empty_evidence", "[]", "evidence list is empty")
    for item in items:
        r = str(item)
        m = _STRICT_ID.fullmatch(r)
        if m is not None:
            got = resolve(m.group(1), m.group(2), r, r)
            if got is not None:
                out.append(got)
            continue
        recovered: list[str] = []
        for piece in _SPLIT.split(r):
            if not piece:
                continue
            pm = _STRICT_ID.fullmatch(piece) or _LENIENT_ID.fullmatch(piece)
            if pm is None:
                continue
            literal = f"D{pm.group(1)}:{pm.group(2)}"
            got = resolve(pm.group(1), pm.group(2), r, literal)
            if got is not None:
                recovered.append(got)
        detail = "not of the form D<session>:<turn>"
        detail += f"; read as {', '.join(recovered)}" if recovered else "; nothing recoverable"
        report("malformed_evidence", r, detail, recovered)
        out.extend(recovered)
    return tuple(dict.fromkeys(out))


def _parse_observations(
    sid: str, obs: Any, turns: Mapping[str, Turn], problems: list[Problem]
) -> tuple[Observation, ...]:
    out: list[Observation] = []
    if not isinstance(obs, dict):
        return ()
    keyed = []
    for key, per_speaker in obs.items():
        m = re.fullmatch(r"session_(\d+)_observation", key)
        if m is not None and isinstance(per_speaker, dict):
            keyed.append((int(m.group(1)), key, per_speaker))
    for n, key, per_speaker in sorted(keyed, key=lambda x: x[0]):
        for speaker, items in per_speaker.items():
            for j, item in enumerate(items if isinstance(items, list) else []):
                ev: Any
                if isinstance(item, str):
                    text, ev = item, []
                elif isinstance(item, list) and item:
                    text, ev = str(item[0]), item[1] if len(item) > 1 else []
                else:
                    continue
                ev_list = [ev] if isinstance(ev, str) else [str(e) for e in ev]
                ids = parse_evidence(
                    ev_list,
                    turns,
                    sample_id=sid,
                    source="observation",
                    location=f"{key}/{speaker}[{j}]",
                    problems=problems,
                )
                out.append(Observation(n, str(speaker), text, ids, "; ".join(ev_list)))
    return tuple(out)


def _parse_events(sid: str, events: Any, problems: list[Problem]) -> tuple[EventSummary, ...]:
    out: list[EventSummary] = []
    if not isinstance(events, dict):
        return ()
    keyed = []
    for key, v in events.items():
        m = re.fullmatch(r"events_session_(\d+)", key)
        if m is not None and isinstance(v, dict):
            keyed.append((int(m.group(1)), key, v))
    for n, key, v in sorted(keyed, key=lambda x: x[0]):
        raw_date = v.get("date")
        d: date | None = None
        if isinstance(raw_date, str):
            try:
                d = parse_event_date(raw_date)
            except ValueError as e:
                problems.append(Problem(sid, "event", key, "bad_date", raw_date, str(e)))
        for speaker, texts in v.items():
            if speaker == "date" or not isinstance(texts, list):
                continue
            for text in texts:
                out.append(
                    EventSummary(
                        n,
                        str(speaker),
                        str(text),
                        d,
                        raw_date if isinstance(raw_date, str) else None,
                    )
                )
    return tuple(out)


def _parse_qa(sid: str, k: int, q: Any, turns: Mapping[str, Turn], problems: list[Problem]) -> QA:
    if not isinstance(q, dict) or "question" not in q or "category" not in q:
        raise DataError(f"LoCoMo {sid} qa[{k}]: expected an object with question and category")
    try:
        cat = Category(int(q["category"]))
    except ValueError:
        raise DataError(f"LoCoMo {sid} qa[{k}]: unknown category {q['category']!r}") from None
    raw_ev = q.get("evidence") or []
    raw_list = [raw_ev] if isinstance(raw_ev, str) else [str(e) for e in raw_ev]
    ev = parse_evidence(
        raw_list, turns, sample_id=sid, source="qa", location=f"qa[{k}]", problems=problems
    )
    ans = q.get("answer")
    adv = q.get("adversarial_answer")
    return QA(
        index=k,
        question=str(q["question"]),
        # Some gold answers are JSON numbers (years); upstream scores str(answer).
        answer=None if ans is None else str(ans),
        category=cat,
        evidence=ev,
        evidence_raw=tuple(raw_list),
        adversarial_answer=None if adv is None else str(adv),
    )
