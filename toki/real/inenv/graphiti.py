"""Graphiti (graphiti-core 0.31.x) on the embedded Kuzu driver, every boundary gated.

Built as a user would (`Graphiti(graph_driver=KuzuDriver(...), llm_client=...,
embedder=..., cross_encoder=...)`) with an `LLMClient` subclass whose `generate_response`
is a gate point, a feature-hashed `EmbedderClient` and a pass-through `CrossEncoderClient`;
telemetry off (`GRAPHITI_TELEMETRY_ENABLED=false`, set by the system's env). Graphiti is
async: each agent runs its claims on an event loop of its own and every gate point is an
awaitable one (`Controller.agate`), so one agent can have several coroutines parked at once
(`semaphore_gather` runs node and edge searches in parallel tasks); the unit is
(agent, task).

Gate points and their footprints:

  llm.<prompt name>       none (the host answers from the workload's judge); the detail
                          carries the prompt's structured context (captured by wrapping
                          `generate_prompt_response`): candidates, facts, node names
  kuzu.read / kuzu.write  reads / writes ("kuzu", "graph"): every Kuzu statement passes
                          through `driver.execute_query` and commits on its own (Kuzu's
                          `execute_write` is not a transaction), so each is one step

Workarounds for graphiti-core 0.31.2 (documented in docs/real.md): `httpx` is missing from
its dependencies (the lock file pins it); `KuzuDriver` never sets `_database`, so
`add_episode(group_id=...)` crashes until it is set (set here to the group); its
`build_indices_and_constraints` does nothing for Kuzu, so the full-text indexes of
`get_fulltext_indices(GraphProvider.KUZU)` are created here (the FTS extension is bundled
with kuzu). Kuzu's `AsyncConnection` runs statements in its own thread pool; here the
driver's client runs each statement synchronously in the agent's loop thread, right after
its gate point (the statement is the same; only the thread differs), so no agent's work
runs while another's is released.

Determinism: Graphiti reads the clock through `utc_now()` (created_at, expired_at) and ids
through `uuid4()` (nodes, edges); both are patched with one stream per agent: agent i's n-th
read of the clock is BASE + n s + i ms. A clock per agent is not shared state, so reading it
is no gate point; Graphiti decides with valid_at / reference_time, never with these times.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.metadata
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import types
import uuid as _uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from . import stubs
from .controller import Controller

__all__ = ["Adapter"]

# the program step log: every step's return reads and writes it (see _program)
_LOG = ([("program", "log")], [("program", "log")])

GROUP = "toki"
CLAIM: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "toki_real_graphiti_claim", default=None
)
PROMPT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "toki_real_graphiti_prompt", default=None
)
_WRITE = re.compile(r"\b(MERGE|CREATE|SET|DELETE|DETACH|REMOVE)\b", re.IGNORECASE)
GRAPH = ("kuzu", "graph")


def episode_body(claim: dict[str, Any]) -> str:
    return f"{claim['key']} is {claim['value']}"


def reference_time(claim: dict[str, Any]) -> datetime:
    """The episode's reference time: the claim's valid start (days from stubs.BASE)."""
    return stubs.BASE + timedelta(days=int(claim.get("start") or 0))


def _summary(name: str | None, context: Any) -> dict[str, Any]:
    """What the host needs from a prompt's context (plain JSON)."""
    if not isinstance(context, dict):
        return {}
    if name == "dedupe_nodes.nodes":
        return {
            "extracted": [
                {"id": n.get("id"), "name": n.get("name")}
                for n in context.get("extracted_nodes") or []
            ],
            "existing": [
                {"candidate_id": n.get("candidate_id"), "name": n.get("name")}
                for n in context.get("existing_nodes") or []
            ],
        }
    if name and "summar" in name:  # entity summaries (add_episode, remove_episode's rebuild)
        return {
            "entities": [str(e.get("name")) for e in context.get("entities") or []],
            "episode_content": str(context.get("episode_content") or ""),
        }
    if name == "dedupe_edges.resolve_edge":
        return {
            "new_edge": context.get("new_edge"),
            "existing_edges": list(context.get("existing_edges") or []),
            "invalidation_candidates": list(context.get("edge_invalidation_candidates") or []),
        }
    return {}


