"""toki.llm against a stub OpenAI-compatible server on 127.0.0.1: protocol, retries, the θ
cache (a rerun makes zero calls), offline mode, malformed responses, and the API key."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.llm_stub import StubServer
from toki.errors import IntegrityError, InvalidInput
from toki.llm import (
    CacheMiss,
    LLMClient,
    LLMConfig,
    LLMRejected,
    LLMUnavailable,
    Prompt,
    ResponseCache,
    parse_completion,
)

SECRET = "sk-test-NEVER-STORE-ME-1234"
PROMPT = Prompt("greet", "You greet people.", "Greet $name from $city.", max_tokens=16)
JSON_PROMPT = Prompt("facts", "Reply with JSON.", "About $x", max_tokens=8, json_object=True)


@pytest.fixture
def stub() -> StubServer:
    with StubServer() as s:
        yield s


def client(stub: StubServer, cache: ResponseCache | Path | None = None, **kw: object) -> LLMClient:
    cfg_kw = {k: kw.pop(k) for k in list(kw) if k in LLMConfig.__dataclass_fields__}
    cfg = LLMConfig(stub.base_url, "stub-model", **cfg_kw)  # type: ignore[arg-type]
    sleeps: list[float] = []
    kw.setdefault("sleep", sleeps.append)
    kw.setdefault("environ", {"OPENAI_API_KEY": SECRET})
    c = LLMClient(cfg, cache, **kw)  # type: ignore[arg-type]
    c.sleeps = sleeps  # type: ignore[attr-defined]
    return c


def test_protocol_request_and_response(stub: StubServer) -> None:
    c = client(stub, temperature=0.3, seed=7)
    out = c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    assert out.text == "Greet Ada from Oslo." and not out.cached and out.ok
    [req] = stub.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == f"Bearer {SECRET}"
    body = req["body"]
    assert body["model"] == "stub-model" and body["temperature"] == 0.3 and body["seed"] == 7
    assert body["max_tokens"] == 16 and "response_format" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You greet people."},
        {"role": "user", "content": "Greet Ada from Oslo."},
    ]
    assert out.tokens_in == len("You greet people.Greet Ada from Oslo.") // 4
    assert c.stats.tokens_in == out.tokens_in and c.stats.tokens_out == 4
    c.complete(JSON_PROMPT, {"x": "y"})
    assert stub.requests[-1]["body"]["response_format"] == {"type": "json_object"}


def test_no_key_no_authorization_header(stub: StubServer) -> None:
    c = client(stub, environ={})
    c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    assert "Authorization" not in stub.requests[0]["headers"] and not c.has_key


def test_second_run_makes_zero_calls_and_gives_identical_results(
    stub: StubServer, tmp_path: Path
) -> None:
    path = tmp_path / "cache.sqlite"
    inputs = [{"name": n, "city": c} for n in ("Ada", "Bo", "Cy") for c in ("Oslo", "Rome")]
    first = client(stub, path)
    a = [first.complete(PROMPT, i).text for i in inputs]
    assert first.stats.calls == 6 and first.stats.cache_hits == 0
    first.cache.close()
    stub.responder = lambda body: "a different model now"  # a rerun must not see this
    second = client(stub, path)
    b = [second.complete(PROMPT, i).text for i in inputs]
    assert a == b
    assert second.stats.calls == 0 and second.stats.requests == 0
    assert second.stats.cache_hits == 6 and len(stub.requests) == 6
    assert second.stats.cached_tokens_in == first.stats.tokens_in


def test_theta_is_the_judge_key_and_covers_every_part_of_the_request(stub: StubServer) -> None:
    c = client(stub)
    inputs = {"name": "Ada", "city": "Oslo"}
    theta = c.theta(PROMPT, inputs)
    assert (theta.model, theta.temperature, theta.seed) == ("stub-model", 0.0, 0)
    assert theta.prompt_hash == PROMPT.hash
    variants = [
        client(stub, seed=1).theta(PROMPT, inputs),
        client(stub, temperature=0.7).theta(PROMPT, inputs),
        LLMClient(LLMConfig(stub.base_url, "other"), environ={}).theta(PROMPT, inputs),
        c.theta(Prompt("greet", "You greet people!", PROMPT.user, 16), inputs),
        c.theta(Prompt("greet", PROMPT.system, PROMPT.user, 17), inputs),
        c.theta(PROMPT, {"name": "Ada", "city": "Rome"}),
    ]
    digests = {theta.digest, *(v.digest for v in variants)}
    assert len(digests) == 7
    # the endpoint is not part of θ: a cache made against one server replays on another
    other = LLMClient(LLMConfig("http://127.0.0.1:1/v1", "stub-model"), environ={})
    assert other.theta(PROMPT, inputs) == theta


@given(
    st.dictionaries(st.sampled_from(["name", "city"]), st.text(max_size=20), min_size=2),
    st.integers(0, 3),
    st.sampled_from([0.0, 0.5, 1.0]),
)
def test_theta_is_a_function_of_its_fields(inputs: dict[str, str], seed: int, temp: float) -> None:
    cfg = LLMConfig("http://127.0.0.1:1/v1", "m", temperature=temp, seed=seed)
    a = LLMClient(cfg, environ={}).theta(PROMPT, inputs)
    b = LLMClient(cfg, environ={}).theta(PROMPT, dict(reversed(list(inputs.items()))))
    assert a == b and a.digest == b.digest


def test_offline_refuses_to_call_and_names_the_missing_entry(
    stub: StubServer, tmp_path: Path
) -> None:
    path = tmp_path / "c.sqlite"
    c = client(stub, path)
    c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    c.cache.close()
    off = client(stub, path, offline=True)
    assert off.complete(PROMPT, {"name": "Ada", "city": "Oslo"}).text == "Greet Ada from Oslo."
    missing = {"name": "Bo", "city": "Oslo"}
    with pytest.raises(CacheMiss) as err:
        off.complete(PROMPT, missing, label="greeting q7")
    msg = str(err.value)
    assert "greeting q7" in msg and off.theta(PROMPT, missing).digest in msg and str(path) in msg
    assert len(stub.requests) == 1  # offline sent nothing


def test_retries_on_rate_limits_and_server_errors(stub: StubServer) -> None:
    stub.script = ["429", "500", "503"]
    c = client(stub, backoff=0.5)
    assert c.complete(PROMPT, {"name": "Ada", "city": "Oslo"}).text == "Greet Ada from Oslo."
    assert (c.stats.requests, c.stats.retries, c.stats.calls) == (4, 3, 1)
    assert c.sleeps == [0.5, 1.0, 2.0]  # type: ignore[attr-defined]


def test_retries_on_timeout(stub: StubServer) -> None:
    stub.timeout_sleep = 1.0
    stub.script = ["timeout"]
    c = client(stub, timeout=0.2)
    assert c.complete(PROMPT, {"name": "Ada", "city": "Oslo"}).text == "Greet Ada from Oslo."
    assert c.stats.retries == 1


def test_gives_up_after_max_retries_without_leaking_the_key(stub: StubServer) -> None:
    stub.script = ["503"] * 3
    c = client(stub, max_retries=2)
    with pytest.raises(LLMUnavailable) as err:
        c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    assert "3 attempt" in str(err.value) and "HTTP 503" in str(err.value)
    assert SECRET not in str(err.value) and SECRET not in repr(c)


def test_malformed_responses_are_counted_not_cached(stub: StubServer, tmp_path: Path) -> None:
    stub.script = ["garbage", "nochoices"]
    c = client(stub, tmp_path / "c.sqlite")
    a = c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    b = c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    assert a.text is None and a.problem == "response is not JSON"
    assert b.text is None and b.problem is not None and "model overloaded" in b.problem
    assert c.stats.malformed == 2 and len(c.cache) == 0
    ok = c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})  # asked again, answered, recorded
    assert ok.text == "Greet Ada from Oslo." and len(c.cache) == 1


def test_auth_errors_stop_and_name_the_variable(stub: StubServer) -> None:
    stub.script = ["401"]
    c = client(stub, api_key_env="MY_KEY", environ={"MY_KEY": SECRET})
    with pytest.raises(LLMRejected, match=r"HTTP 401.*\$MY_KEY") as err:
        c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    assert SECRET not in str(err.value)


def test_a_refused_request_stops_only_before_the_first_answer(stub: StubServer) -> None:
    stub.script = ["400"]
    with pytest.raises(LLMRejected, match="first request"):
        client(stub).complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    c = client(stub)
    c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    stub.script = ["400"]
    out = c.complete(PROMPT, {"name": "Bo", "city": "Oslo"})
    assert out.text is None and out.problem is not None and "HTTP 400" in out.problem
    assert c.stats.rejected == 1


def test_dry_run_counts_distinct_calls_and_sends_nothing(stub: StubServer) -> None:
    c = client(stub, dry_run=True)
    for name in ("Ada", "Bo", "Ada"):
        assert c.complete(PROMPT, {"name": name, "city": "Oslo"}).text is None
    assert c.stats.planned == 2 and stub.requests == [] and len(c.cache) == 0
    with pytest.raises(InvalidInput):
        client(stub, dry_run=True, offline=True)


def test_the_key_is_never_stored(stub: StubServer, tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    c = client(stub, path)
    c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    c.cache.close()
    assert SECRET.encode() not in path.read_bytes()
    assert SECRET not in repr(c) and SECRET not in json.dumps(c.config.to_json())
    with pytest.raises(InvalidInput, match="credentials"):
        LLMConfig("http://user:pw@127.0.0.1:1/v1", "m")


def test_a_tampered_cache_row_is_refused(stub: StubServer, tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    c = client(stub, path)
    c.complete(PROMPT, {"name": "Ada", "city": "Oslo"})
    c.cache.close()
    db = sqlite3.connect(path)
    db.execute("UPDATE responses SET request = '{\"messages\": []}'")
    db.commit()
    db.close()
    with pytest.raises(IntegrityError, match="another request"):
        client(stub, path).complete(PROMPT, {"name": "Ada", "city": "Oslo"})


def test_cache_keeps_the_first_response_and_summarises(tmp_path: Path) -> None:
    cfg = LLMConfig("http://127.0.0.1:1/v1", "m")
    theta = LLMClient(cfg, environ={}).theta(PROMPT, {"name": "a", "city": "b"})
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        assert cache.put(theta, "greet", {"messages": []}, "{}", "first", tokens_in=3)
        assert not cache.put(theta, "greet", {"messages": []}, "{}", "second")
        hit = cache.get(theta)
        assert hit is not None and hit.text == "first" and theta in cache
        assert cache.summary()["by_model_and_prompt"] == [
            {"model": "m", "prompt": "greet", "rows": 1, "tokens_in": 3, "tokens_out": 0}
        ]
    (tmp_path / "junk").write_bytes(b"not a database at all" * 100)
    with pytest.raises(InvalidInput, match="not a toki LLM cache"):
        ResponseCache(tmp_path / "junk")


def test_loopback_servers_bypass_proxies(stub: StubServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert client(stub).complete(PROMPT, {"name": "Ada", "city": "Oslo"}).ok


def test_bad_prompts_and_configs_are_refused() -> None:
    with pytest.raises(InvalidInput, match="takes"):
        PROMPT.messages({"name": "Ada"})
    with pytest.raises(InvalidInput, match="string"):
        PROMPT.messages({"name": "Ada", "city": 3})  # type: ignore[dict-item]
    with pytest.raises(InvalidInput):
        Prompt("x", "s", "u", max_tokens=0)
    with pytest.raises(InvalidInput, match="http"):
        LLMConfig("ftp://host/v1", "m")
    with pytest.raises(InvalidInput, match="temperature"):
        LLMConfig("http://127.0.0.1/v1", "m", temperature=-1)
    with pytest.raises(InvalidInput, match="model"):
        LLMConfig("http://127.0.0.1/v1", " ")


@given(
    st.one_of(
        st.text(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["choices", "message", "content", "usage", "error", "x"]),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=12,
        ).map(json.dumps),
    )
)
def test_parse_completion_never_raises(body: str) -> None:
    text, problem, t_in, t_out, _ = parse_completion(body)
    assert (text is None) == (problem is not None)
    assert t_in >= 0 and t_out >= 0
