"""The product's grid: the library's own `Memory.write`, in writer processes, on PostgreSQL.

`toki pg-grid` checks TOKI's write path as a model (`TokiModel`) on the server; this grid
checks the product. Each cell is (operator, level, writers): `rounds` rounds, each on a fresh
schema, where `writers` separate processes (each with its own `Memory` over its own
`PostgresStore` connection) wait on one barrier and then write their inboxes of the seeded
synthetic workload the model grid uses (`synthetic(agents=writers, claims_per_agent,
keys=1, seed=seed + round)`: every claim contradicts the previous one on one hot key), at
`level` (below the operator's declared level with `allow_weaker_isolation=True`).

The checkers then read the product's recorded history back: the event log (versions,
decisions, the keyed judge log), the stored projection, and what each writer's live Memory
believed after each of its writes.

- N1 (replay inconsistency): the live state of a writer after a write (its state hash at its
  watermark) differs from the replay of the final log up to that watermark, or a writer's
  final state, a replay of the whole log and the stored projection disagree
  (`toki.check.asof.n1_memory`; opening a drifted projection raises, and counts).
- N2 (belief-drift skew): a commit a writer saw is missing from the log, or the final
  beliefs (the answer at each claim's valid start and far after, plus EWM's evidence totals)
  are those of no serial execution of the claims the log holds that keeps each writer's
  order, each run through a fresh in-memory Memory with the same operator, judge and policy.
  The log's commit order is tried first (it keeps every writer's order, so it is one of
  them); otherwise every order is tried up to `toki.check.anomalies.ALL_ORDERS`
  (`serial_orders`), beyond which the round is undecided.
- N3 (audit erasure): a value some writer believed after a commit can no longer be produced
  by the final store (its history and audit rows), as `n3_erasure` asks of a model.

EWM runs with a deterministic judge (`PreferNewestJudge`), so its verdicts go to the keyed
judge log and a serial re-run gets the same answers; RULE runs under a `newest_valid_time`
policy set before the writers start (as the model's initial policy row).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from multiprocessing.context import SpawnProcess
from pathlib import Path
from queue import Empty
from typing import Any, cast

from toki.algebra import OPERATORS
from toki.algebra.base import Operator
from toki.algebra.provenance import Decision
from toki.algebra.rule import Policy
from toki.canonical import canonical_json, digest
from toki.check.anomalies import ALL_ORDERS, serial_orders
from toki.check.asof import n1_memory
from toki.errors import IntegrityError, InvalidInput, StoreError, TokiError
from toki.isolation import Isolation, dominates
from toki.judge import Judge, PreferNewestJudge
from toki.log import Event, EventKind
from toki.memory import Memory
from toki.model import Claim, FactKey
from toki.sim.workload import SimClaim, synthetic
from toki.store.postgres import PostgresStore

__all__ = [
    "LEVELS",
    "OPERATORS_ORDER",
    "Round",
    "WriterPool",
    "beliefs",
    "check_round",
    "doc_section",
    "n2_serial",
    "read_results",
    "record",
    "run_product",
    "run_round",
    "serial_beliefs",
    "to_claim",
    "write_doc",
    "write_results",
]

OPERATORS_ORDER = ("LWW", "EWM", "AWAIT", "RULE")
LEVELS: Mapping[str, Isolation] = {
    "RU": Isolation.READ_UNCOMMITTED,  # PostgreSQL runs READ UNCOMMITTED as READ COMMITTED
    "RC": Isolation.READ_COMMITTED,
    "RR": Isolation.SNAPSHOT,  # PostgreSQL's REPEATABLE READ is snapshot isolation
    "SER": Isolation.SERIALIZABLE,
}
TENANT = "grid"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = Policy("newest_valid_time")
BARRIER_TIMEOUT = 60.0
ROUND_TIMEOUT = 300.0
BEGIN, END = "<!-- pg-product:begin -->", "<!-- pg-product:end -->"


# ------------------------------------------------------------------------ claims and beliefs


def to_claim(c: SimClaim) -> Claim:
    """The workload's claim as the library takes it: key "user0:city" is subject user0,
    fact_key city; valid from day `start`, recorded at second `recorded` after BASE."""
    subject, _, fact = c.key.partition(":")
    return Claim(
        FactKey(TENANT, subject, fact or "value"),
        c.value,
        c.source,
        valid_from=BASE + timedelta(days=c.start),
        recorded_at=BASE + timedelta(seconds=c.recorded),
        weight=c.weight,
    )


def _judge(op: str) -> Judge | None:
    """EWM asks a deterministic judge (its verdicts go to the keyed judge log)."""
    # a frozen dataclass: its read-only attributes satisfy the protocol at run time
    return cast("Judge", PreferNewestJudge()) if op == "EWM" else None


def _prepare(mem: Memory, op: str, keys: Sequence[FactKey]) -> None:
    """What the model has in its initial rows: RULE's policy, in force before any claim."""
    if op == "RULE":
        for fact in sorted({k.fact_key for k in keys}):
            mem.set_policy(TENANT, fact, POLICY, recorded_at=BASE - timedelta(days=1))


