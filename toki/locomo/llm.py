"""The three roles a language model plays in the LoCoMo ablations: answerer, extractor, judge.

Each is a thin layer over `toki.llm.LLMClient`: a fixed prompt (written out in
docs/locomo.md), the inputs it is filled with (which, with the prompt, make θ), and a parser
that never crashes on what comes back. A response that does not parse is counted on the
role (`malformed`) and handled by a written rule: the answerer answers "", the extractor falls
back to `RuleExtractor` for the statements it could not read (so both ablation arms keep the
same texts), the judge gives no verdict (the question leaves the J score's pairs).
"""

from __future__ import annotations

import calendar
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any, Protocol, runtime_checkable

from toki.llm import LLMClient, Prompt
from toki.locomo.answer import NOT_MENTIONED, render_date
from toki.locomo.retrieval import Chunk, Hit
from toki.locomo.typed import ExtractedClaim, RuleExtractor, SessionText, TimeExpr
from toki.time import BoundSource

__all__ = [
    "ANSWER_PROMPT",
    "EXTRACT_PROMPT",
    "JUDGE_PROMPT",
    "AnswerJudge",
    "LLMAnswerJudge",
    "LLMAnswerer",
    "LLMExtractor",
    "clean_answer",
    "parse_json_object",
    "render_item",
]

ANSWER_PROMPT = Prompt(
    name="locomo-answer/1",
    system=(
        "You answer a question about two people using only the memories listed, which were "
        "taken from their past conversations. Reply with a short phrase (a few words), using "
        "the words of the memories where you can; no explanation. For a question about time, "
        'reply with the date, month or year as the memories give it (e.g. "7 May 2023", '
        '"June 2023", "2022"), resolving relative times such as "last week" against the date '
        "the memory was said on. If the memories do not contain the answer, reply exactly: "
        f"{NOT_MENTIONED}"
    ),
    user="Memories (most relevant first):\n$memories\n\nQuestion: $question\nAnswer:",
    max_tokens=64,
)

EXTRACT_PROMPT = Prompt(
    name="locomo-extract/1",
    system=(
        "You turn statements about two people into typed facts for a memory store that keeps "
        "every version of a fact. For each numbered statement give one fact with these fields: "
        '"item": the statement\'s number; "subject": the name of the speaker the fact is '
        'about (one of the speakers listed, spelled as given); "predicate": a short snake_case '
        "key naming what the fact is about, chosen so that a later statement updating the same "
        'thing gets the same key (e.g. "job", "home_city", "relationship_status", "pet"); '
        '"valid_from": when the fact began to hold, as "YYYY-MM-DD", "YYYY-MM" or "YYYY", '
        'resolving relative expressions ("yesterday", "last week", "two years ago") against '
        "the session date, or null when neither the statement nor its stated date says when; "
        '"time_quote": the exact words of the statement or of its stated date that give '
        'valid_from, or null. Reply with JSON only: {"facts": [...]}.'
    ),
    user="Speakers: $speakers\nSession date: $session_date\nStatements:\n$statements",
    max_tokens=4096,
    json_object=True,
)

JUDGE_PROMPT = Prompt(
    name="locomo-judge/1",
    system=(
        "You grade an answer to a question one person asked about another, whose answer is in "
        "their past conversations. Compare the generated answer with the gold answer and "
        "label it CORRECT or WRONG. Be generous: a longer answer is CORRECT when it is about "
        "the same thing as the gold answer and does not contradict it. For a question about "
        "time, an answer naming the same date, month, year or period is CORRECT even in "
        'another format ("May 7th" for "7 May 2023") or as a relative time that resolves to '
        'it. Reply with JSON only: {"label": "CORRECT"} or {"label": "WRONG"}.'
    ),
    user="Question: $question\nGold answer: $gold\nGenerated answer: $answer",
    max_tokens=32,
    json_object=True,
)

