"""The real-database grid: TOKI's operators on PostgreSQL beside the simulator, cell by cell.

Each cell is (operator, level, writers): N seeded random schedules of TOKI's write path
(`TokiModel`) on a synthetic single-key workload with `writers` agents, executed once on a real
server through `toki.sim.pgstore.PgStore` and once on `SimStore` at the matching level, with
the same workload, the same schedule seed and the same judges, and checked by the same
checkers (`check_run`). The scheduler picks uniformly among the enabled agents; since the
server and the simulator may disable (block) different agents at a point, the same seed does
not always give the same schedule, so cells are compared as rates with Wilson intervals:
a cell is flagged when the two 95 % intervals are disjoint.

Besides N1–N3 the grid reports `N2co`: N2 decided, where N2 is undecided (more committed
claims than it can try every serial order of), by the run's own commit order: a run whose
belief state equals that of the serial execution in commit order is not an N2 (that order is
one of the serial orders). Undecided runs are counted apart (`*_undecided`), never as found;
rates are found / runs.

Level names: RC ↔ READ_COMMITTED, RR ↔ SNAPSHOT (PostgreSQL's repeatable read is snapshot
isolation), SER ↔ SERIALIZABLE.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, cast

from toki.check.anomalies import check_run
from toki.experiments.stats import wilson_interval
from toki.isolation import Isolation
from toki.sim.explore import RandomStrategy, Run, Stats
from toki.sim.pgstore import PgServer
from toki.sim.store import OpKind, SimStore
from toki.sim.workload import SimClaim, Workload, synthetic
from toki.systems.base import SimJudge, belief_hash, build_program, run_serially
from toki.systems.toki_model import TokiModel

__all__ = [
    "ANOMALIES",
    "COLUMNS",
    "LEVELS",
    "OPERATORS",
    "check_doc",
    "doc_section",
    "read_csv",
    "run_grid",
    "write_csv",
    "write_doc",
]

OPERATORS = ("LWW", "EWM", "AWAIT", "RULE")
LEVELS: Mapping[str, Isolation] = {
    "RC": Isolation.READ_COMMITTED,
    "RR": Isolation.SNAPSHOT,
    "SER": Isolation.SERIALIZABLE,
}
ANOMALIES = ("N1", "N2", "N2co", "N3")
COLUMNS = (
    "operator",
    "level",
    "writers",
    "reps",
    "anomaly",
    "server_found",
    "server_rate",
    "server_ci_low",
    "server_ci_high",
    "sim_found",
    "sim_rate",
    "sim_ci_low",
    "sim_ci_high",
    "disagree",
    "server_undecided",
    "sim_undecided",
    "server_aborts_per_run",
    "sim_aborts_per_run",
    "server_stuck",
    "sim_stuck",
)
BEGIN, END = "<!-- pg-grid:begin -->", "<!-- pg-grid:end -->"


def _commit_order_claims(run: Run, workload: Workload) -> list[SimClaim]:
    """The claims whose version row committed, in commit order (a serial order of the run)."""
    by_id = {c.cid: c for c in workload.claims}
    pending: dict[int, list[str]] = {}
    out: list[SimClaim] = []
    for op in run.history:
        key = op.key
        if op.kind is OpKind.WRITE and isinstance(key, tuple) and key[:1] == ("ver",):
            if key[1] in by_id:
                pending.setdefault(op.txn, []).append(key[1])
        elif op.kind is OpKind.COMMIT:
            out.extend(by_id[cid] for cid in pending.pop(op.txn, []))
    return out


def _verdicts(
    system: TokiModel, workload: Workload, run: Run, judge: SimJudge, recovery: SimJudge
) -> dict[str, bool | None]:
    """Per anomaly: True (found), False (ruled out) or None (the checker is undecided)."""
    v = check_run(system, workload, run, judge, recovery)
    found: dict[str, bool | None] = {
        name: (verdict.found if verdict.ran else None) for name, verdict in v.items()
    }
    n2co = found["N2"]
    if n2co is None:  # undecided: the run's commit order is one serial order that may match
        state = run_serially(system, workload, _commit_order_claims(run, workload), judge)
        live = system.beliefs(dict(run.state), workload.keys)
        if belief_hash(live) == belief_hash(system.beliefs(state, workload.keys)):
            n2co = False
    found["N2co"] = n2co
    return found


def _one_run(
    system: TokiModel,
    workload: Workload,
    level: Isolation,
    factory: Callable[..., Any],
    seed: int,
    judge: SimJudge,
) -> Run:
    store_factory = cast("Callable[..., SimStore]", factory)  # PgStore is SimStore-shaped
    program = build_program(system, workload, level=level, judge=judge, store_factory=store_factory)
    return next(islice(RandomStrategy(seed).runs(program, Stats()), 1))


def _fmt(column: str, x: Any) -> Any:
    """A row's value as the CSV writes it: rates to 4 places, aborts per run to 2 (rows in
    memory, and `toki pg-grid --json`, keep the numbers)."""
    if not isinstance(x, float):
        return x
    return f"{x:.2f}" if column.endswith("_per_run") else f"{x:.4f}"


def run_grid(
    dsn: str,
    *,
    operators: Sequence[str] = OPERATORS,
    levels: Sequence[str] = tuple(LEVELS),
    writers: Sequence[int] = (2, 4, 8),
    reps: int = 20,
    seed: int = 0,
    claims_per_agent: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Every cell, one row per anomaly (columns `COLUMNS`, rates and aborts as floats). Rep
    i uses workload seed and schedule seed `seed + i` on both the server and the simulator."""
    rows: list[dict[str, Any]] = []
    judge, recovery = SimJudge(0.5, seed), SimJudge(0.5, seed + 1)
    with PgServer(dsn) as server:
        for op in operators:
            system = TokiModel(op)
            for level_name in levels:
                level = LEVELS[level_name]
                for w in writers:
                    found: dict[str, dict[str, int]] = {
                        side: dict.fromkeys(ANOMALIES, 0) for side in ("server", "sim")
                    }
                    undecided: dict[str, dict[str, int]] = {
                        side: dict.fromkeys(ANOMALIES, 0) for side in ("server", "sim")
                    }
                    aborts = {"server": 0, "sim": 0}
                    stuck = {"server": 0, "sim": 0}
                    for i in range(reps):
                        workload = synthetic(
                            agents=w, claims_per_agent=claims_per_agent, keys=1, seed=seed + i
                        )
                        for side, factory in (("server", server), ("sim", SimStore)):
                            try:
                                run = _one_run(system, workload, level, factory, seed + i, judge)
                            finally:
                                server.close_stores()
                            aborts[side] += sum(op_.kind is OpKind.ABORT for op_ in run.history)
                            stuck[side] += run.deadlock or run.truncated
                            for name, hit in _verdicts(
                                system, workload, run, judge, recovery
                            ).items():
                                if hit is None:
                                    undecided[side][name] += 1
                                else:
                                    found[side][name] += hit
                        if progress is not None:
                            progress(1)
                    for name in ANOMALIES:
                        a = wilson_interval(found["server"][name], reps)
                        b = wilson_interval(found["sim"][name], reps)
                        disjoint = a.high < b.low or b.high < a.low
                        rows.append(
                            dict(
                                zip(
                                    COLUMNS,
                                    (
                                        op,
                                        level_name,
                                        w,
                                        reps,
                                        name,
                                        found["server"][name],
                                        a.estimate,
                                        a.low,
                                        a.high,
                                        found["sim"][name],
                                        b.estimate,
                                        b.low,
                                        b.high,
                                        "yes" if disjoint else "no",
                                        undecided["server"][name],
                                        undecided["sim"][name],
                                        aborts["server"] / reps,
                                        aborts["sim"] / reps,
                                        stuck["server"],
                                        stuck["sim"],
                                    ),
                                    strict=True,
                                )
                            )
                        )
    return rows