def _probes(claims: Sequence[SimClaim]) -> list[datetime]:
    days = sorted({c.start for c in claims})
    return [BASE + timedelta(days=d) for d in days] + [BASE + timedelta(days=10_000)]


def beliefs(
    mem: Memory, keys: Sequence[FactKey], probes: Sequence[datetime], op: str
) -> dict[str, Any]:
    """Per key: the answer (kind, value) at each probe valid time as known now, and for EWM
    the evidence total per value (what the model's beliefs hold)."""
    out: dict[str, Any] = {}
    for key in keys:
        answers = []
        for at in probes:
            r = mem.resolve_at(key, at)
            answers.append([r.kind, r.value])
        entry: dict[str, Any] = {"answers": answers}
        if op == "EWM":
            totals: dict[str, float] = {}
            for h in mem.history(key):
                if h.revoked_at is None:
                    v = h.version
                    totals[v.value_json] = round(totals.get(v.value_json, 0.0) + v.weight, 9)
            entry["evidence"] = dict(sorted(totals.items()))
        out[str(key)] = entry
    return out


def _keys(claims: Sequence[SimClaim]) -> list[FactKey]:
    return sorted({to_claim(c).key for c in claims}, key=str)


def serial_beliefs(op: str, order: Sequence[SimClaim], claims: Sequence[SimClaim]) -> str:
    """The belief hash of `order` run serially through a fresh in-memory Memory."""
    mem = Memory()
    keys = _keys(claims)
    _prepare(mem, op, keys)
    for c in order:
        mem.write(to_claim(c), OPERATORS[op], judge=_judge(op))
    return digest(canonical_json(beliefs(mem, keys, _probes(claims), op)))


# ------------------------------------------------------------------------ the writer process


def record(mem: Memory, c: SimClaim, d: Decision, claims: Sequence[SimClaim]) -> dict[str, Any]:
    """What a writer keeps of one committed write: the claim, its version, its watermark and
    live state hash (N1), and what its live Memory believed right after (N3)."""
    op = d.provenance.operator
    return {
        "cid": c.cid,
        "committed": True,
        "vid": d.claim_id,
        "action": d.action.value,
        "isolation": d.provenance.isolation.value,
        "watermark": mem.watermark,
        "state_hash": mem.state_hash(),
        "believed": beliefs(mem, _keys(claims), _probes(claims), op),
    }


def _write_inbox(index: int, barrier: Any, task: Mapping[str, Any]) -> dict[str, Any]:
    op: Operator = OPERATORS[task["operator"]]
    level = Isolation(task["level"])
    claims = [SimClaim.from_json(c) for c in task["inbox"]]
    every = [SimClaim.from_json(c) for c in task["claims"]]
    mem = Memory(PostgresStore(task["url"], schema=task["schema"]), isolation=level)
    writes: list[dict[str, Any]] = []
    try:
        barrier.wait(BARRIER_TIMEOUT)
        for c in claims:
            try:
                d = mem.write(
                    to_claim(c),
                    op,
                    judge=_judge(op.name),
                    allow_weaker_isolation=bool(task["allow_weaker"]),
                )
            except TokiError as exc:  # WriteConflict after its retries, or a store error
                writes.append({"cid": c.cid, "committed": False, "error": repr(exc)})
                continue
            writes.append(record(mem, c, d, every))
        stats = mem.write_stats
        barrier.wait(BARRIER_TIMEOUT)  # every writer is done: now the log is complete
        mem.refresh()
        return {
            "writer": index,
            "writes": writes,
            "retries": stats.retries,
            "final_watermark": mem.watermark,
            "final_hash": mem.state_hash(),
        }
    finally:
        mem.close()


