"""TOKI's own library under the simulator: the agents run `Memory.write` itself.

Each agent opens a `Memory` over a `SimEventStore` (toki/store/sim.py) at the program's
isolation level and writes its inbox with `yield from memory.write_steps(claim, operator)`:
the partition read, the judge, the conditional head update, the event and projection rows
and the commit are scheduler steps, and the decision between them is the library's code
(toki/write.py's planner over the partition, the operator). Nothing here re-implements the
write path; this module only translates workloads into `Claim`s and finished runs into what
the checkers ask:

- beliefs: `Db.current` of each key over the replay of the run's committed events (a value,
  or the contradicting values a reader is served), plus the claim values on record;
- recovery: reopen the committed state (the chain check and the projection reconcile a
  `Memory` runs on open) and re-adjudicate every logged claim with the given judge, the
  keyed judge log answering the questions it holds (`toki.scratch.rejudge`, what
  `Memory.readjudicate` runs);
- recoverable: every version value `Db.history` still has.

Rows `toki-lib-<op>` run each operator at its declared level by default; `--isolation`
(the program's level) runs it elsewhere, and a level below the operator's precondition is
then an explicit experiment (`allow_weaker_isolation=True`, recorded in each decision).
`toki-lib-<op>-nohead` is the ablation without the head rows' conditional update.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, ClassVar

from toki.algebra import OPERATORS
from toki.algebra.rule import Policy
from toki.db import Db
from toki.errors import InvalidInput, TokiError, WriteConflict
from toki.isolation import Isolation, dominates
from toki.judge import JudgeQuestion, Verdict
from toki.memory import POLICY_SUBJECT, Memory
from toki.model import Claim, FactKey
from toki.scratch import rejudge
from toki.shadow import serving_db
from toki.sim.program import Agent
from toki.sim.workload import SimClaim, Workload
from toki.store.sim import SimEventStore, initial_rows
from toki.systems._kit import GAVE_UP, belief_entry
from toki.systems.base import AgentContext, Beliefs, SimJudge, SystemModel

__all__ = ["BASE", "SimJudgeAsJudge", "TokiLibrary", "claim_of", "fact_key"]

TENANT = "toki-sim"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
"""Day 0 of the workloads: a claim's start and recording tick are days after it."""
READ_AT = BASE + timedelta(days=365 * 100)
"""The facade's clock: after every workload time, so `current()` is asked when every claim is
known and valid (the write path never reads the clock: each claim carries its times)."""
POLICY = Policy("newest_valid_time")
"""RULE's policy in force for every key from before the first claim (the TOKI model's)."""


def _clock() -> datetime:
    return READ_AT


def fact_key(key: str) -> FactKey:
    """A workload key "subject:predicate" as a FactKey."""
    subject, _, name = key.partition(":")
    return FactKey(TENANT, subject or "user", name or "value")


def claim_of(c: SimClaim) -> Claim:
    return Claim(
        fact_key(c.key),
        c.value,
        c.source,
        valid_from=BASE + timedelta(days=c.start),
        recorded_at=BASE + timedelta(days=c.recorded),
        weight=c.weight,
    )


class SimJudgeAsJudge:
    """toki's Judge protocol answered by a `SimJudge`, on the TOKI model's question text
    ("<key>: <incumbents> vs <challenger>"). θ does not depend on the SimJudge's seed: a
    fresh judge is the same configuration asked again (an LLM at temperature > 0), so the
    keyed log answers it wherever it holds the question."""

    name = "sim"
    model = "toki-sim-judge"
    prompt = "which of these facts holds?"
    temperature = 1.0
    seed: int | None = None

    def __init__(self, sim: SimJudge) -> None:
        self.sim = sim

    def judge(self, question: JudgeQuestion) -> Verdict:
        values = [str(c.value) for c in question.candidates]
        if question.task == "contradicts":
            return Verdict(contradicts=len(set(values)) > 1)
        key = f"{question.key.subject}:{question.key.fact_key}"
        pick = self.sim.pick(f"{key}: {' / '.join(values[:-1])} vs {values[-1]}", values)
        winner = [c for c in question.candidates if str(c.value) == pick][-1]
        if question.task == "score":
            return Verdict(
                scores=tuple((c.id, 1.0 if c is winner else 0.0) for c in question.candidates)
            )
        return Verdict(winner=winner.id)


@lru_cache(maxsize=256)
def _initial(keys: tuple[str, ...], rule: bool) -> tuple[tuple[Hashable, Any], ...]:
    facts = [fact_key(k) for k in keys]
    if not rule:
        return tuple(initial_rows(facts).items())
    setup = Memory(clock=_clock)
    for name in sorted({f.fact_key for f in facts}):
        setup.set_policy(TENANT, name, POLICY, recorded_at=BASE - timedelta(days=1))
    policy_keys = [FactKey(TENANT, POLICY_SUBJECT, f.fact_key) for f in facts]
    return tuple(initial_rows([*facts, *policy_keys], setup.events()).items())


