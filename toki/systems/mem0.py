"""Mem0's two write paths (mem0ai/mem0), one model each: the write path changed in April 2026.

- `Mem0Judge` ("mem0-1.0.11"): the ADD/UPDATE/DELETE/NONE LLM-judge pipeline of releases up to
  v1.0.11, read at 9d6b79a1 (after v1.0.11, before a488e190 reached v2.0.0).
- `Mem0AddOnly` ("mem0-2.x"): the add-only "V3 PHASED BATCH PIPELINE" introduced by
  a488e190 (#4805, 2026-04-14), first released in v2.0.0, read at HEAD 8d5b7865 (v2.0.18+).

Both from ../shared/research/systems.md §1. Rows (SimStore keys):
- ("mem", key, mid): a vector-store point {value, text, hash, n}; mid stands for the uuid4;
- ("hist", n): a row of the SQLite history table {memory_id, key, old, new, event} (n orders
  rows as `get_history`'s created_at does);
- ("seq", "hist"), ("seq", "mem"): the wall-clock order of history rows and of inserts.

The vector store and the SQLite history are two stores with no shared transaction: every
call is its own autocommit statement, so other agents interleave between them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.isolation import Isolation
from toki.sim.program import Agent, Delete, Local, Read, Select, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems._kit import (
    belief_entry,
    next_seq,
    one,
    rows_of,
    run_inbox,
    seq_rows,
    stmt,
    txn,
)
from toki.systems.base import AgentContext, Beliefs, Records, SimJudge, SystemModel

__all__ = ["Mem0AddOnly", "Mem0Judge"]

State = Mapping[Hashable, Any]


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _search(key: str, top_k: int) -> Agent:
    """`vector_store.search(top_k=…)` scoped by user: modelled as the key's points (exact
    retrieval of the same (subject, predicate); a simplification), at most `top_k` of them,
    ranked by memory id (similarity among one key's memories is not modelled)."""
    rows = yield from one(Select(lambda k, v: k[:2] == ("mem", key), name=f"search {key}"))
    found = {} if isinstance(rows, str) else dict(rows)
    ranked = sorted(found, key=lambda k: (len(str(k[2])), str(k[2])))[:top_k]
    return {k: found[k] for k in ranked}


def _history(key: str, mid: str, event: str, old: Any, new: Any, **extra: Any) -> Agent:
    """`SQLiteManager.add_history`: its own statement under a threading lock."""

    def body() -> Agent:
        n = yield from next_seq("hist")
        row = {"memory_id": mid, "key": key, "old": old, "new": new, "event": event, **extra}
        yield from stmt(Write(("hist", n), row))
        return n

    return (yield from txn(body))


class _Mem0Base(SystemModel):
    isolation: ClassVar[Isolation] = Isolation.READ_COMMITTED

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return seq_rows(("hist", "mem"))

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        counter = iter(range(1_000_000))

        def one_claim(c: SimClaim) -> Agent:
            return self._add(c, ctx, lambda: f"a{ctx.index}.{next(counter)}")

        return run_inbox(inbox, ctx, one_claim)

    def _add(self, c: SimClaim, ctx: AgentContext, new_id: Any) -> Agent:
        raise NotImplementedError

    def recoverable(self, state: State, key: str) -> set[str]:
        """Values still producible: live points, and old/new texts in the history table."""
        out = {str(v["value"]) for _, v in rows_of(state, "mem", key)}
        for _, h in rows_of(state, "hist"):
            if h["key"] == key:
                out.update(str(x) for x in (h["old"], h["new"], h.get("from")) if x is not None)
        return out

    @staticmethod
    def _history_rows(state: State) -> list[dict[str, Any]]:
        """The history table as `Memory.history(id)` lists each memory's rows: by created_at,
        then updated_at, i.e. by the time of the change (read before the vector write), not
        by when the row was written: the real 1.0.11 writes an ADD row after another
        writer's UPDATE of that memory has written its own (tests/real/test_mem0.py). The
        change's time is the point's version (`ver`: 0 at ADD, +1 per UPDATE or DELETE);
        changes made from the same version (a forked history) keep the order written."""
        rows = sorted(rows_of(state, "hist"), key=lambda kv: kv[0][1])
        listed = sorted(rows, key=lambda kv: (str(kv[1]["memory_id"]), kv[1].get("ver", 0)))
        return [v for _, v in listed]


class Mem0Judge(_Mem0Base):
    """Mem0 ≤ v1.0.11: `Memory._add_to_vector_store` with infer=True (mem0/memory/main.py at
    9d6b79a1): LLM #1 extracts facts; `vector_store.search(top_k=5)` per fact; LLM #2
    (`get_update_memory_messages`, DEFAULT_UPDATE_MEMORY_PROMPT) returns ADD/UPDATE/DELETE/
    NONE per candidate; the actions are applied in order by `_create_memory`,
    `_update_memory` (re-reads `prev_value`, then `vector_store.update`, then a history row)
    and `_delete_memory` (hard delete + history row, is_deleted=1). Models the synchronous
    `Memory`; `AsyncMemory` would run the actions as concurrent tasks."""

    name: ClassVar[str] = "mem0-1.0.11"
    version: ClassVar[str] = "9d6b79a1"
    records: ClassVar[Records] = Records(inputs=False, decisions=True)
    capacities: ClassVar[Mapping[str, int]] = {"search top_k": 5}
    title: ClassVar[str] = "Mem0 (LLM judge, ≤ v1.0.11)"
    release: ClassVar[str] = (
        "mem0 ≤ v1.0.11 write path (ADD/UPDATE/DELETE/NONE judge), read at 9d6b79a1"
    )
    sources: ClassVar[tuple[str, ...]] = (
        "mem0/memory/main.py@9d6b79a1: Memory._add_to_vector_store, _create_memory, "
        "_update_memory, _delete_memory, _resolve_mapped_id (temp_uuid_mapping)",
        "mem0/configs/prompts.py@9d6b79a1: DEFAULT_UPDATE_MEMORY_PROMPT, "
        "get_update_memory_messages",
        "mem0/memory/storage.py@9d6b79a1: SQLiteManager (history table, threading.Lock)",
        "issue mem0ai/mem0#3709 (no lock across read → LLM → write)",
        "../shared/research/systems.md §1a",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "LLM #2 picks ADD/UPDATE/DELETE/NONE per retrieved memory",
        "old values kept": "only as text in the SQLite history (old_memory/new_memory); the "
        "vector point is overwritten (UPDATE) or hard-deleted (DELETE); no supersedes link",
        "decision logged with inputs": "no: facts, candidates, prompt and raw output are not "
        "stored; history keeps the outcome only",
        "concurrency control": "none across search → LLM → write; vector store and history "
        "are separate autocommit stores (read committed per statement)",
        "idempotency on retry": "none: a retried add() re-runs both LLM calls on the changed "
        "store; `hash` is stored but not used for dedup",
        "recovery": "re-apply each memory's history rows as Memory.history lists them "
        "(created_at, then updated_at: the change's time, read before the vector write; the "
        "only record of decisions; text only)",
        "judge sees": "the top-k points of the same user scope (ids remapped to 0,1,…)",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "LLM #1 extracts exactly the claim's (key, value); retrieval returns exactly the "
        "key's points",
        "the judge's verdict per claim: UPDATE (probability p) else NONE/ADD/DELETE+ADD",
        "NONE's session-id rewrite, graph memory, metadata and reset() are not modelled",
        "sync Memory: actions applied in order (AsyncMemory's concurrent tasks not modelled)",
        "FAISS update is one atomic upsert (mem0's FAISS store deletes, then inserts: "
        "two concurrent updates can land in the reverse order of their times)",
        "a history row's time is the memory's version (0 at ADD, +1 per change): two "
        "changes made from the same version keep the order their rows were written, where "
        "the real clock orders them by when each read it",
    )

    def _add(self, c: SimClaim, ctx: AgentContext, new_id: Any) -> Agent:
        yield Local("extract", c.cid)  # LLM #1
        found = yield from _search(c.key, self.capacities["search top_k"])
        olds = sorted((str(k[2]), v) for k, v in found.items())
        actions: list[tuple[str, str | None]]
        if not olds:
            actions = [("ADD", None)]
        elif any(v["value"] == c.value for _, v in olds):
            actions = []
        else:
            question = (
                f"mem0 update memory: {c.key}: existing "
                f"{sorted({v['value'] for _, v in olds})} vs new {c.value!r}"
            )
            yield Local("judge", question)  # LLM #2
            event = ctx.judge.pick(question, ["NONE", "ADD", "DELETE", "UPDATE"])
            if event == "UPDATE":
                actions = [("UPDATE", olds[0][0])]
                actions += [("DELETE", mid) for mid, _ in olds[1:]]
            elif event == "DELETE":
                actions = [("DELETE", mid) for mid, _ in olds]
                actions.append(("ADD", None))
            elif event == "ADD":
                actions = [("ADD", None)]
            else:
                actions = []
        for event, mid in actions:
            if event == "ADD":
                m = str(new_id())
                point = {"value": c.value, "text": f"{c.key} is {c.value}", "ver": 0}
                yield from one(Write(("mem", c.key, m), point))
                yield from _history(c.key, m, "ADD", None, c.value, ver=0)
            elif event == "UPDATE" and mid is not None:
                prev = yield from one(Read(("mem", c.key, mid)))
                if prev is None:  # vector_store.get finds nothing: error logged, skipped
                    continue
                ver = int(prev.get("ver", 0)) + 1  # updated_at: read after the get
                point = {"value": c.value, "text": f"{c.key} is {c.value}", "ver": ver}
                yield from one(Write(("mem", c.key, mid), point))  # upsert
                yield from _history(c.key, mid, "UPDATE", prev["value"], c.value, ver=ver)
            elif event == "DELETE" and mid is not None:
                prev = yield from one(Read(("mem", c.key, mid)))
                if prev is None:
                    continue
                ver = int(prev.get("ver", 0)) + 1
                yield from one(Delete(("mem", c.key, mid)))
                yield from _history(c.key, mid, "DELETE", prev["value"], None, ver=ver)
        return "ok"

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {k: belief_entry(v["value"] for _, v in rows_of(state, "mem", k)) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """Re-apply each memory's history rows in the order `Memory.history` lists them:
        ADD/UPDATE set the point's text, DELETE removes it. No LLM is called."""
        points: dict[tuple[str, str], str] = {}
        for h in self._history_rows(state):
            ident = (h["key"], h["memory_id"])
            if h["event"] == "DELETE":
                points.pop(ident, None)
            else:
                points[ident] = str(h["new"])
        return {
            k: belief_entry(v for (key, _), v in sorted(points.items()) if key == k) for k in keys
        }


class Mem0AddOnly(_Mem0Base):
    """Mem0 v2.0.0 → HEAD: `Memory._add_to_vector_store`, "=== V3 PHASED BATCH PIPELINE ==="
    (mem0/memory/main.py at 8d5b7865): Phase 1 one `vector_store.search(top_k=10)`; Phase 2
    one LLM call with ADDITIVE_EXTRACTION_PROMPT that records *transitions* ("switched from
    X to Y") and names a contradicted memory in `linked_memory_ids`; Phases 4–5 md5 dedup
    against the Phase-1 snapshot; Phase 6 batch insert (new uuid4s) and ADD history rows.
    `add()` never calls `_update_memory`/`_delete_memory`: contradictions coexist."""

    name: ClassVar[str] = "mem0-2.x"
    version: ClassVar[str] = "8d5b7865"
    records: ClassVar[Records] = Records(inputs=False, decisions=True)
    capacities: ClassVar[Mapping[str, int]] = {"search top_k": 10}
    title: ClassVar[str] = "Mem0 (add-only, v2.0.0+)"
    release: ClassVar[str] = (
        "mem0 v2.0.0–v2.0.18+ add-only 'V3 phased batch pipeline' (a488e190, #4805), "
        "read at HEAD 8d5b7865"
    )
    sources: ClassVar[tuple[str, ...]] = (
        "mem0/memory/main.py@8d5b7865: Memory._add_to_vector_store "
        "('# === V3 PHASED BATCH PIPELINE ==='), get_last_messages/save_messages",
        "mem0/configs/prompts.py@8d5b7865: ADDITIVE_EXTRACTION_PROMPT (linked_memory_ids)",
        "issues mem0ai/mem0#6515 / PR #6516 (hash-dedup TOCTOU), #6243 (entity-store race)",
        "../shared/research/systems.md §1b",
    )
    encodes: ClassVar[Mapping[str, str]] = {
        "who decides": "nobody resolves: the extraction LLM may phrase a transition "
        "('changed from X to Y'); old and new memories coexist",
        "old values kept": "yes: add() never updates or deletes; every insert has an ADD "
        "history row; the linked_memory_ids link is dropped",
        "decision logged with inputs": "no (extraction prompt/output not stored; messages "
        "truncated to the last 10 per scope)",
        "concurrency control": "none; md5 dedup checks the stale Phase-1 snapshot (TOCTOU, "
        "#6515); autocommit vector store and SQLite history (read committed per statement)",
        "idempotency on retry": "an exact retry is deduped only if the first attempt finished "
        "before the retry's Phase-1 search; else a permanent duplicate",
        "recovery": "re-apply the history table (ADD rows) in order",
        "judge sees": "the top-10 memories found by one search over the new messages",
    }
    simplifies: ClassVar[tuple[str, ...]] = (
        "extraction yields exactly the claim's value; a transition when the search found a "
        "contradicting memory and the LLM (the judge, favouring 'transition' with p) says so",
        "a reader treats a transition 'X → Y' as superseding earlier memories of X; "
        "otherwise contradicting memories are all served (value None: unresolved)",
        "Phase 0 messages table and Phase 7 entity store (ranking boost only) not modelled",
        "explicit update()/delete() user APIs are not part of the write path modelled",
    )

    def _add(self, c: SimClaim, ctx: AgentContext, new_id: Any) -> Agent:
        found = yield from _search(c.key, self.capacities["search top_k"])  # Phase 1
        snapshot = [v for _, v in sorted(found.items(), key=lambda kv: repr(kv[0]))]
        current = _current(snapshot)
        others = sorted({v for v in current if v != c.value})
        text, source = f"{c.key} is {c.value}", None
        question = f"mem0 additive extraction: {c.key}: existing {others} vs new {c.value!r}"
        yield Local("extract", question)  # Phase 2: one LLM call
        if others and ctx.judge.pick(question, ["fact", "transition"]) == "transition":
            source = others[0]
            text = f"{c.key} changed from {source} to {c.value}"
        digest = _md5(text)
        if any(v["hash"] == digest for v in snapshot):  # Phases 4-5: dedup on the snapshot
            return "dedup"
        mid = str(new_id())

        def insert() -> Agent:  # Phase 6: batch insert
            n = yield from next_seq("mem")
            point = {"value": c.value, "text": text, "hash": digest, "from": source, "n": n}
            yield from stmt(Write(("mem", c.key, mid), point))
            return n

        n = yield from txn(insert)
        yield from _history(c.key, mid, "ADD", None, c.value, text=text, n=n, **{"from": source})
        return "ok"

    def beliefs(self, state: State, keys: Iterable[str]) -> Beliefs:
        return {k: _entry([v for _, v in rows_of(state, "mem", k)]) for k in keys}

    def recover(self, state: State, keys: Iterable[str], judge: SimJudge) -> Beliefs:
        """Re-apply the ADD history rows; no LLM is called."""
        points: dict[str, list[dict[str, Any]]] = {}
        for h in self._history_rows(state):
            if h["event"] == "ADD":
                row = {"value": h["new"], "from": h.get("from"), "n": h.get("n", 0)}
                points.setdefault(h["key"], []).append(row)
        return {k: _entry(points.get(k, [])) for k in keys}


def _current(points: Sequence[Mapping[str, Any]]) -> list[str]:
    """What a reader takes as current: memories not superseded by a later transition."""
    out = []
    for p in points:
        later = [q for q in points if q.get("from") == p["value"] and q.get("n", 0) > p.get("n", 0)]
        if not later:
            out.append(str(p["value"]))
    return out


def _entry(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return belief_entry(_current(points), stored=sorted(str(p["value"]) for p in points))
