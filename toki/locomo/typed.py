"""The typed memory layer: LoCoMo observations and event summaries as bitemporal toki facts.

Each statement becomes a claim about a subject (the speaker) under a fact key derived from
its text by a fixed, documented rule (`predicate_of`), with a valid time taken from the
session date or from a relative time expression in the text (`time_of`), recorded at the
session time, sourced from the dialogue ids it cites. Statements with the same subject and
predicate in different sessions become versions of one key, so the store's supersession,
history and as-of reads apply to them. No model is involved: `RuleExtractor` is
deterministic, and an LLM extractor plugs in through the `Extractor` protocol.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Protocol, runtime_checkable

import numpy as np

from toki.algebra import LWW, Operator, Policy
from toki.errors import InvalidInput
from toki.locomo.answer import ExtractiveAnswerer, asks_for_time
from toki.locomo.data import Conversation
from toki.locomo.metrics import porter_stem
from toki.locomo.retrieval import STOP_WORDS, BM25Retriever, Chunk, Hit, Tokenizer
from toki.memory import Memory
from toki.model import Claim, FactKey, Lifecycle
from toki.time import BoundSource

__all__ = [
    "PREDICATE_SKIP",
    "ExtractedClaim",
    "Extractor",
    "RuleExtractor",
    "SessionText",
    "TimeExpr",
    "TypedAnswerer",
    "TypedFact",
    "TypedMemory",
    "TypedRetriever",
    "build_typed_memory",
    "predicate_of",
    "session_texts",
    "time_of",
]

# Words that never name a predicate: the retrieval stop words plus auxiliaries, hedges,
# aspect verbs and time words ("is planning to", "recently", "last week"), so that the
# predicate is the first words carrying content after the subject.
PREDICATE_SKIP: frozenset[str] = STOP_WORDS | frozenset(
    """
    currently recently also really still just always often never already finally again
    going planning plans planned got get gets getting started starting start starts
    feel feels felt found finds wants want wanted likes like loves enjoys enjoyed decided
    tried trying excited thinking considering hoping hopes looking forward new last next
    week weekend weekends year years month months day days yesterday today tonight ago soon
    morning evening night first time lot as also well even
    """.split()  # noqa: SIM905 - a word list reads better as text
)

# Irregular past forms mapped to their base form before stemming, so that "took" and
# "take", "went" and "go" give one predicate (Porter stemming leaves them apart).
IRREGULAR: Mapping[str, str] = {
    "took": "take", "taken": "take", "went": "go", "gone": "go", "ran": "run",
    "made": "make", "bought": "buy", "saw": "see", "seen": "see", "gave": "give",
    "given": "give", "met": "meet", "won": "win", "began": "begin", "begun": "begin",
    "wrote": "write", "written": "write", "read": "read", "drew": "draw", "drawn": "draw",
    "sang": "sing", "sung": "sing", "left": "leave", "lost": "lose", "kept": "keep",
    "told": "tell", "thought": "think", "brought": "bring", "taught": "teach",
    "built": "build", "spent": "spend", "sent": "send", "held": "hold", "led": "lead",
    "joined": "join", "had": "have", "has": "have", "goes": "go", "does": "do", "did": "do",
    "done": "do", "was": "be", "were": "be",
}  # fmt: skip

_WORDS = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = tuple(calendar.month_name)[1:]
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5,
                 "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SessionText:
    """One statement of a session as an extractor sees it.

    kind: "observation" or "event"; index: its position among the conversation's items of
    that kind; evidence: the dialogue turns it cites; date: a date the dataset states for it
    (event summaries), else None.
    """

    kind: str
    index: int
    speaker: str
    text: str
    evidence: tuple[str, ...]
    date: date | None = None


@dataclass(frozen=True, slots=True)
class TimeExpr:
    """A valid-time start read from a statement, with how precise it is and who said so.

    `label` renders it as LoCoMo gold answers do ("7 May 2023", "the week before 9 June
    2023", "2022"); `source` is EVIDENCE when the text or the dataset states the time and
    ASSUMED when it defaults to the session date.
    """

    start: datetime
    label: str
    granularity: str  # "day", "week", "month", "year"
    source: BoundSource


@dataclass(frozen=True, slots=True)
class ExtractedClaim:
    """What an extractor makes of one statement: a typed claim about a subject."""

    subject: str
    predicate: str
    text: str
    when: TimeExpr
    source_id: str
    evidence: tuple[str, ...]
    kind: str
    item: str  # id of the statement in the conversation ("obs/3", "event/0")


@runtime_checkable
class Extractor(Protocol):
    """Turns the statements of one session into typed claims.

    `session_time` is when the session took place (the recording time of its claims). An LLM
    extractor implements this one method; `RuleExtractor` is the deterministic default.
    """

    def extract(
        self, session_time: datetime, texts: Sequence[SessionText]
    ) -> list[ExtractedClaim]: ...


def _render_day(d: date) -> str:
    return f"{d.day} {_MONTHS[d.month - 1]} {d.year}"


def _at(d: date) -> datetime:
    return datetime.combine(d, time(0, 0), tzinfo=UTC)


def _month_shift(d: date, months: int) -> date:
    m = d.month - 1 + months
    return date(d.year + m // 12, m % 12 + 1, 1)


def time_of(text: str, said_on: date, stated: date | None = None) -> TimeExpr:
    """The valid-time start of a statement made on `said_on` (rules in order, first wins):

    yesterday / last night → the day before (day); today / tonight / this morning → that day;
    last <weekday> → "the <weekday> before <date>"; last week(end) → "the week(end) before
    <date>"; N days/weeks ago → that day; last month → the month before; next month → the
    month after; last year → the year before; N years ago → that year. These are EVIDENCE:
    the text states them. Otherwise `stated` (a date the dataset gives) as EVIDENCE, else
    the session date as ASSUMED: a statement made that day holds no later than that day,
    and its true start is not known.
    """
    low = text.lower()
    day = _render_day(said_on)
    ev = BoundSource.EVIDENCE
    if re.search(r"\b(yesterday|last night)\b", low):
        d = said_on - timedelta(days=1)
        return TimeExpr(_at(d), _render_day(d), "day", ev)
    if re.search(r"\b(today|tonight|this morning|this afternoon|this evening)\b", low):
        return TimeExpr(_at(said_on), day, "day", ev)
    m = re.search(r"\blast (" + "|".join(_WEEKDAYS) + r")\b", low)
    if m:
        back = (said_on.weekday() - _WEEKDAYS.index(m.group(1))) % 7 or 7
        return TimeExpr(_at(said_on - timedelta(days=back)), f"the {m.group(1)} before {day}",
                        "day", ev)  # fmt: skip
    m = re.search(r"\blast (week|weekend)\b", low)
    if m:
        return TimeExpr(_at(said_on - timedelta(days=7)), f"the {m.group(1)} before {day}",
                        "week", ev)  # fmt: skip
    m = re.search(r"\b(\d+|a|an|one|two|three|four|five|six|seven|eight|nine|ten) "
                  r"(day|days|week|weeks) ago\b", low)  # fmt: skip
    if m:
        n = int(m.group(1)) if m.group(1).isdigit() else _NUMBER_WORDS[m.group(1)]
        d = said_on - timedelta(days=n * (7 if m.group(2).startswith("week") else 1))
        return TimeExpr(_at(d), _render_day(d), "day", ev)
    if re.search(r"\blast month\b", low):
        d = _month_shift(said_on, -1)
        return TimeExpr(_at(d), f"{_MONTHS[d.month - 1]} {d.year}", "month", ev)
    if re.search(r"\bnext month\b", low):
        d = _month_shift(said_on, 1)
        return TimeExpr(_at(d), f"{_MONTHS[d.month - 1]} {d.year}", "month", ev)
    m = re.search(r"\b(last year|(\d+|a|one|two|three|four|five|six|seven|eight|nine|ten) "
                  r"years? ago)\b", low)  # fmt: skip
    if m:
        n = (
            1
            if m.group(1) == "last year"
            else (int(m.group(2)) if m.group(2).isdigit() else _NUMBER_WORDS[m.group(2)])
        )
        y = said_on.year - n
        return TimeExpr(_at(date(y, 1, 1)), str(y), "year", ev)
    if stated is not None:
        return TimeExpr(_at(stated), _render_day(stated), "day", ev)
    return TimeExpr(_at(said_on), day, "day", BoundSource.ASSUMED)


def predicate_of(subject: str, text: str, n_words: int = 2) -> str:
    """The fact key of a statement about `subject`: its first `n_words` content words.

    Rule: lowercase the text and split it into words; start after the first mention of the
    subject's first name (a possessive "Melanie's kids" keeps "kids"), or at the beginning
    when the subject is not named; drop `PREDICATE_SKIP` words and other speakers' names are
    kept (they are content); map irregular past forms to their base (`IRREGULAR`);
    Porter-stem; join the first `n_words` with "_". "Caroline attended an LGBTQ support group"
    → "attend_lgbtq". A statement with no content word gets "misc".
    """
    first = subject.split()[0].lower() if subject.split() else ""
    words = _WORDS.findall(text.lower())
    start = next((i + 1 for i, w in enumerate(words) if w.split("'")[0] == first), 0)
    kept: list[str] = []
    for w in words[start:]:
        base = w.split("'")[0]
        if base in PREDICATE_SKIP or base == first or not base:
            continue
        kept.append(porter_stem(IRREGULAR.get(base, base)))
        if len(kept) == n_words:
            break
    return "_".join(kept) or "misc"


@dataclass(frozen=True, slots=True)
class RuleExtractor:
    """The deterministic extractor: subject = the speaker, predicate by `predicate_of`,
    valid time by `time_of`, source = the cited dialogue ids (or the item id when none)."""

    n_words: int = 2

    def extract(self, session_time: datetime, texts: Sequence[SessionText]) -> list[ExtractedClaim]:
        said_on = session_time.date()
        out: list[ExtractedClaim] = []
        for t in texts:
            when = time_of(t.text, t.date or said_on, t.date)
            item = f"{'obs' if t.kind == 'observation' else 'event'}/{t.index}"
            out.append(
                ExtractedClaim(
                    subject=t.speaker,
                    predicate=predicate_of(t.speaker, t.text, self.n_words),
                    text=t.text,
                    when=when,
                    source_id=",".join(t.evidence) if t.evidence else item,
                    evidence=t.evidence,
                    kind=t.kind,
                    item=item,
                )
            )
        return out


def session_texts(conversation: Conversation) -> dict[int, list[SessionText]]:
    """The statements of each session (observations, then event summaries, file order)."""
    out: dict[int, list[SessionText]] = {s.index: [] for s in conversation.sessions}
    for i, o in enumerate(conversation.observations):
        out.setdefault(o.session, []).append(
            SessionText("observation", i, o.speaker, o.text, o.evidence)
        )
    for i, e in enumerate(conversation.events):
        out.setdefault(e.session, []).append(SessionText("event", i, e.speaker, e.text, (), e.date))
    return out


@dataclass(frozen=True, slots=True)
class TypedFact:
    """One claim as written: its key, version id, session, recording time and extraction."""

    key: FactKey
    version_id: str
    session: int
    recorded_at: datetime
    claim: ExtractedClaim

    def chunk(self) -> Chunk:
        """The fact as a retrievable item: its text, with subject, key and valid time."""
        c = self.claim
        return Chunk(
            self.version_id,
            c.text,
            {
                "kind": c.kind,
                "item": c.item,
                "subject": c.subject,
                "predicate": c.predicate,
                "session": self.session,
                "valid_from": c.when.start,
                "valid_source": c.when.source.value,
                "time_label": c.when.label,
                "granularity": c.when.granularity,
                "recorded_at": self.recorded_at,
                "evidence": c.evidence,
            },
        )


@dataclass(frozen=True, slots=True)
class TypedMemory:
    """A conversation's typed memory: the toki store and the facts written to it, in order."""

    sample_id: str
    memory: Memory
    facts: tuple[TypedFact, ...]
    subjects: tuple[str, ...]
    operator: str
    session_times: Mapping[int, datetime] = field(default_factory=dict)

    def keys(self) -> list[FactKey]:
        """Distinct fact keys, in first-write order."""
        return list(dict.fromkeys(f.key for f in self.facts))

    def by_version(self) -> dict[str, TypedFact]:
        return {f.version_id: f for f in self.facts}


def build_typed_memory(
    conversation: Conversation,
    *,
    extractor: Extractor | None = None,
    operator: Operator = LWW,
    policy: Policy | None = None,
) -> TypedMemory:
    """Write every statement of the conversation into a fresh `Memory` through `operator`.

    Recording time: the session's time plus the statement's position in the session in
    seconds, so that file order is recording order (a later statement in a session is
    newer). Valid time: `valid_from` is the extracted start; an ASSUMED start is passed as
    None so toki itself defaults it to the recording time and marks it ASSUMED. Tenant = the
    conversation id, subject = the speaker, fact_key = the predicate. RULE needs `policy`
    (default newest_valid_time), put in force per fact key before its first write.
    """
    ext = extractor if extractor is not None else RuleExtractor()
    mem = Memory()
    sid = conversation.sample_id
    texts = session_texts(conversation)
    facts: list[TypedFact] = []
    times: dict[int, datetime] = {}
    policies: set[str] = set()
    rule = policy if policy is not None else Policy("newest_valid_time")
    for session in conversation.sessions:
        if session.date_time is None:
            continue
        times[session.index] = session.date_time
        for pos, c in enumerate(ext.extract(session.date_time, texts.get(session.index, []))):
            recorded = session.date_time + timedelta(seconds=pos)
            key = FactKey(sid, c.subject, c.predicate)
            if operator.name == "RULE" and c.predicate not in policies:
                mem.set_policy(sid, c.predicate, rule, recorded_at=recorded)
                policies.add(c.predicate)
            valid_from = c.when.start if c.when.source is BoundSource.EVIDENCE else None
            claim = Claim(key, c.text, c.source_id, valid_from=valid_from, recorded_at=recorded)
            vid = mem.write(claim, operator).claim_id
            if vid is None:  # pragma: no cover - Memory.write always names the claim's version
                raise InvalidInput("claim", f"the write of {c.text!r} named no version")
            facts.append(TypedFact(key, vid, session.index, recorded, c))
    speakers = (conversation.speaker_a, conversation.speaker_b)
    return TypedMemory(sid, mem, tuple(facts), speakers, operator.name, times)


_PRESENT = re.compile(r"^\s*(what|which|who|where|how)\b.*\b(is|are|does|do)\b", re.I)
_PAST = re.compile(r"\b(did|was|were|had|has|have|when|ago|last|before|after|first)\b", re.I)


def asks_current(question: str) -> bool:
    """A question about the present state ("What is X's status?", "Where does X live?"):
    present-tense auxiliary and no past or time marker."""
    return _PRESENT.search(question) is not None and _PAST.search(question) is None


class TypedRetriever:
    """BM25 over the facts' texts, filtered and ranked with the bitemporal store.

    * Subject: when the question names exactly one of the conversation's speakers (first
      name), only that subject's facts are candidates (the flat store has no subject).
    * Current state: for a present-tense question (`asks_current`), a retrieved version that
      is no longer the key's current value is replaced by the key's current version
      (`Memory.resolve_at(key)`), dropping duplicates; with `overwrite=True` the store keeps
      only each key's latest version and retrieval sees nothing else (no history).
    * Unresolved: a version still PROPOSED, revoked, or on either side of an open conflict
      is never retrieved (toki never serves an unresolved conflict as a value, nor puts one
      in a prompt). Every hit carries its `status` ("current" or "superseded") as of now.
    """

    def __init__(
        self,
        typed: TypedMemory,
        *,
        tokenizer: Tokenizer | None = None,
        overwrite: bool = False,
        use_subject: bool = True,
        use_current: bool = True,
    ) -> None:
        self.typed = typed
        self.use_subject = use_subject
        self.use_current = use_current
        facts = list(typed.facts)
        if overwrite:
            latest: dict[FactKey, TypedFact] = {}
            for f in facts:
                latest[f.key] = f
            keep = {id(f) for f in latest.values()}
            facts = [f for f in facts if id(f) in keep]
        self.facts = facts
        self._chunks = [f.chunk() for f in facts]
        self._by_version = {f.version_id: i for i, f in enumerate(facts)}
        self._bm25 = BM25Retriever(
            self._chunks, tokenizer=tokenizer if tokenizer is not None else Tokenizer(stem=True)
        )
        self._subjects = {s.split()[0].lower(): s for s in typed.subjects if s.split()}

    def subject_of(self, question: str) -> str | None:
        """The one speaker the question names, else None."""
        words = {w.split("'")[0] for w in _WORDS.findall(question.lower())}
        named = [s for first, s in self._subjects.items() if first in words]
        return named[0] if len(named) == 1 else None

    def retrieve(self, query: str, k: int) -> list[Hit]:
        if k < 1:
            raise InvalidInput("k", f"must be at least 1, got {k}")
        scores = self._bm25.scores(query)
        if self.use_subject:
            subject = self.subject_of(query)
            if subject is not None:
                mask = np.array([f.key.subject == subject for f in self.facts], dtype=bool)
                scores = np.where(mask, scores, 0.0)
        order = np.argsort(-scores, kind="stable")
        current = self.use_current and asks_current(query)
        hits: list[Hit] = []
        seen: set[str] = set()
        for i in order:
            score = float(scores[i])
            if score <= 0.0 or len(hits) == k:
                break
            idx = int(i)
            if current:
                idx = self._current_index(idx)
            chunk = self._chunks[idx]
            status = self._status(idx)
            if chunk.id in seen or status is None:
                continue
            seen.add(chunk.id)
            hits.append(Hit(Chunk(chunk.id, chunk.text, {**chunk.metadata, "status": status}),
                            score, len(hits)))  # fmt: skip
        return hits

    def _status(self, idx: int) -> str | None:
        """ "current" or "superseded"; None for a version that is not settled."""
        fact = self.facts[idx]
        life = self.typed.memory.lifecycle(fact.version_id)
        if life in (Lifecycle.PROPOSED, Lifecycle.REVOKED):
            return None
        if any(fact.version_id in pair for pair in self.typed.memory.open_conflicts(fact.key)):
            return None
        return "superseded" if life is Lifecycle.SUPERSEDED else "current"

    def _current_index(self, idx: int) -> int:
        res = self.typed.memory.resolve_at(self.facts[idx].key)
        if res.is_value and len(res.version_ids) >= 1:
            for vid in reversed(res.version_ids):
                j = self._by_version.get(vid)
                if j is not None:
                    return j
        return idx


@dataclass(frozen=True, slots=True)
class TypedAnswerer:
    """Answers from typed facts: a temporal question gets the top fact's valid time rendered
    at the precision it was stated with (`time_label`; the year alone for "what year", month
    and year for "which month"); anything else goes to the extractive answerer."""

    extractive: ExtractiveAnswerer = field(default_factory=ExtractiveAnswerer)

    def answer(self, question: str, retrieved: Sequence[Hit], category: int | None = None) -> str:
        if retrieved and asks_for_time(question, category):
            top = retrieved[0].chunk
            may_abstain = self.extractive.abstain_categories is None or (
                category is not None and int(category) in self.extractive.abstain_categories
            )
            weak = self.extractive.support(question, top) < self.extractive.abstain_threshold
            label = top.metadata.get("time_label")
            start = top.metadata.get("valid_from")
            if (
                isinstance(label, str)
                and isinstance(start, datetime)
                and not (may_abstain and weak)
            ):
                q = question.lower()
                if re.search(r"\b(what|which|in which)\s+year\b", q):
                    return str(start.year)
                if re.search(r"\b(what|which|in which)\s+month\b", q):
                    return f"{_MONTHS[start.month - 1]} {start.year}"
                return label
        return self.extractive.answer(question, retrieved, category)


def typed_chunks(typed: TypedMemory) -> list[Chunk]:
    """Every fact version as a chunk (for inspection or another retriever)."""
    return [f.chunk() for f in typed.facts]


def describe_keys(typed: TypedMemory) -> dict[str, Any]:
    """Counts: facts, keys, keys with versions in more than one session, bound sources."""
    sessions: dict[FactKey, set[int]] = {}
    for f in typed.facts:
        sessions.setdefault(f.key, set()).add(f.session)
    sources: dict[str, int] = {}
    for f in typed.facts:
        sources[f.claim.when.source.value] = sources.get(f.claim.when.source.value, 0) + 1
    return {
        "facts": len(typed.facts),
        "keys": len(sessions),
        "keys_across_sessions": sum(1 for s in sessions.values() if len(s) > 1),
        "valid_from_sources": dict(sorted(sources.items())),
    }


def iter_versions(typed: TypedMemory, keys: Iterable[FactKey]) -> list[TypedFact]:
    """The facts written under the given keys, in write order."""
    wanted = set(keys)
    return [f for f in typed.facts if f.key in wanted]