class TokiLibrary(SystemModel):
    """The library at one operator (`keyed_log=False`: the ablation without the judge log;
    `head_check=False`: without the head rows' conditional update)."""

    title: ClassVar[str] = "TOKI (library)"
    release: ClassVar[str] = "toki (this repository): Memory.write through toki.store.sim"
    sources: ClassVar[tuple[str, ...]] = (
        "toki/write.py: plan_write, run by Memory.write_steps (the write path itself)",
        "toki/store/sim.py: the transaction shell of toki/store/postgres.py as SimStore steps",
    )

    def __init__(
        self,
        operator: str = "EWM",
        *,
        keyed_log: bool = True,
        judge: bool | None = None,
        head_check: bool = True,
        prefix: str = "toki-lib",
    ) -> None:
        """prefix: the row names' stem (`toki-lib-ewm`; the matrix's `toki` rows: `toki`)."""
        if operator not in OPERATORS:
            raise InvalidInput(
                "operator", f"unknown operator {operator!r}", f"use one of {sorted(OPERATORS)}"
            )
        self.operator = operator
        self.keyed_log = keyed_log
        self.uses_judge = operator == "EWM" if judge is None else judge
        self.head_check = head_check
        self.isolation_level: Isolation = OPERATORS[operator].requires
        suffix = ("" if keyed_log else "-nolog") + ("" if head_check else "-nohead")
        self.model_name = f"{prefix}-{operator.lower()}{suffix}"

    @property
    def name(self) -> str:  # type: ignore[override]
        return self.model_name

    @property
    def isolation(self) -> Isolation:  # type: ignore[override]
        return self.isolation_level

    @property
    def encodes(self) -> Mapping[str, str]:  # type: ignore[override]
        return {
            "who decides": f"toki's {self.operator} operator (the library code)"
            + (" with a judge scoring the contradiction" if self.uses_judge else ""),
            "write path": "Memory.write_steps: partition read, plan, head update, events, "
            "projection, commit, one SimStore statement per step",
            "concurrency control": "the head row's conditional update per written key"
            if self.head_check
            else "none beyond the isolation level (ablation: no head update)",
            "decision logged with inputs": "yes (keyed judge log)" if self.keyed_log else "no",
        }

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        return dict(_initial(workload.keys, self.operator == "RULE"))

    # -- the agents ---------------------------------------------------------------------

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return self._agent(inbox, ctx)

    def _agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        level = ctx.level or self.isolation_level
        memory = Memory(
            SimEventStore(level, head_check=self.head_check), clock=_clock, isolation=level
        )
        op = OPERATORS[self.operator]
        judge = SimJudgeAsJudge(ctx.judge) if self.uses_judge else None
        weaker = not dominates(level, op.requires)  # an experiment, recorded in each decision
        done: list[str] = []
        for claim in inbox:
            try:
                decision = yield from memory.write_steps(
                    claim_of(claim),
                    op,
                    judge=judge,
                    log_judge=self.keyed_log,
                    allow_weaker_isolation=weaker,
                )
            except WriteConflict:
                done.append(GAVE_UP)
                continue
            done.append(decision.action.value)
        return tuple(done)

    # -- what the checkers ask ------------------------------------------------------------

    def _db(self, state: Mapping[Hashable, Any]) -> Db:
        """The committed events of a run, replayed: the library's own fold, as a value."""
        store = SimEventStore.of_state(state, self.isolation_level)
        return serving_db(store.load(0), READ_AT)

    def beliefs(self, state: Mapping[Hashable, Any], keys: Iterable[str]) -> Beliefs:
        keys = list(keys)
        try:
            return beliefs_of(self._db(state), keys)
        except (KeyError, TokiError) as exc:  # a log the library cannot replay (below)
            return _unreadable(keys, exc)

    def recover(
        self, state: Mapping[Hashable, Any], keys: Iterable[str], judge: SimJudge
    ) -> Beliefs:
        keys = list(keys)
        try:  # the library's reopen (chain check, replay, projection reconcile), then
            # re-adjudication of every logged claim
            reopened = Memory(SimEventStore.of_state(state, self.isolation_level), clock=_clock)
            fresh = rejudge(
                reopened.events(),
                {},
                OPERATORS[self.operator],
                judge=SimJudgeAsJudge(judge) if self.uses_judge else None,
                use_keyed_log=self.keyed_log,
                level=reopened.isolation,
            )
        except (KeyError, TokiError) as exc:
            return _unreadable(keys, exc, "recovery_failed")
        return beliefs_of(fresh.db(READ_AT), keys)

    def recoverable(self, state: Mapping[Hashable, Any], key: str) -> set[str]:
        try:
            db = self._db(state)
        except (KeyError, TokiError):
            return set()  # nothing can be read back from a log that does not replay
        return {str(h.version.value) for h in db.history(fact_key(key))}


def _unreadable(keys: Iterable[str], exc: BaseException, field: str = "unreadable") -> Beliefs:
    """Beliefs of a state whose log the library cannot replay: the ablation without head
    rows can leave an event naming a version whose batch a concurrent writer overwrote
    (replay then raises KeyError, not a toki error: noted in docs/exploration.md)."""
    why = f"{type(exc).__name__}: {exc}"
    return {k: {"value": None, "live": [], field: why} for k in keys}


def beliefs_of(state: Db | Memory, keys: Iterable[str]) -> Beliefs:
    """Per workload key: what a reader is served now (`belief_entry`: the value, or the
    contradicting values) and the claim values on record (a lost claim shows)."""
    db = state.db() if isinstance(state, Memory) else state
    out: Beliefs = {}
    for k in keys:
        fk = fact_key(k)
        res = db.current(fk)
        if res.kind == "value":
            served = [str(res.value)]
        else:
            served = [str(db.version(v).value) for v in res.version_ids]
        claims = sorted(
            str(h.version.value) for h in db.history(fk) if h.version.supersedes is None
        )
        out[k] = belief_entry(served, kind=res.kind, claims=claims)
    return out
