"""mem0 (mem0ai 1.x and 2.x) on FAISS and its SQLite history, with every boundary gated.

Built as a user would (`Memory.from_config` with the `faiss` vector store and a history
file), except that the LLM and embedder factories return toki's stubs (no OpenAI client is
ever built). Gate points and their footprints (resources; "*" = every key of the family):

  llm.extract / llm.decide / llm.additive   none (the host answers from the workload's judge)
  clock.now (mem0.memory.main)              reads and writes ("clock", None)
  vector.search / vector.list / ...search   reads ("vec:<collection>", "*")
  vector.get(id)                            reads ("vec:<collection>", id)
  vector.insert(ids) / update(id) / delete  writes ("vec:<collection>", id) for each id
  history.add / history.batch_add           writes ("history", memory id) for each row
  history.get(memory id)                    reads ("history", memory id)
  messages.get / messages.save (2.x)        reads / writes ("messages", scope) (+ clock: the
                                            save stamps rows inside the storage lock)

FAISS `update` calls `delete` then `insert` on itself: those are gate points too, so another
agent can run between them (the research notes' non-atomic update). Thread pools: `add()`
(1.x) submits its vector-store and graph work to a ThreadPoolExecutor (and `search`/`get_all`
their reads); each submission is a unit of its agent (`pools`; `TOKI_REAL_POOLS=inline`:
run at once in the agent's thread, the earlier behaviour).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.metadata
import os
import shutil
import tempfile
import types
import uuid as _uuid
from typing import Any

from . import pools, stubs
from .controller import CURRENT, Controller

__all__ = ["Adapter"]

# the program step log: every step's return reads and writes it (see _program)
_LOG = ([("program", "log")], [("program", "log")])

CLAIM: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "toki_real_claim", default=None
)
PROMPT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "toki_real_prompt", default=None
)
FOUND: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar(
    "toki_real_found", default=None
)


def subject(key: str) -> str:
    """The mem0 user a workload key belongs to: 'alice:manager' -> 'alice'."""
    return key.split(":", 1)[0] or "user"


def message(claim: dict[str, Any]) -> str:
    return f"{claim['key']} is {claim['value']}"


def faiss_config(data_dir: str, dims: int) -> dict[str, Any]:
    """mem0's configuration over FAISS files and a history database in `data_dir`, with the
    OpenAI providers whose factories toki replaces by its offline stand-ins before use (the
    adapter here, and each process of `mem0_procs`)."""
    return {
        "vector_store": {
            "provider": "faiss",
            "config": {
                "path": os.path.join(data_dir, "faiss"),
                "collection_name": "toki",
                "embedding_model_dims": dims,
                "distance_strategy": "cosine",
            },
        },
        "llm": {"provider": "openai", "config": {"api_key": "unused", "model": "stub"}},
        "embedder": {"provider": "openai", "config": {"api_key": "unused", "embedding_dims": dims}},
        "history_db_path": os.path.join(data_dir, "history.db"),
    }

class Llm:
    """The LLM: every call is a gate point; the host's reply is the response text."""

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.config = types.SimpleNamespace(model="toki-real-stub", temperature=0.0)

    def generate_response(self, messages: Any = None, *args: Any, **kw: Any) -> str:
        prompt = PROMPT.get()
        PROMPT.set(None)
        claim = CLAIM.get()
        detail: dict[str, Any]
        if prompt is None:
            purpose, detail = "extract", {"claim": claim}
        else:
            purpose = prompt["purpose"]
            detail = {"claim": claim, **{k: v for k, v in prompt.items() if k != "purpose"}}
            if purpose == "additive":
                detail["found"] = FOUND.get() or []
        reply = self.controller.gate("llm", f"llm.{purpose}", detail)
        return str(reply) if reply is not None else "{}"


