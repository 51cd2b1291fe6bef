"""Drive a real system through toki's explorer: gate points become explorer steps.

`real_program` makes a `toki.sim.Program` whose agents are generators that talk to the
worker: each yields one step per gate point its library call parks at (a `Local` with the
point's footprint, or lock steps on the simulated store), and executing that step releases
the call, which runs until the agent's next gate point. The engine, the strategies (random,
PCT, bounded, DPOR), `replay_schedule` and the crash choices are toki's own, unchanged. A
world is a fresh library instance (the worker's `open`), so any schedule re-runs from scratch.

After a run, the library is observed through its own API (`RealRun`). `serial_beliefs` runs
the real code serially over orders of committed claims (what N2 compares against).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from toki.canonical import canonical_json
from toki.errors import InvalidInput, ProgramError, ScheduleError
from toki.isolation import Isolation
from toki.real.adapter import Picker, RealSystem
from toki.real.errors import RealError, WorkerError
from toki.real.faults import FaultPlan, error_for
from toki.real.gate import GatePoint, as_local, is_release, lock_steps, resources
from toki.real.session import Session
from toki.real.systems import worker_python
from toki.sim.engine import Choice, Execution
from toki.sim.explore import Run, Stats, Strategy, record
from toki.sim.program import (
    Abort,
    Agent,
    Commit,
    Crash,
    Fault,
    Footprint,
    Local,
    Program,
    Step,
    World,
)
from toki.sim.store import SimStore
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import belief_hash

__all__ = [
    "DEATHS",
    "KILLED",
    "CountingPicker",
    "LiveTrace",
    "RealRun",
    "SerialCache",
    "finish_run",
    "open_session",
    "real_program",
    "real_runs",
    "run_plan",
    "run_serially",
    "serial_beliefs",
    "serial_orders",
    "unwrapped",
]


@dataclass(frozen=True, slots=True)
class RealRun:
    """One explored schedule of a real system, observed through the library's own API.

    `trace` lists what happened at each gate point in order (the agent, the point, the
    reply it was released with) and each crash; `timeline` is what a reader was served after
    each step that wrote shared state; `recovered` is the worker's recovery output."""

    schedule: tuple[Choice, ...]
    trace: tuple[Mapping[str, Any], ...]
    outcomes: tuple[Any, ...]
    observation: Mapping[str, Any]
    timeline: tuple[Mapping[str, Any], ...]
    recovered: Any = None
    footprints: tuple[Footprint, ...] | None = field(default=None, repr=False, compare=False)
    recovered_pinned: Any = None  # the same recovery with the live judge pinned (N1 vs RD)
    judge_calls: int = 0  # questions the live write path asked the judge
    restart: Mapping[str, Any] | None = None  # after a process death: the reopened library
    # the OS pids of the worker that died and of the one that reopened the library (not part
    # of the record: pids differ between runs of the same schedule)
    worker_pids: tuple[int, int] | None = field(default=None, compare=False)

    @property
    def record(self) -> dict[str, Any]:
        """Everything the run left, as plain JSON (what "byte-identical" compares)."""
        return {
            "schedule": list(self.schedule),
            "trace": list(self.trace),
            "outcomes": _plain(self.outcomes),
            "observation": self.observation,
            "timeline": list(self.timeline),
            "recovered": self.recovered,
            "recovered_pinned": self.recovered_pinned,
            **({"restart": self.restart} if self.restart is not None else {}),
        }

    @property
    def digest(self) -> str:
        return hashlib.sha256(canonical_json(self.record).encode()).hexdigest()

    @property
    def state_digest(self) -> str:
        """The library's final state alone (distinct states explored)."""
        return hashlib.sha256(canonical_json(self.observation).encode()).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def _frozen(value: Any) -> Any:
    """An outcome with a stable repr (lists become tuples)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    return value


class LiveTrace:
    """The gate points and crashes of the world being run (one per program; a new world
    starts a new trace), and counters over all worlds (`notes`): `sibling_order_fixed`
    counts the moments an async agent had two or more tasks parked at gate points that
    touch shared state; the explorer released them in creation order (the (agent, task)
    orders inside one agent are not explored, see docs/real.md)."""

    def __init__(self, workload: Workload | None = None, seed: int = 0) -> None:
        self.trace: list[dict[str, Any]] = []
        self.notes: dict[str, int] = {}
        self.workload = workload
        self.seed = seed
        self.replays: dict[str, Any] = {}  # recovery re-runs, memoised by order and judge
        self.judge_calls = 0  # questions the live write path asked the judge (this world)
        self.armed: dict[int, int] = {}  # agent -> injected failures waiting for its next call
        self.dead = False  # the worker process died in this world (restart or torn fault)
        self.pids: tuple[int, int] | None = None  # the dead worker's pid, the new one's
        self.at: dict[int, int | None] = {}  # agent -> the claim of the point it is parked at
        self.rotation: dict[int, int] = {}  # agent -> task choices fired since its last step
        self.switched: dict[int, int] = {}  # agent -> task choices fired in this world


def _acquires(point: GatePoint) -> bool:
    return point.kind == "lock" and not is_release(point)


def _units(resp: Mapping[str, Any]) -> list[GatePoint]:
    """The agent's parked units (tasks, threads), by unit number: the oldest first."""
    if resp.get("state") != "parked":
        return []
    return [GatePoint.from_json(p) for p in resp.get("parked") or [resp["point"]]]