_THINK = re.compile(r"^\s*<think>.*?</think>", re.S)
_ANSWER_PREFIX = re.compile(r"^\s*(answer\s*:\s*)", re.I)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)
_PARTIAL_DATE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")
_MONTHS = tuple(calendar.month_name)[1:]


# -- rendering memory items ----------------------------------------------------------------


def _day(v: Any) -> str | None:
    if isinstance(v, datetime):
        return render_date(v.astimezone(UTC).date())
    if isinstance(v, date):
        return render_date(v)
    return None


def render_item(chunk: Chunk) -> str:
    """One memory as the answerer's prompt shows it: the text, then what the memory layer
    knows about it. A typed fact shows its subject, its valid time with where the bound came
    from, when it was recorded and whether a later statement superseded it; a flat chunk
    shows only the date of the session it was said in."""
    m = chunk.metadata
    text = " ".join(chunk.text.split())
    if "subject" in m and "valid_from" in m:
        parts = [f"about {m['subject']}"]
        if m.get("valid_source") == BoundSource.EVIDENCE.value and m.get("time_label"):
            parts.append(f"holds from {m['time_label']} (stated)")
        else:
            parts.append("start not stated")
        said = _day(m.get("recorded_at"))
        if said:
            parts.append(f"said on {said}")
        if m.get("status") == "superseded":
            parts.append("superseded by a later statement")
        return f"- {text} ({'; '.join(parts)})"
    said = _day(m.get("date")) or _day(m.get("session_date"))
    return f"- {text} (said on {said})" if said else f"- {text}"


