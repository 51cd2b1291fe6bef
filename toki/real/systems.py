"""The real systems toki can drive, by name (`toki real run SYSTEM`)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from toki.errors import InvalidInput
from toki.real.adapter import RealSystem
from toki.real.adapters.cognee import CogneeHost
from toki.real.adapters.graphiti import GraphitiHost
from toki.real.adapters.langchain import LangGraphStoreHost, LangMemHost
from toki.real.adapters.langgraph_ckpt import LangGraphCheckpointHost
from toki.real.adapters.letta import LettaHost
from toki.real.adapters.mem0 import Mem0Host
from toki.real.adapters.toki_memory import TokiHost
from toki.real.deploy import Processes
from toki.real.envs import SetupReport, python_for, setup
from toki.real.errors import SetupFailed

__all__ = [
    "ALIASES",
    "ENVIRONMENTS",
    "SYSTEMS",
    "LockedLibrary",
    "get_real_system",
    "setup_name",
    "setup_system",
    "worker_python",
]

_MEM0_ENV = {"MEM0_TELEMETRY": "False"}
_MEM0_GATES = (
    "LLM: generate_response (fact extraction, the update decision / additive extraction)",
    "clock: datetime.now in mem0.memory.main (a gate point), in storage (inside its call)",
    "uuid4 in mem0.memory.main, storage and the FAISS store (one stream per agent)",
    "FAISS: search, list, keyword_search, search_batch, get, insert, update, delete",
    "SQLite history: add_history, batch_add_history, get_history; messages (2.x)",
    "thread pools: each ThreadPoolExecutor submission is a unit of its agent (1.x add, "
    "search, get_all); TOKI_REAL_POOLS=inline runs them in the agent's thread",
)

_ASYNC_ENTITY_GATES = (
    *_MEM0_GATES[:1],
    "clock: datetime.now in mem0.memory.main, one stream per agent (no gate point)",
    *_MEM0_GATES[2:5],
    "the entity store: a second FAISS collection (<collection>_entities), gated alike",
    "tasks and to_thread threads of every AsyncMemory call: units of the agent (tasks:<n>)",
)
_ASYNC_ENTITY_SIMPLIFIED = (
    "as mem0-2.2.1+entities (entity extraction stubbed); the clock is a stream per agent "
    "(read on the event loop)",
)

SYSTEMS: dict[str, RealSystem] = {
    "mem0-1.0.11": RealSystem(
        name="mem0-1.0.11",
        title="mem0ai 1.0.11 (LLM judge: ADD/UPDATE/DELETE/NONE), FAISS + SQLite history",
        library="mem0ai",
        version="1.0.11",
        module="mem0",
        adapter="mem0",
        host=Mem0Host(1),
        lock="mem0-1.0.11.txt",
        env=_MEM0_ENV,
        model="mem0-1.0.11",
        intercepted=_MEM0_GATES,
        simplified=(
            "the LLM answers from the workload's judge with the model's question text "
            "(one fact per message, '<key> is <value>')",
            "embeddings are feature-hashed words (64 dims): retrieval finds a key's memories "
            "because they share its words, not by meaning",
            "graph memory off (no graph store configured), as in a default configuration",
        ),
    ),
    "mem0-1.0.11-async": RealSystem(
        name="mem0-1.0.11-async",
        title="mem0ai 1.0.11 AsyncMemory: add() as asyncio tasks and to_thread calls",
        library="mem0ai",
        version="1.0.11",
        module="mem0",
        adapter="mem0_async",
        host=Mem0Host(1),
        lock="mem0-1.0.11.txt",
        venv="mem0-1.0.11",
        env=_MEM0_ENV,
        model=None,  # not a matrix row: the same model as mem0-1.0.11, driven asynchronously
        intercepted=(
            *_MEM0_GATES[:1],
            "clock: datetime.now in mem0.memory.main, one stream per agent (no gate point)",
            *_MEM0_GATES[2:5],
            "tasks and to_thread threads of AsyncMemory.add: units of the agent (tasks:<n>)",
        ),
        simplified=("as mem0-1.0.11; the clock is a stream per agent (read on the event loop)",),
        exhaustible=False,  # units released oldest first unless tasks:<n>
    ),
    "mem0-1.0.11-procs": RealSystem(
        name="mem0-1.0.11-procs",
        title="mem0ai 1.0.11, one Memory per agent over the same FAISS files and history db",
        library="mem0ai",
        version="1.0.11",
        module="mem0",
        adapter="mem0",
        host=Processes(Mem0Host(1)),
        lock="mem0-1.0.11.txt",
        venv="mem0-1.0.11",
        env=_MEM0_ENV,
        model=None,  # a deployment of mem0-1.0.11, not a matrix row
        intercepted=(
            *_MEM0_GATES,
            "each FAISS write also writes the index and docstore files (saved whole)",
        ),
        simplified=(
            "as mem0-1.0.11; the agents' instances live in one worker process (separate "
            "objects, connections and in-memory indexes, as separate processes have)",
        ),
    ),
    "mem0-2.2.1": RealSystem(
        name="mem0-2.2.1",
        title="mem0ai 2.2.1 (add-only phased pipeline), FAISS + SQLite history",
        library="mem0ai",
        version="2.2.1",
        module="mem0",
        adapter="mem0",
        host=Mem0Host(2),
        lock="mem0-2.2.1.txt",
        env=_MEM0_ENV,
        model="mem0-2.x",
        intercepted=_MEM0_GATES,
        simplified=(
            "the extraction LLM answers from the workload's judge with the model's question "
            "text (a fact, or a transition '<key> changed from X to <value>')",
            "embeddings are feature-hashed words (64 dims)",
            "spaCy is not installed (as with a plain `pip install mem0ai`): lemmatisation "
            "and entity linking are inert, so the entity store stays empty",
        ),
    ),
    "mem0-1.0.5": RealSystem(
        name="mem0-1.0.5",
        title="mem0ai 1.0.5 (LLM judge), FAISS + SQLite history: the version before the "
        "fixes of delete_all's collection reset and of FAISS delete (corpus scenarios)",
        library="mem0ai",
        version="1.0.5",
        module="mem0",
        adapter="mem0",
        host=Mem0Host(1),
        lock="mem0-1.0.5.txt",
        env=_MEM0_ENV,
        model=None,  # corpus only: no row of the verdict matrix
        intercepted=_MEM0_GATES,
        simplified=(
            "as mem0-1.0.11 (the same adapter and stubs); kept for the reports it reproduces",
        ),
    ),
    "mem0-2.0.12": RealSystem(
        name="mem0-2.0.12",
        title="mem0ai 2.0.12 (add-only), FAISS + SQLite history: the version before update() "
        "kept a memory's user / agent / run ids (corpus scenarios)",
        library="mem0ai",
        version="2.0.12",
        module="mem0",
        adapter="mem0",
        host=Mem0Host(2),
        lock="mem0-2.0.12.txt",
        env=_MEM0_ENV,
        model=None,  # corpus only: no row of the verdict matrix
        intercepted=_MEM0_GATES,
        simplified=("as mem0-2.2.1 (the same adapter and stubs)",),
    ),
    "mem0-2.2.1+entities": RealSystem(
        name="mem0-2.2.1+entities",
        title="mem0ai 2.2.1 with its entity store on (entity extraction stubbed for spaCy)",
        library="mem0ai",
        version="2.2.1",
        module="mem0",
        adapter="mem0",
        host=Mem0Host(2),
        lock="mem0-2.2.1.txt",
        env={**_MEM0_ENV, "TOKI_MEM0_ENTITIES": "1"},
        venv="mem0-2.2.1",
        model=None,  # corpus only: no row of the verdict matrix
        intercepted=(
            *_MEM0_GATES,
            "the entity store: a second FAISS collection (<collection>_entities), gated alike",
        ),
        simplified=(
            "as mem0-2.2.1, except that entity extraction is on: spaCy's "
            "extract_entities / extract_entities_batch are replaced by a deterministic stub "
            "(the entities of '<subject>:<predicate> is <value>' are the subject and the "
            "value), so the entity store and its linked_memory_ids are built and read",
        ),
    ),
    "mem0-2.2.1+entities-async": RealSystem(
        name="mem0-2.2.1+entities-async",
        title="mem0ai 2.2.1 AsyncMemory with its entity store: each call's asyncio tasks and "
        "to_thread calls are units",
        library="mem0ai",
        version="2.2.1",
        module="mem0",
        adapter="mem0_async",
        host=Mem0Host(2),
        lock="mem0-2.2.1.txt",
        env={**_MEM0_ENV, "TOKI_MEM0_ENTITIES": "1"},
        venv="mem0-2.2.1",
        model=None,  # corpus only: no row of the verdict matrix
        intercepted=_ASYNC_ENTITY_GATES,
        simplified=_ASYNC_ENTITY_SIMPLIFIED,
        exhaustible=False,  # units released oldest first unless tasks:<n>
    ),
    "mem0-2.0.7+entities-async": RealSystem(
        name="mem0-2.0.7+entities-async",
        title="mem0ai 2.0.7 AsyncMemory with its entity store: the version before delete_all "
        "stopped gathering per-memory entity cleanups (corpus scenarios)",
        library="mem0ai",
        version="2.0.7",
        module="mem0",
        adapter="mem0_async",
        host=Mem0Host(2),
        lock="mem0-2.0.7.txt",
        env={**_MEM0_ENV, "TOKI_MEM0_ENTITIES": "1"},
        model=None,  # corpus only: no row of the verdict matrix
        intercepted=_ASYNC_ENTITY_GATES,
        simplified=_ASYNC_ENTITY_SIMPLIFIED,
        exhaustible=False,
    ),
    "toki-memory": RealSystem(
        name="toki-memory",
        title="toki Memory, in-process store shared by the agents' threads (EWM + judge)",
        library="toki",
        version="",
        module="toki",
        adapter="toki_memory",
        host=TokiHost("memory"),
        model="toki",
        intercepted=(
            "EventStore: append, load, last_seq, load_projection (all ordered: the shared "
            "facade's state changes between them)",
            "the judge: every question Memory.write asks (EWM's score)",
        ),
        simplified=("claims' valid and recording times are the workload's day and tick numbers",),
        crashes="an agent's thread dies of an exception raised at its gate point (its with "
        "blocks release Memory's writer lock); the other threads and the store live on",
    ),
    "toki-sqlite": RealSystem(
        name="toki-sqlite",
        title="toki Memory, one facade per agent over one SQLite file (EWM + judge)",
        library="toki",
        version="",
        module="toki",
        adapter="toki_memory",
        host=TokiHost("sqlite"),
        model="toki",
        intercepted=(
            "EventStore: append, load, last_seq, load_projection on the shared file",
            "write_lock (BEGIN IMMEDIATE) as a lock the scheduler models",
            "the judge: every question Memory.write asks (EWM's score)",
        ),
        simplified=("claims' valid and recording times are the workload's day and tick numbers",),
        crashes="an agent abandoned between two gate points; its connection is closed, so "
        "SQLite rolls back its open transaction (what a dead process leaves)",
    ),
}

_LANGGRAPH_SIMPLIFIED = (
    "the application puts each claim's value under (subject, predicate): "
    "store.put((subject,), predicate, {'value': v}); no read-decide-write in the application",
    "no TTL, no index (no embeddings configured): search lists a namespace",
)
SYSTEMS["graphiti-0.31.2"] = RealSystem(
    name="graphiti-0.31.2",
    title="graphiti-core 0.31.2 on embedded Kuzu 0.11.3 (LLM flags contradictions; "
    "valid-time rule picks the loser)",
    library="graphiti-core",
    version="0.31.2",
    module="graphiti_core",
    adapter="graphiti",
    host=GraphitiHost(),
    lock="graphiti-0.31.2.txt",
    env={"GRAPHITI_TELEMETRY_ENABLED": "false"},
    model="graphiti",
    exhaustible=False,
    intercepted=(
        "LLM: LLMClient.generate_response (every prompt: extract_nodes, dedupe_nodes, "
        "extract_edges, dedupe_edges.resolve_edge), an awaitable gate point per call",
        "Kuzu: every statement through KuzuDriver.execute_query (reads and writes of the "
        "graph; each commits on its own)",
        "clock (utc_now) and uuid4: one stream per agent",
        "async: each agent's event loop; several coroutines of one agent can be parked",
    ),
    simplified=(
        "entity and edge extraction are exact: one entity per side, one edge "
        "'<key> is <value>' valid from the claim's start (the model's simplification)",
        "embeddings are feature-hashed words; the cross-encoder keeps the search order",
        "Kuzu in memory (':memory:'), a fresh database per run; statements run in the "
        "agent's loop thread instead of Kuzu's pool",
        "an agent's parked sibling tasks are released oldest first (the explorer chooses "
        "the agent, not the task inside it; strategy_notes count when this mattered)",
    ),
)
SYSTEMS["langgraph-store-memory"] = RealSystem(
    name="langgraph-store-memory",
    title="LangGraph InMemoryStore (langgraph 1.2.24): put overwrites, no history",
    library="langgraph",
    version="1.2.24",
    module="langgraph.store.memory",
    adapter="langchain",
    host=LangGraphStoreHost("memory"),
    lock="langgraph-1.2.24.txt",
    venv="langgraph-1.2.24",
    model="langgraph-store",
    intercepted=("Store.batch: every get/put/search/delete (deletes are PutOp(value=None))",),
    simplified=_LANGGRAPH_SIMPLIFIED,
)
SYSTEMS["langgraph-store-postgres"] = RealSystem(
    name="langgraph-store-postgres",
    title="LangGraph PostgresStore (langgraph-checkpoint-postgres 3.2.0) on the local "
    "PostgreSQL, a schema per run",
    library="langgraph-checkpoint-postgres",
    version="3.2.0",
    module="langgraph.store.postgres",
    adapter="langchain",
    host=LangGraphStoreHost("postgres"),
    lock="langgraph-1.2.24.txt",
    venv="langgraph-1.2.24",
    model="langgraph-store",
    intercepted=(
        "PostgresStore.batch: every get/put/search/delete (each batch its own transaction)",
    ),
    simplified=(
        *_LANGGRAPH_SIMPLIFIED,
        "needs TOKI_PG_DSN (default postgresql://postgres@127.0.0.1:5432/test); each run "
        "in a schema of its own, dropped afterwards",
    ),
)
SYSTEMS["langgraph-store-postgres-3.1.0"] = RealSystem(
    name="langgraph-store-postgres-3.1.0",
    title="LangGraph PostgresStore (langgraph-checkpoint-postgres 3.1.0): the version before "
    "namespace scoping respected segment boundaries (corpus scenarios)",
    library="langgraph-checkpoint-postgres",
    version="3.1.0",
    module="langgraph.store.postgres",
    adapter="langchain",
    host=LangGraphStoreHost("postgres"),
    lock="langgraph-pgstore-3.1.0.txt",
    model=None,  # corpus only: no row of the verdict matrix
    intercepted=(
        "PostgresStore.batch: every get/put/search/delete (each batch its own transaction)",
    ),
    simplified=("as langgraph-store-postgres (the same adapter)",),
)
SYSTEMS["langmem-0.0.30-reflection"] = RealSystem(
    name="langmem-0.0.30-reflection",
    title="LangMem 0.0.30's ReflectionExecutor: the manager runs on a background thread",
    library="langmem",
    version="0.0.30",
    module="langmem",
    adapter="langchain",
    host=LangMemHost("langmem-reflection"),
    lock="langgraph-1.2.24.txt",
    venv="langgraph-1.2.24",
    model=None,  # the application differs from the model row's (it does not wait)
    intercepted=(
        "as langmem-0.0.30; the executor's worker thread is a unit of the agent that made "
        "the executor, its queue waits and sleeps go through the controller (virtual time)",
    ),
    simplified=(
        "each agent is one conversation: per message it reads its memories, then submits "
        "the whole conversation (thread_id = the conversation), and leaves a `with` block "
        "(shutdown, wait=True) at the end; after_seconds = 0",
        "the stub model answers for the last value of each key the conversation states",
    ),
)
SYSTEMS["langgraph-checkpoint-postgres"] = RealSystem(
    name="langgraph-checkpoint-postgres",
    title="LangGraph 1.2.24's Pregel loop with durability='sync' over PostgresSaver "
    "(langgraph-checkpoint-postgres 3.2.0): a thread of three nodes, with restarts",
    library="langgraph",
    version="1.2.24",
    module="langgraph.checkpoint.postgres",
    adapter="langgraph_ckpt",
    host=LangGraphCheckpointHost(),
    lock="langgraph-1.2.24.txt",
    venv="langgraph-1.2.24",
    intercepted=(
        "the saver: aget_tuple (reads the thread), aput and aput_writes (write it), each "
        "before PostgresSaver's SQL; the loop's background saves are asyncio tasks (units)",
        "each node's side effect (writes the thread's effects)",
        "checkpoint ids (uuid6 of the wall clock): a counter of the worker, monotonic",
    ),
    simplified=(
        "the application: nodes s1 -> s2 -> s3, each appends to an external effects log "
        "and returns {'done': [node]}; a client resumes a thread the saver holds with "
        "ainvoke(None)",
        "PostgresSaver's sync SQL runs behind the async saver interface in the agent's "
        "loop thread (one schema per run on TOKI_PG_DSN)",
    ),
)
SYSTEMS["langmem-0.0.30"] = RealSystem(
    name="langmem-0.0.30",
    title="LangMem 0.0.30 memory store manager (trustcall) over a LangGraph InMemoryStore",
    library="langmem",
    version="0.0.30",
    module="langmem",
    adapter="langchain",
    host=LangMemHost(),
    lock="langgraph-1.2.24.txt",
    venv="langgraph-1.2.24",
    model="langmem",
    intercepted=(
        "the chat model: a BaseChatModel whose bind_tools binds the tools and whose "
        "_generate is a gate point (the host answers with tool calls: Memory, PatchDoc, "
        "RemoveDoc)",
        "Store.batch: every search/put/delete of the manager",
        "thread pools (langchain's ContextThreadPoolExecutor): each submission a unit of its agent",
        "uuid4 (new memory ids): one stream per agent",
    ),
    simplified=(
        "extraction is exact: one memory 'key is value' per claim (the model's)",
        "the manager's verdict on a contradiction comes from the workload's judge: patch, "
        "remove + insert, or insert (the model's question)",
        "store = InMemoryStore without an index (search lists the namespace)",
    ),
)
SYSTEMS["letta-0.16.8"] = RealSystem(
    name="letta-0.16.8",
    title="Letta 0.16.8 server library: agents editing one shared core-memory block, "
    "PostgreSQL 16 + pgvector (pgserver)",
    library="letta",
    version="0.16.8",
    module="letta.server.server",  # the server (SyncServer), not only the package
    adapter="letta",
    host=LettaHost(),
    lock="letta-0.16.8.txt",  # telemetry (Datadog, OTEL) is off unless configured
    model="letta",
    # the matrix samples straight away: DPOR does not finish within the real budget (60
    # schedules of `manager`, about 85 gate points each, left it unexhausted; docs/real.md)
    exhaustible=False,
    intercepted=(
        "SQL: every statement of Letta's engine on block, messages, agents and "
        "provider_traces (select reads its tables, update / insert / delete writes its "
        "target), except selects of agents alone (relationship loads Letta gathers in I/O "
        "order); statements after a transaction's first write run inside that point",
        "LLM: the tool call of a step (core_memory_append / core_memory_replace / none)",
        "uuid4 in Letta's id generator (one stream per agent)",
    ),
    simplified=(
        "a step is LettaAgentV3's persistence without its loop: load the agent state, the "
        "LLM gate point answers the tool call, the provider trace is written, "
        "LettaCoreToolExecutor runs the tool, the input message, tool call and tool return "
        "are persisted (create_many_messages_async) and the agent's in-context ids updated "
        "(update_message_ids_async); no run or step rows, one LLM call per step",
        "the schema is create_all plus the message sequence, not Letta's migrations",
    ),
)

SYSTEMS["cognee-1.6.5"] = RealSystem(
    name="cognee-1.6.5",
    title="Cognee 1.6.5: add + cognify on its local stores (SQLite, Ladybug graph, LanceDB)",
    library="cognee",
    version="1.6.5",
    module="cognee",
    adapter="cognee",
    host=CogneeHost(),
    lock="cognee-1.6.5.txt",
    # no usage telemetry; single-user (its default is multi-tenant with authentication)
    env={"TELEMETRY_DISABLED": "1", "ENABLE_BACKEND_ACCESS_CONTROL": "false"},
    # the real row beside the model row `cognee` (docs/real.md, Cognee: 50 DPOR schedules of
    # the default workload finish in about 75 s, twice alike; crashes unwind the agent)
    model="cognee",
    # the matrix samples straight away: 200 DPOR schedules of `manager` (the real budget's
    # dpor) left it unexhausted (about 195 gate points a schedule; docs/real.md)
    exhaustible=False,
    intercepted=(
        "LLM: LLMGateway.acreate_structured_output (the KnowledgeGraph extraction, the "
        "chunk summary): an LLM gate point, answered in process",
        "embeddings: OpenAICompatibleEmbeddingEngine.embed_text (a gate point, no footprint)",
        "graph: every public coroutine of the Ladybug adapter, at its outermost call",
        "vector: every public coroutine of the LanceDB adapter, at its outermost call",
        "SQLite: every SELECT outside a write transaction; a write transaction (first write "
        "to commit or rollback) as a lock the scheduler models",
        "cognee's locks (its per-dataset pipeline lock, module locks, VECTOR_DB_LOCK, "
        "Ladybug's source-ref lock): a lock per event loop, taking it is the modelled lock",
        "uuid4 in cognee's modules (one stream per agent); datetime in cognee's modules "
        "(toki's clock, not a gate point)",
    ),
    simplified=(
        "graph extraction is exact: one edge '<subject> -<predicate>-> <value>' per claim "
        "(the model's); the chunk summary is the chunk's text",
        "embeddings are feature-hashed words (64 dims), counted by a word tokenizer",
        "each agent runs its calls in an event loop of its own (asyncio.run per agent)",
        "cognify takes its items one at a time (data_per_batch=1; cognee's default is 20 "
        "concurrently, whose order followed I/O threads): items of one cognify are not "
        "interleaved",
        "one modelled lock for all of cognee's locks and SQLite's writer lock",
        "a crash unwinds the agent's thread at its gate point (a thread of a live process)",
        "cognify as released (1.6.5): no functional_relationships, which the model row "
        "describes (removed before 1.6.5 in favour of improve(review_conflicts=True))",
    ),
)

ALIASES = {
    "mem0-2.x": "mem0-2.2.1",
    "mem0-1.x": "mem0-1.0.11",
    "toki": "toki-memory",
    "graphiti": "graphiti-0.31.2",
    "langmem": "langmem-0.0.30",
    "letta": "letta-0.16.8",
    "cognee": "cognee-1.6.5",
}


def get_real_system(name: str) -> RealSystem:
    try:
        return SYSTEMS[ALIASES.get(name, name)]
    except KeyError:
        raise InvalidInput(
            "system",
            f"unknown real system {name!r}",
            f"use one of {', '.join(sorted(SYSTEMS))} (aliases: {', '.join(sorted(ALIASES))})",
        ) from None


def worker_python(system: RealSystem) -> str:
    """The interpreter of the system's environment (EnvironmentMissing when not set up)."""
    return python_for(system.env_name, system.lock)