Job = Callable[[int, Any, Mapping[str, Any]], dict[str, Any]]
"""What a writer process runs per round: (writer index, the shared barrier, task) -> result.
A module-level function (spawned processes import it by name)."""


def _worker(job: Job, index: int, barrier: Any, tasks: Any, results: Any) -> None:
    """A writer process: one task per round until None (or until its parent is gone)."""
    parent = mp.parent_process()
    while True:
        try:
            task = tasks.get(timeout=5.0)
        except Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if task is None:
            return
        try:
            results.put({"writer": index, **job(index, barrier, task)})
        except BaseException as exc:  # reported to the parent, which fails the round
            barrier.abort()
            results.put({"writer": index, "error": repr(exc)})


@dataclass
class WriterPool:
    """`n` writer processes running `job` (spawned once: a fresh interpreter, no inherited
    connection) sharing one barrier, so that every round starts its writers together."""

    n: int
    job: Job = _write_inbox

    def __post_init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.barrier = ctx.Barrier(self.n)
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in range(self.n)]
        self.procs: list[SpawnProcess] = [
            ctx.Process(
                target=_worker,
                args=(self.job, i, self.barrier, self.tasks[i], self.results),
                daemon=True,
            )
            for i in range(self.n)
        ]
        for p in self.procs:
            p.start()

    def run(self, tasks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        for q, task in zip(self.tasks, tasks, strict=True):
            q.put(dict(task))
        out: list[dict[str, Any]] = []
        deadline = time.monotonic() + ROUND_TIMEOUT
        while len(out) < self.n:
            try:
                out.append(self.results.get(timeout=1.0))
            except Empty:
                dead = [i for i, p in enumerate(self.procs) if not p.is_alive()]
                if dead or time.monotonic() > deadline:
                    why = (
                        f"writer {dead[0]} exited" if dead else f"no result in {ROUND_TIMEOUT:g} s"
                    )
                    raise StoreError(f"pg-grid --product: {why}") from None
        if self.barrier.broken:
            self.barrier.reset()
        errors = [r["error"] for r in out if "error" in r]
        if errors:
            raise StoreError(f"pg-grid --product: a writer process failed: {errors[0]}")
        return sorted(out, key=lambda r: int(r["writer"]))

    def close(self) -> None:
        for q in self.tasks:
            q.put(None)
        for p in self.procs:
            p.join(10)
            if p.is_alive():
                p.terminate()


# ------------------------------------------------------------------------ one round


@dataclass(frozen=True, slots=True)
class Round:
    """One round's outcome: committed claims, retries, and per anomaly found / undecided."""

    claims: int
    failed: int
    retries: int
    found: Mapping[str, bool]
    n2_undecided: bool
    below: bool
    details: Mapping[str, Any]


def run_round(
    pool: WriterPool,
    dsn: str,
    op: str,
    level: Isolation,
    inboxes: Sequence[Sequence[SimClaim]],
) -> Round:
    """Run one round on a fresh schema (dropped afterwards) and check it."""
    schema = f"toki_pgp_{uuid.uuid4().hex[:12]}"
    every = [c for inbox in inboxes for c in inbox]
    keys = _keys(every)
    store = PostgresStore(dsn, schema=schema)
    admin = Memory(store)
    try:
        _prepare(admin, op, keys)
        below = not dominates(level, OPERATORS[op].requires)
        task = {
            "url": dsn,
            "schema": schema,
            "operator": op,
            "level": level.value,
            "allow_weaker": below,
            "claims": [c.to_json() for c in every],
        }
        results = pool.run([{**task, "inbox": [c.to_json() for c in inbox]} for inbox in inboxes])
        found, undecided, details = check_round(dsn, schema, op, inboxes, results)
    finally:
        store.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        admin.close()
    writes = [w for r in results for w in r["writes"]]
    return Round(
        claims=sum(w["committed"] for w in writes),
        failed=sum(not w["committed"] for w in writes),
        retries=sum(int(r["retries"]) for r in results),
        found=found,
        n2_undecided=undecided,
        below=below,
        details=details,
    )


def check_round(
    dsn: str,
    schema: str,
    op: str,
    inboxes: Sequence[Sequence[SimClaim]],
    results: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, bool], bool, dict[str, Any]]:
    every = [c for inbox in inboxes for c in inbox]
    keys, probes = _keys(every), _probes(every)
    details: dict[str, Any] = {}
    try:
        final = Memory(PostgresStore(dsn, schema=schema))
    except IntegrityError as exc:  # the stored projection differs from the log
        return {"N1": True, "N2": False, "N3": False}, True, {"N1": str(exc)}
    try:
        events = final.events()
        # N1: each live state is the replay of the log up to its watermark; all agree at the end
        n1 = n1_memory(final).found
        prefix_hash: dict[int, str] = {}
        for r in results:
            n1 |= r["final_hash"] != final.state_hash()
            for w in r["writes"]:
                if not w["committed"]:
                    continue
                wm = int(w["watermark"])
                if wm not in prefix_hash:
                    prefix_hash[wm] = Memory.replay(e for e in events if e.seq <= wm).state_hash()
                if prefix_hash[wm] != w["state_hash"]:
                    n1 = True
                    details.setdefault("N1", f"writer {r['writer']} at seq {wm}")
        # N2: the final beliefs are those of a serial order of the claims the log holds that
        # keeps each writer's order (the log decides what committed: a write whose call
        # failed after its commit is in it); a claim a writer saw commit must be in it
        logged = _logged_claims(events, every)
        reported = {w["vid"] for r in results for w in r["writes"] if w["committed"]}
        lost = sorted(reported - set(logged))
        live = digest(canonical_json(beliefs(final, keys, probes, op)))
        n2: bool | None = bool(lost)
        if lost:
            details["N2"] = {"lost": lost}
        else:
            n2, why = n2_serial(op, inboxes, list(logged.values()), live)
            if why:
                details["N2"] = why
        # N3: every value a writer believed after a commit is still in the final store
        keep: dict[str, set[str]] = {}
        for key in keys:
            values = {h.version.value_json for h in final.history(key)}
            values |= {row.version.value_json for row in final.audit(key)}
            keep[str(key)] = values
        erased = sorted(
            {
                (k, canonical_json(value))
                for r in results
                for w in r["writes"]
                if w["committed"]
                for k, entry in w["believed"].items()
                for kind, value in entry["answers"]
                if kind == "value" and canonical_json(value) not in keep.get(k, set())
            }
        )
        if erased:
            details["N3"] = erased[:5]
        found = {"N1": n1, "N2": bool(n2), "N3": bool(erased)}
        return found, n2 is None, details
    finally:
        final.close()


