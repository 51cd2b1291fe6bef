"""LangGraph's `BaseStore` (InMemoryStore, PostgresStore) and LangMem's memory store manager,
every boundary gated. One worker module, three systems (config "mode"):

* "store-memory" / "store-postgres": the application writes each claim with
  `store.put((subject,), predicate, {"value": value})`. The PostgresStore runs on the local
  server (config "dsn") in a schema of its own per run (`options=-csearch_path=...`), set up
  with `.setup()` and dropped when the run is discarded.
* "langmem": `create_memory_store_manager(model, namespace=("memories", "{user_id}"),
  store=InMemoryStore(), enable_deletes=True)`; each claim is one conversation turn
  "<key> is <value>" passed to `manager.invoke(..., config={"configurable": {"user_id":
  subject}})`. Before that, the application keeps the turn in the store's ("threads",
  subject) namespace, as a LangGraph checkpointer would keep the thread: LangMem stores no
  inputs itself, and the model's recovery (re-run the manager over the thread with a fresh
  LLM) assumes the application keeps them. The thread is listed by the store's created_at
  (a clock ticked inside the gated put). The model is a small `BaseChatModel` whose
  `bind_tools` binds the tools in OpenAI format and whose `_generate` is a gate point
  answered by the host with tool calls (`Memory` inserts, `PatchDoc` JSON patches,
  `RemoveDoc`), which trustcall applies.

Gate points and footprints ("*": every key):

  store.batch     per op: GetOp reads ("store", "<ns>#<key>"); PutOp (a delete is a PutOp
                  with value None) writes it; SearchOp / ListNamespacesOp read ("store", "*")
  llm.extract / llm.manage   none (the host answers from the workload's judge)

Every get/put/search/delete passes through `Store.batch` (the research notes), so that one
wrapper is the whole store boundary. Thread pools (langchain's `ContextThreadPoolExecutor`,
LangGraph's background executor) and threads an agent starts (LangMem's reflection worker)
are units of the agent (`pools`), and uuid4 (LangMem's new
memory ids, trustcall's message ids) draws from one stream per agent.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import importlib.metadata
import itertools
import logging
import os
import re
import types
import uuid as _uuid
from typing import Any

from . import pools, stubs
from .controller import Controller

__all__ = ["Adapter"]

# the program step log: every step's return reads and writes it (see _program)
_LOG = ([("program", "log")], [("program", "log")])

CLAIM: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "toki_real_langchain_claim", default=None
)
# the conversation a reflection is about (the executor's payload), for the stub model
CLAIMS: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "toki_real_langchain_claims", default=None
)
_INSTANCE = re.compile(r'<instance id=(\S+) schema_type="(\w+)">\s*(.*?)\s*</instance>', re.S)
_SCHEMAS = itertools.count()


class _StoreClock(stubs.GatedDatetime):
    """InMemoryStore's clock (created_at / updated_at of a put): read inside the gated
    batch, whose footprint declares the clock, so it ticks without parking."""

    gated = False


def subject_of(key: str) -> tuple[str, str]:
    subject, _, predicate = key.partition(":")
    return subject or "user", predicate or "value"


def resource(namespace: Any, key: Any) -> str:
    return "/".join(map(str, namespace)) + "#" + str(key)


def _existing(messages: Any) -> list[dict[str, Any]]:
    """The documents trustcall shows the model (`<instance id=... schema_type=...>`)."""
    out = []
    for message in messages:
        for doc_id, kind, body in _INSTANCE.findall(str(getattr(message, "content", ""))):
            try:
                content = ast.literal_eval(body)
            except (ValueError, SyntaxError):
                content = body
            if isinstance(content, dict):
                content = content.get("content", content)
            out.append({"id": doc_id, "kind": kind, "content": content})
    return out


class Adapter:
    """The in-environment half of the LangGraph store and LangMem adapters."""

    units = True  # pool submissions and started threads are units of their agent (`pools`)

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
        from langgraph.store.memory import InMemoryStore

        self.versions = {
            d: importlib.metadata.version(d)
            for d in ("langgraph", "langgraph-checkpoint-postgres", "langmem")
        }
        self.InMemoryStore = InMemoryStore
        ctl = controller

        def footprint(ops: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
            reads, writes, detail = [], [], []
            for op in ops:
                if isinstance(op, GetOp):
                    reads.append(("store", resource(op.namespace, op.key)))
                    detail.append(["get", resource(op.namespace, op.key)])
                elif isinstance(op, PutOp):
                    writes.append(("store", resource(op.namespace, op.key)))
                    what = "delete" if op.value is None else "put"
                    detail.append([what, resource(op.namespace, op.key), op.value])
                elif isinstance(op, SearchOp | ListNamespacesOp):
                    reads.append(("store", "*"))
                    prefix = getattr(op, "namespace_prefix", ())
                    detail.append(["search", "/".join(map(str, prefix))])
            return reads, writes, detail

        def gate_batch(cls: Any, clock: bool) -> None:
            original = cls.batch

            def batch(self: Any, ops: Any) -> Any:
                ops = list(ops)
                reads, writes, detail = footprint(ops)
                if clock and any(isinstance(op, PutOp) for op in ops):
                    writes.append(("clock", None))  # the put stamps created_at (ticks)
                ctl.gate("store", "store.batch", {"ops": detail}, reads, writes)
                return original(self, ops)

            cls.batch = batch

        import langgraph.store.memory as memory_module

        memory_module.datetime = _StoreClock
        gate_batch(InMemoryStore, True)
        try:
            from langgraph.store.postgres import PostgresStore
        except ImportError:  # pragma: no cover - the lock installs it
            PostgresStore = None
        self.PostgresStore = PostgresStore
        if PostgresStore is not None:
            gate_batch(PostgresStore, False)  # the server stamps its rows
        pools.install_from_env(controller)
        fake_uuid = types.SimpleNamespace(**{**vars(_uuid), "uuid4": stubs.uuid4})
        import langmem.knowledge.extraction as extraction
        import trustcall._base as trustcall_base

        extraction.uuid = fake_uuid
        trustcall_base.uuid = fake_uuid
        import langmem.reflection as reflection

        reflection.time = pools.VirtualTime(controller)  # the worker's queue loop and sleeps
        self.ReflectionExecutor = reflection.ReflectionExecutor
        self.logged: list[str] = []  # what the reflection worker logged as errors
        reflection.logger.addHandler(_Collect(self.logged))
        reflection.logger.propagate = False
        self.create_manager = extraction.create_memory_store_manager
        self.chat = _chat_model(controller)
        self.mode = "store-memory"
        self.store: Any = None
        self.manager: Any = None
        self.stack = contextlib.ExitStack()
        self.schema: str | None = None
        self.dsn: str | None = None
        self.subjects: list[str] = []
        self.steps: list[dict[str, Any]] = []  # program steps, in the order they returned
        self.reflected: list[dict[str, Any]] = []  # reflection mode: reads and submissions

    def describe(self) -> dict[str, Any]:
        return {"library": "langgraph", "version": self.versions["langgraph"], **self.versions}

    def open(self, config: dict[str, Any]) -> None:
        self.close()
        self.mode = str(config.get("mode") or "store-memory")
        self.steps = []
        self.subjects = list(config.get("subjects") or ["user"])
        if self.mode == "store-postgres":
            self._open_postgres(str(config["dsn"]))
        else:
            self.store = self.InMemoryStore()
        self.reflected = []
        self.logged.clear()
        if self.mode in ("langmem", "langmem-reflection"):
            self.manager = self.create_manager(
                self.chat,
                namespace=("memories", "{user_id}"),
                store=self.store,
                enable_deletes=True,
            )

    def _open_postgres(self, dsn: str) -> None:
        import psycopg

        if self.PostgresStore is None:
            raise RuntimeError("langgraph-checkpoint-postgres is not installed")
        self.dsn = dsn
        self.schema = f"toki_real_lg_{os.getpid()}_{next(_SCHEMAS)}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
            conn.execute(f'CREATE SCHEMA "{self.schema}"')
        sep = "&" if "?" in dsn else "?"
        url = f"{dsn}{sep}options=-csearch_path%3D{self.schema}"
        self.store = self.stack.enter_context(self.PostgresStore.from_conn_string(url))
        self.store.setup()

    def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        if inbox and "op" in inbox[0]:
            return self._program(agent, inbox)
        if self.mode == "langmem-reflection":
            return self._reflecting(agent, inbox)
        out: list[Any] = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            CLAIM.set(claim)
            subject, predicate = subject_of(str(claim["key"]))
            try:
                if self.mode == "langmem":
                    # the application keeps the conversation (what a checkpointer would):
                    # the input log the model's recovery re-runs the manager over
                    self.store.put(
                        ("threads", subject), f"{agent}.{n}", {"text": _text(claim), "claim": claim}
                    )
                    puts = self.manager.invoke(
                        {"messages": [{"role": "user", "content": _text(claim)}]},
                        config={"configurable": {"user_id": subject}},
                    )
                    out.append(sorted(_content(p["value"]) for p in puts))
                else:
                    self.store.put((subject,), predicate, {"value": claim["value"]})
                    out.append("put")
            except Exception as exc:  # an application logs a failed write and goes on
                out.append(f"error: {type(exc).__name__}: {exc}")
        return out

    def _reflecting(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        """The application of LangMem's ReflectionExecutor docs: one conversation per agent;
        for each message it reads the user's memories (what it would answer from), keeps the
        turn, and submits the whole conversation for reflection in the background (thread_id
        = the conversation, so a newer submission cancels a pending one) without waiting;
        the `with` block's exit waits for the executor (shutdown(wait=True))."""
        out: list[Any] = []
        conversation: list[dict[str, Any]] = []
        reflector = _Reflector(self.manager)
        with self.ReflectionExecutor(reflector, store=self.store) as executor:
            futures = []
            for n, claim in enumerate(inbox):
                self.controller.begin_claim(n)
                CLAIM.set(claim)
                subject, _ = subject_of(str(claim["key"]))
                served = sorted(_content(i.value) for i in self.store.search(("memories", subject)))
                self.store.put(
                    ("threads", subject), f"{agent}.{n}", {"text": _text(claim), "claim": claim}
                )
                conversation.append(claim)
                payload = {
                    "messages": [{"role": "user", "content": _text(c)} for c in conversation],
                    "claims": list(conversation),
                }
                config = {"configurable": {"user_id": subject}}
                future = executor.submit(payload, config=config, thread_id=f"conversation-{agent}")
                futures.append(future)
                self.reflected.append({"agent": agent, "message": n, "served": served})
                out.append(served)
        for n, future in enumerate(futures):  # what became of each submission
            state = "cancelled" if future.cancelled() else "done" if future.done() else "pending"
            error = None if state != "done" or future.exception() is None else future.exception()
            self.reflected.append(
                {"agent": agent, "submission": n, "future": state, "error": _error(error)}
            )
        return out

    def _items(self) -> list[dict[str, Any]]:
        rows = []
        for subject in self.subjects:
            namespace = ("memories", subject) if self.mode.startswith("langmem") else (subject,)
            for item in self.store.search(namespace, limit=10_000):
                value = item.value
                if self.mode.startswith("langmem"):
                    rows.append({"subject": subject, "key": item.key, "text": _content(value)})
                else:
                    rows.append(
                        {
                            "subject": subject,
                            "key": item.key,
                            "value": value.get("value") if isinstance(value, dict) else value,
                        }
                    )
        rows.sort(key=lambda r: (r["subject"], str(r["key"])))
        return rows

    def snapshot(self) -> dict[str, Any]:
        return {"items": self._items()}

    def observe(self) -> dict[str, Any]:
        if not self.mode.startswith("langmem"):
            return {"items": self._items(), "derived": self._derived()}
        if self.steps:  # a program of the manager's operations
            return {"items": self._items(), "derived": self._derived()}
        thread = [
            item
            for subject in self.subjects
            for item in self.store.search(("threads", subject), limit=10_000)
        ]
        thread.sort(key=lambda i: (i.created_at, i.key))
        out = {"items": self._items(), "thread": [i.value["claim"] for i in thread]}
        if self.mode == "langmem-reflection":
            out["reflection"] = list(self.reflected)
            out["unit_errors"] = list(self.controller.unit_errors)
            out["logged"] = list(self.logged)
        return out

    def recover(self, config: dict[str, Any]) -> Any:
        return None  # neither keeps a log: what survives is the store's own rows

    # -- programs of the store's own operations (toki/real/program.py) -------------------

    def _program(self, agent: int, steps: list[dict[str, Any]]) -> list[Any]:
        out: list[Any] = []
        for n, step in enumerate(steps):
            self.controller.begin_claim(n)
            op = str(step["op"])
            args = {k: v for k, v in step.items() if k not in ("op", "bind")}
            namespace: tuple[str, ...]
            if self.mode == "langmem":  # the manager's namespace: ("memories", user_id)
                namespace = ("memories", str(args.get("user_id", "user")))
                scope = {"user_id": str(args.get("user_id", "user"))}
            else:
                namespace = tuple(str(x) for x in args.get("namespace") or ())
                scope = {"namespace": "/".join(namespace)}
            entry: dict[str, Any] = {
                "agent": agent,
                "step": n,
                "op": op,
                "args": args,
                "scope": scope,
                "invoked": len(self.steps),  # after the returns logged so far
            }
            try:
                entry["returned"] = self._call(op, namespace, args)
            except Exception as exc:  # an application logs a failed call and goes on
                entry["error"] = f"{type(exc).__name__}: {exc}"
            # the call returns: a gate point ordered against every other return, so the
            # step log's order (what a later read saw after a delete) is explored by the
            # scheduler, not fixed by it
            self.controller.gate("program", "program.return", {"op": op, "step": n}, *_LOG)
            self.steps.append(entry)
            out.append(entry.get("returned", entry.get("error")))
        return out

    def _call(self, op: str, namespace: tuple[str, ...], args: dict[str, Any]) -> Any:
        store = self.store
        if op == "put":
            key = str(args["key"])
            store.put(namespace, key, {"value": args["value"]})
            rid = resource(namespace, key)
            return [{"id": rid, "event": "ADD", "text": str(args["value"])}]
        if op == "delete":
            store.delete(namespace, str(args["key"]))
            return [{"id": resource(namespace, args["key"]), "event": "DELETE"}]
        if op == "get":
            item = store.get(namespace, str(args["key"]))
            return [] if item is None else [_item_record(item)]
        if op == "search":
            return [_item_record(i, self.mode) for i in store.search(namespace, limit=1000)]
        if op == "manage":  # LangMem's manager over one conversation turn
            text = str(args["text"])
            key, _, value = text.partition(" is ")
            CLAIM.set({"key": key, "value": value})
            puts = self.manager.invoke(
                {"messages": [{"role": "user", "content": text}]},
                config={"configurable": {"user_id": namespace[-1]}},
            )
            return [
                {
                    "id": resource(tuple(p["namespace"]), p["key"]),
                    "event": "DELETE" if p.get("value") is None else "SAVE",
                    "text": None if p.get("value") is None else _content(p["value"]),
                }
                for p in puts
            ]
        raise ValueError(f"the store has no operation {op!r}")

    def _rows(self) -> list[tuple[tuple[str, ...], str, Any]]:
        """Every (namespace, key, value) the store holds, read from its own storage (the
        InMemoryStore's dict, the PostgresStore's table), not through search."""
        if self.mode == "store-postgres":
            with self.store._cursor() as cur:
                cur.execute("SELECT prefix, key, value FROM store ORDER BY prefix, key")
                rows = cur.fetchall()
            out = []
            for r in rows:
                prefix, key, value = (
                    (r["prefix"], r["key"], r["value"]) if isinstance(r, dict) else r
                )
                out.append((tuple(str(prefix).split(".")), str(key), value))
            return out
        data = getattr(self.store, "_data", {}) or {}
        return sorted(
            (tuple(ns), str(k), item.value)
            for ns, items in data.items()
            for k, item in items.items()
        )

    def _derived(self) -> dict[str, Any]:
        records = []
        for namespace, key, value in self._rows():
            if self.mode.startswith("langmem"):
                if namespace[:1] != ("memories",):
                    continue  # the application's thread log, not memories
                text: Any = _content(value)
                scope = {"user_id": "/".join(namespace[1:])}
            else:
                text = value.get("value") if isinstance(value, dict) else value
                scope = {"namespace": "/".join(namespace)}
            records.append(
                {
                    "id": resource(namespace, key),
                    "text": None if text is None else str(text),
                    "scope": scope,
                }
            )
        return {"records": records, "steps": list(self.steps)}

    def on_crash(self, agent: int) -> None:
        pass  # a batch runs whole inside its call: an abandoned agent holds nothing

    def close(self) -> None:
        self.stack.close()
        self.stack = contextlib.ExitStack()
        self.store = None
        self.manager = None
        if self.schema is not None and self.dsn is not None:
            import psycopg

            with contextlib.suppress(Exception), psycopg.connect(self.dsn, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
        self.schema = None


class _Collect(logging.Handler):
    """Keeps the messages a library logger emits (LangMem's worker logs its errors)."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


class _Reflector:
    """The reflector the application hands ReflectionExecutor: the memory store manager (its
    `namespace`), invoked on the payload's messages; the payload's claims are kept for the
    stub model (what a real model would read from the messages)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.namespace = manager.namespace

    def invoke(self, payload: dict[str, Any], config: Any = None) -> Any:
        CLAIMS.set(list(payload.get("claims") or []))
        return self.manager.invoke({"messages": payload["messages"]}, config=config)


def _error(exc: BaseException | None) -> str | None:
    return None if exc is None else f"{type(exc).__name__}: {exc}"


def _item_record(item: Any, mode: str = "store-memory") -> dict[str, Any]:
    """A store item as a reader is served it (program reads); LangMem's memories are
    scoped by the user their namespace names."""
    if mode == "langmem":
        return {
            "id": resource(item.namespace, item.key),
            "text": _content(item.value),
            "scope": {"user_id": "/".join(item.namespace[1:])},
        }
    value = item.value.get("value") if isinstance(item.value, dict) else item.value
    return {
        "id": resource(item.namespace, item.key),
        "text": None if value is None else str(value),
        "scope": {"namespace": "/".join(item.namespace)},
    }


def _content(value: Any) -> str:
    """A stored LangMem value {"kind", "content": {"content": text}} -> text."""
    while isinstance(value, dict) and "content" in value:
        value = value["content"]
    return str(value)


def _text(claim: dict[str, Any]) -> str:
    return f"{claim['key']} is {claim['value']}"


def _chat_model(controller: Controller) -> Any:
    """A chat model for trustcall: `bind_tools` binds OpenAI-format tools (a
    RunnableBinding, as trustcall expects), `_generate` parks at a gate point and turns the
    host's reply {"tool_calls": [{"name", "args"}]} into an AIMessage."""
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.utils.function_calling import convert_to_openai_tool

    class GatedChat(BaseChatModel):  # type: ignore[misc]
        @property
        def _llm_type(self) -> str:
            return "toki-real-stub"

        def bind_tools(self, tools: Any, tool_choice: Any = None, **kw: Any) -> Any:
            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kw)

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> Any:
            tools = [t["function"]["name"] for t in kw.get("tools") or []]
            purpose = "manage" if "PatchDoc" in tools or "RemoveDoc" in tools else "extract"
            if "PatchFunctionErrors" in tools or "PatchFunctionName" in tools:
                purpose = "repair"
            detail = {"claim": CLAIM.get(), "tools": tools, "existing": _existing(messages)}
            if CLAIMS.get() is not None:  # a reflection: the whole conversation
                detail["claims"] = CLAIMS.get()
            reply = controller.gate("llm", f"llm.{purpose}", detail)
            calls = []
            for n, call in enumerate((reply or {}).get("tool_calls") or []):
                calls.append(
                    {
                        "name": call["name"],
                        "args": call["args"],
                        "id": f"call_{n}",
                        "type": "tool_call",
                    }
                )
            message = AIMessage(content="" if calls else "nothing to record", tool_calls=calls)
            return ChatResult(generations=[ChatGeneration(message=message)])

    return GatedChat()
