"""toki's own `Memory` as a real system, through its public API and the EventStore protocol.

Two deployments (config "variant"):

* "memory": one `Memory` over the in-process store, shared by every agent (threads of one
  process). Its facade state (log, snapshot) is touched between gate points, so every gate
  point of this variant declares a write of ("toki:instance", None): all its steps are
  ordered against each other (sound and exhaustive, no reduction).
* "sqlite": one `Memory` per agent over the same SQLite file (processes sharing a database).
  The shared state is the file: store calls read or write ("sqlite", "events") and
  ("sqlite", "projection"); `write_lock()` (BEGIN IMMEDIATE) is a lock gate point, so the
  scheduler knows an agent waits while another holds it. A crash closes the crashed agent's
  connection, as a dead process's would be: SQLite rolls its transaction back.

Gate points: every EventStore call (`store.*`), the lock, and the judge (`judge.<task>`,
answered by the host). The operator is EWM with the gated judge scoring contradictions.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta
from typing import Any

from toki import Memory
from toki.algebra.ewm import EWM
from toki.isolation import Isolation
from toki.judge import JudgeQuestion, Verdict
from toki.log import Event
from toki.model import Claim, FactKey
from toki.replay import KeySummary
from toki.store.base import EventStore, Plan
from toki.store.memory import InMemoryStore
from toki.store.sqlite import SQLiteStore
from toki.systems.base import SimJudge

from . import stubs
from .controller import Controller

__all__ = ["Adapter", "fact_key"]

TENANT = "toki-real"
READ_AT = stubs.BASE + timedelta(days=3650)
"""Memory's clock: after every workload time (valid starts and recording times are days from
stubs.BASE), so `current()` answers for a time at which every claim is known and valid. The
write path never reads it (each claim carries its recording time)."""


def clock() -> datetime:
    return READ_AT


def fact_key(key: str) -> FactKey:
    subject, _, name = key.partition(":")
    return FactKey(TENANT, subject or "user", name or "value")


def claim_of(c: Mapping[str, Any]) -> Claim:
    return Claim(
        fact_key(str(c["key"])),
        c["value"],
        str(c.get("source", "user")),
        valid_from=stubs.BASE + timedelta(days=int(c.get("start", 0))),
        recorded_at=stubs.BASE + timedelta(days=int(c.get("recorded", 0))),
        weight=float(c.get("weight", 1.0)),
    )


def _day(at: datetime | None) -> int | None:
    """A valid-from time as the workload's day number (`claim_of`'s inverse)."""
    return None if at is None else (at - stubs.BASE).days


class GatedWriter:
    """Memory's in-process writer lock as a gate point: a thread waiting for it must be
    parked by the explorer, not blocked where the controller cannot see it."""

    def __init__(self, gated: GatedStore) -> None:
        self.gated = gated
        self._open = threading.local()

    def __enter__(self) -> None:
        cm = self.gated.write_lock()
        cm.__enter__()
        stack = getattr(self._open, "stack", None)
        if stack is None:
            stack = self._open.stack = []
        stack.append(cm)

    def __exit__(self, *exc: Any) -> bool | None:
        return bool(self._open.stack.pop().__exit__(*exc))


class GatedStore:
    """An EventStore whose every call is a gate point (then delegated)."""

    def __init__(
        self, inner: EventStore, ctl: Controller, fam: str, extra: Sequence[Any], lock: str | None
    ) -> None:
        self.inner = inner
        self.ctl = ctl
        self.fam = fam
        self.extra = list(extra)
        self.lock = lock
        self.url = inner.url
        self._depth = threading.local()  # per thread: depth of its own write_lock()

    @property
    def held(self) -> int:
        return int(getattr(self._depth, "n", 0))

    @held.setter
    def held(self, n: int) -> None:
        self._depth.n = n

    def _gate(
        self, name: str, reads: Sequence[str], writes: Sequence[str], detail: Any = None
    ) -> None:
        self.ctl.gate(
            "store",
            f"store.{name}",
            detail,
            [(self.fam, r) for r in reads],
            [(self.fam, w) for w in writes] + self.extra,
        )

    def write_lock(self) -> AbstractContextManager[None]:
        return self._locked()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if self.lock is None or self.held:
            self.held += 1
            try:
                with self.inner.write_lock():
                    yield
            finally:
                self.held -= 1
            return
        self.ctl.gate("lock", "store.lock", {"lock": self.lock, "op": "acquire"})
        self.held += 1
        try:
            with self.inner.write_lock():
                yield
                # the commit publishes what was written under the lock
                everything = [(self.fam, "events"), (self.fam, "projection")]
                self.ctl.gate(
                    "lock", "store.unlock", {"lock": self.lock, "op": "release"}, [], everything
                )
        finally:
            self.held -= 1

    def append(
        self,
        events: Sequence[Event],
        summaries: Mapping[FactKey, KeySummary],
        watermark: int,
        *,
        replace: bool = False,
    ) -> None:
        if self.lock is not None and not self.held:
            # an append outside write_lock() takes the writer lock itself (SQLiteStore's
            # BEGIN IMMEDIATE): the scheduler must know, or the agent would block unseen
            with self._locked():
                self.append(events, summaries, watermark, replace=replace)
            return
        detail = {
            "events": [e.kind.value for e in events],
            "watermark": watermark,
            "replace": replace,
        }
        self._gate("append", [], ["events", "projection"], detail)
        self.inner.append(events, summaries, watermark, replace=replace)

    def transact(self, keys: frozenset[FactKey], level: Isolation, plan: Plan) -> int:
        """One gate point (read the partition, append) under this store's gated lock."""
        with self._locked():
            self._gate("transact", ["events"], ["events", "projection"], {"keys": len(keys)})
            return self.inner.transact(keys, level, plan)

    def sequence(self) -> int:
        return 0

    def load_state(self) -> tuple[list[Event], list[Event], int, dict[FactKey, KeySummary]]:
        """One gate point: the real store reads the log and the projection in one read
        transaction, so no other step can fall between them."""
        self._gate("load_state", ["events", "projection"], [])
        return self.inner.load_state()

    def load(self, after_seq: int = 0) -> Iterator[Event]:
        self._gate("load", ["events"], [], {"after": after_seq})
        return iter(list(self.inner.load(after_seq)))

    def last_seq(self) -> int:
        self._gate("last_seq", ["events"], [])
        return self.inner.last_seq()

    def load_projection(self) -> tuple[int, dict[FactKey, KeySummary]]:
        self._gate("load_projection", ["projection"], [])
        return self.inner.load_projection()

    def close(self) -> None:
        self.inner.close()


