"""An OpenAI-compatible chat-completions client whose every answer is cached under its θ key.

θ = (prompt hash, seed, model, temperature, tool-output hash) is the key TOKI logs a judge's
verdict under (`toki.judge.JudgeKey`); this module uses the same key for every model call.
The *prompt* is the fixed part of a request (system text, user template, max tokens, response
format) and the *tool output* is what gets filled in (retrieved memory, a question). The
request is a function of θ, so a rerun with the same θ reads the SQLite cache and makes no
call, and `offline=True` refuses to call at all and names the first missing entry.

Standard library only (urllib, sqlite3): the protocol is one JSON POST, and the `openai`
package would add a dependency for nothing the cache does not already decide.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import sqlite3
import string
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.client import HTTPException
from pathlib import Path
from typing import Any

from toki.canonical import canonical_json, digest
from toki.errors import IntegrityError, InvalidInput, TokiError
from toki.judge import JudgeKey
from toki.time import format_instant

__all__ = [
    "DEFAULT_API_KEY_ENV",
    "CacheMiss",
    "CachedResponse",
    "Completion",
    "LLMClient",
    "LLMConfig",
    "LLMError",
    "LLMRejected",
    "LLMStats",
    "LLMUnavailable",
    "Prompt",
    "ResponseCache",
    "parse_completion",
]

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
CACHE_SCHEMA = "toki-llm-cache/1"


class LLMError(TokiError):
    """A model call could not be made or answered (the message never holds the API key)."""


class LLMUnavailable(LLMError):
    """The server kept timing out, refusing connections or rate-limiting after every retry."""


class LLMRejected(LLMError):
    """The server refused the request itself (bad model name, bad key, bad parameters)."""


class CacheMiss(LLMError):
    """Offline, and the cache holds no response for this θ: the message names the entry."""


# -- prompts and configuration -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Prompt:
    """A prompt template: the system text and a user template with `$field` placeholders
    (`string.Template`), plus the generation settings that belong to it.

    `hash` covers everything fixed about the request except model, temperature and seed (those
    are θ's own fields): change a word or `max_tokens` and every θ changes with it.
    """

    name: str
    system: str
    user: str
    max_tokens: int = 256
    json_object: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise InvalidInput("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if not string.Template(self.user).is_valid():
            raise InvalidInput("user", "is not a valid $-template", "write $$ for a literal $")

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(string.Template(self.user).get_identifiers())

    @property
    def hash(self) -> str:
        return digest(canonical_json(self._fixed()))

    def _fixed(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "user": self.user,
            "max_tokens": self.max_tokens,
            "response_format": "json_object" if self.json_object else "text",
        }

    def messages(self, inputs: Mapping[str, str]) -> list[dict[str, str]]:
        """The chat messages for these inputs (exactly the template's fields, all strings)."""
        want, got = set(self.fields), set(inputs)
        if want != got:
            raise InvalidInput(
                "inputs",
                f"prompt {self.name!r} takes {sorted(want)}, got {sorted(got)}",
            )
        bad = [k for k, v in inputs.items() if not isinstance(v, str)]
        if bad:
            raise InvalidInput(f"inputs.{bad[0]}", "must be a string")
        user = string.Template(self.user).substitute(inputs)
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]


@dataclass(frozen=True, slots=True)
class LLMConfig:
    """Where and how to call: `base_url` is the API root that `/chat/completions` hangs off
    (e.g. http://127.0.0.1:8000/v1 for vLLM, http://127.0.0.1:11434/v1 for Ollama). The key is
    read from the environment variable `api_key_env` when the client is made; local servers
    need none."""

    base_url: str
    model: str
    temperature: float = 0.0
    seed: int | None = 0
    timeout: float = 120.0
    max_retries: int = 5
    backoff: float = 1.0
    backoff_cap: float = 60.0
    api_key_env: str = DEFAULT_API_KEY_ENV

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InvalidInput(
                "base_url",
                f"{self.base_url!r} is not an http(s) URL",
                "e.g. http://127.0.0.1:8000/v1",
            )
        if url.username is not None or url.password is not None:
            raise InvalidInput(
                "base_url",
                "holds credentials",
                f"put the key in ${self.api_key_env}, never in the URL (it would be stored)",
            )
        if not self.model.strip():
            raise InvalidInput("model", "is empty", "name the model the server serves")
        if not (0.0 <= self.temperature <= 2.0):
            raise InvalidInput("temperature", f"{self.temperature} is not in [0, 2]")
        if self.timeout <= 0 or self.backoff < 0 or self.backoff_cap < 0:
            raise InvalidInput("timeout", "timeout must be positive and backoffs non-negative")
        if self.max_retries < 0:
            raise InvalidInput("max_retries", f"must be >= 0, got {self.max_retries}")

    @property
    def endpoint(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def to_json(self) -> dict[str, Any]:
        """What a result file records about the model (no key, ever)."""
        return {
            "base_url": self.base_url,
            "model": self.model,
            "temperature": self.temperature,
            "seed": self.seed,
        }


# -- responses ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Completion:
    """One answer: its text (None when there is none to give), θ, whether it came from the
    cache, token counts, and `problem` saying why there is no text (malformed response,
    dry run)."""

    text: str | None
    theta: JudgeKey
    cached: bool
    tokens_in: int = 0
    tokens_out: int = 0
    finish_reason: str | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.text is not None


def parse_completion(body: str) -> tuple[str | None, str | None, int, int, str | None]:
    """(text, problem, tokens in, tokens out, finish reason) of a chat-completions body.

    A body that is not the protocol's shape (not JSON, no choices, no text content) gives
    text None and says why; it never raises.
    """
    try:
        data = json.loads(body)
    except ValueError:
        return None, "response is not JSON", 0, 0, None
    if not isinstance(data, dict):
        return None, "response is not a JSON object", 0, 0, None
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    t_in = usage.get("prompt_tokens") if isinstance(usage, dict) else None
    t_out = usage.get("completion_tokens") if isinstance(usage, dict) else None
    tin = t_in if isinstance(t_in, int) and t_in >= 0 else 0
    tout = t_out if isinstance(t_out, int) and t_out >= 0 else 0
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        err = data.get("error")
        why = f"no choices (server said: {_short(err)})" if err else "response has no choices"
        return None, why, tin, tout, None
    first = choices[0]
    finish = first.get("finish_reason") if isinstance(first.get("finish_reason"), str) else None
    message = first.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str):
        return None, "choice has no text content", tin, tout, finish
    return content, None, tin, tout, finish


def _short(x: object, n: int = 200) -> str:
    s = x if isinstance(x, str) else json.dumps(x, default=str)
    return s if len(s) <= n else s[:n] + "…"


# -- the cache ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CachedResponse:
    """One cache row: the response recorded for a θ, with the request that produced it."""

    theta: str
    prompt_name: str
    request: dict[str, Any]
    text: str
    tokens_in: int
    tokens_out: int
    finish_reason: str | None
    seconds: float
    created_at: str
    endpoint: str


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS responses (
    theta TEXT PRIMARY KEY,
    prompt_hash TEXT NOT NULL,
    seed INTEGER,
    model TEXT NOT NULL,
    temperature REAL NOT NULL,
    tool_output_hash TEXT NOT NULL,
    prompt_name TEXT NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    text TEXT NOT NULL,
    tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL,
    finish_reason TEXT,
    seconds REAL NOT NULL,
    created_at TEXT NOT NULL,
    endpoint TEXT NOT NULL
);
"""


class ResponseCache:
    """A SQLite file with one row per θ: the response and its metadata. The first response
    recorded for a θ is kept for good (like the keyed judge log); share the file with a
    paper's artifact and anyone can rerun the experiment offline, bit for bit.

    Rows hold the full request (the prompt text), never the API key.
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path)
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        except sqlite3.DatabaseError as e:
            raise InvalidInput("cache", f"{self.path} is not a toki LLM cache ({e})") from None
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (CACHE_SCHEMA,))
            self._db.commit()
        elif row[0] != CACHE_SCHEMA:
            raise InvalidInput("cache", f"{self.path} has schema {row[0]!r}, not {CACHE_SCHEMA!r}")

    def __len__(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM responses").fetchone()[0])

    def __contains__(self, theta: object) -> bool:
        d = theta.digest if isinstance(theta, JudgeKey) else theta
        return (
            self._db.execute("SELECT 1 FROM responses WHERE theta = ?", (d,)).fetchone() is not None
        )

    def get(self, theta: JudgeKey) -> CachedResponse | None:
        row = self._db.execute(
            "SELECT theta, prompt_name, request, text, tokens_in, tokens_out, finish_reason, "
            "seconds, created_at, endpoint FROM responses WHERE theta = ?",
            (theta.digest,),
        ).fetchone()
        if row is None:
            return None
        return CachedResponse(
            row[0], row[1], json.loads(row[2]), row[3], row[4], row[5], row[6], row[7], row[8],
            row[9],
        )  # fmt: skip

    def put(
        self,
        theta: JudgeKey,
        prompt_name: str,
        request: Mapping[str, Any],
        response: str,
        text: str,
        *,
        tokens_in: int = 0,
        tokens_out: int = 0,
        finish_reason: str | None = None,
        seconds: float = 0.0,
        endpoint: str = "",
    ) -> bool:
        """Record a response; False (and nothing changed) when θ already has one."""
        cur = self._db.execute(
            "INSERT OR IGNORE INTO responses VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                theta.digest, theta.prompt_hash, theta.seed, theta.model, theta.temperature,
                theta.tool_output_hash, prompt_name, canonical_json(dict(request)), response,
                text, tokens_in, tokens_out, finish_reason, seconds,
                format_instant(datetime.now(UTC)), endpoint,
            ),
        )  # fmt: skip
        self._db.commit()
        return cur.rowcount == 1

    def summary(self) -> dict[str, Any]:
        """Rows per (model, prompt name) and the tokens they cost when they were made."""
        rows = self._db.execute(
            "SELECT model, prompt_name, count(*), sum(tokens_in), sum(tokens_out) "
            "FROM responses GROUP BY model, prompt_name ORDER BY model, prompt_name"
        ).fetchall()
        return {
            "path": self.path,
            "rows": len(self),
            "by_model_and_prompt": [
                {"model": m, "prompt": p, "rows": n, "tokens_in": ti, "tokens_out": to}
                for m, p, n, ti, to in rows
            ],
        }

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- costs -------------------------------------------------------------------------------