def _siblings_touch_shared(resp: Mapping[str, Any]) -> bool:
    parked = resp.get("parked") or []
    return sum(1 for p in parked if p.get("reads") or p.get("writes")) >= 2


def open_session(system: RealSystem, *, gate_timeout: float = 60.0) -> Session:
    """A worker for `system` (EnvironmentMissing, naming the setup command, if not set up)."""
    return Session(
        system.name, worker_python(system), system.adapter, system.env, gate_timeout=gate_timeout
    )


def real_program(
    system: RealSystem,
    session: Session,
    workload: Workload,
    judge: Picker,
    *,
    seed: int = 0,
    crash_budget: int = 0,
    max_steps: int = 10_000,
    faults: FaultPlan | None = None,
) -> tuple[Program, LiveTrace]:
    """A program whose every world is a fresh instance of the library in `session`.
    `faults` (default: `crash_budget` crashes per agent) adds the explorer's fault choices
    of `toki.real.faults`: injected failures per agent, one process death per run."""
    live = LiveTrace(workload, seed)
    config = system.host.config(workload)
    plan = faults if faults is not None else FaultPlan(crash=crash_budget)
    if plan.dies and not session.info.get("restartable"):
        raise WorkerError(
            f"system {system.name!r}: its adapter cannot reopen the library from its files "
            "in a new process (no reopen/handover/resume hooks), so restart and torn faults "
            "do not apply"
        )
    if plan.torn and not session.info.get("tearable"):
        raise WorkerError(
            f"system {system.name!r}: its state is not in files toki can tear (no "
            "durable_files hook), so torn does not apply; restart:1 does"
        )
    if plan.tasks and not (session.info.get("is_async") or session.info.get("units")):
        raise WorkerError(
            f"system {system.name!r}: its adapter runs one unit per agent (not asynchronous, "
            "no thread pools), so tasks:<n> does not apply"
        )

    def agent(i: int, inbox: Sequence[SimClaim]) -> Agent:
        resp = session.call("start", agent=i, inbox=[c.to_json() for c in inbox])
        pending: Step | None = None  # the model's lock release, after the real one
        in_lock = False  # inside the model's lock transaction
        while resp["state"] == "parked" or pending is not None or in_lock:
            point = GatePoint.from_json(resp["point"]) if resp["state"] == "parked" else None
            if in_lock and pending is None and (point is None or _acquires(point)):
                # the library let go of its lock without the release gate point (an injected
                # failure unwound its `with` block): so does the model
                pending = Abort()
            units = _units(resp) if pending is None else []
            if point is not None and pending is None and _siblings_touch_shared(resp):
                # the explorer cannot reorder them (no task choices, or none left): noted
                spent = live.switched.get(i, 0) >= plan.tasks
                note = "sibling_order_fixed" if not plan.tasks else "task_choices_spent"
                if spent:
                    live.notes[note] = live.notes.get(note, 0) + 1
            if point is not None:
                live.at[i] = point.claim
            try:
                if pending is not None:
                    yield pending
                    pending = None
                    in_lock = False
                    continue
                assert point is not None
                if plan.tasks and len(units) > 1 and all(u.kind != "lock" for u in units):
                    # any parked unit may be the one released: the step covers them all
                    reads = frozenset().union(*(resources(u.reads) for u in units))
                    writes = frozenset().union(*(resources(u.writes) for u in units))
                    yield Local(point.name, point, reads, writes)
                    point = units[live.rotation.pop(i, 0) % len(units)]
                elif point.kind != "lock":
                    yield as_local(point)
                elif is_release(point):
                    # the release publishes what was written under the lock: the step that
                    # runs it carries the point's footprint; the model's lock goes one step
                    # later, so no agent can take the real lock before it is really free
                    yield as_local(point)
                    pending = Commit()
                else:
                    for step in lock_steps(point):
                        result = yield step
                        if isinstance(result, Exception):
                            raise WorkerError(f"the lock model refused {point.name}: {result}")
                    in_lock = True
            except Crash:
                if live.dead:
                    raise  # the process is gone: nothing is left to abandon
                session.call("crash", agent=i)
                live.trace.append(
                    {
                        "crash": i,
                        "before": None if point is None else point.name,
                        "claim": None if point is None else point.claim,
                    }
                )
                raise
            live.rotation.pop(i, None)
            if live.dead:  # the process died while this agent was parked: it never resumes
                if in_lock:
                    yield Abort()
                return KILLED
            fail = None
            if live.armed.get(i):
                live.armed[i] -= 1
                fail = error_for(point, plan.error)
            reply = None
            if fail is None:
                counting = CountingPicker(judge)
                reply = system.host.answer(point, counting)
                live.judge_calls += counting.asked
            live.trace.append(
                {
                    "agent": i,
                    "point": point.name,
                    "claim": point.claim,
                    "detail": point.detail,
                    "reply": reply,
                    **({"task": point.task} if point.task else {}),
                    **({"fault": "raise", "error": fail} if fail else {}),
                }
            )
            resp = session.call("step", agent=i, reply=reply, task=point.task, fail=fail)
        return _frozen(resp["outcome"])

    def arm(i: int) -> Fault:
        def apply() -> None:
            live.armed[i] = live.armed.get(i, 0) + 1

        return Fault(f"raise:{i}", apply, plan.raises, frozenset((i,)))

    def switch(i: int) -> Fault:
        def apply() -> None:
            live.rotation[i] = live.rotation.get(i, 0) + 1
            live.switched[i] = live.switched.get(i, 0) + 1

        return Fault(f"task:{i}", apply, plan.tasks, frozenset((i,)))

    def die() -> None:
        out = session.call("kill", tear=bool(plan.torn))
        dead = session.pid
        session.respawn()  # SIGKILL, then a new worker process for the same files
        session.call("resume", handover=out["handover"])
        live.pids = (dead, session.pid)
        live.dead = True
        live.trace.append(
            {
                "fault": "torn" if plan.torn else "restart",
                "killed": out.get("killed"),
                "torn": out.get("torn"),
            }
        )

    def build() -> World:
        session.call("open", seed=seed, config=config)
        live.trace = []
        live.judge_calls = 0
        live.armed = {}
        live.dead = False
        live.pids = None
        live.at = {}
        live.rotation = {}
        live.switched = {}
        agents = tuple(agent(i, inbox) for i, inbox in enumerate(workload.inboxes))
        choices: list[Fault] = []
        if plan.raises:
            choices += [arm(i) for i in range(len(agents))]
        if plan.tasks:
            choices += [switch(i) for i in range(len(agents))]
        if plan.dies:
            choices.append(Fault("torn" if plan.torn else "restart", die, 1, None))
        return World(SimStore(Isolation.READ_COMMITTED), agents, tuple(choices))

    name = f"{system.name}/{workload.name}"
    return Program(name, build, plan.crash, max_steps), live