class GatedJudge:
    """toki's Judge protocol; each question is a gate point the host answers."""

    name = "real-stub"
    model = "toki-real-stub"
    prompt = "which of these facts holds?"
    temperature = 1.0
    seed: int | None = None

    def __init__(self, ctl: Controller, extra: Sequence[Any]) -> None:
        self.ctl = ctl
        self.extra = list(extra)

    def judge(self, question: JudgeQuestion) -> Verdict:
        detail = {
            "task": question.task,
            "key": f"{question.key.subject}:{question.key.fact_key}",
            "candidates": [{"id": c.id, "value": c.value} for c in question.candidates],
        }
        reply = self.ctl.gate("llm", f"judge.{question.task}", detail, [], self.extra)
        return Verdict.from_json(reply or {})


class _LocalJudge:
    """The recovery's fresh judge (outside any agent nothing is gated): SimJudge semantics
    with the host's question text."""

    name = "recovery"
    model = "toki-real-stub"
    prompt = "which of these facts holds?"
    temperature = 1.0
    seed: int | None = None

    def __init__(self, p: float, seed: int) -> None:
        self.sim = SimJudge(p, seed)
        self.asked = 0  # questions put to it (a recovery that asks none cannot show N1)

    def judge(self, question: JudgeQuestion) -> Verdict:
        self.asked += 1
        values = [str(c.value) for c in question.candidates]
        key = f"{question.key.subject}:{question.key.fact_key}"
        pick = self.sim.pick(f"{key}: {' / '.join(values[:-1])} vs {values[-1]}", values)
        winner = [c for c in question.candidates if str(c.value) == pick][-1]
        if question.task == "score":
            return Verdict(
                scores=tuple((c.id, 1.0 if c is winner else 0.0) for c in question.candidates)
            )
        if question.task == "contradicts":
            return Verdict(contradicts=len(set(values)) > 1)
        return Verdict(winner=winner.id)