def _empty(response_model: Any) -> dict[str, Any]:
    """An answer for a prompt the host does not model: the schema's required lists empty."""
    if response_model is None:
        return {}
    out: dict[str, Any] = {}
    for name, field in getattr(response_model, "model_fields", {}).items():
        if field.is_required():
            out[name] = []
    return out


class _SyncClient:
    """Stands in for kuzu.AsyncConnection: runs the statement at once, in the calling
    thread (the agent's loop thread; the main thread when observing)."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    async def execute(self, query: str, parameters: dict[str, Any] | None = None) -> Any:
        return self.connection.execute(query, parameters=parameters or {})


class Adapter:
    """The in-environment half of the Graphiti adapter."""

    is_async = True

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.root: str | None = None
        import graphiti_core.graphiti_types as graphiti_types
        import kuzu
        from graphiti_core import Graphiti
        from graphiti_core.cross_encoder.client import CrossEncoderClient
        from graphiti_core.driver.driver import GraphProvider
        from graphiti_core.driver.kuzu_driver import KuzuDriver
        from graphiti_core.edges import EntityEdge
        from graphiti_core.embedder.client import EmbedderClient
        from graphiti_core.errors import GroupsEdgesNotFoundError
        from graphiti_core.graph_queries import get_fulltext_indices
        from graphiti_core.llm_client.client import LLMClient
        from graphiti_core.llm_client.config import LLMConfig
        from graphiti_core.nodes import EntityNode, EpisodeType, EpisodicNode
        from graphiti_core.utils.bulk_utils import RawEpisode

        self.version = importlib.metadata.version("graphiti-core")
        self.kuzu = kuzu
        self.Graphiti = Graphiti
        self.KuzuDriver = KuzuDriver
        self.EntityEdge = EntityEdge
        self.EntityNode = EntityNode
        self.GroupsEdgesNotFoundError = GroupsEdgesNotFoundError
        self.fulltext = list(get_fulltext_indices(GraphProvider.KUZU))
        ctl = controller
        dims = 64

        class Llm(LLMClient):  # type: ignore[misc]
            async def _generate_response(self, *args: Any, **kw: Any) -> dict[str, Any]:
                raise RuntimeError("toki.real: the stub LLM answers in generate_response")

            async def generate_response(
                self,
                messages: Any,
                response_model: Any = None,
                max_tokens: Any = None,
                model_size: Any = None,
                group_id: Any = None,
                prompt_name: str | None = None,
                **kw: Any,
            ) -> dict[str, Any]:
                prompt = PROMPT.get() or {}
                name = prompt_name or prompt.get("name") or "unknown"
                detail = {
                    "claim": _prompt_claim(prompt.get("context")),
                    "prompt": name,
                    **_summary(name, prompt.get("context")),
                }
                reply = await ctl.agate("llm", f"llm.{name}", detail)
                return reply if isinstance(reply, dict) and reply else _empty(response_model)

        class Embedder(EmbedderClient):  # type: ignore[misc]
            async def create(self, input_data: Any) -> list[float]:
                text = input_data if isinstance(input_data, str) else " ".join(map(str, input_data))
                return stubs.embed(text, dims)

            async def create_batch(self, input_data_list: list[str]) -> list[list[float]]:
                return [stubs.embed(t, dims) for t in input_data_list]

        class Ranker(CrossEncoderClient):  # type: ignore[misc]
            async def rank(self, query: str, passages: list[str]) -> list[tuple[str, float]]:
                return [(p, 1.0 - i / (len(passages) + 1)) for i, p in enumerate(passages)]

        self.llm = Llm(LLMConfig(api_key="unused", model="toki-real-stub"), cache=False)
        self.embedder = Embedder()
        self.ranker = Ranker()

        original = graphiti_types.generate_prompt_response

        async def generate_prompt_response(
            llm_client: Any, prompt_name: Any, legacy: Any, context: Any, **kw: Any
        ) -> Any:
            PROMPT.set({"name": str(prompt_name), "context": context})
            try:
                return await original(llm_client, prompt_name, legacy, context, **kw)
            finally:
                PROMPT.set(None)

        execute = KuzuDriver.execute_query

        async def execute_query(self: Any, cypher_query_: str, **kwargs: Any) -> Any:
            write = bool(_WRITE.search(cypher_query_))
            text = " ".join(cypher_query_.split())[:90]
            await ctl.agate(
                "graph",
                "kuzu.write" if write else "kuzu.read",
                {"query": text},
                [GRAPH],
                [GRAPH] if write else [],
            )
            return await execute(self, cypher_query_, **kwargs)

        KuzuDriver.execute_query = execute_query
        fake_uuid = types.SimpleNamespace(uuid4=stubs.uuid4, UUID=_uuid.UUID)
        for name, module in list(sys.modules.items()):
            if not name.startswith("graphiti_core") or module is None:
                continue
            if getattr(module, "generate_prompt_response", None) is original:
                module.generate_prompt_response = generate_prompt_response  # type: ignore[attr-defined]
            if hasattr(module, "utc_now"):
                module.utc_now = self.now  # type: ignore[attr-defined]
            if getattr(module, "uuid4", None) is _uuid.uuid4:
                module.uuid4 = stubs.uuid4  # type: ignore[attr-defined]
            if getattr(module, "uuid", None) is _uuid:
                module.uuid = fake_uuid  # type: ignore[attr-defined]
        self.graphiti: Any = None
        self.driver: Any = None
        self.path: str | None = None  # the run's Kuzu database file
        self.unopenable: str | None = None  # why the files of a dead process do not open
        self.lives = 0  # database folders made under root (a restart opens a new one)
        self.groups: list[str] = [GROUP]
        self.steps: list[dict[str, Any]] = []  # program steps, in the order they returned
        self.bound: dict[str, list[dict[str, Any]]] = {}  # a read's answer, by binding name
        self.EpisodicNode = EpisodicNode
        self.RawEpisode = RawEpisode
        self.EpisodeType = EpisodeType

    def now(self) -> datetime:
        """Graphiti's `utc_now`: a clock per agent (see the module docstring)."""
        ctl = self.controller
        agent = ctl.agent()
        if agent is None:
            return stubs.BASE
        stream = f"clock/{agent}"
        n = ctl.ids.get(stream, 0) + 1
        ctl.ids[stream] = n
        return stubs.BASE + timedelta(seconds=n, milliseconds=agent)

    def describe(self) -> dict[str, Any]:
        return {"library": "graphiti-core", "version": self.version}

    def open(self, config: dict[str, Any]) -> None:
        self.close()
        if self.root is None:
            self.root = tempfile.mkdtemp(prefix="toki-real-kuzu-")
        self.groups = sorted({GROUP, *(config.get("groups") or [])})
        self.steps = []
        self.bound = {}
        self._connect(self._new_dir())

    def _new_dir(self) -> str:
        assert self.root is not None
        self.lives += 1
        path = os.path.join(self.root, f"run{self.lives}")
        os.makedirs(path)
        return path

    def _connect(self, folder: str) -> None:
        """Graphiti over the Kuzu database in `folder` (created, or reopened from the files a
        dead process left: Kuzu replays its WAL when it opens)."""
        import warnings

        self.path = os.path.join(folder, "graph.kuzu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # Kuzu is deprecated upstream
            driver = self.KuzuDriver(db=self.path)
        driver._database = GROUP  # 0.31.2: KuzuDriver never sets it
        driver.client.close()  # its AsyncConnection (a thread pool): replaced by ours
        driver.client = _SyncClient(self.kuzu.Connection(driver.db))
        for query in self.fulltext:  # 0.31.2: build_indices_and_constraints is a no-op
            try:
                driver.client.connection.execute(query)
            except RuntimeError as exc:  # a reopened database has them already
                if "already exists" not in str(exc):
                    raise
        self.driver = driver
        self.graphiti = self.Graphiti(
            graph_driver=driver,
            llm_client=self.llm,
            embedder=self.embedder,
            cross_encoder=self.ranker,
        )

    async def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        if inbox and "op" in inbox[0]:
            return await self._program(agent, inbox)
        out: list[Any] = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            CLAIM.set(claim)
            try:
                result = await self.graphiti.add_episode(
                    name=f"claim {agent}.{n}",
                    episode_body=episode_body(claim),
                    source_description="toki workload",
                    reference_time=reference_time(claim),
                    group_id=GROUP,
                )
            except Exception as exc:  # an agent logs a failed add and goes on
                out.append([f"error: {type(exc).__name__}: {exc}"])
                continue
            out.append(sorted([e.fact, e.invalid_at is not None] for e in result.edges))
        return out

    # -- reading through the library's own API -------------------------------------------

    def _edges(self) -> list[dict[str, Any]]:
        try:
            edges = asyncio.run(self.EntityEdge.get_by_group_ids(self.driver, self.groups))
        except self.GroupsEdgesNotFoundError:  # the library's answer for "no edges yet"
            edges = []
        rows = [
            {
                "uuid": e.uuid,
                "fact": e.fact,
                "valid_at": _iso(e.valid_at),
                "invalid_at": _iso(e.invalid_at),
                "expired_at": _iso(e.expired_at),
                "episodes": len(e.episodes or []),
                "group": e.group_id,
            }
            for e in edges
        ]
        rows.sort(key=lambda r: (str(r["valid_at"]), str(r["fact"]), str(r["uuid"])))
        return rows

    def _summaries(self) -> list[dict[str, Any]]:
        """Each entity node's summary (what Graphiti serves about an entity beside its
        edges), read from the graph."""
        nodes = asyncio.run(self.EntityNode.get_by_group_ids(self.driver, self.groups))
        rows = [
            {"id": n.uuid, "name": n.name, "text": n.summary or "", "user": n.group_id}
            for n in nodes
        ]
        return sorted(rows, key=lambda r: (str(r["name"]), str(r["id"])))

    def snapshot(self) -> dict[str, Any]:
        if self.unopenable is not None:  # the library did not start: it serves nothing
            return {"edges": [], "memories": [], "summaries": []}
        edges = self._edges()
        return {
            "edges": edges,
            # what the restart checks compare (toki/real/restart.py): the edges a reader is
            # served, and the entity summaries
            "memories": [{"id": e["uuid"], "text": e["fact"], "user": e["group"]} for e in edges],
            "summaries": self._summaries(),
        }

    def observe(self) -> dict[str, Any]:
        if self.unopenable is not None:
            derived = {"records": [], "structures": {}, "agree": [], "steps": list(self.steps)}
            return {**self.snapshot(), "episodes": [], "derived": derived}
        view = self.snapshot()
        far = stubs.BASE + timedelta(days=36500)
        episodes = asyncio.run(
            self.graphiti.retrieve_episodes(reference_time=far, last_n=10_000, group_ids=[GROUP])
        )
        return {
            **view,
            "episodes": [
                {"name": e.name, "content": e.content, "valid_at": _iso(e.valid_at)}
                for e in episodes
            ],
            "derived": self._derived(),
        }

    # -- programs of Graphiti's own operations (toki/real/program.py) ---------------------

    async def _program(self, agent: int, steps: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for n, step in enumerate(steps):
            self.controller.begin_claim(n)
            op = str(step["op"])
            # invoked after the returns logged so far (real-time order: what a read
            # invoked after a delete returned may no longer serve)
            entry: dict[str, Any] = {
                "agent": agent,
                "step": n,
                "op": op,
                "invoked": len(self.steps),
            }
            try:
                args = {k: self._resolve(v) for k, v in step.items() if k not in ("op", "bind")}
                entry["args"] = args
                groups = args.get("group_ids") or []
                group = args.get("group_id", groups[0] if len(groups) == 1 else None)
                entry["scope"] = {} if group is None else {"group_id": str(group)}
                entry["returned"] = await self._call(agent, n, op, args)
                if step.get("bind"):
                    self.bound[str(step["bind"])] = entry["returned"]
            except Exception as exc:  # an application logs a failed call and goes on
                entry["error"] = f"{type(exc).__name__}: {exc}"
            # the call returns: a gate point ordered against every other return, so the
            # step log's order (what a later read saw after a delete) is explored by the
            # scheduler, not fixed by it
            await self.controller.agate("program", "program.return", {"op": op, "step": n}, *_LOG)
            self.steps.append(entry)
            out.append(entry.get("returned", entry.get("error")))
        return out

    def _resolve(self, value: Any) -> Any:
        if not (isinstance(value, str) and value.startswith("$")):
            return value
        name, _, last = value[1:].rpartition(".")
        name, index = (name, int(last)) if last.isdigit() and name else (value[1:], 0)
        records = self.bound.get(name) or []
        if len(records) <= index:
            raise LookupError(f"{value}: the step bound to {name!r} returned no record {index}")
        return records[index].get("id")

    async def _call(self, agent: int, n: int, op: str, args: dict[str, Any]) -> Any:
        g = self.graphiti
        group = str(args.get("group_id", GROUP))
        day = int(args.get("day", 0))
        if op == "add_episode":
            text = str(args["text"])
            CLAIM.set(_claim(text, day))
            result = await g.add_episode(
                name=f"step {agent}.{n}",
                episode_body=text,
                source_description="toki program",
                reference_time=stubs.BASE + timedelta(days=day),
                group_id=group,
            )
            # the episode, and each edge it saved as the call reports it (resolved and
            # invalidated): what response-divergence compares with the stored edge
            return [
                {"id": result.episode.uuid, "event": "EPISODE"},
                *(
                    {
                        "id": e.uuid,
                        "event": "SAVE",
                        "text": e.fact,
                        "state": {"invalid_at": _iso(e.invalid_at)},
                    }
                    for e in sorted(result.edges, key=lambda e: str(e.uuid))
                ),
            ]
        if op == "add_episode_bulk":
            texts = [str(t) for t in args["texts"]]
            raw = [
                self.RawEpisode(
                    name=f"step {agent}.{n}.{i}",
                    content=t,
                    source_description="toki program",
                    source=self.EpisodeType.text,
                    reference_time=stubs.BASE + timedelta(days=day),
                )
                for i, t in enumerate(texts)
            ]
            CLAIM.set(_claim(texts[0], day) if texts else None)
            result = await g.add_episode_bulk(raw, group_id=group)
            return [{"id": e.uuid, "event": "EPISODE"} for e in result.episodes]
        if op == "remove_episode":
            await g.remove_episode(str(args["episode_id"]))
            return [{"id": str(args["episode_id"]), "event": "DELETE"}]
        if op == "search":
            groups = [str(x) for x in args.get("group_ids") or [group]]
            edges = await g.search(str(args["query"]), group_ids=groups)
            return [_edge_record(e) for e in edges]
        if op == "get_edges":
            return [_edge_record(e) for e in await self._group_edges([group])]
        raise ValueError(f"graphiti has no operation {op!r}")

    async def _group_edges(self, groups: list[str]) -> list[Any]:
        try:
            edges = await self.EntityEdge.get_by_group_ids(self.driver, groups)
        except self.GroupsEdgesNotFoundError:
            edges = []
        return sorted(edges, key=lambda e: (str(e.fact), str(e.uuid)))

    def _derived(self) -> dict[str, Any]:
        """Graphiti's derived structures, read from the graph: the entity edges (records,
        scoped by group) and the two records of which episode supports which edge: each
        edge's `episodes` list, and each episode's `entity_edges` list."""
        edges = asyncio.run(self._group_edges(self.groups))
        episodes = asyncio.run(self.EpisodicNode.get_by_group_ids(self.driver, self.groups))
        live = {e.uuid for e in edges}
        return {
            "records": [
                {**_edge_record(e), "state": {"invalid_at": _iso(e.invalid_at)}} for e in edges
            ],
            "structures": {
                "edge_provenance": sorted(
                    f"{p}->{e.uuid}" for e in edges for p in e.episodes or []
                ),
                "episode_edges": sorted(
                    f"{ep.uuid}->{x}" for ep in episodes for x in ep.entity_edges or [] if x in live
                ),
            },
            "agree": [["edge_provenance", "episode_edges"]],
            "steps": list(self.steps),
        }

    def recover(self, config: dict[str, Any]) -> Any:
        return None  # re-ingesting the stored episodes is run by the host (replay_inputs)

    def on_crash(self, agent: int) -> None:
        pass  # each Kuzu statement committed on its own: what ran stays, nothing is held

    # -- restart hooks (toki/real/faults.py): files, reopen, probes ------------------------

    def durable_files(self) -> list[str]:
        """Kuzu's database file and its write-ahead log (Kuzu 0.11: `<path>` and
        `<path>.wal`): what a restarted process opens."""
        return [] if self.path is None else [self.path, self.path + ".wal"]

    HANDOVER = ("path", "groups", "steps", "bound")
    """What a restarted process is started with (server.py copies these attributes): the
    database file's path, the groups, the adapter's own step log; no Graphiti or Kuzu
    object. `resumed` then gives the new process a scratch folder; `reopen` opens the files."""

    def resumed(self) -> None:
        if self.root is None:
            self.root = tempfile.mkdtemp(prefix="toki-real-kuzu-")

    def reopen(self) -> None:
        """A fresh Graphiti, in the new worker process, over the files the dead process
        left: their bytes are copied into a new folder first (what is on disk at the death),
        and Kuzu is tried on a scratch copy in a process of its own (a replay that crashes
        the engine must not take the worker with it)."""
        assert self.path is not None
        folder, trial = self._new_dir(), self._new_dir()
        for f in self.durable_files():
            if os.path.exists(f):
                shutil.copyfile(f, os.path.join(folder, os.path.basename(f)))
                shutil.copyfile(f, os.path.join(trial, os.path.basename(f)))
        self._release()
        self.unopenable = _opens(os.path.join(trial, "graph.kuzu"))
        shutil.rmtree(trial, ignore_errors=True)
        if self.unopenable is None:
            self._connect(folder)

    def probe(self, text: str, scope: str) -> list[dict[str, Any]]:
        """What Graphiti's search for `text` in group `scope` answers (best first); its
        search reports no score."""
        edges = asyncio.run(self.graphiti.search(text, group_ids=[scope], num_results=3))
        return [{"id": e.uuid, "text": e.fact, "score": None} for e in edges]

    def integrity(self) -> dict[str, Any]:
        """Graphiti's two records of which episode supports which edge (each edge's
        `episodes`, each episode's `entity_edges`), counted: they must agree."""
        structures = self._derived()["structures"]
        return {name: len(ids) for name, ids in structures.items()}

    def _release(self) -> None:
        self.unopenable = None
        driver, self.graphiti, self.driver = self.driver, None, None
        if driver is not None:
            driver.client.connection.close()
            driver.db.close()

    def close(self) -> None:
        """Close the run's Kuzu database explicitly: each one reserves Kuzu's default
        max_db_size (8 TiB) of address space until it is closed, and waiting for the garbage
        collector let a long real matrix run out of it ("Mmap for size 8796093022208
        failed"). Its files go with it."""
        self._release()
        if self.root is not None:
            for name in os.listdir(self.root):
                shutil.rmtree(os.path.join(self.root, name), ignore_errors=True)
        self.path = None


def _opens(path: str) -> str | None:
    """Whether Kuzu opens the database at `path` in a fresh process (None), else why not:
    opening replays the write-ahead log, and a replay that crashes the engine must not take
    the worker with it (the files are a scratch copy: a replay rewrites them)."""
    code = "import sys, kuzu; kuzu.Database(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120
    )
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        how = f"the process died of signal {signal.Signals(-done.returncode).name}"
    else:
        how = f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"
    return f"kuzu.Database({os.path.basename(path)!r}) on the dead process's files: {how}"


def _claim(text: str, day: int = 0) -> dict[str, Any] | None:
    """The claim an episode text states ('<key> is <value>'), for the stub LLM."""
    key, sep, value = text.partition(" is ")
    return {"key": key, "value": value, "start": day} if sep else None


def _prompt_claim(context: Any) -> dict[str, Any] | None:
    """The agent's claim, unless the prompt is about another episode (a bulk call)."""
    claim, episode = CLAIM.get(), _episode_claim(context)
    if episode is None or (
        claim is not None
        and (claim.get("key"), claim.get("value")) == (episode["key"], episode["value"])
    ):
        return claim
    return episode


def _episode_claim(context: Any) -> dict[str, Any] | None:
    """In a bulk call every episode's prompts run in one agent: the claim is read from the
    episode the prompt is about."""
    if isinstance(context, dict) and isinstance(context.get("episode_content"), str):
        day = int((CLAIM.get() or {}).get("start") or 0)  # the step's reference day
        return _claim(context["episode_content"], day)
    return None


def _edge_record(e: Any) -> dict[str, Any]:
    return {"id": e.uuid, "text": e.fact, "scope": {"group_id": str(e.group_id)}}


def _iso(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return str(value.astimezone(UTC).isoformat())
    return str(value)
