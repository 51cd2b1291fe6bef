"""The host halves of the Graphiti and LangMem adapters, without the libraries: the stub
LLM's answers keep the model's decision rules for any candidates the library shows it
(hypothesis, fixed seed printed by hypothesis on failure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toki.real.adapters.graphiti import PROMPT, GraphitiHost, parse_fact
from toki.real.adapters.langchain import LangMemHost, parse_text
from toki.real.gate import GatePoint
from toki.systems.base import SimJudge

KEYS = st.sampled_from(["alice:manager", "alice:city", "bob:manager"])
VALUES = st.sampled_from(["Bob", "Carol", "Dave", "Erin"])
FACTS = st.tuples(KEYS, VALUES).map(lambda kv: f"{kv[0]} is {kv[1]}")


def llm_point(detail: dict) -> GatePoint:  # type: ignore[type-arg]
    return GatePoint(0, "llm", f"llm.{detail.get('prompt', 'manage')}", detail)


@settings(max_examples=200, deadline=None)
@given(
    key=KEYS,
    value=VALUES,
    existing=st.lists(FACTS, max_size=3),
    invalidation=st.lists(FACTS, max_size=3),
    seed=st.integers(0, 50),
)
def test_graphiti_resolve_edge_follows_the_model(
    key: str, value: str, existing: list[str], invalidation: list[str], seed: int
) -> None:
    ex = [{"idx": i, "fact": f} for i, f in enumerate(existing)]
    inv = [{"idx": len(existing) + i, "fact": f} for i, f in enumerate(invalidation)]
    detail = {
        "prompt": "dedupe_edges.resolve_edge",
        "claim": {"key": key, "value": value},
        "new_edge": f"{key} is {value}",
        "existing_edges": ex,
        "invalidation_candidates": inv,
    }
    judge = SimJudge(0.5, seed)
    reply = GraphitiHost().answer(llm_point(detail), judge)
    facts = {c["idx"]: parse_fact(c["fact"]) for c in ex + inv}
    stated = any(f == (key, value) for f in facts.values())
    # duplicates: only EXISTING FACTS that state exactly the new fact
    assert all(facts[i] == (key, value) and i < len(ex) for i in reply["duplicate_facts"])
    if stated:  # the model asks nothing when a candidate already states the value
        assert reply["contradicted_facts"] == []
        return
    # contradicted: same key, another value, and the judge said yes to the model's question
    for i, fact in facts.items():
        assert fact is not None
        question = f"{PROMPT}: {key}: does {value!r} contradict {fact[1]!r}?"
        expect = fact[0] == key and judge.pick(question, ["no", "yes"]) == "yes"
        assert (i in reply["contradicted_facts"]) == expect


@settings(max_examples=200, deadline=None)
@given(
    key=KEYS,
    value=VALUES,
    docs=st.lists(FACTS, max_size=3, unique=True),
    seed=st.integers(0, 50),
)
def test_langmem_manager_answers_never_touch_another_key(
    key: str, value: str, docs: list[str], seed: int
) -> None:
    existing = [{"id": f"d{i}", "kind": "Memory", "content": t} for i, t in enumerate(docs)]
    detail = {
        "claim": {"key": key, "value": value},
        "tools": ["PatchDoc", "Memory", "RemoveDoc"],
        "existing": existing,
    }
    calls = LangMemHost().answer(llm_point(detail), SimJudge(0.5, seed))["tool_calls"]
    same = {d["id"] for d in existing if (p := parse_text(d["content"])) and p[0] == key}
    touched = {c["args"]["json_doc_id"] for c in calls if c["name"] in ("PatchDoc", "RemoveDoc")}
    assert touched <= same
    if any(parse_text(d["content"]) == (key, value) for d in existing):
        assert calls == []  # already stated: nothing to record
    else:
        written = [c for c in calls if c["name"] in ("Memory", "PatchDoc")]
        assert len(written) == 1  # exactly one write of the new value
        if not same:
            assert calls == [{"name": "Memory", "args": {"content": f"{key} is {value}"}}]