@dataclass(slots=True)
class LLMStats:
    """What a run cost: calls answered by the server, cache hits, HTTP requests and retries,
    tokens in and out of the new calls (and of the cached ones when they were made), time
    spent waiting for the server, responses without text, requests the server refused, and
    (dry run) calls still needed with the characters their messages hold."""

    calls: int = 0
    cache_hits: int = 0
    requests: int = 0
    retries: int = 0
    malformed: int = 0
    rejected: int = 0
    truncated: int = 0
    planned: int = 0
    planned_chars: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cached_tokens_in: int = 0
    cached_tokens_out: int = 0
    seconds: float = 0.0
    by_prompt: dict[str, dict[str, int]] = field(default_factory=dict)

    def tally(self, prompt: str, what: str) -> None:
        """Count one call, cache hit or planned call of `prompt`."""
        per = self.by_prompt.setdefault(prompt, {"calls": 0, "cache_hits": 0, "planned": 0})
        per[what] += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "requests": self.requests,
            "retries": self.retries,
            "malformed": self.malformed,
            "rejected": self.rejected,
            "truncated": self.truncated,
            "planned": self.planned,
            "planned_chars": self.planned_chars,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cached_tokens_in": self.cached_tokens_in,
            "cached_tokens_out": self.cached_tokens_out,
            "seconds_waiting": round(self.seconds, 3),
            "by_prompt": {k: dict(v) for k, v in sorted(self.by_prompt.items())},
        }

    def line(self) -> str:
        """One short line for a progress bar."""
        s = (
            f"calls {self.calls}, cache hits {self.cache_hits}, "
            f"tokens {self.tokens_in}/{self.tokens_out}, {self.seconds:.0f}s"
        )
        if self.retries:
            s += f", retries {self.retries}"
        if self.malformed:
            s += f", malformed {self.malformed}"
        if self.rejected:
            s += f", refused {self.rejected}"
        if self.planned:
            s += f", to call {self.planned}"
        return s