class Adapter:
    def __init__(self, controller: Controller) -> None:
        self.ctl = controller
        self.root = tempfile.mkdtemp(prefix="toki-real-toki-")
        self.variant = "memory"
        self.keys: list[str] = []
        self.shared: Memory | None = None
        self.inner: InMemoryStore | None = None
        self.path: str | None = None
        self.run_dir: str | None = None
        self.stores: dict[int, GatedStore] = {}
        self.memories: dict[int, Memory] = {}

    def describe(self) -> dict[str, Any]:
        from importlib.metadata import version

        return {"library": "toki", "version": version("toki")}

    def open(self, config: dict[str, Any]) -> None:
        self.close()
        self.variant = str(config.get("variant", "memory"))
        self.keys = list(config.get("keys") or [])
        self.run_dir = tempfile.mkdtemp(dir=self.root)
        if self.variant == "memory":
            self.inner = InMemoryStore()
            extra = [("toki:instance", None)]
            store = GatedStore(self.inner, self.ctl, "memory", extra, None)
            self.shared = Memory(store, clock=clock)
            # Memory serialises its writes under one in-process lock: gate it like a store lock
            writer = GatedStore(self.inner, self.ctl, "memory", extra, "memory-writer")
            self.shared._writer = GatedWriter(writer)  # type: ignore[assignment]
            self.judge = GatedJudge(self.ctl, extra)
        else:
            self.path = os.path.join(self.run_dir, "toki.db")
            SQLiteStore(self.path).close()  # the schema exists before any agent starts
            self.judge = GatedJudge(self.ctl, [])

    def _memory(self, agent: int) -> Memory:
        if self.shared is not None:
            return self.shared
        if agent not in self.memories:
            assert self.path is not None
            store = GatedStore(SQLiteStore(self.path), self.ctl, "sqlite", [], "sqlite-writer")
            self.stores[agent] = store
            self.memories[agent] = Memory(store, clock=clock)
        return self.memories[agent]

    def agent_main(self, agent: int, inbox: list[dict[str, Any]]) -> list[Any]:
        mem = self._memory(agent)
        out = []
        for n, c in enumerate(inbox):
            self.ctl.begin_claim(n)
            decision = mem.write(claim_of(c), EWM, judge=self.judge)
            out.append(decision.action.value)
        return out

    def _reader(self) -> Memory:
        """A fresh facade over the durable record (the library's documented reopen)."""
        if self.variant == "memory":
            assert self.inner is not None
            return Memory(self.inner, clock=clock)
        assert self.path is not None
        return Memory.open(f"sqlite:///{self.path}", clock=clock)

    def _live(self) -> Memory:
        """The live system: the shared instance, or the shared file's log replayed. (Not
        `Memory.open`: opening reconciles, and a reconcile may write, which an observer must
        not do, least of all while an agent holds the writer lock.)"""
        if self.shared is not None:
            return self.shared
        assert self.path is not None
        store = SQLiteStore(self.path)
        try:
            events = list(store.load(0))
        finally:
            store.close()
        return Memory.replay(events, clock=clock)

    @staticmethod
    def _view(mem: Memory, keys: Sequence[str]) -> dict[str, Any]:
        out = {}
        for key in keys:
            fk = fact_key(key)
            res = mem.current(fk)
            values = sorted(str(mem.version(v).value) for v in res.version_ids)
            if res.kind == "value":
                values = [str(res.value)]
            out[key] = {
                "kind": res.kind,
                "values": values,
                "history": sorted(str(h.version.value) for h in mem.history(fk)),
                # which claims the versions came from (value, source, valid-from day): two
                # claims of one agent may carry the same value
                "claims": sorted(
                    [str(h.version.value), h.version.source_id, _day(h.version.valid.start)]
                    for h in mem.history(fk)
                ),
            }
        return out

    def snapshot(self) -> dict[str, Any]:
        mem = self._live()
        try:
            return {"keys": self._view(mem, self.keys)}
        finally:
            if mem is not self.shared:
                mem.close()

    def observe(self) -> dict[str, Any]:
        mem = self._live()
        try:
            return {
                "keys": self._view(mem, self.keys),
                "events": [[e.seq, e.kind.value, e.payload_hash] for e in mem.events()],
                "state_hash": mem.state_hash(),
            }
        finally:
            if mem is not self.shared:
                mem.close()

    def recover(self, config: dict[str, Any]) -> Any:
        """Reopen the durable record (replay and reconcile), and re-adjudicate every logged
        claim with a fresh judge (answered from the keyed log where it has the question)."""
        try:
            mem = self._reader()
        except Exception as exc:  # the record cannot be reopened: that is the finding
            return {"error": f"reopen: {type(exc).__name__}: {exc}"}
        try:
            judge = _LocalJudge(float(config.get("p", 0.5)), int(config.get("seed", 1)))
            out: dict[str, Any] = {"reopened": self._view(mem, self.keys)}
            try:
                out["rejudged"] = self._view(mem.readjudicate(EWM, judge=judge), self.keys)
            except Exception as exc:
                out["rejudged_error"] = f"{type(exc).__name__}: {exc}"
            out["judge_calls"] = judge.asked
            return out
        finally:
            mem.close()

    @property
    def crash_unwinds(self) -> bool:
        """In-process agents are threads of one live process: a crashed one dies of an
        exception at its gate point (its `with` blocks release Memory's writer lock), it is
        not left parked holding it. Agents over SQLite are processes: abandoned."""
        return self.variant == "memory"

    def on_crash(self, agent: int) -> None:
        """What a dead process leaves: its connection closed, its transaction rolled back.
        (Straight at the connection: the parked thread still holds the store's own lock.)"""
        store = self.stores.pop(agent, None)
        if store is not None:
            conn = getattr(store.inner, "_conn", None)
            if conn is not None:
                conn.close()

    def close(self) -> None:
        for store in self.stores.values():
            conn = getattr(store.inner, "_conn", None)
            if conn is not None:
                conn.close()
        self.stores = {}
        self.memories = {}
        self.shared = None
        self.inner = None
        if self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self.run_dir = None