@dataclass(frozen=True, slots=True)
class LockedLibrary:
    """A library whose environment is locked and set up, but which no adapter drives yet.

    `toki real setup NAME` makes its environment; `setup all` (what CI runs) and `run` leave
    it out, so a library that only installs never breaks CI or claims a real row."""

    name: str
    library: str  # the distribution whose version is pinned
    version: str
    module: str  # what `import` loads (checked when the environment is made)
    lock: str
    env: Mapping[str, str] = field(default_factory=dict)


ENVIRONMENTS: dict[str, LockedLibrary] = {}


def _check_import(system: RealSystem | LockedLibrary) -> Callable[[str], None]:
    def check(python: str) -> None:
        code = (
            "import importlib.metadata as m, importlib; "
            f"importlib.import_module({system.module!r}); "
            f"print(m.version({system.library!r}))"
        )
        with tempfile.TemporaryDirectory() as home:
            done = subprocess.run(
                [python, "-c", code],
                capture_output=True,
                text=True,
                timeout=300,
                env={**system.env, "HOME": home, "PATH": "/usr/bin:/bin"},
                check=False,
            )
        got = done.stdout.strip().splitlines()[-1:] if done.stdout else []
        if done.returncode != 0 or got != [system.version]:
            raise SetupFailed(
                f"system {system.name!r}: {system.library} did not import at version "
                f"{system.version} in the new environment: "
                + (done.stderr.strip().splitlines()[-1] if done.stderr.strip() else repr(got))
            )

    return check


def setup_name(name: str) -> str:
    """The full name of a system or locked library that `toki real setup` accepts."""
    full = ALIASES.get(name, name)
    return full if full in ENVIRONMENTS else get_real_system(name).name


def setup_system(name: str, *, force: bool = False) -> SetupReport:
    full = ALIASES.get(name, name)
    if full in ENVIRONMENTS:
        library = ENVIRONMENTS[full]
        return setup(library.name, library.lock, check=_check_import(library), force=force)
    system = get_real_system(name)
    return setup(system.env_name, system.lock, check=_check_import(system), force=force)
