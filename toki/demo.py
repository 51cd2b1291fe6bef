"""The Lisbon → Berlin story from the seeds: why a memory needs two clocks.

`make run` prints it. Each answer is computed by the public API; the story only asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from toki.memory import Memory
from toki.model import FactKey, Resolution

__all__ = ["Story", "lisbon_berlin"]


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    valid_at: str | None
    system_as_of: str | None
    answer: Resolution

    def render(self) -> str:
        a = self.answer
        shown = repr(a.value) if a.kind == "value" else a.kind
        return f"  Q: {self.text}\n     -> {shown}"


@dataclass(frozen=True, slots=True)
class Story:
    narrative: tuple[str, ...]
    questions: tuple[Question, ...]
    history: tuple[str, ...]
    state_hash: str

    def render(self) -> str:
        lines = ["toki demo: Lisbon -> Berlin (valid time vs system time)", ""]
        lines += [f"  {n}" for n in self.narrative]
        lines.append("")
        lines += [q.render() for q in self.questions]
        lines += ["", "  History (each date labelled by its meaning):"]
        lines += [f"    - {h}" for h in self.history]
        lines += ["", f"  state hash: {self.state_hash}"]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "narrative": list(self.narrative),
            "questions": [
                {
                    "question": q.text,
                    "valid_at": q.valid_at,
                    "system_as_of": q.system_as_of,
                    "kind": q.answer.kind,
                    "value": q.answer.value,
                }
                for q in self.questions
            ],
            "history": list(self.history),
            "state_hash": self.state_hash,
        }


def lisbon_berlin() -> Story:
    """Build the story on a fixed clock so that its output is reproducible."""
    mem = Memory(clock=lambda: datetime(2026, 9, 1, tzinfo=UTC))
    city = FactKey(tenant="demo", subject="user-1", fact_key="city")
    lisbon = mem.assert_fact(
        city,
        "Lisbon",
        valid_from="2026-01-01T00:00:00Z",
        recorded_at="2026-02-01T00:00:00Z",
        source_id="msg-1",
    )
    mem.supersede(
        lisbon,
        "Berlin",
        valid_from="2026-07-03T00:00:00Z",
        recorded_at="2026-08-12T00:00:00Z",
        source_id="msg-2",
    )
    asks = [
        ("Where does the user live now (as we know now)?", None, None),
        (
            "Where did they live on 20 July, as we knew it on 1 August?",
            "2026-07-20T00:00:00Z",
            "2026-08-01T00:00:00Z",
        ),
        ("Where did they live on 20 July, as we know it now?", "2026-07-20T00:00:00Z", None),
        ("Where did they live in March?", "2026-03-15T00:00:00Z", None),
        ("Where did they live in December 2025?", "2025-12-15T00:00:00Z", None),
    ]
    questions = tuple(
        Question(text, valid_at, as_of, mem.resolve_at(city, valid_at, as_of))
        for text, valid_at, as_of in asks
    )
    return Story(
        narrative=(
            "1 Feb 2026, msg-1: 'I live in Lisbon' (since 1 Jan 2026).",
            "12 Aug 2026, msg-2: 'I moved to Berlin on 3 July.'",
            "The clock reads 1 Sep 2026.",
        ),
        questions=questions,
        history=tuple(entry.render() for entry in mem.history(city)),
        state_hash=mem.state_hash(),
    )