KILLED = "KILLED"
"""The outcome of an agent whose process died while it was parked (a restart or torn
fault); after the restart its client retries the claims it was not acknowledged."""


def finish_run(
    system: RealSystem,
    session: Session,
    live: LiveTrace,
    run: Run,
    recovery: Picker,
    judge: Picker | None = None,
) -> RealRun:
    """Observe the library after `run` ended (call before anything re-opens the session),
    and run its recovery with the fresh `recovery` judge and, given the live `judge`, with
    that judge pinned (what tells N1 from RD)."""
    restart = _restart(system, session, live, judge) if live.dead else None
    seen = session.call("observe")
    trace = tuple(live.trace)
    restored = _recovered(system, session, live, seen["observation"], recovery)
    pinned = None
    if judge is not None:
        pinned = _recovered(system, session, live, seen["observation"], judge)
    return RealRun(
        schedule=run.schedule,
        trace=trace,
        outcomes=run.outcomes,
        observation=seen["observation"],
        timeline=tuple(seen["timeline"]),
        recovered=restored,
        footprints=run.footprints,
        recovered_pinned=pinned,
        judge_calls=live.judge_calls,
        restart=restart,
        worker_pids=live.pids,
    )


def _restart(
    system: RealSystem, session: Session, live: LiveTrace, judge: Picker | None
) -> dict[str, Any]:
    """After a process death (`die` killed the worker and started a new process that took
    over its run): the new process opens the library from its own files, then each killed
    client retries, serially, the claims it was not acknowledged (from the one it was
    working on), then the library is asked to answer a search for each memory it serves
    (`probe`) and to count its own index (`integrity`)."""
    assert live.workload is not None
    killed: list[Any] = next(
        (t.get("killed") or [] for t in live.trace if t.get("fault") in DEATHS), []
    )
    reopened = session.call("reopen")
    if reopened.get("failed"):  # the library does not start: no client can retry
        return {
            "reopened": reopened.get("view"),
            "failed": reopened["failed"],
            "retried": {},
            "probes": [],
            "integrity": None,
        }
    retried: dict[str, list[Any]] = {}
    for i in sorted(int(a) for a in killed):
        inbox = live.workload.inboxes[i]
        start = live.at.get(i) or 0
        todo = list(inbox[start:])
        if not todo:
            continue
        retried[str(i)] = [c.to_json() for c in todo]
        resp = session.call("start", agent=i, inbox=[c.to_json() for c in todo])
        while resp["state"] == "parked":
            point = GatePoint.from_json(resp["point"])
            reply = system.host.answer(point, judge) if judge is not None else None
            resp = session.call("step", agent=i, reply=reply, task=point.task)
    seen = session.call("observe")
    views = [seen["observation"], *(t.get("view") or {} for t in seen.get("timeline", ()))]
    queries = [  # every memory the library served, before or after the death
        dict(q)
        for q in dict.fromkeys(
            (("text", m["text"]), ("scope", str(m.get("user", "user"))))
            for view in views
            for m in view.get("memories", ())
            if isinstance(m, Mapping) and isinstance(m.get("text"), str)
        )
    ]
    probed = session.call("probe", queries=queries)
    return {
        "reopened": reopened.get("view"),
        "integrity_reopened": reopened.get("integrity"),
        "retried": retried,
        "probes": [  # empty when the adapter cannot search
            {"query": q, "answers": a} for q, a in zip(queries, probed["answers"], strict=False)
        ],
        "integrity": probed.get("integrity"),
    }


