"""Planted defects: deliberately broken variants of the store, the models and the write path.

Each mutant names the checker that must catch it and a budget (explored schedules, or one
scripted scenario for the bitemporal store). `detect(mutant)` runs the broken configuration
and the correct one on the same budget: the checker must fire on the broken one and stay
silent on the correct one (no false positives). `make_table.py` writes the table of
docs/anomalies.md from these results.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from toki import FactKey, Memory
from toki.check.anomalies import check_run
from toki.check.asof import n1_memory, n3_as_of
from toki.errors import StoreError
from toki.isolation import Isolation
from toki.relay import OutboxRow, Relay, RelayResult
from toki.sim import DPOR, iter_runs
from toki.sim.program import Agent, Begin, Commit, Delete, Read, Write
from toki.sim.store import SimStore
from toki.sim.workload import SimClaim, Workload, scenario
from toki.systems.base import AgentContext, SimJudge, SystemModel, build_program
from toki.systems.toki_model import TokiModel

JUDGE, RECOVERY = SimJudge(0.5, 1), SimJudge(0.5, 99)
BUDGET = 200


@dataclass(frozen=True, slots=True)
class Result:
    caught: bool
    needed: int | None  # schedules (or scenario steps) until the first detection
    correct_anomalies: int  # the checker's findings on the correct configuration


@dataclass(frozen=True, slots=True)
class Mutant:
    name: str
    defect: str
    checker: str
    run: Callable[[], Result]


# -- simulated models: explore, check, compare with the correct configuration -------------


def _explore(
    model: SystemModel,
    workload: Workload,
    level: Isolation,
    anomaly: str,
    store_factory: Callable[..., SimStore] = SimStore,
) -> tuple[int | None, int]:
    program = build_program(model, workload, level=level, judge=JUDGE, store_factory=store_factory)
    first, hits = None, 0
    for i, run in enumerate(iter_runs(program, DPOR(), budget=BUDGET), start=1):
        if check_run(model, workload, run, JUDGE, RECOVERY, (anomaly,))[anomaly].found:
            hits += 1
            first = first or i
    return first, hits


def _model_mutant(
    broken: SystemModel,
    correct: SystemModel,
    workload: Workload,
    level: Isolation,
    anomaly: str,
    correct_level: Isolation | None = None,
    store_factory: Callable[..., SimStore] = SimStore,
) -> Result:
    first, _ = _explore(broken, workload, level, anomaly, store_factory)
    _, clean_hits = _explore(correct, workload, correct_level or level, anomaly)
    return Result(first is not None, first, clean_hits)


class NoAuditLWW(TokiModel):
    """Overwrites the current row and keeps neither the claim's version nor an audit row."""

    def _one(self, c: SimClaim, ctx: AgentContext) -> Agent:
        yield Begin()
        cur = yield Read(("cur", c.key))
        if isinstance(cur, Exception):
            return "retry"
        if cur is None or (cur["recorded"], cur["cid"]) < (c.recorded, c.cid):
            yield Write(
                ("cur", c.key),
                {"value": c.value, "cid": c.cid, "recorded": c.recorded, "start": c.start},
            )
        result = yield Commit()
        return "retry" if isinstance(result, Exception) else "ok"


class LosersDeleted(TokiModel):
    """Writes the audit row, then deletes what lost (its version and audit rows)."""

    def _audit(self, key: str, loser: Any, winner: str | None) -> Agent:
        yield Delete(("ver", loser["cid"]))
        return None


class JudgeNotLogged(TokiModel):
    """The verdict is never written, yet recovery trusts a log that is not there."""

    def _log_decision(self, key: str, new_cur: Any, decision: Any) -> Agent:
        yield Write(("dec", key, new_cur["n"]), {"cur": dict(new_cur), "judge": None, "bonus": {}})
        return None


class ReplayCallsJudge(TokiModel):
    """The verdict is logged, but recovery ignores it and asks the judge again."""

    def recover(self, state: Any, keys: Any, judge: SimJudge) -> Any:
        unlogged = TokiModel(self.operator, keyed_log=False)
        return unlogged.recover(state, keys, judge)


class NotIdempotent(TokiModel):
    """A redelivered claim is processed again (no version-row check): evidence counts twice."""

    def _one(self, c: SimClaim, ctx: AgentContext) -> Agent:
        ctx.switches["deliveries"] = ctx.switches.get("deliveries", 0) + 1
        fresh = SimClaim(
            c.key,
            c.value,
            c.start,
            c.recorded,
            c.weight,
            c.source,
            f"{c.cid}#{ctx.switches['deliveries']}",
        )
        return (yield from super()._one(fresh, ctx))


