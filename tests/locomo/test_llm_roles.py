"""The LLM answerer, extractor and judge, and `toki locomo ablate --answerer llm`, against a
stub OpenAI-compatible server on 127.0.0.1 that plays a deterministic model."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.llm_stub import StubServer
from toki.algebra import AWAIT
from toki.llm import CacheMiss, LLMClient, LLMConfig, ResponseCache
from toki.locomo import LocomoDataset, build_typed_memory, run_ablations
from toki.locomo.ablations import typed_answers
from toki.locomo.cli import main
from toki.locomo.llm import (
    ANSWER_PROMPT,
    EXTRACT_PROMPT,
    JUDGE_PROMPT,
    LLMAnswerer,
    LLMAnswerJudge,
    LLMExtractor,
    clean_answer,
    parse_json_object,
    render_item,
)
from toki.locomo.retrieval import Chunk
from toki.locomo.typed import RuleExtractor, SessionText
from toki.time import BoundSource

from .conftest import invented_sample

_STATEMENT = re.compile(r"^(\d+)\. \[([^\]]+)\] (.*?)(?: \(stated date: .*\))?$")


def fake_model(body: dict[str, Any]) -> str:
    """A deterministic stand-in for a model, one behaviour per prompt."""
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if system == ANSWER_PROMPT.system:
        first = next(line for line in user.splitlines() if line.startswith("- "))
        return first[2:].rsplit(" (", 1)[0]
    if system == EXTRACT_PROMPT.system:
        said = datetime.strptime(re.search(r"Session date: (.*)", user).group(1), "%d %B %Y")  # type: ignore[union-attr]
        facts = []
        for line in user.splitlines():
            m = _STATEMENT.match(line)
            if m is None:
                continue
            text = m.group(3)
            pred = "job" if " works as " in text else text.split()[1]
            fact: dict[str, Any] = {
                "item": int(m.group(1)),
                "subject": m.group(2),
                "predicate": pred,
                "valid_from": None,
                "time_quote": None,
            }
            if "yesterday" in text:
                fact["valid_from"] = (said - timedelta(days=1)).strftime("%Y-%m-%d")
                fact["time_quote"] = "yesterday"
            facts.append(fact)
        return "```json\n" + json.dumps({"facts": facts}) + "\n```"
    if system == JUDGE_PROMPT.system:
        gold = re.search(r"Gold answer: (.*)", user).group(1)  # type: ignore[union-attr]
        answer = re.search(r"Generated answer: (.*)", user).group(1)  # type: ignore[union-attr]
        return json.dumps({"label": "CORRECT" if gold.lower() in answer.lower() else "WRONG"})
    raise AssertionError("unknown prompt")


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer(fake_model) as s:
        yield s


def make_client(stub: StubServer, cache: Path | None = None, **kw: Any) -> LLMClient:
    return LLMClient(LLMConfig(stub.base_url, "stub-model"), cache, environ={}, **kw)


def roles(client: LLMClient) -> dict[str, Any]:
    return {
        "answerer": LLMAnswerer(client),
        "extractor": LLMExtractor(client),
        "judge": LLMAnswerJudge(client),
    }


def test_llm_ablations_rerun_from_the_cache_with_zero_calls(
    stub: StubServer, invented: LocomoDataset, tmp_path: Path
) -> None:
    path = tmp_path / "cache.sqlite"
    first = make_client(stub, path)
    a = run_ablations(invented, resamples=200, **roles(first))
    assert first.stats.calls > 0 and first.stats.malformed == 0
    first.cache.close()
    second = make_client(stub, path)
    b = run_ablations(invented, resamples=200, **roles(second))
    assert a == b
    assert second.stats.calls == 0 and second.stats.requests == 0
    assert second.stats.cache_hits == first.stats.calls + first.stats.cache_hits
    # J rows beside the F1 rows, and the J score is what the judge said
    j = [r for r in a if r["metric"] == "llm_judge" and r["kind"] == "score"]
    assert {(r["ablation"], r["variant"]) for r in j} >= {
        ("typed_layer", "typed"),
        ("typed_layer", "flat"),
    }
    typed_all = next(r for r in j if r["variant"] == "typed" and r["category"] == "all")
    assert typed_all["n"] == 4 and typed_all["no_verdict"] == 0
    # the LLM keys ("job") make Ada's three jobs versions of one key: superseded twice
    sup = next(
        r
        for r in a
        if r["ablation"] == "audit_rows"
        and r["slice"] == "superseded"
        and r["variant"] == "dual_row"
    )
    assert sup["kind"] == "check" and sup["n"] == 2 and sup["holds"]


def test_offline_run_names_the_first_missing_entry(
    stub: StubServer, invented: LocomoDataset, tmp_path: Path
) -> None:
    off = make_client(stub, tmp_path / "empty.sqlite", offline=True)
    with pytest.raises(CacheMiss, match=r"extract 2021-03-01.*θ [0-9a-f]{32}"):
        run_ablations(invented, resamples=50, **roles(off))
    assert stub.requests == []


def test_unresolved_conflicts_never_enter_a_prompt(
    stub: StubServer, invented: LocomoDataset
) -> None:
    client = make_client(stub)
    tm = build_typed_memory(
        invented.conversations[0], operator=AWAIT, extractor=LLMExtractor(client)
    )
    typed_answers(invented, [tm], answerer=LLMAnswerer(client))
    prompts = [
        r["body"]["messages"][1]["content"]
        for r in stub.requests
        if r["body"]["messages"][0]["content"] == ANSWER_PROMPT.system
    ]
    assert prompts, "the answerer was called"
    # AWAIT without a confirmer leaves the nurse and pilot claims PROPOSED, conflict open
    assert not any("nurse" in p or "pilot" in p for p in prompts)
    assert any("baker" in p for p in prompts)


def test_malformed_extraction_falls_back_to_rules_and_keeps_every_text(
    invented: LocomoDataset,
) -> None:
    with StubServer(lambda body: "I cannot help with that.") as s:
        ext = LLMExtractor(make_client(s))
        conv = invented.conversations[0]
        tm = build_typed_memory(conv, extractor=ext)
        rule = build_typed_memory(conv)
    assert [f.claim for f in tm.facts] == [f.claim for f in rule.facts]
    assert ext.malformed == ext.responses == 3
    assert ext.fallback_statements == len(tm.facts) == 6


SESSION = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
TEXTS = [
    SessionText("observation", 0, "Ada", "Ada moved to Oslo last month.", ("D1:1",)),
    SessionText("observation", 1, "Ada", "Ada adopted a cat.", ("D1:2",)),
    SessionText("event", 0, "Bo", "Bo ran a race.", (), date(2023, 5, 6)),
    SessionText("observation", 2, "Bo", "Bo likes tea.", ("D1:4",)),
]


def canned(reply: str | Callable[[dict[str, Any]], str]) -> StubServer:
    return StubServer(reply if callable(reply) else (lambda body: reply))


def test_extractor_validates_each_fact() -> None:
    facts = [
        {
            "item": 1,
            "subject": "ada",
            "predicate": "Home City",
            "valid_from": "2023-04",
            "time_quote": "last month",
        },
        {"item": 1, "subject": "Ada", "predicate": "dup", "valid_from": None},  # covered
        {
            "item": 2,
            "subject": "Ada",
            "predicate": "pet",
            "valid_from": "2020-01-01",
            "time_quote": "in 2020",
        },  # the quote is not in the statement: no invented date
        {
            "item": 3,
            "subject": "Bo",
            "predicate": "race",
            "valid_from": "2023-05-06",
            "time_quote": "6 May 2023",
        },  # from the stated date
        {"item": 4, "subject": "Carol", "predicate": "tea"},  # not a speaker
        {"item": 9, "subject": "Bo", "predicate": "x"},  # no such statement
        "not an object",
    ]
    with canned(json.dumps({"facts": facts})) as s:
        ext = LLMExtractor(make_client(s))
        out = ext.extract(SESSION, TEXTS)
        sent = s.requests[0]["body"]["messages"][1]["content"]
    assert "Speakers: Ada, Bo" in sent and "Session date: 8 May 2023" in sent
    assert "3. [Bo] Bo ran a race. (stated date: 6 May 2023)" in sent
    assert [c.text for c in out] == [t.text for t in TEXTS]
    assert [c.predicate for c in out[:3]] == ["home_city", "pet", "race"]
    assert out[0].subject == "Ada"
    assert (out[0].when.label, out[0].when.granularity, out[0].when.source) == (
        "April 2023",
        "month",
        BoundSource.EVIDENCE,
    )
    assert out[1].when.source is BoundSource.ASSUMED and out[1].when.label == "8 May 2023"
    assert out[2].when.label == "6 May 2023" and out[2].when.source is BoundSource.EVIDENCE
    assert out[3] == RuleExtractor().extract(SESSION, TEXTS)[3]  # fallback
    assert (ext.rejected_facts, ext.fallback_statements, ext.unsupported_times) == (4, 1, 1)
    assert ext.malformed == 0


def test_answerer_prompt_and_cleaning() -> None:
    with canned('<think>hmm</think>\nAnswer: "Oslo"\nbecause...') as s:
        client = make_client(s)
        ans = LLMAnswerer(client)
        hits = build_typed_hits()
        assert ans.answer("Where did Ada move?", hits, category=5) == "Oslo"
        assert ans.answer("Anything?", []) == "Not mentioned in the conversation"
        user = s.requests[0]["body"]["messages"][1]["content"]
    assert len(s.requests) == 1  # nothing retrieved: no call
    assert "category" not in user.lower() and "Question: Where did Ada move?" in user
    assert user.splitlines()[1].startswith("- Ada moved to Oslo last month. (about Ada")


def build_typed_hits() -> list[Any]:
    from toki.locomo.retrieval import Hit

    chunk = Chunk(
        "v1",
        "Ada moved to Oslo last month.",
        {
            "subject": "Ada",
            "valid_from": datetime(2023, 4, 1, tzinfo=UTC),
            "valid_source": "evidence",
            "time_label": "April 2023",
            "recorded_at": SESSION,
            "status": "superseded",
        },
    )
    return [Hit(chunk, 1.0, 0)]


def test_render_item_shows_what_each_layer_knows() -> None:
    typed = build_typed_hits()[0].chunk
    assert render_item(typed) == (
        "- Ada moved to Oslo last month. (about Ada; holds from April 2023 (stated); "
        "said on 8 May 2023; superseded by a later statement)"
    )
    assumed = Chunk(
        "v2",
        "Ada likes tea.",
        {
            "subject": "Ada",
            "valid_from": SESSION,
            "valid_source": "assumed",
            "recorded_at": SESSION,
            "status": "current",
        },
    )
    assert (
        render_item(assumed) == "- Ada likes tea. (about Ada; start not stated; said on 8 May 2023)"
    )
    flat = Chunk("c", "Ada likes  tea.", {"date": date(2023, 5, 8), "speaker": "Ada"})
    assert render_item(flat) == "- Ada likes tea. (said on 8 May 2023)"


@pytest.mark.parametrize(
    ("reply", "verdict", "malformed"),
    [
        ('{"label": "CORRECT"}', True, 0),
        ('```json\n{"label": "wrong"}\n```', False, 0),
        ("The answer is CORRECT.", True, 0),
        ("CORRECT or WRONG, hard to say", None, 1),
        ('{"label": "maybe"}', None, 1),
        ("", None, 1),
    ],
)
def test_judge_parses_its_verdict(reply: str, verdict: bool | None, malformed: int) -> None:
    with canned(reply) as s:
        judge = LLMAnswerJudge(make_client(s))
        assert judge.grade("When?", "7 May 2023", "May 7th") is verdict
        assert judge.malformed == malformed
        assert judge.grade("When?", "7 May 2023", "  ") is False  # empty: wrong, no call
        assert len(s.requests) == 1


def test_clean_answer_and_parse_json_object() -> None:
    assert clean_answer("  'Lyon'  ") == "Lyon"
    assert clean_answer("answer: a red kite\nsecond line") == "a red kite"
    assert clean_answer("<think>\nlong\n</think>\n\n7 May 2023") == "7 May 2023"
    assert clean_answer("") == ""
    assert parse_json_object('Sure! {"facts": []} Hope that helps') == {"facts": []}
    assert parse_json_object("[1, 2]") is None
    assert parse_json_object("{not json}") is None


# -- the command ------------------------------------------------------------------------


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    p = tmp_path / "locomo10.json"
    p.write_text(json.dumps([invented_sample()]))
    return p


def _cli(stub: StubServer, data_file: Path, cache: Path, *extra: str) -> list[str]:
    return [
        "ablate",
        "--path",
        str(data_file),
        "--answerer",
        "llm",
        "--judge",
        "llm",
        "--base-url",
        stub.base_url,
        "--model",
        "stub-model",
        "--cache",
        str(cache),
        "--resamples",
        "100",
        "--json",
        "--quiet",
        *extra,
    ]


def test_cli_llm_run_writes_costs_with_the_results(
    stub: StubServer, data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "c.sqlite"
    assert main(_cli(stub, data_file, cache)) == 0
    rows = json.loads(capsys.readouterr().out)
    run = rows[-1]
    assert run["kind"] == "run" and run["llm"]["model"] == "stub-model"
    assert run["costs"]["calls"] == len(stub.requests) > 0
    assert run["costs"]["tokens_in"] > 0 and set(run["prompts"]) == {
        ANSWER_PROMPT.name,
        JUDGE_PROMPT.name,
    }
    assert run["roles"]["answerer"]["malformed"] == 0
    calls = len(stub.requests)
    assert main(_cli(stub, data_file, cache, "--offline")) == 0
    again = json.loads(capsys.readouterr().out)
    assert again[:-1] == rows[:-1] and again[-1]["costs"]["calls"] == 0
    assert len(stub.requests) == calls
    with ResponseCache(cache) as c:
        assert len(c) == calls


def test_cli_dry_run_and_offline_miss(
    stub: StubServer, data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_cli(stub, data_file, tmp_path / "c.sqlite", "--dry-run")) == 0
    [plan] = json.loads(capsys.readouterr().out)
    assert plan["dry_run"] and plan["costs"]["planned"] > 0 and stub.requests == []
    assert main(_cli(stub, data_file, tmp_path / "d.sqlite", "--offline")) == 2
    err = capsys.readouterr().err
    assert "offline: no cached response for answer" in err and stub.requests == []


def test_cli_refuses_model_options_without_a_model_role(
    data_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ablate", "--path", str(data_file), "--offline"]) == 2
    assert "model role" in capsys.readouterr().err
    assert main(["ablate", "--path", str(data_file), "--answerer", "llm"]) == 2
    assert "--base-url" in capsys.readouterr().err


def test_the_docs_write_down_every_prompt() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "locomo.md"
    text = " ".join(docs.read_text(encoding="utf-8").split())
    for prompt in (ANSWER_PROMPT, EXTRACT_PROMPT, JUDGE_PROMPT):
        assert " ".join(prompt.system.split()) in text, prompt.name
        assert " ".join(prompt.user.split()) in text, prompt.name


def _offline(reply: str, prompt: Any, inputs: dict[str, str]) -> LLMClient:
    """An offline client whose cache already holds `reply` for this request: no server."""
    client = LLMClient(LLMConfig("http://127.0.0.1:1/v1", "m"), environ={}, offline=True)
    theta = client.theta(prompt, inputs)
    client.cache.put(theta, prompt.name, client.request_body(prompt, inputs), "{}", reply)
    return client


_VALUES = st.one_of(
    st.none(),
    st.integers(-2, 6),
    st.booleans(),
    st.sampled_from(
        [
            "Ada",
            "bo",
            "Carol",
            "job",
            "Home City",
            "",
            "2023",
            "2023-04",
            "2023-04-31",
            "2023-05-06",
            "last month",
            "6 May 2023",
            "3",
        ]
    ),
    st.text(max_size=8),
)
# mostly well-formed facts with one field or another wrong, plus arbitrary objects
_FACT = st.one_of(
    st.fixed_dictionaries(
        {
            "item": st.one_of(st.integers(1, 4), st.sampled_from([0, 5, "2", True, None])),
            "subject": st.one_of(
                st.sampled_from(["Ada", "bo", "Bo"]), st.sampled_from(["Carol", "", None, 3])
            ),
            "predicate": st.one_of(
                st.sampled_from(["job", "Home City"]), st.sampled_from(["", None, "!!", 7])
            ),
            "valid_from": st.one_of(
                st.sampled_from(["2023", "2023-04", "2023-05-06"]),
                st.sampled_from([None, "2023-04-31", "May", 5]),
            ),
            "time_quote": st.sampled_from(
                [None, "", "last month", "6 May 2023", "in 2020", "tea", "race", 3]
            ),
        }
    ),
    st.dictionaries(
        st.sampled_from(["item", "subject", "predicate", "valid_from", "time_quote"]), _VALUES
    ),
)
_REPLY = st.one_of(
    st.lists(st.one_of(_FACT, _VALUES), max_size=8).map(lambda fs: json.dumps({"facts": fs})),
    st.text(max_size=40),
    _VALUES.map(json.dumps),
)


@settings(max_examples=300)
@given(_REPLY)
def test_any_extraction_reply_keeps_every_text_and_never_invents_a_date(reply: str) -> None:
    probe = LLMExtractor(LLMClient(LLMConfig("http://127.0.0.1:1/v1", "m"), environ={}))
    ext = LLMExtractor(_offline(reply, EXTRACT_PROMPT, probe.inputs(SESSION, TEXTS)))
    out = ext.extract(SESSION, TEXTS)
    rules = RuleExtractor().extract(SESSION, TEXTS)
    assert [(c.text, c.source_id, c.item) for c in out] == [
        (r.text, r.source_id, r.item) for r in rules
    ]
    assert ext.fallback_statements == sum(1 for c, r in zip(out, rules, strict=True) if c == r)
    data = parse_json_object(reply)
    facts = data.get("facts") if isinstance(data, dict) else None
    quotes = [
        " ".join(f["time_quote"].lower().split())
        for f in facts or []
        if isinstance(f, dict) and isinstance(f.get("time_quote"), str) and f["time_quote"].strip()
    ]
    for c, r, t in zip(out, rules, TEXTS, strict=True):
        assert c.subject in ("Ada", "Bo")
        sources = [" ".join(t.text.lower().split())]
        if t.date is not None:
            sources.append(f"{t.date.day} {t.date:%B} {t.date.year}".lower())
        if c != r and not any(q in src for q in quotes for src in sources):
            # no quote of the statement backs a date: the start is ASSUMED, never invented
            assert c.when.source is BoundSource.ASSUMED


@given(st.text(max_size=60))
def test_any_judge_reply_gives_a_verdict_or_counts_as_malformed(reply: str) -> None:
    inputs = {"question": "When?", "gold": "7 May 2023", "answer": "May 7th"}
    judge = LLMAnswerJudge(_offline(reply, JUDGE_PROMPT, inputs))
    verdict = judge.grade("When?", "7 May 2023", "May 7th")
    assert verdict in (True, False, None)
    assert judge.malformed == (verdict is None)


def test_malformed_answers_are_counted_and_the_run_completes(
    stub: StubServer, invented: LocomoDataset
) -> None:
    stub.script = ["garbage", "nochoices", "garbage"]
    client = make_client(stub)
    ans = LLMAnswerer(client)
    rows = run_ablations(invented, ablations=["typed_layer"], resamples=50, answerer=ans)
    assert rows and ans.malformed == 3 == client.stats.malformed
    assert client.stats.calls == len(stub.requests)


def test_cli_progress_shows_the_costs(
    stub: StubServer, data_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a for a in _cli(stub, data_file, tmp_path / "c.sqlite") if a != "--quiet"]
    assert main([*args, "--ablation", "typed_layer"]) == 0
    err = capsys.readouterr().err
    assert "model requests" in err and "cache hits" in err and "tokens" in err