DEATHS = ("restart", "torn")


def _recovered(
    system: RealSystem,
    session: Session,
    live: LiveTrace,
    observation: Mapping[str, Any],
    judge: Picker,
) -> Any:
    """The worker's own recovery, else (for a library whose recovery is re-ingesting its
    stored inputs) the host's replay of them through the real code."""
    replay_inputs = getattr(system.host, "replay_inputs", None)
    if replay_inputs is not None and live.workload is not None:
        return _replay(system, session, live, observation, judge, replay_inputs)
    return session.call("recover", config={"p": judge.p, "seed": judge.seed}).get("recovered")


def _replay(
    system: RealSystem,
    session: Session,
    live: LiveTrace,
    observation: Mapping[str, Any],
    recovery: Picker,
    replay_inputs: Any,
) -> Any:
    """A library whose documented recovery is re-ingesting its stored inputs (Graphiti's
    episodes): run the real code serially over them, in the order the library lists them,
    with the fresh recovery judge. Call after observing: it re-opens the session."""
    assert live.workload is not None
    order = replay_inputs(observation, live.workload)
    if order is None:
        return None
    key = canonical_json([recovery.p, recovery.seed, [c.to_json() for c in order]])
    found = live.replays.get(key)
    if found is None:
        counting = CountingPicker(recovery)
        obs = run_serially(system, session, live.workload, order, counting, live.seed)
        found = {
            "replayed": obs,
            "order": [c.to_json() for c in order],
            "judge_calls": counting.asked,
        }
        live.replays[key] = found
    return found