class BlindAwait(TokiModel):
    """AWAIT inserts into the current row with a blind write instead of a conditional one."""

    def _one(self, c: SimClaim, ctx: AgentContext) -> Agent:
        yield Begin()
        cur = yield Read(("cur", c.key))
        if isinstance(cur, Exception):
            return "retry"
        yield Write(("ver", c.cid), c.to_json())
        if cur["value"] in (None, c.value):
            new = {
                "value": c.value,
                "cid": c.cid,
                "recorded": c.recorded,
                "start": c.start,
                "n": cur.get("n", 0) + 1,
            }
            yield Write(("cur", c.key), new)
            yield Write(("dec", c.key, new["n"]), {"cur": new, "judge": None, "bonus": {}})
        else:
            yield Write(("prop", c.cid), {"key": c.key, "value": c.value, "status": "pending"})
        result = yield Commit()
        return "retry" if isinstance(result, Exception) else "ok"


class NoFirstUpdaterWins(SimStore):
    """Snapshot isolation that lets a write overwrite a concurrently committed version."""

    def _fail(self, t: Any, reason: str) -> None:  # type: ignore[override]
        if "concurrent update" in reason:
            return
        super()._fail(t, reason)  # type: ignore[misc]


def _race() -> Workload:
    return scenario("evidence-race")


# -- the bitemporal store: scripted scenarios with the as-of and replay checkers ----------

K = FactKey("crm", "people:ivan", "city")


@contextmanager
def _patched(cls: Any, name: str, fn: Any) -> Iterator[None]:
    old = getattr(cls, name)
    setattr(cls, name, fn)
    try:
        yield
    finally:
        setattr(cls, name, old)


class _FlakyStore:
    """Fails the delivery of one outbox row once (a relay worker failure)."""

    def __init__(self, relay: Relay, fail_on: int | None) -> None:
        self.relay, self.fail_on = relay, fail_on

    def __call__(self, row: OutboxRow) -> None:
        if self.relay.position == self.fail_on:
            self.fail_on = None
            raise StoreError("relay worker lost its connection")
        self.relay._apply(row)


class RelayTimeRelay(Relay):
    """The defect: records the relay's clock as knowledge time."""

    relay_clock = "2026-11-05T18:00:00Z"

    def _apply(self, row: OutboxRow) -> None:
        super()._apply(
            OutboxRow(row.key, row.value, row.valid_from, self.relay_clock, row.source_id)
        )


class CarryOnRelay(Relay):
    """The defect: skips a failed row and carries on."""

    def run(self) -> RelayResult:
        moved = 0
        while self.position < len(self.outbox):
            try:
                self._deliver(self.outbox[self.position])
                moved += 1
            except StoreError:
                pass
            self.position += 1
        return RelayResult(moved, self.position, None)


OUTBOX = [
    OutboxRow(K, "Berlin", "2026-10-15T00:00:00Z", "2026-11-01T10:00:00Z", "crm-1"),
    OutboxRow(K, "Prague", "2026-11-02T00:00:00Z", "2026-11-02T10:00:00Z", "crm-2"),
    OutboxRow(K, "Oslo", "2026-11-03T00:00:00Z", "2026-11-03T10:00:00Z", "crm-3"),
]
SERVED = [(r.written_at, K, r.valid_from, r.value) for r in OUTBOX]


def _relayed(relay_cls: type[Relay], fail_on: int | None) -> Memory:
    mem = Memory()
    relay = relay_cls(mem, OUTBOX)
    relay._deliver = _FlakyStore(relay, fail_on)
    relay.run()
    relay.run()  # the next pass resumes where the first stopped
    return mem


def _relay_time_mutant() -> Result:
    caught = n3_as_of(_relayed(RelayTimeRelay, None), SERVED).found
    clean = n3_as_of(_relayed(Relay, None), SERVED).found
    return Result(caught, 1 if caught else None, int(clean))


def _relay_continue_mutant() -> Result:
    caught = n3_as_of(_relayed(CarryOnRelay, 1), SERVED).found
    clean = n3_as_of(_relayed(Relay, 1), SERVED).found
    return Result(caught, 1 if caught else None, int(clean))


def _segment_history(mem: Memory, revoke_by_id: bool) -> list[tuple[str, FactKey, str, Any]]:
    berlin = mem.assert_fact(
        K,
        "Berlin",
        valid_from="2026-09-01T00:00:00Z",
        recorded_at="2026-09-02T00:00:00Z",
        source_id="m1",
    )
    mem.insert_segment(
        K,
        "Prague",
        valid_from="2026-10-01T00:00:00Z",
        valid_to="2026-10-15T00:00:00Z",
        recorded_at="2026-11-01T00:00:00Z",
        source_id="m2",
    )
    if revoke_by_id:  # the defect: only the remembered id, not the piece that holds it now
        import toki.lifecycle as lifecycle_module

        with _patched(lifecycle_module, "_derived_pieces", lambda state, root: [root.id]):
            mem.revoke(berlin, recorded_at="2026-11-21T00:00:00Z", reason="never lived there")
    else:
        mem.revoke(berlin, recorded_at="2026-11-21T00:00:00Z", reason="never lived there")
    # after the correction the source believes nothing for November
    return [("2026-11-22T00:00:00Z", K, "2026-11-20T00:00:00Z", None)]