def clean_answer(text: str) -> str:
    """The answer in a reply: a leading <think>…</think> block, an "Answer:" prefix and
    surrounding quotes and whitespace removed; only the first non-empty line is kept."""
    s = _THINK.sub("", text)
    lines = [ln.strip() for ln in s.strip().splitlines() if ln.strip()]
    s = lines[0] if lines else ""
    s = _ANSWER_PREFIX.sub("", s).strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "\"'":
        s = s[1:-1].strip()
    return s


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The JSON object in a reply (a ```json fence or text around the braces tolerated), or
    None when there is none."""
    s = _THINK.sub("", text).strip()
    fence = _FENCE.match(s)
    if fence:
        s = fence.group(1)
    for candidate in (s, s[s.find("{") : s.rfind("}") + 1] if "{" in s else ""):
        if not candidate:
            continue
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict):
            return data
    return None


# -- the answerer ---------------------------------------------------------------------------


@dataclass
class LLMAnswerer:
    """An `Answerer`: the question and the retrieved memories (`render_item`, best first) go
    to the model with `ANSWER_PROMPT`. The LoCoMo category is not shown (the model must not
    learn from the benchmark's labels). With nothing retrieved it answers `NOT_MENTIONED`
    without a call. A reply with no text counts as malformed and answers ""."""

    client: LLMClient
    prompt: Prompt = ANSWER_PROMPT
    malformed: int = 0
    calls: int = 0

    def inputs(self, question: str, retrieved: Sequence[Hit]) -> dict[str, str]:
        return {
            "memories": "\n".join(render_item(h.chunk) for h in retrieved),
            "question": " ".join(question.split()),
        }

    def answer(self, question: str, retrieved: Sequence[Hit], category: int | None = None) -> str:
        if not retrieved:
            return NOT_MENTIONED
        self.calls += 1
        c = self.client.complete(self.prompt, self.inputs(question, retrieved), label="answer")
        if c.text is None and self.client.dry_run:
            # one placeholder per distinct request, so a judge plans one call per answer
            return f"[dry run {c.theta.digest}]"
        if c.text is None:
            self.malformed += 1
            return ""
        return clean_answer(c.text)

    def costs(self) -> dict[str, int]:
        return {"questions_sent": self.calls, "malformed": self.malformed}


# -- the extractor --------------------------------------------------------------------------


def _norm(s: str) -> str:
    return " ".join(s.lower().split())


def _speaker_of(name: object, speakers: Sequence[str]) -> str | None:
    if not isinstance(name, str) or not name.strip():
        return None
    n = _norm(name)
    for s in speakers:
        if n == _norm(s) or n == _norm(s).split()[0]:
            return s
    return None


def _speakers(texts: Sequence[SessionText]) -> tuple[str, ...]:
    """The speakers a session's statements are filed under (first mention first)."""
    return tuple(dict.fromkeys(t.speaker for t in texts))


def _predicate(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    p = re.sub(r"[^a-z0-9]+", "_", value.lower()).strip("_")
    return p[:64] if p else None


def _time_expr(value: object, quote: object, text: SessionText) -> tuple[TimeExpr | None, bool]:
    """(the valid-time start, whether a given date was dropped as unsupported). A date is kept
    only when `quote` occurs in the statement or its stated date: toki never invents
    precision, so an unsupported date becomes the session date, ASSUMED."""
    if value is None:
        return None, False
    if not isinstance(value, str):
        return None, True
    m = _PARTIAL_DATE.match(value.strip())
    if m is None:
        return None, True
    year, month, day = int(m.group(1)), m.group(2), m.group(3)
    try:
        start = date(year, int(month) if month else 1, int(day) if day else 1)
    except ValueError:
        return None, True
    sources = [_norm(text.text)]
    if text.date is not None:
        d = text.date
        sources += [_norm(render_date(d)), _norm(f"{d.day} {_MONTHS[d.month - 1]}, {d.year}")]
    if (
        not isinstance(quote, str)
        or not quote.strip()
        or not any(_norm(quote) in s for s in sources)
    ):
        return None, True
    if day:
        label, gran = render_date(start), "day"
    elif month:
        label, gran = f"{_MONTHS[start.month - 1]} {start.year}", "month"
    else:
        label, gran = str(start.year), "year"
    at = datetime(start.year, start.month, start.day, tzinfo=UTC)
    return TimeExpr(at, label, gran, BoundSource.EVIDENCE), False


@dataclass
class LLMExtractor:
    """An `Extractor`: one call per session with `EXTRACT_PROMPT`; the reply is validated
    fact by fact. A fact is kept when its item names a statement not yet covered, its
    subject is a speaker the session's statements are filed under and its predicate is
    non-empty (normalised to snake_case). Its `valid_from` is EVIDENCE only when
    `time_quote` occurs in the statement or its stated date; otherwise the start is the
    session date, ASSUMED (counted in `unsupported_times`). Every statement the reply does not
    cover validly goes through `RuleExtractor` instead (counted in `fallback_statements`), so
    the typed arm holds exactly the texts the flat arm does."""

    client: LLMClient
    prompt: Prompt = EXTRACT_PROMPT
    fallback: RuleExtractor = field(default_factory=RuleExtractor)
    responses: int = 0
    malformed: int = 0
    rejected_facts: int = 0
    fallback_statements: int = 0
    unsupported_times: int = 0

    def inputs(self, session_time: datetime, texts: Sequence[SessionText]) -> dict[str, str]:
        lines = []
        for i, t in enumerate(texts, 1):
            stated = f" (stated date: {render_date(t.date)})" if t.date is not None else ""
            lines.append(f"{i}. [{t.speaker}] {' '.join(t.text.split())}{stated}")
        return {
            "speakers": ", ".join(_speakers(texts)),
            "session_date": render_date(session_time.date()),
            "statements": "\n".join(lines),
        }

    def extract(self, session_time: datetime, texts: Sequence[SessionText]) -> list[ExtractedClaim]:
        if not texts:
            return []
        speakers = _speakers(texts)
        self.responses += 1
        c = self.client.complete(
            self.prompt, self.inputs(session_time, texts), label=f"extract {session_time:%Y-%m-%d}"
        )
        data = parse_json_object(c.text) if c.text is not None else None
        facts = data.get("facts") if data is not None else None
        if not isinstance(facts, list):
            self.malformed += 0 if self.client.dry_run else 1
            facts = []
        rules = self.fallback.extract(session_time, texts)
        chosen: dict[int, ExtractedClaim] = {}
        for f in facts:
            claim = self._claim(f, texts, speakers, rules, session_time.date(), chosen)
            if claim is None:
                self.rejected_facts += 1
            else:
                chosen[claim[0]] = claim[1]
        out = []
        for i, rule in enumerate(rules):
            if i in chosen:
                out.append(chosen[i])
            else:
                self.fallback_statements += 1
                out.append(rule)
        return out

    def _claim(
        self,
        f: object,
        texts: Sequence[SessionText],
        speakers: Sequence[str],
        rules: Sequence[ExtractedClaim],
        said_on: date,
        chosen: Mapping[int, ExtractedClaim],
    ) -> tuple[int, ExtractedClaim] | None:
        if not isinstance(f, dict):
            return None
        item = f.get("item")
        if isinstance(item, str) and item.strip().isdigit():
            item = int(item)
        if not isinstance(item, int) or isinstance(item, bool) or not 1 <= item <= len(texts):
            return None
        i = item - 1
        subject = _speaker_of(f.get("subject"), speakers)
        predicate = _predicate(f.get("predicate"))
        if i in chosen or subject is None or predicate is None:
            return None
        text, rule = texts[i], rules[i]
        when, dropped = _time_expr(f.get("valid_from"), f.get("time_quote"), text)
        if dropped:
            self.unsupported_times += 1
        if when is None:
            when = TimeExpr(
                datetime(said_on.year, said_on.month, said_on.day, tzinfo=UTC),
                render_date(said_on),
                "day",
                BoundSource.ASSUMED,
            )
        return i, ExtractedClaim(
            subject=subject,
            predicate=predicate,
            text=rule.text,
            when=when,
            source_id=rule.source_id,
            evidence=rule.evidence,
            kind=rule.kind,
            item=rule.item,
        )

    def costs(self) -> dict[str, int]:
        return {
            "sessions_sent": self.responses,
            "malformed": self.malformed,
            "rejected_facts": self.rejected_facts,
            "fallback_statements": self.fallback_statements,
            "unsupported_times": self.unsupported_times,
        }


# -- the judge ------------------------------------------------------------------------------


@runtime_checkable
class AnswerJudge(Protocol):
    """Grades a prediction against the gold answer: True (correct), False (wrong) or None
    (no verdict). The J score is the share of questions graded correct."""

    def grade(self, question: str, gold: str, prediction: str) -> bool | None: ...


_LABEL = re.compile(r"\b(CORRECT|WRONG)\b")


@dataclass
class LLMAnswerJudge:
    """LLM-as-judge with `JUDGE_PROMPT` (toki's wording of the generous CORRECT/WRONG rule
    memory-system papers use for LoCoMo's J score). An empty prediction is WRONG without a
    call. A reply that is neither {"label": ...} nor text holding exactly one of the two
    labels gives no verdict and counts as malformed."""

    client: LLMClient
    prompt: Prompt = JUDGE_PROMPT
    calls: int = 0
    malformed: int = 0

    def grade(self, question: str, gold: str, prediction: str) -> bool | None:
        if not prediction.strip():
            return False
        self.calls += 1
        inputs = {
            "question": " ".join(question.split()),
            "gold": " ".join(gold.split()),
            "answer": " ".join(prediction.split()),
        }
        c = self.client.complete(self.prompt, inputs, label="judge")
        verdict = _verdict(c.text) if c.text is not None else None
        if verdict is None and not self.client.dry_run:
            self.malformed += 1
        return verdict

    def costs(self) -> dict[str, int]:
        return {"answers_sent": self.calls, "malformed": self.malformed}


def _verdict(text: str) -> bool | None:
    data = parse_json_object(text)
    if data is not None:
        label = data.get("label")
        if isinstance(label, str) and label.strip().upper() in ("CORRECT", "WRONG"):
            return label.strip().upper() == "CORRECT"
        return None
    found = set(_LABEL.findall(_THINK.sub("", text).upper()))
    return (found == {"CORRECT"}) if len(found) == 1 else None