# -- the client --------------------------------------------------------------------------


class _Transient(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


class _Refused(Exception):
    """A 4xx the server gives for this request (e.g. a prompt over the context length)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class LLMClient:
    """Calls a chat-completions endpoint through a θ-keyed `ResponseCache`.

    * cache hit: the recorded text, no call;
    * `offline=True`: a miss raises `CacheMiss` naming the entry (nothing is sent);
    * `dry_run=True`: a miss is counted in `stats.planned` and answered with no text (nothing
      is sent or recorded): what a run would cost before paying for it;
    * otherwise one POST, retried with exponential backoff on timeouts, dropped connections,
      429 and 5xx (honouring Retry-After); a 200 response with text is recorded, one without
      text is counted as malformed and not recorded (a rerun asks again). 401/403/404 stop
      the run (the configuration is wrong); another 4xx for one request (e.g. a prompt over
      the context length) is counted as refused and the run goes on, unless no request has
      been answered yet.
    """

    def __init__(
        self,
        config: LLMConfig,
        cache: ResponseCache | str | Path | None = None,
        *,
        offline: bool = False,
        dry_run: bool = False,
        on_update: Callable[[LLMStats], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if offline and dry_run:
            raise InvalidInput("offline", "offline and dry_run exclude each other")
        self.config = config
        self.cache = (
            cache if isinstance(cache, ResponseCache) else ResponseCache(cache or ":memory:")
        )
        self.offline = offline
        self.dry_run = dry_run
        self.stats = LLMStats()
        self._on_update = on_update
        self._sleep = sleep
        env = os.environ if environ is None else environ
        self.__key = env.get(config.api_key_env) or None
        self._planned: set[str] = set()
        self._answered = 0
        host = urllib.parse.urlsplit(config.base_url).hostname or ""
        # A server on this machine is never behind a proxy: keep its traffic on loopback.
        handlers = [urllib.request.ProxyHandler({})] if _is_loopback(host) else []
        self._opener = urllib.request.build_opener(*handlers)

    def __repr__(self) -> str:
        c = self.config
        return f"LLMClient(model={c.model!r}, base_url={c.base_url!r}, cache={self.cache.path!r})"

    @property
    def has_key(self) -> bool:
        return self.__key is not None

    def theta(self, prompt: Prompt, inputs: Mapping[str, str]) -> JudgeKey:
        """θ of the request these inputs make from this prompt."""
        prompt.messages(inputs)  # validates the inputs
        return JudgeKey(
            prompt_hash=prompt.hash,
            seed=self.config.seed,
            model=self.config.model,
            temperature=float(self.config.temperature),
            tool_output_hash=digest(canonical_json(dict(inputs))),
        )

    def request_body(self, prompt: Prompt, inputs: Mapping[str, str]) -> dict[str, Any]:
        """The JSON body sent for these inputs (what the cache row records)."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": prompt.messages(inputs),
            "temperature": self.config.temperature,
            "max_tokens": prompt.max_tokens,
        }
        if self.config.seed is not None:
            body["seed"] = self.config.seed
        if prompt.json_object:
            body["response_format"] = {"type": "json_object"}
        return body

    def complete(self, prompt: Prompt, inputs: Mapping[str, str], *, label: str = "") -> Completion:
        """The model's answer to `prompt` filled with `inputs`; `label` names the call in errors
        (e.g. "answer conv-26 q12")."""
        theta = self.theta(prompt, inputs)
        body = self.request_body(prompt, inputs)
        try:
            return self._complete(prompt, theta, body, label)
        finally:
            if self._on_update is not None:
                self._on_update(self.stats)

    def _complete(
        self, prompt: Prompt, theta: JudgeKey, body: dict[str, Any], label: str
    ) -> Completion:
        hit = self.cache.get(theta)
        if hit is not None:
            if hit.request.get("messages") != body["messages"]:
                raise IntegrityError(
                    f"cache {self.cache.path}: the row for θ {theta.digest} holds another "
                    "request than the one it is keyed by (the file was edited?)"
                )
            self.stats.cache_hits += 1
            self.stats.cached_tokens_in += hit.tokens_in
            self.stats.cached_tokens_out += hit.tokens_out
            self.stats.tally(prompt.name, "cache_hits")
            return Completion(
                hit.text, theta, True, hit.tokens_in, hit.tokens_out, hit.finish_reason
            )
        if self.offline:
            what = label or prompt.name
            raise CacheMiss(
                f"offline: no cached response for {what} (prompt {prompt.name!r}, "
                f"θ {theta.digest}: {canonical_json(theta.to_json())}) in {self.cache.path}; "
                "run without --offline to make the call, or use the cache the results came with"
            )
        if self.dry_run:
            if theta.digest not in self._planned:
                self._planned.add(theta.digest)
                self.stats.planned += 1
                self.stats.planned_chars += sum(len(m["content"]) for m in body["messages"])
                self.stats.tally(prompt.name, "planned")
            return Completion(None, theta, False, problem="dry run: not called")
        started = time.perf_counter()
        try:
            raw = self._post(body, label or prompt.name)
        except _Refused as e:
            self.stats.seconds += time.perf_counter() - started
            self.stats.rejected += 1
            if self._answered == 0:
                raise LLMRejected(
                    f"{self.config.endpoint}: the server refused the first request "
                    f"({label or prompt.name}): {e.reason}; check --model and the server's "
                    "options before running the rest"
                ) from None
            return Completion(None, theta, False, problem=f"refused: {e.reason}")
        seconds = time.perf_counter() - started
        self._answered += 1
        self.stats.seconds += seconds
        self.stats.calls += 1
        self.stats.tally(prompt.name, "calls")
        text, problem, t_in, t_out, finish = parse_completion(raw)
        self.stats.tokens_in += t_in
        self.stats.tokens_out += t_out
        if text is None:
            self.stats.malformed += 1
            return Completion(None, theta, False, t_in, t_out, finish, problem)
        if finish == "length":
            self.stats.truncated += 1
        self.cache.put(
            theta, prompt.name, body, raw, text,
            tokens_in=t_in, tokens_out=t_out, finish_reason=finish, seconds=round(seconds, 3),
            endpoint=self.config.base_url,
        )  # fmt: skip
        return Completion(text, theta, False, t_in, t_out, finish)

    # -- HTTP ------------------------------------------------------------------------------

    def _post(self, body: dict[str, Any], what: str) -> str:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.__key is not None:
            headers["Authorization"] = f"Bearer {self.__key}"
        cfg = self.config
        attempts = cfg.max_retries + 1
        for attempt in range(attempts):
            self.stats.requests += 1
            try:
                return self._send(data, headers)
            except _Transient as e:
                reason, retry_after = e.reason, e.retry_after
            if attempt == attempts - 1:
                raise LLMUnavailable(
                    self._redact(
                        f"{cfg.endpoint}: no answer for {what} after {attempts} attempt(s); "
                        f"last: {reason} (is the server up? raise --max-retries or --timeout)"
                    )
                )
            self.stats.retries += 1
            delay = min(cfg.backoff_cap, cfg.backoff * 2**attempt)
            if retry_after is not None:
                delay = min(cfg.backoff_cap, max(delay, retry_after))
            self.stats.seconds += delay
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, data: bytes, headers: dict[str, str]) -> str:
        req = urllib.request.Request(
            self.config.endpoint, data=data, headers=headers, method="POST"
        )
        try:
            with self._opener.open(req, timeout=self.config.timeout) as resp:
                return str(resp.read().decode("utf-8", errors="replace"))
        except urllib.error.HTTPError as e:
            detail = _error_detail(e)
            if e.code in RETRY_STATUSES:
                raise _Transient(f"HTTP {e.code}{detail}", _retry_after(e.headers)) from None
            hint = {
                401: f" (check ${self.config.api_key_env})",
                403: f" (check ${self.config.api_key_env})",
                404: " (check --base-url: it should end where /chat/completions begins, "
                "and --model)",
            }.get(e.code)
            if hint is not None:
                raise LLMRejected(
                    self._redact(f"{self.config.endpoint}: HTTP {e.code}{detail}{hint}")
                ) from None
            raise _Refused(self._redact(f"HTTP {e.code}{detail}")) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, ConnectionRefusedError) and self._answered == 0:
                # nothing listens there: retrying for half a minute would not change that
                raise LLMUnavailable(
                    self._redact(
                        f"{self.config.endpoint}: connection refused before any answer "
                        "(is the server running, and is --base-url right?)"
                    )
                ) from None
            raise _Transient(f"connection failed: {e.reason}") from None
        except (TimeoutError, ConnectionError, HTTPException, OSError) as e:
            raise _Transient(f"{type(e).__name__}: {e}") from None

    def _redact(self, message: str) -> str:
        return message.replace(self.__key, "[API key]") if self.__key else message


def _error_detail(e: urllib.error.HTTPError) -> str:
    try:
        raw = e.read().decode("utf-8", errors="replace")
    except Exception:  # the body is a courtesy: never let it hide the status
        return ""
    try:
        data = json.loads(raw)
        msg = data.get("error", data) if isinstance(data, dict) else data
        if isinstance(msg, dict):
            msg = msg.get("message", msg)
    except ValueError:
        msg = raw
    text = re.sub(r"\s+", " ", _short(msg)).strip()
    return f": {text}" if text else ""


def _retry_after(headers: Any) -> float | None:
    value = headers.get("Retry-After") if headers is not None else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
