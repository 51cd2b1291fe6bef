"""LangGraph's checkpointer under the explorer: a small graph run with `durability="sync"`
over `PostgresSaver` (langgraph-checkpoint-postgres), with restarts.

The application: a thread runs a chain of nodes ("s1" -> "s2" -> "s3" by default); each node
first does its side effect (appends one entry to `effects`, standing for an email sent or a
row written elsewhere: it survives the process) and then returns `{"done": [node]}`. The
graph is compiled with a saver over the local PostgreSQL, in a schema of its own per run,
and driven through `ainvoke(..., durability="sync")`: the loop's background saves
(`aput_writes` of a finished task, `aput` of the next checkpoint) are asyncio tasks of the
agent, i.e. units (`--faults tasks:<n>` lets the explorer release them in another order).
A step `run {thread}` (in a claims workload: each claim runs the thread named by its key)
starts the thread, or, when the saver already holds a checkpoint of it
(a restarted client), resumes it with `ainvoke(None, config)`, as LangGraph documents.

Gate points and footprints (thread t):

  checkpoint.get          aget_tuple: reads ("checkpoint", t)
  checkpoint.put          aput of checkpoint of step k: writes ("checkpoint", t)
  checkpoint.put_writes   aput_writes of a task's writes: writes ("checkpoint", t)
  effect.<node>           the node's side effect: writes ("effect", t)

Config "barrier" (a control, not a release: langchain-ai/langgraph#8055 proposed it and was
closed unmerged) makes `aput` first wait for every `aput_writes` in flight, the order the
report asks for.

The saver's SQL is `PostgresSaver`'s, run synchronously behind the async interface in the
agent's loop thread (a socket wait would look like a quiescent loop to the controller).
Checkpoint ids are `uuid6` in the real code (the wall clock): here a counter of the worker,
monotonic across a restart, so a schedule gives the same ids. After a death (`restart:1`;
`torn` does not apply: the saver's state is in PostgreSQL, not in files toki can tear),
`reopen` drops nothing but the dead agents: the next `run` opens a fresh connection and
saver on the same schema. A checkpointer has no search (no `probe`): the checks read
`effects` (what each node did, before and after the death) and the saver's tables as the
death left them (`integrity` at the reopen: every checkpoint, its parent and the writes
stored on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import itertools
import operator
import os
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

from .controller import Controller

__all__ = ["Adapter"]

_LOG = ([("program", "log")], [("program", "log")])
_SCHEMAS = itertools.count()
NODES = ("s1", "s2", "s3")


class _State(TypedDict):
    done: Annotated[list[str], operator.add]


def _thread(config: Any) -> str:
    return str((config or {}).get("configurable", {}).get("thread_id", ""))


class Adapter:
    is_async = True

    def __init__(self, controller: Controller) -> None:
        import langgraph.pregel._checkpoint as lg_checkpoint
        from langgraph.checkpoint.postgres import PostgresSaver

        self.controller = controller
        self.versions = {
            d: importlib.metadata.version(d)
            for d in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres")
        }
        self.ids = 0  # checkpoint ids drawn (uuid6)

        def uuid6(node: Any = None, clock_seq: Any = None) -> uuid.UUID:
            # version 6, variant RFC 4122, the counter in the top 48 bits: sorts like uuid6
            self.ids += 1
            return uuid.UUID(int=(self.ids << 80) | (0x6 << 76) | (0x8 << 60))

        lg_checkpoint.uuid6 = uuid6
        ctl = controller

        adapter = self

        class Saver(PostgresSaver):  # type: ignore[misc]
            """PostgresSaver's SQL behind the async interface, each call a gate point."""

            async def aget_tuple(self, config: Any) -> Any:
                t = _thread(config)
                await ctl.agate("sql", "checkpoint.get", {"thread": t}, [("checkpoint", t)], [])
                return self.get_tuple(config)

            async def alist(self, config: Any, **kw: Any) -> AsyncIterator[Any]:
                for item in self.list(config, **kw):
                    yield item

            async def aput(self, config: Any, checkpoint: Any, metadata: Any, versions: Any) -> Any:
                t = _thread(config)
                detail = {
                    "thread": t,
                    "step": metadata.get("step"),
                    "source": metadata.get("source"),
                }
                if adapter.barrier:  # the writes in flight first (langgraph PR #8055's order)
                    me = asyncio.current_task()
                    await asyncio.gather(*(w for w in adapter.inflight if w is not me))
                await ctl.agate("sql", "checkpoint.put", detail, [], [("checkpoint", t)])
                return self.put(config, checkpoint, metadata, versions)

            async def aput_writes(
                self, config: Any, writes: Any, task_id: str, task_path: str = ""
            ) -> None:
                t = _thread(config)
                done = [v for c, v in writes if c == "done"]
                detail = {"thread": t, "channels": sorted({c for c, _ in writes}), "done": done}
                me = asyncio.current_task()
                if me is not None:
                    adapter.inflight.add(me)
                try:
                    await ctl.agate("sql", "checkpoint.put_writes", detail, [], [("checkpoint", t)])
                    self.put_writes(config, writes, task_id, task_path)
                finally:
                    adapter.inflight.discard(me)

        self.Saver = Saver
        self.dsn: str | None = None
        self.schema: str | None = None
        self.url = ""
        self.effects: list[dict[str, Any]] = []  # the side effects, in the order they ran
        self.steps: list[dict[str, Any]] = []
        self.instance = 0  # 0 before a restart, 1 after
        self.barrier = False  # config "barrier": aput waits for the writes in flight
        self.inflight: set[Any] = set()  # aput_writes tasks not finished
        self.reader: Any = None  # a saver on its own connection, outside any agent
        self.stack = contextlib.ExitStack()

    def describe(self) -> dict[str, Any]:
        return {"library": "langgraph", "version": self.versions["langgraph"], **self.versions}

    # -- a fresh instance ----------------------------------------------------------------

    def open(self, config: dict[str, Any]) -> None:
        import psycopg

        self.close()
        self.ids = 0
        self.effects, self.steps, self.instance = [], [], 0
        self.barrier, self.inflight = bool(config.get("barrier")), set()
        self.dsn = str(config["dsn"])
        self.schema = f"toki_real_lgck_{os.getpid()}_{next(_SCHEMAS)}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        sep = "&" if "?" in self.dsn else "?"
        self.url = f"{self.dsn}{sep}options=-csearch_path%3D{self.schema}"
        self.reader = self._saver()
        self.reader.setup()

    def _saver(self) -> Any:
        import psycopg
        from psycopg.rows import dict_row

        conn = psycopg.connect(self.url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        self.stack.callback(conn.close)
        return self.Saver(conn)

    HANDOVER = ("dsn", "schema", "url", "ids", "effects", "steps", "instance", "barrier")
    """What a restarted process is started with (server.py copies these attributes): the
    DSN and schema, the id stream's position (a restarted service does not re-draw ids),
    and the adapter's records of the run (side effects that ran, steps); no connection.
    `reopen` connects."""

    def reopen(self) -> None:
        """In the new worker process (the dead one's connections died with it, unclosed):
        what the saver committed is what there is. The next `run` makes its saver on the
        same schema."""
        self.instance += 1
        self.inflight = set()
        self.reader = self._saver()

    # -- the application -----------------------------------------------------------------

    def _graph(self, saver: Any) -> Any:
        from langgraph.config import get_config
        from langgraph.graph import END, START, StateGraph

        ctl = self.controller

        def node(name: str) -> Any:
            async def run(state: _State) -> dict[str, list[str]]:
                t = _thread(get_config())
                await ctl.agate("effect", f"effect.{name}", {"thread": t}, [], [("effect", t)])
                self.effects.append({"thread": t, "node": name, "instance": self.instance})
                return {"done": [name]}

            return run

        g: Any = StateGraph(_State)
        for name in NODES:
            g.add_node(name, node(name))
        for a, b in zip((START, *NODES), (*NODES, END), strict=True):
            g.add_edge(a, b)
        return g.compile(checkpointer=saver)

    async def _run(self, thread: str) -> dict[str, Any]:
        saver = self._saver()
        graph = self._graph(saver)
        config = {"configurable": {"thread_id": thread}}
        saved = await saver.aget_tuple(config)
        out = await graph.ainvoke(
            None if saved is not None else {"done": []}, config, durability="sync"
        )
        return {"thread": thread, "resumed": saved is not None, "done": list(out["done"])}

    async def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for n, item in enumerate(inbox):
            self.controller.begin_claim(n)
            # a claim "key is value" of a claims workload runs the thread named by its key
            step = item if "op" in item else {"op": "run", "thread": str(item["key"])}
            op = str(step.get("op"))
            entry: dict[str, Any] = {
                "agent": agent,
                "step": n,
                "op": op,
                "args": {k: v for k, v in step.items() if k not in ("op", "bind")},
                "scope": {"thread": str(step.get("thread"))},
                "invoked": len(self.steps),
            }
            try:
                if op != "run":
                    raise ValueError(f"the graph has no operation {op!r}")
                entry["returned"] = await self._run(str(step["thread"]))
            except Exception as exc:  # an application logs a failed run and goes on
                entry["error"] = f"{type(exc).__name__}: {exc}"
            await self.controller.agate("program", "program.return", {"op": op, "step": n}, *_LOG)
            self.steps.append(entry)
            out.append(entry.get("returned", entry.get("error")))
        return out

    # -- what a reader is served, and the saver's tables -----------------------------------

    def checkpoints(self) -> list[dict[str, Any]]:
        """Every checkpoint the saver holds (its tables, not the graph's API), oldest first:
        id, parent, step, and the nodes whose writes are stored on it."""
        rows = []
        for t in self.reader.list(None):
            conf = t.config["configurable"]
            parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            rows.append(
                {
                    "thread": conf["thread_id"],
                    "id": conf["checkpoint_id"],
                    "parent": parent,
                    "step": t.metadata.get("step"),
                    "writes": len(t.pending_writes or ()),
                    "written": sorted(
                        str(v[0]) for _, c, v in t.pending_writes or () if c == "done" and v
                    ),
                }
            )
        rows.sort(key=lambda r: (r["thread"], r["id"]))
        return rows

    def snapshot(self) -> dict[str, Any]:
        """What a reader of each thread is served: its latest checkpoint's `done`."""
        memories = []
        for thread in sorted({c["thread"] for c in self.checkpoints()}):
            saved = self.reader.get_tuple({"configurable": {"thread_id": thread}})
            for name in (saved.checkpoint["channel_values"].get("done") or []) if saved else []:
                memories.append({"id": f"{thread}/{name}", "text": name, "user": thread})
        return {"memories": memories}

    def observe(self) -> dict[str, Any]:
        records = [
            {"id": m["id"], "text": m["text"], "scope": {"thread": m["user"]}}
            for m in self.snapshot()["memories"]
        ]
        return {
            **self.snapshot(),
            "effects": list(self.effects),
            "checkpoints": self.checkpoints(),
            "derived": {"records": records, "steps": list(self.steps)},
        }

    def integrity(self) -> dict[str, Any]:
        """The saver's tables as the death left them (read at the reopen)."""
        return {"checkpoints": self.checkpoints()}

    def recover(self, config: dict[str, Any]) -> Any:
        return None

    def on_crash(self, agent: int) -> None:
        pass

    def close(self) -> None:
        self.stack.close()
        self.stack = contextlib.ExitStack()
        self.reader = None
        if self.schema is not None and self.dsn is not None:
            import psycopg

            with contextlib.suppress(Exception), psycopg.connect(self.dsn, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        self.schema = None
