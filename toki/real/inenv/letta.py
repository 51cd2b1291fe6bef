"""Letta 0.16.8's server library: agents editing one shared core-memory block.

Built at import of the worker: a private PostgreSQL 16 with pgvector (`letta_db.start`, a
socket in the worker's scratch folder), `LETTA_PG_URI` pointing at it, Letta's schema; then
`letta` is imported (it reads its settings at import). `open` empties every table and makes
the default organization and user, one block "shared" and one Letta agent per workload agent
with that block attached (ids fixed, so runs are comparable).

An agent's claim "<key> is <value>" runs Letta's own core-memory tool path: the agent's
state is loaded (`agent_manager.get_agent_by_id_async`, as a step begins), the LLM gate
point "llm.tool" shows the host the block as the agent sees it and the host answers the tool
call (`core_memory_replace` of the key's line, `core_memory_append` of a new line, or none),
and `LettaCoreToolExecutor` runs it: the new value is computed from the loaded state and
written by `agent_manager.update_memory_if_changed_async` through
`block_manager.update_block_async` (Letta's comment there: "update the blocks (LRW)").

A program of family "letta" (`toki/real/program.py`; `toki real run letta --workload
archival-decide`) runs Letta's archival tools through the same executor, on one archive
every agent is attached to: `insert` is `archival_memory_insert` (`passage_manager.
insert_passage`: the passage's embedding, then its `archival_passages` row, then the system
prompt rebuilt), `search` is `archival_memory_search` (the query's embedding, then pgvector's
cosine order), `remember` writes a "<key> is <value>" line into the block (append / replace
/ nothing, on the block as loaded at step start), and `decide` is a search and then, as the
agent's next step (state loaded again), `remember` of the newest passage's value for the
query's key. Embeddings are word-hash vectors (`stubs.embed`) at the agents' 64 dimensions
(Letta pads them to its 4096-wide column), offline; they are no gate point (they read and
write nothing shared).

Gate points: every SQL statement Letta's engine runs on the tables the agents write (block:
the tool's update; messages: the system prompt rebuilt for every agent of the block;
archival_passages: an insert, and the search's select), before
it runs ("sql.select" reads its tables;
"sql.update" / "sql.insert" / "sql.delete" writes its target). Statements after the first
write of a transaction run inside that point: a transaction parked while holding a row lock
would block the other agent inside PostgreSQL, where no gate point can release it. A write
to any other table raises (no footprint covers it), so reads of the other tables (agents,
tools, blocks_agents, ...) commute with everything and need no gate point. uuid4 in Letta's
id generator draws from one stream per agent.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.metadata
import json
import os
import re
import tempfile
import types
import uuid as _uuid
from typing import Any

from . import letta_db, stubs
from .controller import Controller

__all__ = ["Adapter"]

# what steps write (archival_passages: a program's archival_memory_insert)
GATED = frozenset({"block", "messages", "agents", "provider_traces", "archival_passages"})
EMBED_DIMS = 64  # the stub embedding config's dimension; Letta pads vectors to 4096
LABEL = "shared"
_TABLES = re.compile(r'\b(?:FROM|JOIN|UPDATE|INTO)\s+"?(\w+)"?', re.I)
_WRITE = re.compile(r'^\s*(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+"?(\w+)"?', re.I)
_BLOCK_ID = "block-00000000-0000-4000-8000-00000000b10c"
_TRUNCATE_SKIP = {"alembic_version"}


def agent_id(n: int) -> str:
    return f"agent-00000000-0000-4000-8000-{n:012d}"


class Adapter:
    """The in-environment half of the Letta adapter."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.root = tempfile.mkdtemp(prefix="toki-letta-")
        os.environ["HOME"] = self.root  # LettaConfig writes ~/.letta/config
        self.server, self.uri = letta_db.start(self.root)
        atexit.unregister(self.server._cleanup)  # stopped by close(), before root goes
        os.environ["LETTA_PG_URI"] = self.uri
        letta_db.create_schema(self.uri)
        import letta.schemas.letta_base as letta_base
        from letta.server.db import engine
        from letta.server.server import SyncServer
        from sqlalchemy import create_engine, event, text

        letta_base.uuid = types.SimpleNamespace(**{**vars(_uuid), "uuid4": stubs.uuid4})
        self.version = importlib.metadata.version("letta")
        self.text = text
        self.sync = create_engine(self.uri.replace("postgresql://", "postgresql+psycopg2://"))
        with self.sync.connect() as conn:
            self.tables = sorted(
                r[0]
                for r in conn.execute(
                    text("select tablename from pg_tables where schemaname = 'public'")
                )
                if r[0] not in _TRUNCATE_SKIP
            )
        self.letta = SyncServer(init_with_default_org_and_user=False)
        self.agents: list[str] = []
        self.user: Any = None
        self.steps: list[dict[str, Any]] = []  # a program's steps, in the order they returned
        _stub_embeddings()
        event.listen(engine.sync_engine, "before_cursor_execute", self._gate)
        event.listen(engine.sync_engine, "commit", self._clean)
        event.listen(engine.sync_engine, "rollback", self._clean)

    # -- gate points ------------------------------------------------------------------------

    def _gate(self, conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if self.controller.agent() is None or conn.info.get("toki_dirty"):
            return
        write = _WRITE.match(statement)
        tables = {t.lower() for t in _TABLES.findall(statement)}
        if write is not None:
            target = write.group(2).lower()
            if target not in GATED:
                raise RuntimeError(f"toki.real letta: ungated write to table {target!r}")
            verb = write.group(1).split()[0].lower()
            conn.info["toki_dirty"] = True
            reads = sorted((tables & GATED) - {target})
            self.controller.gate(
                "sql",
                f"sql.{verb}",
                {"table": target},
                [("table", t) for t in reads],
                [("table", target)],
            )
            return
        touched = sorted(tables & GATED)
        if touched == ["agents"]:
            # the agent row's relationship loads, which Letta gathers over one session: they
            # reach the database in I/O order, so as gate points they made the same schedule
            # differ between worker processes; the row's writes (in-context ids) stay gated
            return
        if touched:
            reads = [("table", t) for t in touched]
            self.controller.gate("sql", "sql.select", {"tables": touched}, reads)

    @staticmethod
    def _clean(conn: Any) -> None:
        conn.info.pop("toki_dirty", None)

    # -- the worker protocol ----------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {"library": "letta", "version": self.version}

    def open(self, config: dict[str, Any]) -> None:
        with self.sync.begin() as conn:
            conn.execute(self.text(f"truncate {', '.join(self.tables)} restart identity cascade"))
        n = int(config.get("agents") or 2)
        self.agents = [agent_id(i) for i in range(n)]
        self.steps = []
        asyncio.run(self._build(str(config.get("initial") or ""), bool(config.get("archive"))))

    async def _build(self, initial: str, archive: bool = False) -> None:
        from letta.schemas.agent import CreateAgent
        from letta.schemas.block import Block

        s = self.letta
        org = await s.organization_manager.create_default_organization_async()
        self.user = await s.user_manager.create_default_actor_async(org_id=org.id)
        await s.block_manager.create_or_update_block_async(
            Block(id=_BLOCK_ID, label=LABEL, value=initial, limit=100_000), actor=self.user
        )
        for n, aid in enumerate(self.agents):
            await s.agent_manager.create_agent_async(
                CreateAgent(
                    name=f"agent{n}",
                    block_ids=[_BLOCK_ID],
                    **letta_db.stub_configs(32_000),
                    include_base_tools=False,
                ),
                actor=self.user,
                _test_only_force_id=aid,
            )
        if archive:  # one archive every agent searches and inserts into
            shared = await s.archive_manager.create_archive_async(
                name="shared",
                embedding_config=letta_db.stub_configs(32_000)["embedding_config"],
                actor=self.user,
            )
            for n, aid in enumerate(self.agents):
                await s.archive_manager.attach_agent_to_archive_async(
                    agent_id=aid, archive_id=shared.id, is_owner=n == 0, actor=self.user
                )

    def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        return asyncio.run(self._agent(agent, inbox))

    async def _agent(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        from letta.services.tool_executor.core_tool_executor import LettaCoreToolExecutor

        s = self.letta
        executor = LettaCoreToolExecutor(
            message_manager=s.message_manager,
            agent_manager=s.agent_manager,
            block_manager=s.block_manager,
            run_manager=s.run_manager,
            passage_manager=s.passage_manager,
            actor=self.user,
        )
        if inbox and "op" in inbox[0]:
            return await self._program(executor, agent, inbox)
        out: list[Any] = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            try:
                out.append(await self._step(executor, self.agents[agent], claim))
            except Exception as exc:  # an application logs a failed step and goes on
                out.append(f"error: {type(exc).__name__}: {exc}")
        return out

    async def _step(self, executor: Any, aid: str, claim: dict[str, Any]) -> str:
        """One step as LettaAgentV3._step persists it: the provider trace of the LLM call
        (`request_async_with_telemetry`), the tool run by the core executor, then the input
        message, the tool call and its return (`create_many_messages_async`) and the agent's
        in-context ids (`update_message_ids_async`), as `_checkpoint_messages` does."""
        from letta.constants import FUNCTION_RETURN_CHAR_LIMIT
        from letta.schemas.letta_message_content import TextContent
        from letta.schemas.message import MessageCreate
        from letta.server.rest_api.utils import (
            create_input_messages,
            create_letta_messages_from_llm_response,
            create_parallel_tool_messages_from_llm_response,
        )
        from letta.utils import validate_function_response

        s = self.letta
        state = await s.agent_manager.get_agent_by_id_async(aid, actor=self.user)
        seen = str(state.memory.get_block(LABEL).value)
        call = self.controller.gate("llm", "llm.tool", {"claim": claim, "block": seen})
        text = f"{claim['key']} is {claim['value']}"
        await self._trace(state, text, call)
        tz, model = state.timezone, state.llm_config.model
        inputs = await create_input_messages(
            [MessageCreate(role="user", content=text)], aid, tz, None, self.user
        )
        if not call:
            outcome = "no tool call"
            new = create_letta_messages_from_llm_response(
                agent_id=aid,
                model=model,
                function_name=None,
                function_arguments=None,
                tool_execution_result=None,
                tool_call_id=None,
                function_response=None,
                timezone=tz,
                reasoning_content=[TextContent(text=f"{text}: already in memory")],
                force_set_request_heartbeat=False,
                add_heartbeat_on_continue=False,
            )
        else:
            name, args = str(call["name"]), {"label": LABEL, **dict(call["args"])}
            result = await executor.execute(name, args, None, self.user, agent_state=state)
            outcome = name if result.status == "success" else f"error: {result.stderr[0]}"
            spec = {"name": name, "arguments": args, "id": f"call_{stubs.uuid4().hex[:24]}"}
            new = create_parallel_tool_messages_from_llm_response(
                agent_id=aid,
                model=model,
                tool_call_specs=[spec],
                tool_execution_results=[result],
                function_responses=[
                    validate_function_response(result.func_return, FUNCTION_RETURN_CHAR_LIMIT)
                ],
                timezone=tz,
            )
        messages = [*inputs, *new]
        await s.message_manager.create_many_messages_async(
            messages,
            actor=self.user,
            project_id=state.project_id,
            template_id=state.template_id,
        )
        await s.agent_manager.update_message_ids_async(
            agent_id=aid,
            message_ids=[*state.message_ids, *(m.id for m in messages)],
            actor=self.user,
        )
        return outcome

    # -- programs of archival and core-memory tools (toki/real/program.py, family "letta") --

    async def _program(self, executor: Any, agent: int, steps: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for n, step in enumerate(steps):
            self.controller.begin_claim(n)
            op = str(step["op"])
            entry: dict[str, Any] = {"agent": agent, "step": n, "op": op}
            try:
                entry.update(await self._op(executor, self.agents[agent], op, step))
            except Exception as exc:  # an application logs a failed call and goes on
                entry["error"] = f"{type(exc).__name__}: {exc}"
            self.steps.append(entry)
            out.append(entry.get("tool", entry.get("error")))
        return out

    async def _op(self, executor: Any, aid: str, op: str, step: dict[str, Any]) -> dict[str, Any]:
        """One step: `insert` runs archival_memory_insert; `remember` writes "<key> is
        <value>" into the shared block; `search` runs archival_memory_search; `decide` is a
        search and, in the agent's next step (state loaded again, as a step begins), the
        block's line of the query's key set to the newest passage's value."""
        s = self.letta
        if op == "insert":
            state = await s.agent_manager.get_agent_by_id_async(aid, actor=self.user)
            result = await executor.execute(
                "archival_memory_insert",
                {"content": str(step["text"])},
                None,
                self.user,
                agent_state=state,
            )
            return {"tool": _status("archival_memory_insert", result)}
        if op in ("search", "decide"):
            state = await s.agent_manager.get_agent_by_id_async(aid, actor=self.user)
            query = str(step["query"])
            result = await executor.execute(
                "archival_memory_search", {"query": query}, None, self.user, agent_state=state
            )
            if result.status != "success":
                return {"tool": _status("archival_memory_search", result)}
            # newest first: what the agent acts on is the latest recorded passage
            found = [
                str(r["content"])
                for r in sorted(
                    result.func_return or [], key=lambda r: (str(r["timestamp"]), str(r["id"]))
                )[::-1]
            ]
            if op == "search":
                return {"tool": "archival_memory_search", "found": found}
            values = [v for line in found for k, v in _lines(line) if k == query]
            if not values:
                return {"tool": "no tool call", "found": found, "decided": None}
            out = await self._remember(executor, aid, f"{query} is {values[0]}")
            return {**out, "found": found, "decided": values[0]}
        if op == "remember":
            return await self._remember(executor, aid, str(step["text"]))
        raise ValueError(f"letta has no operation {op!r}")

    async def _remember(self, executor: Any, aid: str, line: str) -> dict[str, Any]:
        """The core-memory tool the host's policy picks for the line, on the block as the
        agent's state holds it when its step begins: append a new key, replace another
        value, nothing when the block says it already."""
        key, _, value = line.partition(" is ")
        state = await self.letta.agent_manager.get_agent_by_id_async(aid, actor=self.user)
        seen = str(state.memory.get_block(LABEL).value)
        mine = [v for k, v in _lines(seen) if k == key]
        if value in mine:
            return {"tool": "no tool call", "block": seen}
        if not mine:
            name, args = "core_memory_append", {"content": line}
        else:
            name, args = (
                "core_memory_replace",
                {
                    "old_content": f"{key} is {mine[0]}",
                    "new_content": line,
                },
            )
        result = await executor.execute(
            name, {"label": LABEL, **args}, None, self.user, agent_state=state
        )
        return {"tool": _status(name, result), "block": seen}

    async def _trace(self, state: Any, text: str, call: Any) -> None:
        """The provider trace the LLM client's telemetry writes after the call (request:
        the compiled system prompt, which holds the block as loaded; response: the call)."""
        from letta.schemas.provider_trace import ProviderTrace
        from letta.services.telemetry_manager import TelemetryManager

        system = state.memory.compile()
        request = {
            "model": "stub",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": text},
            ],
        }
        response = {"tool_call": call} if call else {"content": f"{text}: already in memory"}
        await TelemetryManager().create_provider_trace_async(
            actor=self.user,
            provider_trace=ProviderTrace(
                request_json=request, response_json=response, agent_id=state.id
            ),
        )

    def _block(self) -> dict[str, Any]:
        with self.sync.connect() as conn:
            row = conn.execute(
                self.text("select value, version from block where id = :id"), {"id": _BLOCK_ID}
            ).one_or_none()
        return (
            {"value": None, "version": None}
            if row is None
            else {
                "value": str(row[0]),
                "version": int(row[1]),
            }
        )

    def _passages(self) -> list[str]:
        """The archival passages' texts, in insertion order."""
        with self.sync.connect() as conn:
            rows = conn.execute(
                self.text("select text from archival_passages order by created_at, id")
            ).all()
        return [str(r[0]) for r in rows]

    def snapshot(self) -> dict[str, Any]:
        return {"block": self._block()}

    def _record(self) -> dict[str, Any]:
        """What the steps persisted, from Letta's tables: each step's messages in
        `sequence_id` order (tool calls with their arguments, tool returns with their
        status) and the provider traces' requests (the system prompt as compiled)."""
        with self.sync.connect() as conn:
            rows = conn.execute(
                self.text(
                    "select agent_id, role, tool_calls, tool_returns from messages "
                    "where role in ('assistant', 'tool') and agent_id = any(:ids) "
                    "order by sequence_id"
                ),
                {"ids": self.agents},
            ).all()
            traces = conn.execute(
                self.text(
                    "select agent_id, request_json from provider_traces where agent_id = any(:ids)"
                ),
                {"ids": self.agents},
            ).all()
        calls, status = [], {}
        for aid, role, tool_calls, tool_returns in rows:
            if role == "assistant":
                for c in tool_calls or []:
                    fn = c.get("function") or {}
                    calls.append(
                        {
                            "agent": self.agents.index(aid),
                            "id": c.get("id"),
                            "name": fn.get("name"),
                            "args": json.loads(fn.get("arguments") or "{}"),
                        }
                    )
            for r in tool_returns or []:
                status[r.get("tool_call_id")] = r.get("status")
        for c in calls:
            c["status"] = status.get(c["id"])
        prompts = sorted(
            json.dumps([self.agents.index(aid), m.get("content")])
            for aid, req in traces
            for m in (req or {}).get("messages", [])
            if m.get("role") == "system"
        )
        return {"tool_calls": calls, "trace_prompts": [json.loads(p)[1] for p in prompts]}

    def observe(self) -> dict[str, Any]:
        """The block through Letta's API (each agent's view) and its row; the steps' record."""

        async def views() -> list[str]:
            out = []
            for aid in self.agents:
                state = await self.letta.agent_manager.get_agent_by_id_async(aid, actor=self.user)
                out.append(str(state.memory.get_block(LABEL).value))
            return out

        out = {"block": self._block(), "agents_see": asyncio.run(views()), **self._record()}
        passages = self._passages()
        if self.steps or passages:  # a program's run (claims never touch the archive)
            out.update(passages=passages, steps=list(self.steps))
        return out

    def recover(self, config: dict[str, Any]) -> Any:
        return None  # no log of edits: the block row is what survives

    def on_crash(self, agent: int) -> None:
        pass  # an abandoned agent's session is closed when its thread unwinds

    def close(self) -> None:
        self.sync.dispose()
        self.server.cleanup()


def _lines(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        key, sep, val = line.partition(" is ")
        if sep:
            out.append((key.strip(), val.strip()))
    return out


def _status(name: str, result: Any) -> str:
    return (
        name
        if result.status == "success"
        else f"error: {result.stderr[0] if result.stderr else ''}"
    )


def _stub_embeddings() -> None:
    """Letta's OpenAI client's embeddings (the agents' embedding endpoint type): word-hash
    vectors (`stubs.embed`) at the agents' dimension, offline. Not a gate point: an
    embedding reads and writes nothing shared (as `stubs.Embedder`)."""
    from letta.llm_api.openai_client import OpenAIClient

    async def request_embeddings(self: Any, inputs: list[str], config: Any) -> list[list[float]]:
        return [stubs.embed(t, int(config.embedding_dim or EMBED_DIMS)) for t in inputs]

    OpenAIClient.request_embeddings = request_embeddings