def _retraction_mutant() -> Result:
    broken, good = Memory(), Memory()
    caught = n3_as_of(broken, _segment_history(broken, True)).found
    clean = n3_as_of(good, _segment_history(good, False)).found
    return Result(caught, 1 if caught else None, int(clean))


def _projection_mutant() -> Result:
    from toki.log import EventKind
    from toki.projection import rows_for

    def stale_rows(snapshot: Any, keys: set[Hashable]) -> Any:
        return {}  # the defect: revokes (and everything else) leave the projection as it was

    def script(mem: Memory, skip_after_revoke: bool) -> None:
        v = mem.assert_fact(K, "Berlin", recorded_at="2026-09-02T00:00:00Z", source_id="m1")
        if skip_after_revoke:
            import toki.partition as partition_module

            with _patched(partition_module, "rows_for", stale_rows):
                mem.revoke(v, recorded_at="2026-09-03T00:00:00Z", reason="wrong")
        else:
            mem.revoke(v, recorded_at="2026-09-03T00:00:00Z", reason="wrong")
        assert any(e.kind is EventKind.REVOKE for e in mem.events())

    broken, good = Memory(), Memory()
    script(broken, True)
    script(good, False)
    del rows_for
    caught = n1_memory(broken).found
    return Result(caught, 1 if caught else None, int(n1_memory(good).found))


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "overwrite-without-audit",
        "LWW overwrites the current row; no version or audit row keeps the loser",
        "N3",
        lambda: _model_mutant(
            NoAuditLWW("LWW"), TokiModel("LWW"), scenario("manager"), Isolation.READ_COMMITTED, "N3"
        ),
    ),
    Mutant(
        "losers-deleted",
        "the loser's rows are deleted after the decision",
        "N3",
        lambda: _model_mutant(
            LosersDeleted("LWW"),
            TokiModel("LWW"),
            scenario("manager"),
            Isolation.READ_COMMITTED,
            "N3",
        ),
    ),
    Mutant(
        "judge-verdict-not-logged",
        "EWM's judge verdict is not written to the keyed log",
        "RD",
        lambda: _model_mutant(
            JudgeNotLogged("EWM"), TokiModel("EWM"), _race(), Isolation.SNAPSHOT, "RD"
        ),
    ),
    Mutant(
        "replay-calls-the-judge",
        "recovery asks the judge again instead of reading the log",
        "N1",
        lambda: _model_mutant(
            ReplayCallsJudge("EWM"), TokiModel("EWM"), _race(), Isolation.SNAPSHOT, "N1"
        ),
    ),
    Mutant(
        "ewm-at-read-committed",
        "EWM run below its precondition (lost evidence update)",
        "N2",
        lambda: _model_mutant(
            TokiModel("EWM"),
            TokiModel("EWM"),
            _race(),
            Isolation.READ_COMMITTED,
            "N2",
            correct_level=Isolation.SNAPSHOT,
        ),
    ),
    Mutant(
        "si-without-first-committer-wins",
        "snapshot isolation that lets a concurrent update through",
        "N2",
        lambda: _model_mutant(
            TokiModel("EWM"),
            TokiModel("EWM"),
            _race(),
            Isolation.SNAPSHOT,
            "N2",
            store_factory=NoFirstUpdaterWins,
        ),
    ),
    Mutant(
        "rule-below-serializable",
        "RULE run at read committed (write skew on the key's partition)",
        "N2",
        lambda: _model_mutant(
            TokiModel("RULE"),
            TokiModel("RULE"),
            _race(),
            Isolation.READ_COMMITTED,
            "N2",
            correct_level=Isolation.SERIALIZABLE,
        ),
    ),
    Mutant(
        "duplicate-delivery-not-idempotent",
        "a redelivered claim is processed again",
        "N2",
        lambda: _model_mutant(
            NotIdempotent("EWM"),
            TokiModel("EWM"),
            scenario("duplicate-delivery"),
            Isolation.SNAPSHOT,
            "N2",
        ),
    ),
    Mutant(
        "await-blind-insert",
        "AWAIT inserts with a blind write instead of a conditional statement",
        "RD",
        lambda: _model_mutant(
            BlindAwait("AWAIT"), TokiModel("AWAIT"), _race(), Isolation.READ_COMMITTED, "RD"
        ),
    ),
    Mutant(
        "relay-time-as-knowledge-time",
        "the relay records its own time, not the source write time",
        "N3 (as-of)",
        _relay_time_mutant,
    ),
    Mutant(
        "relay-continues-after-failure",
        "the relay skips a failed outbox row and carries on",
        "N3 (as-of)",
        _relay_continue_mutant,
    ),
    Mutant(
        "retraction-by-version-id",
        "a retraction looks up the remembered version id; "
        "after a split the value lives in a newer piece",
        "N3 (as-of)",
        _retraction_mutant,
    ),
    Mutant(
        "projection-not-rebuilt-after-revoke",
        "a revoke leaves the projection row as it was",
        "N1 (reconcile)",
        _projection_mutant,
    ),
)