def _vector_gates(controller: Controller, cls: Any) -> None:
    """Wrap the FAISS store's methods (class level: the main and any entity collection)."""

    def fam(self: Any) -> str:
        instance = getattr(self, "_toki_instance", None)  # a process's own copy (deployment)
        at = "" if instance is None else f"@{instance}"
        return f"vec:{getattr(self, 'collection_name', '?')}{at}"

    def saves(self: Any) -> list[tuple[str, Any]]:
        """A write saves the whole index and docstore files: what processes share."""
        if getattr(self, "_toki_instance", None) is None:
            return []  # one instance: its files are read only when it starts
        return [("file", f"faiss:{getattr(self, 'collection_name', '?')}")]

    def wrap(name: str, footprint: Any, after: Any = None) -> None:
        original = getattr(cls, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def gated(self: Any, *args: Any, **kw: Any) -> Any:
            reads, writes, detail = footprint(self, args, kw)
            if writes:
                writes = [*writes, *saves(self)]
            controller.gate("vector", f"vector.{name}", detail, reads, writes)
            out = original(self, *args, **kw)
            if after is not None:
                after(out)
            return out

        setattr(cls, name, gated)

    def arg(args: Any, kw: Any, i: int, name: str, default: Any = None) -> Any:
        return args[i] if len(args) > i else kw.get(name, default)

    def scan(self: Any, args: Any, kw: Any) -> Any:
        return [(fam(self), "*")], [], {"collection": getattr(self, "collection_name", "?")}

    def one_read(self: Any, args: Any, kw: Any) -> Any:
        vid = str(arg(args, kw, 0, "vector_id"))
        return [(fam(self), vid)], [], {"id": vid}

    def one_write(self: Any, args: Any, kw: Any) -> Any:
        vid = str(arg(args, kw, 0, "vector_id"))
        return [], [(fam(self), vid)], {"id": vid}

    def insert(self: Any, args: Any, kw: Any) -> Any:
        ids = arg(args, kw, 2, "ids") or []
        payloads = arg(args, kw, 1, "payloads") or []
        texts = [p.get("data") for p in payloads if isinstance(p, dict)]
        return (
            [],
            [(fam(self), str(i)) for i in ids],
            {"ids": [str(i) for i in ids], "texts": texts},
        )

    def remember(out: Any) -> None:  # the last search's hits, for the LLM call that follows
        if CURRENT.get() is None or not isinstance(out, list):
            return
        found = []
        for hit in out:
            payload = getattr(hit, "payload", None) or {}
            found.append({"text": payload.get("data"), "created_at": payload.get("created_at")})
        FOUND.set(found)

    wrap("search", scan, remember)
    wrap("keyword_search", scan)
    wrap("search_batch", scan)
    wrap("list", scan)
    wrap("get", one_read)
    wrap("insert", insert)
    wrap("update", one_write)
    wrap("delete", one_write)


def _history_gates(controller: Controller, cls: Any) -> None:
    def wrap(name: str, footprint: Any) -> None:
        original = getattr(cls, name, None)
        if original is None:
            return

        @functools.wraps(original)
        def gated(self: Any, *args: Any, **kw: Any) -> Any:
            reads, writes, detail = footprint(args, kw)
            controller.gate("history", _NAMES[name], detail, reads, writes)
            return original(self, *args, **kw)

        setattr(cls, name, gated)

    def add(args: Any, kw: Any) -> Any:
        mid = str(args[0] if args else kw.get("memory_id"))
        event = args[3] if len(args) > 3 else kw.get("event")
        return [], [("history", mid)], {"memory_id": mid, "event": event}

    def batch(args: Any, kw: Any) -> Any:
        records = args[0] if args else kw.get("records", [])
        mids = [str(r.get("memory_id")) for r in records]
        return [], [("history", m) for m in mids], {"memory_ids": mids}

    def get(args: Any, kw: Any) -> Any:
        mid = str(args[0] if args else kw.get("memory_id"))
        return [("history", mid)], [], {"memory_id": mid}

    def messages_get(args: Any, kw: Any) -> Any:
        scope = str(args[0] if args else kw.get("session_scope"))
        return [("messages", scope)], [], {"scope": scope}

    def messages_save(args: Any, kw: Any) -> Any:
        scope = str(args[1] if len(args) > 1 else kw.get("session_scope"))
        return [("clock", None)], [("messages", scope), ("clock", None)], {"scope": scope}

    wrap("add_history", add)
    wrap("batch_add_history", batch)
    wrap("get_history", get)
    wrap("get_last_messages", messages_get)
    wrap("save_messages", messages_save)


_NAMES = {
    "add_history": "history.add",
    "batch_add_history": "history.batch_add",
    "get_history": "history.get",
    "get_last_messages": "messages.get",
    "save_messages": "messages.save",
}


class _TickingDatetime(stubs.GatedDatetime):
    """The storage module's clock: it is read while SQLiteManager holds its lock, so it must
    not park there; it ticks inside the gated call, whose footprint declares the clock."""

    gated = False


_SCOPES = ("user_id", "agent_id", "run_id")


def stub_entities(text: str) -> list[tuple[str, str]]:
    """Stands in for spaCy's entity extraction (mem0 2.x's entity store): the entities of
    '<subject>:<predicate> is <value>' are the subject and the value, typed ENTITY. Only
    with TOKI_MEM0_ENTITIES=1 (the system `mem0-2.2.1+entities`)."""
    key, sep, value = str(text).partition(" is ")
    if not sep:
        return []
    subject = key.split(":", 1)[0]
    return [("ENTITY", e) for e in (subject, value) if e.strip()]


def _norm(entity: str) -> str:
    return " ".join(entity.strip().lower().split())


def _is_ref(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("$")


def _ref(ref: str) -> tuple[str, int]:
    """'$a0.found' -> ('a0.found', 0); '$a0.found.1' -> ('a0.found', 1)."""
    name, _, last = ref[1:].rpartition(".")
    if last.isdigit() and name:
        return name, int(last)
    return ref[1:], 0


def _results(got: Any) -> list[dict[str, Any]]:
    rows = got.get("results", []) if isinstance(got, dict) else got
    return [r for r in rows or [] if isinstance(r, dict)]


def _record(r: dict[str, Any]) -> dict[str, Any]:
    """A memory as a reader is served it (no scores: they are not part of the answer)."""
    return {
        "id": r.get("id"),
        "text": r.get("memory"),
        "scope": {k: str(r[k]) for k in _SCOPES if r.get(k) is not None},
    }


class Adapter:
    """The in-environment half of the mem0 adapters (both major versions)."""

    units = True  # its thread pools' submissions are units of their agent (`pools`)

    def __init__(self, controller: Controller) -> None:
        self.controller = controller
        self.root = tempfile.mkdtemp(prefix="toki-real-mem0-")
        os.environ.setdefault("MEM0_DIR", os.path.join(self.root, "mem0-home"))
        import mem0.memory.main as main
        import mem0.memory.storage as storage
        import mem0.vector_stores.faiss as faiss_store
        from mem0.utils import factory

        self.version = importlib.metadata.version("mem0ai")
        self.major = int(self.version.split(".")[0])
        self.main = main
        fake_uuid = types.SimpleNamespace(uuid4=stubs.uuid4, UUID=_uuid.UUID)
        main.datetime = stubs.GatedDatetime
        main.uuid = fake_uuid
        storage.uuid = fake_uuid
        if hasattr(storage, "datetime"):
            storage.datetime = _TickingDatetime
        faiss_store.uuid = fake_uuid
        llm = Llm(controller)
        self.dims = 64
        embedder = stubs.Embedder(self.dims)
        factory.LlmFactory.create = classmethod(lambda cls, *a, **k: llm)
        factory.EmbedderFactory.create = classmethod(lambda cls, *a, **k: embedder)
        self._capture_prompts(main)
        self.entities = os.environ.get("TOKI_MEM0_ENTITIES") == "1" and hasattr(
            main, "extract_entities_batch"
        )
        if self.entities:  # spaCy's place, deterministically (see `stub_entities`)
            main.extract_entities = stub_entities
            main.extract_entities_batch = lambda texts, batch_size=32: [
                stub_entities(t) for t in texts
            ]
        _vector_gates(controller, faiss_store.FAISS)
        _history_gates(controller, storage.SQLiteManager)
        pools.install_from_env(controller)
        self.memory: Any = None
        self.processes = False
        self.instances: dict[int, Any] = {}
        self.steps: list[dict[str, Any]] = []  # program steps, in the order they returned
        self.bound: dict[str, list[dict[str, Any]]] = {}  # a read's answer, by binding name
        self.run_dir: str | None = None
        self.users: list[str] = []

    def _capture_prompts(self, main: Any) -> None:
        """Keep the structured inputs of the decision prompt for the LLM stub (the prompt
        text itself is long; the host needs the memories and facts it was built from)."""
        if hasattr(main, "get_update_memory_messages"):
            original = main.get_update_memory_messages

            def update_messages(old: Any, facts: Any, *a: Any, **k: Any) -> Any:
                PROMPT.set({"purpose": "decide", "existing": list(old), "facts": list(facts)})
                return original(old, facts, *a, **k)

            main.get_update_memory_messages = update_messages
        if hasattr(main, "generate_additive_extraction_prompt"):
            additive = main.generate_additive_extraction_prompt

            def extraction_prompt(*a: Any, **k: Any) -> Any:
                existing = k.get("existing_memories", a[0] if a else [])
                PROMPT.set({"purpose": "additive", "existing": list(existing or [])})
                return additive(*a, **k)

            main.generate_additive_extraction_prompt = extraction_prompt

    def describe(self) -> dict[str, Any]:
        return {"library": "mem0ai", "version": self.version}

    def open(self, config: dict[str, Any]) -> None:
        self.close()
        self.run_dir = tempfile.mkdtemp(dir=self.root)
        self.users = list(config.get("users") or ["user"])
        cfg = faiss_config(self.run_dir, self.dims)
        self.cfg = cfg
        self.memory = self.main.Memory.from_config(cfg)
        self.steps = []
        self.bound = {}
        # deployment "processes": each agent its own instance over the same files, as
        # separate processes of one service would have (toki/real/deploy.py)
        self.processes = config.get("deployment") == "processes"
        self.agents = int(config.get("agents", 1))
        self.instances = {}
        if self.processes:
            self._spawn()

    def _spawn(self) -> None:
        self.instances = {}
        for k in range(self.agents):
            memory = self.main.Memory.from_config(self.cfg)
            memory.vector_store._toki_instance = k
            self.instances[k] = memory

    def _read_files(self) -> None:
        """Deployment "processes": a reader is a fresh process: it loads the files."""
        if self.processes:
            self.memory = self.main.Memory.from_config(self.cfg)

    def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        if inbox and "op" in inbox[0]:
            return self._program(agent, inbox)
        out = []
        for n, claim in enumerate(inbox):
            self.controller.begin_claim(n)
            CLAIM.set(claim)
            try:
                memory = self.instances.get(agent, self.memory)
                result = memory.add(message(claim), user_id=subject(str(claim["key"])))
            except Exception as exc:  # an agent logs a failed add and goes on, as apps do
                out.append([f"error: {type(exc).__name__}: {exc}"])
                continue
            rows = result.get("results", []) if isinstance(result, dict) else result
            out.append(sorted(str(r.get("event")) for r in rows or []))
        return out

    def _all(self, user: str) -> list[dict[str, Any]]:
        if self.major >= 2:
            got = self.memory.get_all(filters={"user_id": user}, top_k=1000)
        else:
            got = self.memory.get_all(user_id=user, limit=1000)
        rows = got.get("results", []) if isinstance(got, dict) else got
        return [
            {
                "id": r.get("id"),
                "text": r.get("memory"),
                "created_at": r.get("created_at"),
                "updated_at": r.get("updated_at"),
                "user": user,
            }
            for r in rows
        ]

    def snapshot(self) -> dict[str, Any]:
        """What a reader is served now: every live memory (the shape of `observe`'s)."""
        self._read_files()
        memories = [m for u in self.users for m in self._all(u)]
        memories.sort(key=lambda m: (str(m["created_at"]), str(m["id"])))
        return {"memories": memories}

    def observe(self) -> dict[str, Any]:
        self._read_files()
        memories = [m for u in self.users for m in self._all(u)]
        conn = self.memory.db.connection
        rows = conn.execute(
            "SELECT memory_id, old_memory, new_memory, event, created_at, updated_at, is_deleted"
            " FROM history"
        ).fetchall()
        history = [
            dict(
                zip(
                    ("memory_id", "old", "new", "event", "created_at", "updated_at", "is_deleted"),
                    r,
                    strict=True,
                )
            )
            for r in rows
        ]
        history.sort(
            key=lambda h: (
                str(h["updated_at"] or h["created_at"]),
                str(h["created_at"]),
                str(h["memory_id"]),
                str(h["event"]),
            )
        )
        by_api = {}
        for mid in sorted({str(h["memory_id"]) for h in history}):
            by_api[mid] = [
                {"event": h.get("event"), "old": h.get("old_memory"), "new": h.get("new_memory")}
                for h in self.memory.history(mid)
            ]
        memories.sort(key=lambda m: (str(m["created_at"]), str(m["id"])))
        return {
            "memories": memories,
            "history": history,
            "history_api": by_api,
            "derived": self._derived(history),
        }

    # -- programs of mem0's own operations (toki/real/program.py) -------------------------

    def _program(self, agent: int, steps: list[dict[str, Any]]) -> list[Any]:
        """Run one agent's steps through mem0's public API; each returns what the API
        answered (normalised), and the step log keeps the global order they returned in."""
        out = []
        for n, step in enumerate(steps):
            entry = self._begin(agent, n, step)
            if "error" not in entry:
                op = entry["op"]
                try:
                    got = self._request(self._instance(), op, entry["args"])
                    self._returned(entry, step, self._answer(op, entry["args"], got))
                except Exception as exc:  # an application logs a failed call and goes on
                    entry["error"] = f"{type(exc).__name__}: {exc}"
            # the call returns: a gate point ordered against every other return, so the
            # step log's order (what a later read saw after a delete) is explored by the
            # scheduler, not fixed by it
            self.controller.gate("program", "program.return", {"op": entry["op"], "step": n}, *_LOG)
            out.append(self._end(entry))
        return out

    def _begin(self, agent: int, n: int, step: dict[str, Any]) -> dict[str, Any]:
        """A step's log entry with its resolved arguments (or the error resolving them)."""
        self.controller.begin_claim(n)
        op = str(step["op"])
        # invoked after the returns logged so far (real-time order: what a read
        # invoked after a delete returned may no longer serve)
        entry: dict[str, Any] = {"agent": agent, "step": n, "op": op, "invoked": len(self.steps)}
        try:
            args = {k: self._resolve(v) for k, v in step.items() if k not in ("op", "bind")}
            entry["args"] = args
            entry["scope"] = {k: str(v) for k, v in args.items() if k in _SCOPES}
            if op == "update" and _is_ref(step.get("memory_id")):
                entry["basis"] = self._basis(str(step["memory_id"]))
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            return entry
        text = args.get("text")
        if isinstance(text, str):
            key, _, value = text.partition(" is ")
            CLAIM.set({"key": key, "value": value})
        return entry

    def _returned(self, entry: dict[str, Any], step: dict[str, Any], returned: Any) -> None:
        entry["returned"] = returned
        if step.get("bind") and isinstance(returned, list):
            self.bound[str(step["bind"])] = returned

    def _end(self, entry: dict[str, Any]) -> Any:
        self.steps.append(entry)
        return entry.get("returned", entry.get("error"))

    def _resolve(self, value: Any) -> Any:
        """`$name` -> the id of the first record the read bound to `name` returned."""
        if not _is_ref(value):
            return value
        name, index = _ref(str(value))
        records = self.bound.get(name)
        if records is None or len(records) <= index:
            raise LookupError(f"{value}: the read bound to {name!r} returned no record {index}")
        return records[index].get("id")

    def _basis(self, ref: str) -> Any:
        name, index = _ref(ref)
        records = self.bound.get(name) or []
        return records[index].get("text") if len(records) > index else None

    def _scoped(self, args: dict[str, Any]) -> dict[str, Any]:
        return {k: args[k] for k in ("user_id", "agent_id", "run_id") if k in args}

    def _instance(self) -> Any:
        """The instance the running agent calls (its own in deployment "processes")."""
        agent = self.controller.agent()
        return self.memory if agent is None else self.instances.get(agent, self.memory)

    def _request(self, m: Any, op: str, args: dict[str, Any]) -> Any:
        """Call mem0's operation `op` on `m` (on AsyncMemory: the coroutine to await)."""
        scope = self._scoped(args)
        if op == "add":
            return m.add(args["text"], **scope)
        if op == "update":
            extra = {"metadata": args["metadata"]} if "metadata" in args else {}
            if self.major >= 2:
                return m.update(args["memory_id"], text=args["text"], **extra)
            return m.update(args["memory_id"], data=args["text"], **extra)
        if op == "delete":
            return m.delete(args["memory_id"])
        if op == "delete_all":
            return m.delete_all(**scope)
        if op == "get":
            return m.get(args["memory_id"])
        if op == "get_all":
            if self.major >= 2:
                return m.get_all(filters=scope, top_k=1000)
            return m.get_all(**scope, limit=1000)
        if op == "search":
            if self.major >= 2:
                return m.search(args["query"], filters=scope, top_k=100)
            return m.search(args["query"], **scope, limit=100)
        if op == "history":
            return m.history(args["memory_id"])
        raise ValueError(f"mem0 has no operation {op!r}")

    def _answer(self, op: str, args: dict[str, Any], got: Any) -> Any:
        """What the call returned, normalised (the step log's `returned`)."""
        if op == "add":
            rows = got.get("results", []) if isinstance(got, dict) else got
            return [
                {
                    "id": r.get("id"),
                    "event": r.get("event"),
                    "text": r.get("memory"),
                    **({"previous": r["previous_memory"]} if "previous_memory" in r else {}),
                }
                for r in rows or []
            ]
        if op == "update":
            return [{"id": args["memory_id"], "event": "UPDATE", "text": args["text"]}]
        if op == "delete":
            return [{"id": args["memory_id"], "event": "DELETE"}]
        if op == "delete_all":
            return [{"event": "DELETE_ALL", "scope": self._scoped(args)}]
        if op == "get":
            return [] if got is None else [_record(got)]
        if op in ("get_all", "search"):
            return [_record(r) for r in _results(got)]
        return [  # history
            {
                "id": h.get("memory_id"),
                "event": h.get("event"),
                "old": h.get("old_memory"),
                "new": h.get("new_memory"),
            }
            for h in got
        ]

    def _entity_links(self, records: list[dict[str, Any]]) -> dict[str, list[str]]:
        """The entity store's links (each entity row's linked_memory_ids) beside the links
        the live memories imply (the same extraction over their texts), per scope."""
        store = getattr(self.memory, "_entity_store", None)
        rows = (getattr(store, "docstore", None) or {}) if store is not None else {}
        links = []
        for payload in rows.values():
            scope = payload.get("user_id") or payload.get("agent_id") or payload.get("run_id")
            for mid in payload.get("linked_memory_ids") or []:
                links.append(f"{scope}:{_norm(str(payload.get('data')))}->{mid}")
        implied = []
        for r in records:
            scope = next(iter(r["scope"].values()), None)
            for _, entity in stub_entities(str(r["text"])):
                implied.append(f"{scope}:{_norm(entity)}->{r['id']}")
        return {"entity_links": sorted(links), "memory_entities": sorted(implied)}

    def _derived(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        """The structures mem0 derives from a write, read from the store itself: FAISS's
        vectors (by position, named through its id map), the id map, the docstore, and the
        history table (the ids whose last row is not a DELETE); each record's scope."""
        store = self.memory.vector_store
        index_to_id = {
            int(k): str(v) for k, v in (getattr(store, "index_to_id", None) or {}).items()
        }
        index = getattr(store, "index", None)
        ntotal = int(getattr(index, "ntotal", 0) or 0)
        docstore = getattr(store, "docstore", None) or {}
        records = []
        for vid in sorted(docstore):
            payload = docstore[vid] or {}
            records.append(
                {
                    "id": str(vid),
                    "text": payload.get("data"),
                    "scope": {
                        k: str(payload[k])
                        for k in ("user_id", "agent_id", "run_id")
                        if k in payload
                    },
                }
            )
        versions: dict[str, list[dict[str, Any]]] = {}
        for h in history:
            versions.setdefault(str(h["memory_id"]), []).append(
                {"event": h.get("event"), "old": h.get("old"), "new": h.get("new")}
            )
        history_live = sorted(
            mid for mid, rows in versions.items() if rows and rows[-1]["event"] != "DELETE"
        )
        structures: dict[str, list[str]] = {}
        agree: list[list[str]] = []
        if self.entities:
            structures.update(self._entity_links(records))
            agree.append(["entity_links", "memory_entities"])
        return {
            "records": records,
            "versions": versions,
            "structures": {
                **structures,
                "vector_index": sorted(
                    index_to_id.get(i, f"<no id: vector {i}>") for i in range(ntotal)
                ),
                "id_map": sorted(index_to_id.values()),
                "docstore": sorted(str(k) for k in docstore),
                "history_live": history_live,
            },
            "agree": [
                ["vector_index", "id_map"],
                ["id_map", "docstore"],
                ["docstore", "history_live"],
                *agree,
            ],
            "steps": list(self.steps),
        }

    def recover(self, config: dict[str, Any]) -> Any:
        return None  # mem0 has no recovery procedure of its own: the host re-applies history

    def on_crash(self, agent: int) -> None:
        pass  # an abandoned mem0 call holds nothing another agent needs

    # -- restart hooks (toki/real/faults.py): files, reopen, probes ------------------------

    def durable_files(self) -> list[str]:
        """The files mem0 writes itself and reads back when it starts (FAISS: the index and
        its docstore pickle; the history is SQLite, which journals its own writes)."""
        if self.run_dir is None:
            return []
        base = os.path.join(self.run_dir, "faiss", "toki")
        return [base + ".faiss", base + ".pkl"]

    HANDOVER = ("run_dir", "cfg", "users", "processes", "agents", "steps", "bound")
    """What a restarted process is started with (server.py copies these attributes): the
    run's configuration (its files' paths) and the adapter's own step log, no mem0 object;
    `reopen` opens the files."""

    def reopen(self) -> None:
        """mem0 from the files the dead process left: a new Memory over the same config, in
        the new worker process (server.py: nothing of the dead process is in it)."""
        self.memory = self.main.Memory.from_config(self.cfg)
        if self.processes:
            self._spawn()

    def probe(self, text: str, scope: str) -> list[dict[str, Any]]:
        """What a search for `text` answers (best first): id, text, score."""
        if self.major >= 2:
            got = self.memory.search(text, filters={"user_id": scope}, top_k=3)
        else:
            got = self.memory.search(text, user_id=scope, limit=3)
        rows = got.get("results", []) if isinstance(got, dict) else got
        return [{"id": r.get("id"), "text": r.get("memory"), "score": r.get("score")} for r in rows]

    def integrity(self) -> dict[str, Any]:
        """The FAISS store's own counts: vectors in the index, ids mapped, payloads."""
        vs = self.memory.vector_store
        index = getattr(vs, "index", None)
        return {
            "vectors": None if index is None else int(index.ntotal),
            "mapped": len(getattr(vs, "index_to_id", {}) or {}),
            "payloads": len(getattr(vs, "docstore", {}) or {}),
        }

    def close(self) -> None:
        if self.memory is not None:
            with contextlib.suppress(Exception):
                self.memory.close()
            self.memory = None
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None