@dataclass(slots=True)
class CountingPicker:
    """A judge that counts the questions put to it (a recovery that asks none cannot show
    N1: nothing is re-adjudicated)."""

    inner: Picker
    asked: int = 0

    @property
    def p(self) -> float:
        return self.inner.p

    @property
    def seed(self) -> int:
        return self.inner.seed

    def pick(self, question: str, candidates: Sequence[str]) -> str:
        self.asked += 1
        return self.inner.pick(question, candidates)


def real_runs(
    system: RealSystem,
    session: Session,
    workload: Workload,
    strategy: Strategy,
    judge: Picker,
    recovery: Picker,
    *,
    budget: int,
    seed: int = 0,
    crash_budget: int = 0,
    stats: Stats | None = None,
    faults: FaultPlan | None = None,
) -> Iterator[RealRun]:
    """The strategy's schedules of the real system, each observed (at most `budget`)."""
    if budget < 1:
        raise InvalidInput("budget", f"{budget} < 1", "explore at least one schedule")
    program, live = real_program(
        system, session, workload, judge, seed=seed, crash_budget=crash_budget, faults=faults
    )
    stats = stats if stats is not None else Stats()
    runs = strategy.runs(program, stats)
    try:
        count = 0
        while True:
            with unwrapped():
                run = next(runs, None)
            if run is None:
                return
            count += 1
            yield finish_run(system, session, live, run, recovery, judge)
            if count >= budget:
                return
    finally:
        close = getattr(runs, "close", None)
        if close is not None:
            close()
        for name, count in sorted(live.notes.items()):
            stats.note(name, count)


@contextmanager
def unwrapped() -> Iterator[None]:
    """The engine reports an agent's exception as a ProgramError; a real-layer error
    (network refused, worker failed) is re-raised as itself, with its own message."""
    try:
        yield
    except ProgramError as exc:
        if isinstance(exc.__cause__, RealError):
            raise exc.__cause__ from None
        raise


# ---------------------------------------------------------------------------- targeted runs


PlanItem = tuple[Choice, str | None, int | None]


def run_plan(program: Program, plan: Sequence[PlanItem]) -> Run:
    """A targeted schedule, described rather than spelled out: each (choice, point, claim)
    runs agent `choice` until it is parked at the gate point named `point` while working on
    its `claim`-th claim (None, None: until it finishes), or until it waits for a lock another
    agent holds; a "crash:<i>" choice crashes agent i where it is parked. Then every agent
    still running finishes, in index order, and any crash choice left is spent (too late to
    matter). Returns the run, to replay or check."""
    with unwrapped():
        return _run_plan(program, plan)