def write_csv(rows: Iterable[Mapping[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        out.writeheader()
        for r in rows:
            out.writerow({k: _fmt(k, r[k]) for k in COLUMNS})


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def doc_section(rows: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table for docs/postgres.md: per cell, found/runs on the server and in the
    simulator for each anomaly ("(+k?)": k runs the checker left undecided), aborts per run,
    and the anomalies whose intervals are disjoint."""
    cells: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
    for r in rows:
        cells.setdefault((str(r["operator"]), str(r["level"]), str(r["writers"])), {})[
            str(r["anomaly"])
        ] = r
    head = ["operator", "level", "writers", "runs"]
    for name in ANOMALIES:
        head += [f"{name} server", f"{name} sim"]
    head += ["aborts/run server", "aborts/run sim", "disjoint 95 % CI"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (op, level, w), by in cells.items():
        any_row = next(iter(by.values()))
        reps = any_row["reps"]
        line = [op, level, w, str(reps)]
        for name in ANOMALIES:
            r = by[name]
            line += [_cell(r, "server", reps), _cell(r, "sim", reps)]
        flagged = [n for n in ANOMALIES if by[n]["disagree"] == "yes"]
        line += [
            str(_fmt("server_aborts_per_run", any_row["server_aborts_per_run"])),
            str(_fmt("sim_aborts_per_run", any_row["sim_aborts_per_run"])),
            ", ".join(flagged) or "none",
        ]
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines) + "\n"


def _cell(r: Mapping[str, Any], side: str, reps: Any) -> str:
    undecided = int(r[f"{side}_undecided"])
    return f"{r[f'{side}_found']}/{reps}" + (f" (+{undecided}?)" if undecided else "")


def check_doc(path: Path) -> str:
    """The text of `path`, refused unless it has the pg-grid markers (checked before a run,
    so a long grid never ends on a missing file)."""
    from toki.errors import InvalidInput

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput("--doc", f"cannot read {path}: {exc.strerror}") from None
    if not _MARKERS.search(text):
        raise InvalidInput("--doc", f"{path} has no {BEGIN} … {END} markers", "add them")
    return text


_MARKERS = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)


def write_doc(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Replace the table between the pg-grid markers of `path` (markers must exist)."""
    block = f"{BEGIN}\n{doc_section(rows)}{END}"
    path.write_text(_MARKERS.sub(lambda _m: block, check_doc(path)), encoding="utf-8")