def n2_serial(
    op: str, inboxes: Sequence[Sequence[SimClaim]], commit_order: Sequence[SimClaim], live: str
) -> tuple[bool | None, dict[str, Any]]:
    """N2 over the committed claims (`commit_order`, as the log holds them): False when some
    serial order that keeps each writer's (inbox) order gives the belief hash `live`, True
    when none does, None (undecided) when there are more orders than ALL_ORDERS and none of
    those tried does. The commit order itself is tried first."""
    every = [c for inbox in inboxes for c in inbox]
    if serial_beliefs(op, commit_order, every) == live:
        return False, {}
    done = {c.cid for c in commit_order}
    seqs = [tuple(c for c in inbox if c.cid in done) for inbox in inboxes]
    orders, complete = serial_orders(seqs, ALL_ORDERS)
    hit = any(serial_beliefs(op, o, every) == live for o in orders)
    found = None if not hit and not complete else not hit
    return found, {"orders": len(orders), "complete": complete, "commit_order": False}


def _logged_claims(events: Sequence[Event], claims: Sequence[SimClaim]) -> dict[str, SimClaim]:
    """Version id -> workload claim, for each claim ASSERTed in the log, in log order (a
    claim is recognised by its source, value and recording time)."""
    want = {}
    for c in claims:
        made = to_claim(c)
        want[(made.source_id, canonical_json(made.value), made.recorded_at)] = c
    out: dict[str, SimClaim] = {}
    for e in events:
        v = e.version
        if e.kind is EventKind.ASSERT and e.body.get("claim") and v is not None:
            hit = want.get((v.source_id, v.value_json, v.recorded_at))
            if hit is not None:
                out.setdefault(v.id, hit)
    return out


# ------------------------------------------------------------------------ the grid