def _run_plan(program: Program, plan: Sequence[PlanItem]) -> Run:
    ex = Execution(program, track=True)
    for choice, point, claim in plan:
        pid = ex.pid(choice)
        if pid is None or pid not in ex.enabled():
            raise ScheduleError(f"plan: {choice!r} is not enabled after {ex.schedule()!r}")
        if pid >= ex.n:
            ex.step(pid)
            continue
        while True:
            ex.step(pid)
            state = ex.agents[pid]
            if state.done or (point is not None and _parked_at(state.pending, point, claim)):
                break
            if pid not in ex.enabled():
                break  # it waits for a lock another agent holds: it can go no further
    while en := ex.enabled():
        ex.step(en[0])
    return record(ex, "targeted")


def _parked_at(step: Any, point: str, claim: int | None) -> bool:
    gate = getattr(step, "detail", None) or getattr(step, "value", None)  # Local, lock Write
    return (
        isinstance(gate, GatePoint)
        and gate.name == point
        and (claim is None or gate.claim == claim)
    )


# ---------------------------------------------------------------------------- serial runs


def serial_orders(
    sequences: Sequence[Sequence[SimClaim]], limit: int
) -> list[tuple[SimClaim, ...]] | None:
    """Every interleaving of the agents' sequences that keeps each agent's own order (the
    serial executions N2 compares with), or None when there are more than `limit`."""
    total = _multinomial([len(s) for s in sequences])
    if total > limit:
        return None
    out: list[tuple[SimClaim, ...]] = []

    def merge(prefix: list[SimClaim], rest: list[Sequence[SimClaim]]) -> None:
        live = [i for i, s in enumerate(rest) if s]
        if not live:
            out.append(tuple(prefix))
            return
        for i in live:
            nxt = [s[1:] if j == i else s for j, s in enumerate(rest)]
            merge([*prefix, rest[i][0]], nxt)

    merge([], [list(s) for s in sequences])
    return list(dict.fromkeys(out))


def _multinomial(sizes: Sequence[int]) -> int:
    out, n = 1, 0
    for k in sizes:
        for i in range(1, k + 1):
            n += 1
            out = out * n // i
    return out


def run_serially(
    system: RealSystem,
    session: Session,
    workload: Workload,
    order: Sequence[SimClaim],
    judge: Picker,
    seed: int,
) -> Mapping[str, Any]:
    """Run `order` through the real code in one agent, releasing every gate point at once;
    returns the final observation."""
    session.call("open", seed=seed, config=system.host.config(workload))
    resp = session.call("start", agent=0, inbox=[c.to_json() for c in order])
    while resp["state"] == "parked":
        point = GatePoint.from_json(resp["point"])
        reply = system.host.answer(point, judge)
        resp = session.call("step", agent=0, reply=reply, task=point.task)
    observation: Mapping[str, Any] = session.call("observe")["observation"]
    return observation


@dataclass(slots=True)
class SerialCache:
    """Belief hashes of serial real runs, memoised by the order of claims."""

    system: RealSystem
    session: Session
    workload: Workload
    judge: Picker
    seed: int
    hashes: dict[tuple[str, ...], str] = field(default_factory=dict)
    runs: int = 0
    seconds: float = 0.0

    def belief_hash(self, order: Sequence[SimClaim]) -> str:
        key = tuple(canonical_json(c.to_json()) for c in order)
        found = self.hashes.get(key)
        if found is None:
            t0 = time.perf_counter()
            obs = run_serially(
                self.system, self.session, self.workload, order, self.judge, self.seed
            )
            found = belief_hash(self.system.host.beliefs(obs, self.workload.keys))
            self.hashes[key] = found
            self.runs += 1
            self.seconds += time.perf_counter() - t0
        return found


def serial_beliefs(cache: SerialCache, orders: Sequence[Sequence[SimClaim]]) -> set[str]:
    return {cache.belief_hash(order) for order in orders}
