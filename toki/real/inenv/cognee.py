"""Cognee 1.6.5 on its local default stores: `add` + `cognify` of each agent's texts.

Built as a user would (the SDK, `ENABLE_BACKEND_ACCESS_CONTROL=false`: one global store),
in a scratch folder of the worker: SQLite (aiosqlite) for the relational data, Ladybug for
the graph, LanceDB for the vectors. The LLM and the embedder are configured as
OpenAI-compatible endpoints at 127.0.0.1:9 (nothing listens there) and answered in process
before any request is built: `LLMGateway.acreate_structured_output` (every structured call:
the graph extraction, a `KnowledgeGraph`, and the chunk summary) is an LLM gate point whose
reply the host gives from the claim; `OpenAICompatibleEmbeddingEngine.embed_text` returns
toki's word-hash vectors (64 dims) and its tokenizer counts words, so no tokenizer is
fetched from the Hugging Face hub.

An agent's claim "<key> is <value>" is `cognee.add(text, dataset_name="toki")` then
`cognee.cognify(datasets=["toki"])` (which processes every item of the dataset not yet
processed, the other agent's too). Each agent runs its claims in an event loop of its own
(`asyncio.run`, as two SDK callers in two threads would); gate points block that loop.

Gate points and their footprints:

  llm.KnowledgeGraph, llm.<model>   none (the host answers the extraction from the claim)
  embed                             none
  graph.<method>                    every public coroutine of Ladybug's adapter (outermost
                                    call only): reads ("graph", "*"); writes it too unless
                                    the method only reads (get_*, has_*, ...)
  vector.<method>                   LanceDB's adapter: writes / reads ("vector", collection)
                                    (outermost call only: its VECTOR_DB_LOCK is never held
                                    across a gate point, so it is never contended)
  sql.select                        a SELECT outside a write transaction: reads ("sql", t)
  lock.acquire / lock.release       one modelled lock ("cognee"), taken by an agent's first
                                    holding and let go by its last (`Adapter.hold`): a SQLite
                                    write transaction (first write statement to commit or
                                    rollback; the release publishes ("sql", t) of every table
                                    written; SQLite's writer lock would block the other agent
                                    where no gate point can release it) and cognee's asyncio
                                    locks (a lock per event loop, `LoopLock`): module locks,
                                    the adapters' locks, and the per-dataset lock every
                                    pipeline run holds across its gate points

Determinism: uuid4 in cognee's modules draws from a stream per agent; `datetime` in
cognee's modules is toki's clock (not a gate point: a read ticks the shared counter;
observations carry no timestamps); cognify takes its items one at a time (`PER_BATCH`), and
a warm-up before the patch imports what cognify imports lazily.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import importlib.metadata
import inspect
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import types
import uuid as _uuid
import weakref
from typing import Any

from . import stubs
from .controller import Controller

__all__ = ["Adapter"]

DATASET = "toki"
DIMS = 64
# cognify's items one after another (cognee's default: 20 at a time): the order in which
# concurrent items reached their gate points followed their SQLite and LanceDB I/O threads,
# so one schedule ran two ways (agent 0's first LLM call was one claim's, or the other's)
PER_BATCH = 1
ENDPOINT = "http://127.0.0.1:9/v1"  # loopback; nothing listens: a request fails locally
_WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE|REPLACE|CREATE|ALTER|DROP)\b", re.I)
_TARGET = re.compile(
    r"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|UPDATE|DELETE\s+FROM|REPLACE\s+INTO|"
    r"CREATE\s+\w+(?:\s+IF\s+NOT\s+EXISTS)?|ALTER\s+TABLE|DROP\s+\w+"
    r"(?:\s+IF\s+EXISTS)?)\s+\"?(\w+)\"?",
    re.I,
)
_TABLES = re.compile(r'\b(?:FROM|JOIN)\s+"?(\w+)"?', re.I)
_READ_ONLY = ("get_", "has_", "is_", "extract_", "count_", "search", "retrieve", "query_")
_KEEP_TABLES = {"alembic_version", "global_database_version"}
# structural edges of cognify's graph (chunks, documents, types): not claims
_STRUCTURAL = {"is_a", "contains", "made_from", "is_part_of", "mentions", "belongs_to_set"}

INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("toki_cognee_inside", default=False)


def environment(root: str) -> dict[str, str]:
    """Cognee's settings for a worker: local stores under `root`, LLM and embedder at a
    loopback endpoint, nothing fetched at import (litellm's cost map, HF tokenizers)."""
    return {
        "HOME": root,
        "SYSTEM_ROOT_DIRECTORY": os.path.join(root, "system"),
        "DATA_ROOT_DIRECTORY": os.path.join(root, "data"),
        "COGNEE_LOGS_DIR": os.path.join(root, "logs"),
        "TELEMETRY_DISABLED": "1",
        "ENABLE_BACKEND_ACCESS_CONTROL": "false",
        "COGNEE_SKIP_CONNECTION_TEST": "true",
        "CACHING": "false",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HUB_OFFLINE": "1",
        "GRAPH_EXTRACTOR": "llm",
        "LLM_PROVIDER": "openai",
        "LLM_MODEL": "openai/toki-stub",
        "LLM_ENDPOINT": ENDPOINT,
        "LLM_API_KEY": "unused",
        "EMBEDDING_PROVIDER": "openai_compatible",
        "EMBEDDING_MODEL": "toki-stub",
        "EMBEDDING_ENDPOINT": ENDPOINT,
        "EMBEDDING_API_KEY": "unused",
        "EMBEDDING_DIMENSIONS": str(DIMS),
        "LOG_LEVEL": "CRITICAL",
    }


def claim_of(text: Any) -> dict[str, str] | None:
    """The claim a chunk states: its last line of the shape '<key> is <value>'."""
    for line in reversed(str(text).strip().splitlines()):
        key, sep, value = line.strip().partition(" is ")
        if sep and key:
            return {"key": key.strip(), "value": value.strip()}
    return None


class WordTokenizer:
    """Counts words (cognee sizes chunks with it): a tokenizer that needs no download."""

    max_completion_tokens = 8191
    model_input_limit = 8191

    def extract_tokens(self, text: str) -> list[str]:
        return str(text).split()

    def count_tokens(self, text: str) -> int:
        return len(str(text).split())

    def decode_single_token(self, token: Any) -> str:
        return str(token)

    def trim_text_to_max_completion_tokens(self, text: str) -> str:
        return text


@contextlib.contextmanager
def _inside() -> Any:
    token = INSIDE.set(True)
    try:
        yield
    finally:
        INSIDE.reset(token)


class LoopLock:
    """An asyncio.Lock per event loop (cognee's adapters keep one asyncio.Lock for the
    process, which refuses a second loop: each agent runs one). With `model`, taking it is
    also taking the adapter's one modelled lock (see `Adapter.hold`): the scheduler then
    keeps the other agents out, as one lock on one loop would."""

    def __init__(self, adapter: Adapter | None = None) -> None:
        self.adapter = adapter
        self.locks: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()

    def _lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self.locks.get(loop)
        if lock is None:
            lock = self.locks[loop] = asyncio.Lock()
        return lock

    def locked(self) -> bool:
        return self._lock().locked()

    async def __aenter__(self) -> None:
        if self.adapter is not None:
            self.adapter.hold(+1)
        await self._lock().acquire()

    async def __aexit__(self, *exc: Any) -> None:
        try:
            if self.adapter is not None:
                self.adapter.hold(-1)
        finally:
            self._lock().release()


class Adapter:
    """The in-environment half of the Cognee adapter."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.root = tempfile.mkdtemp(prefix="toki-cognee-")
        os.environ.update(environment(self.root))
        import cognee

        self.cognee = cognee
        self.version = importlib.metadata.version("cognee")
        self.values: dict[str, str] = {}  # lower-cased entity name -> the workload's value
        self.holds: dict[int, int] = {}  # agent -> locks it holds (see `hold`)
        self.written: dict[int, set[str]] = {}  # agent -> tables written under them
        self.txns: dict[int, dict[int, set[str]]] = {}  # agent -> connection -> tables
        self.seen: dict[str, Any] | None = None  # the last snapshot, until a graph write
        self._patch_llm()
        self._patch_embedder()
        self._patch_graph()
        self._patch_vector()
        asyncio.run(self._migrate())
        asyncio.run(self._warm_up())
        self._patch_module_globals()
        self._gate_sql()

    # -- gate points ------------------------------------------------------------------------

    def _patch_llm(self) -> None:
        from cognee.infrastructure.llm.LLMGateway import LLMGateway

        ctl = self.controller

        def acreate_structured_output(
            text_input: str, system_prompt: str, response_model: Any, **kw: Any
        ) -> Any:
            async def answer() -> Any:
                name = getattr(response_model, "__name__", str(response_model))
                detail = {"model": name, "claim": claim_of(text_input)}
                reply = ctl.gate("llm", f"llm.{name}", detail)
                if isinstance(reply, dict):
                    return response_model.model_validate(reply)
                return _filled(response_model, text_input)

            return answer()

        LLMGateway.acreate_structured_output = staticmethod(acreate_structured_output)

    def _patch_embedder(self) -> None:
        from cognee.infrastructure.databases.vector.embeddings import (
            OpenAICompatibleEmbeddingEngine as module,
        )
        from cognee.infrastructure.databases.vector.embeddings.EmbeddingEngine import (
            EmbeddingResult,
        )

        ctl = self.controller
        engine = module.OpenAICompatibleEmbeddingEngine

        async def embed_text(self: Any, text: list[str], *args: Any, **kw: Any) -> Any:
            if not INSIDE.get():
                ctl.gate("embed", "embed", {"texts": len(text)})
            return EmbeddingResult([stubs.embed(t, DIMS) for t in text], 0)

        engine.embed_text = embed_text
        engine.get_tokenizer = lambda self: WordTokenizer()

    def _wrap_methods(self, cls: Any, family: str, footprint: Any) -> None:
        """Gate every public coroutine method of `cls` at its outermost call (but `compact`,
        which is skipped: see `_patch_vector`)."""
        ctl, adapter = self.controller, self
        for name, fn in list(vars(cls).items()):
            if name.startswith("_") or name == "compact" or not inspect.iscoroutinefunction(fn):
                continue

            def wrap(fn: Any, name: str) -> Any:
                @functools.wraps(fn)
                async def gated(self: Any, *args: Any, **kw: Any) -> Any:
                    if INSIDE.get() or ctl.agent() is None:
                        return await fn(self, *args, **kw)
                    reads, writes, detail = footprint(name, args, kw)
                    ctl.gate(family, f"{family}.{name}", detail, reads, writes)
                    if family == "graph" and writes:
                        adapter.seen = None  # the graph may change: read it again
                    with _inside():
                        return await fn(self, *args, **kw)

                return gated

            setattr(cls, name, wrap(fn, name))

    def _patch_graph(self) -> None:
        from cognee.infrastructure.databases.graph.ladybug.adapter import LadybugAdapter

        graph = [("graph", "*")]

        def footprint(name: str, args: Any, kw: Any) -> Any:
            write = not name.startswith(_READ_ONLY)
            return graph, graph if write else [], None

        self._wrap_methods(LadybugAdapter, "graph", footprint)
        init = LadybugAdapter.__init__

        @functools.wraps(init)
        def __init__(this: Any, *args: Any, **kw: Any) -> None:
            init(this, *args, **kw)
            this.LADYBUG_ASYNC_LOCK = LoopLock()
            this._connection_lock = LoopLock()
            this._source_ref_change_lock = LoopLock(self)

        LadybugAdapter.__init__ = __init__

    def _patch_vector(self) -> None:
        from cognee.infrastructure.databases.vector.lancedb.LanceDBAdapter import LanceDBAdapter

        writes = {
            "create_data_points",
            "upsert_raw_vectors",
            "update_payload",
            "delete_data_points",
            "remove_belongs_to_set_tags",
            "compact",
            "create_collection",
            "index_data_points",
            "create_vector_index",
            "prune",
            "run_migrations",
        }

        def footprint(name: str, args: Any, kw: Any) -> Any:
            collection = kw.get("collection_name", args[0] if args else None)
            res = [("vector", collection if isinstance(collection, str) else "*")]
            if name in writes:
                return res, res, {"collection": res[0][1]}
            return res, [], {"collection": res[0][1]}

        self._wrap_methods(LanceDBAdapter, "vector", footprint)
        init = LanceDBAdapter.__init__

        @functools.wraps(init)
        def __init__(this: Any, *args: Any, **kw: Any) -> None:
            init(this, *args, **kw)
            this.VECTOR_DB_LOCK = LoopLock(self)
            this._compaction_lock = LoopLock(self)

        LanceDBAdapter.__init__ = __init__
        # the compaction pass after each cognify rewrites LanceDB's fragments in a thread
        # no gate point covers (a run hung there: agent 1 waiting, agent 0 parked inside
        # `compact`, and again with agent 0 parked at its entry while it held the vector
        # engine's lease); it changes no content, so it takes cognee's own skip path (as
        # for remote stores) and is no gate point
        LanceDBAdapter._compaction_skip_reason = lambda this: "off under toki's scheduler"

    def _patch_module_globals(self) -> None:
        """datetime, uuid4 and the module-level asyncio locks of cognee's modules."""
        import datetime as _dt

        # the module, not the function `cognee.infrastructure.locks` exports under its name
        dataset_lock = importlib.import_module("cognee.infrastructure.locks.dataset_lock")
        clock = type("CogneeClock", (stubs.GatedDatetime,), {"gated": False})
        fake_uuid = types.SimpleNamespace(**{**vars(_uuid), "uuid4": stubs.uuid4})
        for name, module in list(sys.modules.items()):
            if not name.startswith("cognee") or module is None:
                continue
            if getattr(module, "datetime", None) is _dt.datetime:
                module.datetime = clock  # type: ignore[attr-defined]
            if getattr(module, "uuid4", None) is _uuid.uuid4:
                module.uuid4 = stubs.uuid4  # type: ignore[attr-defined]
            if getattr(module, "uuid", None) is _uuid:
                module.uuid = fake_uuid  # type: ignore[attr-defined]
            for attr, value in list(vars(module).items()):
                if isinstance(value, asyncio.Lock):  # e.g. create_db_and_tables' lock
                    setattr(module, attr, LoopLock(self))
        # the per-dataset locks, made on first use (`get_dataset_lock`): every pipeline run
        # (add's, cognify's) holds its dataset's lock throughout, across its gate points;
        # an asyncio.Lock there left the other agent awaiting a future of a lock the parked
        # agent held, which no gate point could release (GateTimeout, agent 1 in `add`)
        dataset_lock.asyncio = types.SimpleNamespace(  # type: ignore[attr-defined]
            **{**vars(asyncio), "Lock": lambda: LoopLock(self)}
        )
        dataset_lock._dataset_locks.clear()

    def _gate_sql(self) -> None:
        from cognee.infrastructure.databases.relational import get_relational_engine
        from sqlalchemy import event

        engine = get_relational_engine().engine.sync_engine
        self.db_file = engine.url.database
        event.listen(engine, "before_cursor_execute", self._statement)
        event.listen(engine, "commit", self._end)
        event.listen(engine, "rollback", self._end)

    def hold(self, delta: int, tables: Any = ()) -> None:
        """Take (+1) or let go of (-1) the one lock the scheduler models for cognee's own
        locks and SQLite's writer lock: the agent's first holding acquires it, its last
        release lets it go, publishing the tables its write transactions wrote."""
        agent = self.controller.agent()
        if agent is None:
            return
        n = self.holds.get(agent, 0)
        if self.controller.unwinding():  # a crashed agent lets go as it unwinds: no gate
            self.holds[agent] = max(0, n + delta)
            return
        if delta > 0:
            if n == 0:
                self.controller.gate("lock", "lock.acquire", {"lock": "cognee", "op": "acquire"})
            self.holds[agent] = n + 1
            return
        self.written.setdefault(agent, set()).update(tables)
        if n == 1:
            writes = [("sql", t) for t in sorted(self.written.pop(agent, set()))]
            detail = {"lock": "cognee", "op": "release"}
            self.controller.gate("lock", "lock.release", detail, [], writes)
        self.holds[agent] = max(0, n - 1)

    def _statement(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        agent = self.controller.agent()
        if agent is None:
            return
        txns = self.txns.setdefault(agent, {})
        write = _WRITE.match(statement)
        if write is None:
            if self.holds.get(agent):  # no other agent writes while this one holds the lock
                return
            tables = sorted({t.lower() for t in _TABLES.findall(statement)})
            if tables:
                reads = [("sql", t) for t in tables]
                self.controller.gate("sql", "sql.select", {"tables": tables}, reads)
            return
        target = (_TARGET.match(statement) or write).group(1).lower()
        if id(conn) not in txns:
            self.hold(+1)
            txns[id(conn)] = set()
        txns[id(conn)].add(target)

    def _end(self, conn: Any) -> None:
        agent = self.controller.agent()
        if agent is None:
            return
        tables = (self.txns.get(agent) or {}).pop(id(conn), None)
        if tables is not None:
            self.hold(-1, tables)

    # -- the worker protocol ----------------------------------------------------------------

    async def _migrate(self) -> None:
        from cognee.modules.migrations.startup import run_migrations

        await run_migrations()

    async def _warm_up(self) -> None:
        """One `add` + `cognify` outside any agent (no gate point stops it), before the
        module globals are patched: cognify imports modules lazily (ingestion, chunking,
        storage tasks) whose `uuid4` and locks would otherwise escape the patch in a worker's
        first run only, and its engines and caches are built here, not inside the first
        schedule. `open` empties the stores again."""
        await self.cognee.add("warm:up is done", dataset_name=DATASET)
        await self.cognee.cognify(datasets=[DATASET], data_per_batch=PER_BATCH)

    def describe(self) -> dict[str, Any]:
        return {"library": "cognee", "version": self.version}

    def open(self, config: dict[str, Any]) -> None:
        self.values = {str(v).lower(): str(v) for v in config.get("values") or []}
        self.holds, self.written, self.txns = {}, {}, {}
        self.seen = None
        asyncio.run(self._empty())

    async def _empty(self) -> None:
        """A fresh library instance, cheaper than cognee's prune (about 10 s a run here):
        every graph node and vector table dropped through the adapters' own connections,
        the stored files removed, every relational row deleted (the schema stays, so no
        migration runs again)."""
        from cognee.infrastructure.databases.graph import get_graph_engine
        from cognee.infrastructure.databases.vector import get_vector_engine

        graph = await get_graph_engine()
        await graph.query("MATCH (n) DETACH DELETE n")
        connection = await get_vector_engine().get_connection()
        for name in await connection.table_names():
            await connection.drop_table(name)
        shutil.rmtree(os.environ["DATA_ROOT_DIRECTORY"], ignore_errors=True)
        with contextlib.closing(sqlite3.connect(self.db_file)) as db:
            tables = [
                r[0]
                for r in db.execute("select name from sqlite_master where type = 'table'")
                if r[0] not in _KEEP_TABLES and not r[0].startswith("sqlite_")
            ]
            db.execute("pragma foreign_keys = off")
            for t in tables:
                db.execute(f'delete from "{t}"')
            db.commit()

    def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        return asyncio.run(self._agent(inbox))

    async def _agent(self, inbox: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            text = f"{claim['key']} is {claim['value']}"
            try:
                await self.cognee.add(text, dataset_name=DATASET)
                await self.cognee.cognify(datasets=[DATASET], data_per_batch=PER_BATCH)
                out.append("cognified")
            except Exception as exc:  # an application logs a failed call and goes on
                out.append(f"error: {type(exc).__name__}: {exc}")
        return out

    def _name(self, name: Any) -> str:
        text = str(name or "")
        return self.values.get(text.lower(), text)

    def _graph(self) -> list[dict[str, Any]]:
        """The relationships between entities, read from the graph store itself."""

        async def read() -> Any:
            from cognee.infrastructure.databases.graph import get_graph_engine

            graph = await get_graph_engine()
            return await graph.get_graph_data()

        nodes, edges = asyncio.run(read())
        names = {
            str(n[0]): n[1].get("name")
            for n in nodes
            if isinstance(n[1], dict) and n[1].get("type") == "Entity"
        }
        out = []
        for source, target, rel, *_ in edges:
            if str(rel) in _STRUCTURAL or str(source) not in names or str(target) not in names:
                continue
            subject = self._name(names[str(source)])
            out.append({"key": f"{subject}:{rel}", "value": self._name(names[str(target)])})
        return sorted(out, key=lambda e: (e["key"], e["value"]))

    def _data(self) -> list[dict[str, Any]]:
        """The stored data items (cognee keeps every added text) and whether cognify
        finished them, in the order cognee lists the dataset's data."""

        async def read() -> Any:
            from cognee.modules.data.methods import get_dataset_data, get_datasets_by_name
            from cognee.modules.users.methods import get_default_user

            user = await get_default_user()
            datasets = await get_datasets_by_name([DATASET], user.id)
            out = []
            for ds in datasets:
                for d in await get_dataset_data(ds.id):
                    path = str(getattr(d, "raw_data_location", "") or "")
                    text = None
                    with (
                        contextlib.suppress(OSError),
                        open(path.removeprefix("file://"), encoding="utf-8") as f,
                    ):
                        text = f.read()
                    out.append({"text": text, "dataset": str(ds.name)})
            return out

        try:
            return asyncio.run(read())
        except Exception as exc:  # no dataset yet
            return [{"error": f"{type(exc).__name__}: {exc}"}]

    def snapshot(self) -> dict[str, Any]:
        """What a reader is served now (read again only after a graph write: a snapshot
        follows every step that writes shared state, most of them SQL)."""
        if self.seen is None:
            self.seen = {"edges": self._graph()}
        return self.seen

    def observe(self) -> dict[str, Any]:
        return {"edges": self._graph(), "data": self._data()}

    def recover(self, config: dict[str, Any]) -> Any:
        return None  # re-running cognify over the stored data is the host's (replay_inputs)

    # the agents are threads of one live process (SDK callers): a crashed one dies of an
    # exception at its gate point, so its `async with` blocks release cognee's locks and its
    # SQLAlchemy sessions roll back (SQLite's writer lock is free again); left parked, it
    # would hold the relational write lock for good
    crash_unwinds = True

    def on_crash(self, agent: int) -> None:
        """Its thread has ended (the controller joined it): nothing of it is held."""
        self.holds.pop(agent, None)
        self.written.pop(agent, None)
        self.txns.pop(agent, None)

    def close(self) -> None:
        pass


def _filled(model: Any, text: str) -> Any:
    """An answer for a structured call the host does not model (the chunk summary): every
    required text field is the chunk's text, every required list empty."""
    data: dict[str, Any] = {}
    for name, field in getattr(model, "model_fields", {}).items():
        if not field.is_required():
            continue
        data[name] = [] if "list" in str(field.annotation).lower() else text
    return model.model_validate(data)