def run_product(
    dsn: str,
    *,
    operators: Sequence[str] = OPERATORS_ORDER,
    levels: Sequence[str] = tuple(LEVELS),
    writers: Sequence[int] = (2, 4),
    rounds: int = 10,
    seed: int = 0,
    claims_per_writer: int = 2,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (operator, level, writers): round r uses workload seed `seed + r`."""
    for name in operators:
        if name not in OPERATORS:
            raise InvalidInput("operators", f"unknown operator {name!r}", "LWW, EWM, AWAIT, RULE")
    for name in levels:
        if name not in LEVELS:
            raise InvalidInput("levels", f"unknown level {name!r}", "RU, RC, RR, SER")
    if rounds < 1 or claims_per_writer < 1 or not writers or min(writers) < 1:
        raise InvalidInput("rounds/claims/writers", "must be positive")
    rows: list[dict[str, Any]] = []
    for w in writers:
        pool = WriterPool(w)
        try:
            for op in operators:
                for level_name in levels:
                    level = LEVELS[level_name]
                    rows.append(
                        _cell(pool, dsn, op, level_name, level, w, rounds, seed, claims_per_writer)
                    )
                    if progress is not None:
                        progress(rounds)
        finally:
            pool.close()
    order = {op: i for i, op in enumerate(OPERATORS_ORDER)}
    lv = {name: i for i, name in enumerate(LEVELS)}
    return sorted(rows, key=lambda r: (order[r["operator"]], lv[r["level"]], r["writers"]))


def _cell(
    pool: WriterPool,
    dsn: str,
    op: str,
    level_name: str,
    level: Isolation,
    w: int,
    rounds: int,
    seed: int,
    claims_per_writer: int,
) -> dict[str, Any]:
    started = time.perf_counter()
    counts = dict.fromkeys(("N1", "N2", "N3"), 0)
    claims = failed = retries = undecided = 0
    below = False
    witnesses: list[dict[str, Any]] = []
    for r in range(rounds):
        workload = synthetic(agents=w, claims_per_agent=claims_per_writer, keys=1, seed=seed + r)
        result = run_round(pool, dsn, op, level, workload.inboxes)
        claims += result.claims
        failed += result.failed
        retries += result.retries
        undecided += result.n2_undecided
        below = result.below
        for name, hit in result.found.items():
            counts[name] += hit
        if any(result.found.values()) and len(witnesses) < 3:
            witnesses.append({"seed": seed + r, **result.details})
    declared = OPERATORS[op].requires
    return {
        "operator": op,
        "level": level_name,
        "isolation": level.value,
        "declared": declared.value,
        "relation": "below" if below else ("declared" if level is declared else "above"),
        "writers": w,
        "rounds": rounds,
        "claims_per_writer": claims_per_writer,
        "seeds": [seed, seed + rounds - 1],
        "claims": claims,
        "failed_writes": failed,
        "retries": retries,
        "anomalies": counts,
        "n2_undecided": undecided,
        "witnesses": witnesses,
        "seconds": round(time.perf_counter() - started, 2),
    }


# ------------------------------------------------------------------------ results and docs


def write_results(rows: Sequence[Mapping[str, Any]], path: Path, meta: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"meta": dict(meta), "rows": [dict(r) for r in rows]}
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def read_results(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def doc_section(data: Mapping[str, Any]) -> str:
    """The markdown table for docs/postgres.md: rounds with N1/N2/N3 per cell (undecided N2
    rounds as "+k?"), committed claims, retries, failed writes."""
    head = ["operator", "level", "vs declared", "writers", "rounds", "claims", "retries"]
    head += ["failed writes", "N1", "N2", "N3"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in data["rows"]:
        a = r["anomalies"]
        n2 = f"{a['N2']}/{r['rounds']}" + (f" (+{r['n2_undecided']}?)" if r["n2_undecided"] else "")
        line = [
            r["operator"],
            r["level"],
            r["relation"],
            str(r["writers"]),
            str(r["rounds"]),
            str(r["claims"]),
            str(r["retries"]),
            str(r["failed_writes"]),
            f"{a['N1']}/{r['rounds']}",
            n2,
            f"{a['N3']}/{r['rounds']}",
        ]
        lines.append("| " + " | ".join(line) + " |")
    meta = data.get("meta", {})
    note = ""
    if "command" in meta:
        extra = ", ".join(f"{meta[k]}" for k in ("machine", "python") if k in meta)
        note = f"\nRun: `{meta['command']}`" + (f" ({extra})" if extra else "") + ".\n"
    return "\n".join(lines) + "\n" + note


def write_doc(data: Mapping[str, Any], path: Path) -> None:
    """Replace the table between the pg-product markers of `path` (markers must exist)."""
    text = path.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise InvalidInput("doc", f"{path}: no {BEGIN} … {END} markers")
    block = f"{BEGIN}\n{doc_section(data)}{END}"
    path.write_text(pattern.sub(lambda _m: block, text), encoding="utf-8")
