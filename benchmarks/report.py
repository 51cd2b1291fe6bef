"""Generate the table in benchmarks/README.md from benchmarks/results/*.json.

    python -m benchmarks.report            # rewrite the block between the markers
    python -m benchmarks.report --check    # exit 1 when the README is out of date

Every number comes from a results file; a missing file gives a row that says how to make it.
The anchors are published figures of other tools (cited in the row), never toki measurements.
`rows()` is reused by paper/assets.py for the paper's performance table.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"
BEGIN = "<!-- report:begin -->"
END = "<!-- report:end -->"

# name of results file -> command that writes it
SOURCES = {
    "core": "python -m benchmarks.bench_core",
    "algebra": "python -m benchmarks.bench_algebra",
    "backends": "python -m benchmarks.bench_backends",
    "sim": "python -m benchmarks.bench_sim",
    "check": "python -m benchmarks.bench_check",
    "history": "python -m benchmarks.bench_history",
    "toki_check": "python -m benchmarks.bench_history --toki-check",
    "proofs": "python -m benchmarks.bench_proofs",
    "matrix": "python -m benchmarks.bench_matrix",
    "real": "python -m benchmarks.bench_real",
    "growth": "python -m benchmarks.bench_growth",
    "writers": "python -m benchmarks.bench_writers",
    "toki_lib": "python -m benchmarks.bench_toki_lib --docs docs/exploration.md",
    "integrity": "python -m benchmarks.bench_integrity",
    "consumption": "python -m benchmarks.bench_consumption",
    "write_cost": "python -m benchmarks.bench_write_cost",
    "write_cost_pg": "python -m benchmarks.bench_write_cost_pg",
    "open": "python -m benchmarks.bench_open",
    "scale": "python -m benchmarks.bench_scale",
}

ANCHOR_ELLE = "Jepsen Elle: ~100k-op histories in ~55-73 s on a 24-core Xeon (VLDB 2020, Fig. 4)"
ANCHOR_PLUME = "Plume: 1M txns (20M ops) checked in ~92-105 s (OOPSLA 2024)"
ANCHOR_POLYSI = "PolySI (SI): 1M txns in <= 4 h, < 40 GB (PVLDB 2023, Fig. 11)"
ANCHOR_DPOR = "optimal DPOR: one schedule per Mazurkiewicz class, ratio 1.0 (Abdulla et al. 2014)"


@dataclass(frozen=True)
class Row:
    area: str
    figure: str
    measured: str
    target: str
    anchor: str


def missing(name: str) -> str:
    return f"not generated yet (run `{SOURCES[name]}`)"


def fmt(x: Any, unit: str = "") -> str:
    """A number to three significant figures with thousands separators."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if not isinstance(x, int | float):
        return str(x)
    if isinstance(x, int):
        return f"{x:,} {unit}".strip()
    v = float(x)
    if v == 0:
        s = "0"
    elif abs(v) >= 1000:
        s = f"{round(v, -math.floor(math.log10(abs(v))) + 2):,.0f}"
    else:
        s = f"{v:.3g}"
    return f"{s} {unit}".strip()


def load(results_dir: Path = RESULTS) -> dict[str, dict[str, Any] | None]:
    out: dict[str, dict[str, Any] | None] = {}
    for name in SOURCES:
        path = results_dir / f"{name}.json"
        out[name] = json.loads(path.read_text()) if path.exists() else None
    for path in sorted(results_dir.glob("*.json")):
        out.setdefault(path.stem, json.loads(path.read_text()))
    return out


def _check_sizes(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per history size, the slowest workload's row."""
    by_size: dict[int, dict[str, Any]] = {}
    for run in data["runs"]:
        best = by_size.get(run["txns"])
        if best is None or run["check_s"] > best["check_s"]:
            by_size[run["txns"]] = run
    return [by_size[n] for n in sorted(by_size)]


def _rows_core(d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row("core", "in-memory replay, resolve_at, SQLite append", missing("core"),
                    "replay >= 500,000 events/s; resolve_at <= 50 µs; SQLite >= 50,000 ev/s",
                    "—")]
    units = {"replay_events_per_s": "events/s", "resolve_at_us_1e5_versions": "µs",
             "sqlite_batched_append_events_per_s": "events/s"}
    rows = [Row("core", name.replace("_", " "), fmt(t["measured"], units.get(name, "")),
                fmt(t["target"], units.get(name, "")), "—")
            for name, t in sorted(d.get("targets", {}).items())]
    rep = d.get("replay_in_memory", {})
    if "field_reads_events_per_s" in rep:
        rows.append(Row("core", "replay's floor: the fields a fold must read, read once and "
                        "nothing done with them (bench_core.read_fields), in seq order / in the "
                        "key order replay folds in",
                        f"{fmt(rep['field_reads_events_per_s'], 'events/s')} / "
                        f"{fmt(rep.get('field_reads_key_order_events_per_s'), 'events/s')}", "—",
                        "— (memory reads alone, same events and run as the replay row)"))
    if "bare_fold_events_per_s" in rep:
        rows.append(Row("core", "replay's floor: only the inserts the fold's state needs, in seq "
                        "order (bench_core.bare_fold: no dedupe, ordering, flags or seq numbers)",
                        fmt(rep["bare_fold_events_per_s"], "events/s"), "—",
                        "— (same events and run as the replay row)"))
    hot = d.get("write_path_hot_key")
    if hot:
        rows.append(Row("core", f"write path, hot key: Memory.supersede, {fmt(hot['writes'])} "
                        "writes on one supersede chain (O(log n) each, see docs/concepts.md)",
                        f"{fmt(hot['writes_per_s'], 'writes/s')} (first / last 1,000: "
                        f"{fmt(hot.get('writes_per_s_first_1000'))} / "
                        f"{fmt(hot.get('writes_per_s_last_1000'))})", "—", "—"))
        if "last_to_first" in hot:  # measured since 2026-12-07: best of `repeat` per window
            rows.append(Row("core", "write path, hot key: rate of the last 1,000 writes / the "
                            f"first 1,000 (each window its best of {hot['repeat']} chains)",
                            fmt(hot["last_to_first"]), ">= 0.7 (issue #37)", "—"))
    live = d.get("write_path_live_versions")
    if live:
        ms = live["ms_per_write_by_window"]
        rows.append(Row("core", f"write path, one key of many live versions: Memory.assert_fact, "
                        f"{fmt(live['writes'])} claims on disjoint valid intervals (ms per write "
                        f"in the first / last {fmt(live['window'])}; rate last / first)",
                        f"{fmt(ms[0])} / {fmt(ms[-1])} ms; {live['last_to_first']:.2f}", "—",
                        "O(live versions) per write: the key's projection row lists them all "
                        "(docs/concepts.md)"))
    sq = d.get("sqlite", {})
    if "raw_sqlite_same_rows_per_s" in sq:
        rows.append(Row("core", "sqlite3 alone, same rows into the same schema (FULL / OFF sync; "
                        "key rows, key ids, id prefixes and chain links prebuilt)",
                        f"{fmt(sq['raw_sqlite_same_rows_per_s'], 'rows/s')} / "
                        f"{fmt(sq['raw_sqlite_same_rows_unsynced_per_s'], 'rows/s')}", "—",
                        "— (the database's floor under toki's append)"))
    return rows


def _rows_algebra(d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row("algebra", "dual-row + keyed-log cost vs bare insert", missing("algebra"),
                    "time ratio <= 1.5", "—")]
    c, k = d["dual_row_cost"], d["keyed_log_cost"]
    return [
        Row("algebra", "LWW write (current + audit row) vs bare insert, time ratio",
            fmt(c["time_ratio_vs_bare_insert"]), f"<= {fmt(c['target_ratio'])}", "—"),
        Row("algebra", "EWM keyed judge log, time ratio logged / unlogged",
            fmt(k["time_ratio_logged_vs_unlogged"]), "—", "—"),
    ]


def _rows_backends(d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row("backends", "memory / SQLite / PostgreSQL", missing("backends"), "—", "—")]
    rows = []
    for name, label in (("memory", "in-memory"), ("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        b = d.get(name)
        if not isinstance(b, dict):
            rows.append(Row("backends", label, "not measured (no server)", "—", "—"))
            continue
        anchor = b.get("server", "—").split(" on ")[0] if name == "postgres" else "—"
        n = fmt(b["events"])
        rows += [
            Row("backends", f"{label}: batched append ({n} events)",
                fmt(b["batched_append_events_per_s"], "events/s"), "—", anchor),
            Row("backends", f"{label}: open and replay",
                fmt(b["open_and_replay_events_per_s"], "events/s"), "—", anchor),
            Row("backends", f"{label}: resolve_at median / p99 ({fmt(b['resolve_at_versions'])}"
                " versions)", f"{fmt(b['resolve_at']['median_us'])} / "
                f"{fmt(b['resolve_at']['p99_us'], 'µs')}", "—", anchor),
        ]
    return rows


def _rows_sim(d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row("sim", "DPOR schedules explored / equivalence classes", missing("sim"),
                    "1.0", ANCHOR_DPOR)]
    return [Row("sim", k.replace("_", " "), fmt(v), "—", ANCHOR_DPOR if "ratio" in k else "—")
            for k, v in sorted(_scalars(d.get("summary", d)).items())]


def _rows_check(d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row("check", "Adya checker, 10^6 txns", missing("check"), "<= 60 s on 2 cores",
                    f"{ANCHOR_ELLE}; {ANCHOR_PLUME}; {ANCHOR_POLYSI}")]
    rows = []
    for r in _check_sizes(d):
        n = r["txns"]
        anchor = {10**5: ANCHOR_ELLE, 10**6: f"{ANCHOR_PLUME}; {ANCHOR_POLYSI}"}.get(n, "—")
        target = "<= 60 s on 2 cores" if n == 10**6 else "—"
        rows.append(Row("check", f"Adya checker, {fmt(n)} txns ({fmt(r['ops'])} ops), slowest "
                        f"workload ({r['workload']})",
                        f"{fmt(r['check_s'], 's')}, peak {fmt(r['peak_rss_during_check_mb'], 'MB')}",
                        target, anchor))
    return rows


def _rows_history(d: dict[str, Any] | None) -> list[Row]:
    """Loading + checking Elle histories from files (issue #21 goal 4), largest size."""
    if d is None:
        return [Row("history", "load 10^6 Elle txns (JSON / EDN)", missing("history"),
                    "<= 20 s / <= 60 s, <= 1.5 GB", "—")]
    n = d["summary"]["largest_size"]
    big = {r["format"]: r for r in d["runs"] if r["txns"] == n}
    targets = {"jsonl": "<= 20 s", "json": "<= 20 s", "edn": "<= 60 s"}
    rows = []
    for f in ("jsonl", "json", "edn"):
        r = big.get(f)
        if r is None:
            continue
        load = r["loadavg_1min"]
        rows.append(Row("history", f"{fmt(n)} Elle txns from {f.upper()} ({fmt(r['mb'], 'MB')}): "
                        f"load / check, peak RSS of both (load avg {load[0]:.1f})",
                        f"{fmt(r['load_s'], 's')} (CPU {fmt(r.get('load_cpu_s'), 's')}) / "
                        f"{fmt(r['check_s'], 's')}, {fmt(r['peak_rss_load_and_check_mb'], 'MB')}",
                        f"load {targets[f]}; <= 1,536 MB", d["anchors"]["before"]))
    return rows


def _rows_toki_check(d: dict[str, Any] | None) -> list[Row]:
    """`toki check FILE` end to end (issue #37): the largest size, per format."""
    if d is None:
        return [Row("toki check", "10^6 Elle list-append txns, load + check", missing("toki_check"),
                    ">= 100,000 txns/s, <= 1,536 MB, exponent <= 1.1", ANCHOR_ELLE)]
    s = d["summary"]
    n = s["largest_size"]
    rows = []
    for r in sorted((r for r in d["runs"] if r["txns"] == n), key=lambda r: r["format"]):
        e = d["exponents"].get(r["format"], {})
        rows.append(Row("toki check", f"{fmt(n)} Elle txns from {r['format'].upper()} "
                        f"({fmt(r['mb'], 'MB')}), load + check, {r['path']} path: txns/s wall "
                        f"(CPU), peak RSS, exponent wall (CPU) (load avg "
                        f"{r['loadavg_1min'][0]:.1f})",
                        f"{fmt(r['txns_per_s'])} ({fmt(r['txns_per_cpu_s'])}), "
                        f"{fmt(r['peak_rss_mb'], 'MB')}, {fmt(e.get('wall'))} "
                        f"({fmt(e.get('cpu'))})",
                        ">= 100,000 txns/s, <= 1,536 MB, exponent <= 1.1",
                        f"{ANCHOR_ELLE}; {d['anchors']['before']}"))
    for x in d.get("speedup_over_exact", []):
        if x["txns"] == max(y["txns"] for y in d["speedup_over_exact"]):
            rows.append(Row("toki check", f"{x['file']}: exact path time / toki check time, "
                            "same run", f"{fmt(x['speedup_wall'])}x wall, "
                            f"{fmt(x['speedup_cpu'])}x CPU", "—", "—"))
    return rows


def _rows_proofs(d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row("proofs", "all z3 proofs at default bounds", missing("proofs"), "<= 60 s",
                    "—")]
    return [Row("proofs", f"all {len(d['per_proof'])} z3 proofs at default bounds",
                fmt(d["default_bounds_total_seconds"], "s"), f"<= {fmt(d['target_seconds'], 's')}",
                "— (TOKI's proofs are on paper)")]


def _scalars(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            if k in ("machine", "anchors"):
                continue
            out.update(_scalars(v, f"{prefix}{k}." if isinstance(v, dict) else f"{prefix}{k}"))
    elif isinstance(d, int | float | bool | str):
        out[prefix.rstrip(".")] = d
    return out


def _rows_generic(name: str, d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row(name, "—", missing(name), "—", "—")] if name in SOURCES else []
    scal = _scalars(d.get("summary", d))
    return [Row(name, k.replace("_", " "), fmt(v), "—", "—") for k, v in sorted(scal.items())][:8]


def _rows_real(d: dict[str, Any] | None) -> list[Row]:
    """The real-library summary; setup times beside the research notes' install times."""
    if d is None:
        return [Row("real", "—", missing("real"), "—", "—")]
    anchor = d.get("anchors", {}).get("setup", "—")
    return [Row("real", k, fmt(v), "—", anchor if "setup" in k else "—")
            for k, v in sorted(d.get("summary", {}).items())]


ANCHOR_CONFLICTS = ("issue 21 before groups: n(n+1)/2 events; resolve_at 0.48 s / 8.0 s / 41 s "
                    "at n = 50 / 100 / 150")


def _rows_growth(d: dict[str, Any] | None) -> list[Row]:
    if d is None:
        return [Row("growth", "conflicts on one key, replay", missing("growth"),
                    "events exponent <= 1.2; resolve_at exponent <= 1.3; replay >= 500,000 "
                    "events/s", "—")]
    t = d["targets"]
    return [
        Row("growth", "conflicting values on one key: growth exponent of events (larger of "
            "the fit over all n and the last decade)",
            fmt(t["conflict_events_growth"]["measured"]), "<= 1.2", ANCHOR_CONFLICTS),
        Row("growth", "conflicting values on one key: growth exponent of resolve_at (worst "
            "of now / past valid / past system time, fit and last decade)",
            fmt(t["resolve_at_growth"]["measured"]), "<= 1.3", ANCHOR_CONFLICTS),
        Row("growth", "replay (fold), core workload",
            fmt(t["replay_events_per_s"]["measured"], "events/s"), ">= 500,000 events/s",
            "issue 21: 223,000 events/s"),
        Row("growth", "replay per event: conflict-heavy / core, slowdown",
            fmt(t["conflict_heavy_slowdown_per_event"]["measured"]), "<= 2", "—"),
    ]


def _rows_writers(d: dict[str, Any] | None) -> list[Row]:
    """Per operator: throughput with 1 and the most writers, and the per-key / global-lock
    ratio on distinct keys and on one hot key (docs/postgres.md explains the ceiling)."""
    if d is None:
        return [Row("writers", "PostgreSQL writes/s against writer processes",
                    missing("writers"), "—", "—")]
    cells = {(c["operator"], c["workload"], c["writers"], c["path"]): c for c in d["cells"]}
    most = max(c["writers"] for c in d["cells"])
    out = []
    for r in d["ratios"]:
        if r["writers"] != most:
            continue
        one = cells.get((r["operator"], r["workload"], 1, "per-key"))
        level = cells[(r["operator"], r["workload"], most, "per-key")]["level"]
        out.append(Row(
            "writers",
            f"{r['operator']} at {level}, "
            f"{'distinct keys' if r['workload'] == 'distinct' else 'one hot key'}: "
            f"writes/s with 1 → {most} writer "
            f"processes; per-key / global-lock at {most}",
            f"{fmt(one['writes_per_s'] if one else None)} → {fmt(r['per_key_writes_per_s'])}; "
            f"{fmt(r['ratio'])}",
            "—", "—"))
    return out


def _rows_integrity(d: dict[str, Any] | None) -> list[Row]:
    """Tamper evidence on open: the chain walk's rate and its share of opening a store."""
    if d is None:
        return [Row("integrity", "chain walk on open", missing("integrity"), "—", "—")]
    e = d["events_per_s"]
    return [
        Row("integrity", f"SQLite store of {fmt(d['events'])} events: events/s read / chain "
            "walk / open (read, chain, fold, reconcile)",
            f"{fmt(e['read'])} / {fmt(e['chain walk'])} / {fmt(e['open'])}", "—", d["anchor"]),
        Row("integrity", "chain walk's share of open", fmt(d["chain_share_of_open"]), "—", "—"),
        Row("integrity", "toki verify (Memory.verify with a digest): events/s plain / keyed",
            f"{fmt(e['verify'])} / {fmt(e['verify keyed'])}", "—", "—"),
    ]


def _rows_open(d: dict[str, Any] | None) -> list[Row]:
    """Opening a SQLite store from a checkpoint against a full replay and sqlite3 reading
    the same rows (issue #37); PostgreSQL's against psycopg's, where measured."""
    if d is None:
        return [Row("open", "open from a checkpoint, 10^6 events", missing("open"),
                    "<= 3 s; >= 0.5 of sqlite3 reading the same rows", "—")]
    out = []
    for r in d["sizes"]:
        out.append(Row(
            "open", f"SQLite, {fmt(r['events'])} events over {fmt(r['keys'])} keys: open from "
            f"a checkpoint with a {fmt(r['tail'])}-event tail / at the head / full replay (s); "
            "sqlite3 reading the same rows / open, with the tail / at the head",
            f"{fmt(r['open_checkpoint_s'])} / {fmt(r['open_checkpoint_tail0_s'])} / "
            f"{fmt(r['open_full_replay_s'])}; {fmt(r['checkpoint_ratio_to_floor'])} / "
            f"{fmt(r['checkpoint_tail0_ratio_to_floor'])}",
            "<= 3 s; >= 0.5" if r["events"] >= 10**6 else "—",
            "issue #37: full replay at 19k events/s"))
    top = d["sizes"][-1]
    if "checkpoint_ceiling_ratio" in top:  # measured since 2026-12-07's second stop
        out.append(Row(
            "open", f"… {fmt(top['events'])} events: the best ratio an open making the same "
            "checks could reach, with the tail / at the head (sqlite3 reading the rows / reading "
            "them, the record's digest, one chain link per tail event, one digest per vouched "
            "projection row)",
            f"{fmt(top['checkpoint_ceiling_ratio'])} / "
            f"{fmt(top['checkpoint_tail0_ceiling_ratio'])}", "—",
            "the checks alone bound the ratio the target asks for"))
    out.append(Row(
        "open", f"… {fmt(top['events'])} events, after a checkpointed open: first current() "
        "of one key / first state_hash() (every key built) (s)",
        f"{fmt(top['first_current_one_key_s'])} / {fmt(top['first_state_hash_all_keys_s'])}",
        "—", "—"))
    if "first_write_after_open_s" in top:  # measured since the fix of 2026-12-07
        out.append(Row(
            "open", f"… {fmt(top['events'])} events: the first assert_fact after an open with "
            f"the {fmt(top['tail'])}-event tail (it writes the next checkpoint) (s)",
            fmt(top["first_write_after_open_s"]), "—",
            "docs/integrity.md: it built every tail key before 28005f4"))
    phases = top.get("checkpoint_phases_s")
    if phases:  # measured since the phase breakdown was added to bench_open
        out.append(Row(
            "open", f"… {fmt(top['events'])} events: where the checkpointed open's time goes "
            f"(s; the floor: sqlite3 reading the same rows, {fmt(top['floor_checkpoint_s'])} s)",
            "; ".join(f"{name} {fmt(s)}" for name, s in phases.items()), "—",
            "per-key and per-event Python work bounds the ratio to the floor"))
    out.append(Row(
        "open", "growth exponent of open time, 10^3..10^6: checkpoint with tail / at the "
        "head / full replay",
        f"{fmt(d['checkpoint_growth_exponent'])} / {fmt(d['checkpoint_tail0_growth_exponent'])}"
        f" / {fmt(d['full_replay_growth_exponent'])}", "<= 1.1", "—"))
    pg = d.get("postgresql")
    for r in pg["sizes"] if pg else []:
        out.append(Row(
            "open", f"PostgreSQL, {fmt(r['events'])} events over {fmt(r['keys'])} keys: open "
            f"from a checkpoint with a {fmt(r['tail'])}-event tail / at the head / full replay "
            "(s); psycopg reading the same rows / open, with the tail / at the head",
            f"{fmt(r['open_checkpoint_s'])} / {fmt(r['open_checkpoint_tail0_s'])} / "
            f"{fmt(r['open_full_replay_s'])}; {fmt(r['checkpoint_ratio_to_floor'])} / "
            f"{fmt(r['checkpoint_tail0_ratio_to_floor'])}",
            "<= 3 s; >= 0.5" if r["events"] >= 10**6 else "—",
            "measured " + pg["machine"]["measured_at"]))
    return out


def _rows_consumption(d: dict[str, Any] | None) -> list[Row]:
    """Named reads, the shadow fold and revoke_source (docs/consumption.md, docs/shadow.md)."""
    if d is None:
        return [Row("consumption", "named reads, shadow, revoke_source", missing("consumption"),
                    "—", "—")]
    r = d["read_us"]
    return [
        Row("consumption", "resolve_at µs: memory without / with a consumer; SQLite without / "
            "with (one INSERT per named read)",
            f"{fmt(r['memory, no consumer'])} / {fmt(r['memory, consumer'])}; "
            f"{fmt(r['sqlite, no consumer'])} / {fmt(r['sqlite, consumer'])}", "—", "—"),
        Row("consumption", f"shadow fold of {fmt(d['events'])} events: events/s",
            fmt(d["shadow"]["events_per_s"]), "—", "—"),
        Row("consumption", f"revoke_source over {fmt(d['revoke_source']['keys'])} keys",
            fmt(d["revoke_source"]["ms"], "ms"), "—", "—"),
    ]


def _rows_write_cost(d: dict[str, Any] | None) -> list[Row]:
    """Per write: Memory.assert_fact on SQLite against sqlite3 replaying the statements toki
    ran, one transaction per write, in the same run (issue #37)."""
    if d is None:
        return [Row("write cost", "assert_fact on SQLite vs sqlite3, same statements",
                    missing("write_cost"), ">= 0.7 of sqlite3", "—")]
    out = []
    for sync, note in (("full", "toki's setting"), ("off", "both sides, benchmark only")):
        m = d[sync]
        out.append(Row(
            "write cost", f"assert_fact on SQLite, {fmt(d['writes'])} writes over "
            f"{fmt(d['keys'])} keys, synchronous={m['synchronous']} ({note}): toki / sqlite3 "
            "running the same statements, one transaction per write; ratio",
            f"{fmt(m['toki_writes_per_s'])} / {fmt(m['sqlite3_writes_per_s'], 'writes/s')}; "
            f"{m['ratio']:.2f}", ">= 0.7" if sync == "full" else "—",
            "— (sqlite3 replaying toki's recorded statements and rows, same run)"))
    full = d["full"]
    own = full["toki_us_per_write"] - full["sqlite3_us_per_write"]
    budget = full["sqlite3_us_per_write"] / 0.7 - full["sqlite3_us_per_write"]
    out.append(Row(
        "write cost", "toki's own time per write at synchronous=FULL (toki less sqlite3 running "
        "its statements) / what a ratio of 0.7 leaves for it (sqlite3's time / 0.7 less it)",
        f"{own:.0f} / {budget:.0f} µs", "—", "— (the same run)"))
    if "memory" in d:  # results before the floor was measured lack it
        out.append(Row(
            "write cost", "the same writes on the in-memory store (memory://: planning, events, "
            "hashes, projection rows and fold, no SQL): a floor under toki's own time per write",
            f"{d['memory']['us_per_write']:.0f} µs", "—", "— (the same run)"))
    out += _rows_write_cost_controls(d)
    st = full["statements"]
    counts = ", ".join(f"{n} in {fmt(w)} writes" for n, w in sorted(
        st["per_write_histogram"].items(), key=lambda item: int(item[0])))
    out.append(Row("write cost", "statements per assert_fact (BEGIN IMMEDIATE and COMMIT "
                   "included; two more where the connection has not seen the key's id, and more where "
                   f"the write also writes a checkpoint): {counts}",
                   fmt(st["per_write_mean"]), "—", "—"))
    prof = d.get("profile_us_per_write_off")
    if prof:
        total = prof.pop("assert_fact in all")
        out.append(Row("write cost", "where assert_fact's time goes (cProfile, synchronous=OFF; "
                       "shares of the whole, parts nest: store.append includes its SQL)",
                       "; ".join(f"{name} {v / total:.0%}" for name, v in prof.items()), "—",
                       "—"))
    return out


def _rows_write_cost_controls(d: dict[str, Any]) -> list[Row]:
    """The controls: sqlite3's statements with toki's in-memory write, or a busy loop as long,
    before each write (results before they were measured lack them)."""
    out = []
    for sync in ("full", "off"):
        m = d[sync]
        c, sp = m.get("control"), m.get("spin")
        if not c or not sp:
            continue
        out.append(Row(
            "write cost", f"synchronous={m['synchronous']}, µs per write: sqlite3 alone; the "
            "control (each write made on memory:// before its statements: in-memory write + "
            "sqlite3); a busy loop as long instead (loop + sqlite3); toki",
            f"{m['sqlite3_us_per_write']:.0f}; {c['between_us_per_write']:.0f} + "
            f"{c['sqlite3_us_per_write']:.0f} = {c['us_per_write']:.0f}; "
            f"{sp['between_us_per_write']:.0f} + {sp['sqlite3_us_per_write']:.0f} = "
            f"{sp['us_per_write']:.0f}; {m['toki_us_per_write']:.0f}", "—",
            f"ratio sqlite3 / control {m['sqlite3_us_per_write'] / c['us_per_write']:.2f}: what "
            "a toki whose SQLite layer cost nothing would reach (same run)"))
    return out


def _rows_write_cost_pg(d: dict[str, Any] | None) -> list[Row]:
    """Per write on PostgreSQL: Memory.assert_fact against psycopg sending the commands toki
    sent, in the same run (issue #37)."""
    if d is None:
        return [Row("write cost", "assert_fact on PostgreSQL vs psycopg, same commands",
                    missing("write_cost_pg"), "—", "—")]
    return [Row(
        "write cost", f"assert_fact on PostgreSQL, {fmt(d['writes'])} writes over "
        f"{fmt(d['keys'])} keys: toki / psycopg sending the same commands "
        f"({d['commands']['per_write_mean']:.1f} per write: the head rows, the write and its "
        "COPY, the sequencing, the catch-up); ratio",
        f"{fmt(d['toki_writes_per_s'])} / {fmt(d['psycopg_writes_per_s'], 'writes/s')}; "
        f"{d['ratio']:.2f}", "—", f"— ({d['server']}, same run)"), *_rows_pg_hot_key(d)]


def _rows_pg_hot_key(d: dict[str, Any]) -> list[Row]:
    out = []
    for name, what in (("hot_key", "supersedes on one key"),
                       ("contended_key", "LWW writes on one key by two writers in turn")):
        hot = d.get(name)
        if not hot:  # results before it was measured lack it
            continue
        ms = hot["ms_per_write_by_window"]
        out.append(Row(
            "write cost", f"PostgreSQL, one hot key ({fmt(hot['writes'])} {what}): ms per "
            f"write in the first / last {fmt(hot['window'])} writes; rate last / first",
            f"{fmt(ms[0])} / {fmt(ms[-1])} ms; {hot['last_to_first']:.2f}",
            ">= 0.7 (the hot-key target, met in memory)"
            + ("" if hot["last_to_first"] >= 0.7 else " (not met)"), "—"))
    return out


def _rows_scale(d: dict[str, Any] | None) -> list[Row]:
    """The growth table: open, write, replay and check from 10^3 to 10^6 (issue #37)."""
    if d is None:
        return [Row("growth", "open, write, replay, check 10^3..10^6", missing("scale"),
                    "exponent <= 1.1", "—")]
    out = []
    for r in d["rows"]:
        per = " (per write; the whole job's exponent is 1 more)" if r.get("per_write") else ""
        if r.get("once_per_key"):
            per = (" (once per key after an open; the job, each of the 1,000 keys written "
                   "once, grows as one such write)")
        out.append(Row(
            "growth", f"{r['job']}{per}: seconds at n = "
            + ", ".join(fmt(n) for n in r["n"]) + f"; fitted exponent [{r['source']}]",
            ", ".join(fmt(x) for x in r["seconds"]) + f"; {r['exponent']:+.2f}",
            "— (a part of the write)" if r.get("part")
            else f"job <= {d['target']}" + ("" if r["meets_target"] else " (not met)"), "—"))
    g = d.get("gc_full_pass")
    if g:  # results before it was measured lack it
        out.append(Row(
            "growth", "one full pass of CPython's cyclic GC in a process holding the store with "
            "every key built (a long-lived writer meets one each time its surviving objects "
            "grow by a quarter): seconds at n = " + ", ".join(fmt(n) for n in g["n"])
            + "; objects the GC tracks; fitted exponent [this run]",
            ", ".join(fmt(x) for x in g["seconds"]) + "; "
            + ", ".join(fmt(x) for x in g["tracked"]) + f"; {g['exponent']:+.2f}", "—", "—"))
    return out


def rows(results: dict[str, dict[str, Any] | None]) -> list[Row]:
    special = {"core": _rows_core, "algebra": _rows_algebra, "backends": _rows_backends,
               "sim": _rows_sim, "check": _rows_check, "proofs": _rows_proofs,
               "history": _rows_history, "toki_check": _rows_toki_check, "real": _rows_real,
               "growth": _rows_growth,
               "writers": _rows_writers, "integrity": _rows_integrity,
               "consumption": _rows_consumption, "write_cost": _rows_write_cost,
               "write_cost_pg": _rows_write_cost_pg,
               "open": _rows_open, "scale": _rows_scale}
    out: list[Row] = []
    for name, data in results.items():
        fn = special.get(name)
        out += fn(data) if fn else _rows_generic(name, data)
    return out


def _proof_cell(p: dict[str, Any]) -> str:
    def one(seconds: Any, status: Any, expected: str) -> str:
        return fmt(seconds) + ("" if status == expected else f" ({status})")

    return (f"{one(p['seconds'], p['status'], 'proved')} / "
            f"{one(p.get('weaker_level_seconds'), p.get('weaker_level_status'), 'counterexample')}")


def _table(title: str, header: list[str], body: list[list[str]]) -> list[str]:
    """A bold title line, then a markdown table, then a blank line."""
    return [title, "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in body), ""]


def _with_slope(sizes: list[dict[str, Any]]) -> list[list[str]]:
    body, prev = [], None
    for r in sizes:
        slope = "—"
        if prev is not None:
            ratio = math.log(r["check_s"] / prev["check_s"])
            slope = f"{ratio / math.log(r['txns'] / prev['txns']):.2f}"
        body.append([fmt(r["txns"]), fmt(r["ops"]), fmt(r["check_s"], "s"), fmt(r["txns_per_s"]),
                     fmt(r["peak_rss_during_check_mb"], "MB"), slope])
        prev = r
    return body


def growth(results: dict[str, dict[str, Any] | None]) -> list[str]:
    """Markdown: how each figure grows with the work, where a results file has several sizes."""
    lines: list[str] = []
    conflicts = results.get("growth")
    if conflicts:
        body = [[fmt(r["n"]), fmt(r["events"]), fmt(r["events_per_assertion"]),
                 fmt(r["write_seconds"], "s"), fmt(r["resolve_at_now_us"], "µs"),
                 fmt(r["resolve_at_past_valid_us"], "µs"),
                 fmt(r["resolve_at_past_system_us"], "µs")] for r in conflicts["conflicts"]]
        e = conflicts["growth_exponents"]
        body.append(["exponent", f"{e['events']:.2f}", "—", f"{e['write_seconds']:.2f}",
                     f"{e['resolve_at_now_us']:.2f}", f"{e['resolve_at_past_valid_us']:.2f}",
                     f"{e['resolve_at_past_system_us']:.2f}"])
        tail = conflicts.get("last_decade_exponents")
        if tail:
            body.append(["last decade", f"{tail['events']:.2f}", "—",
                         f"{tail['write_seconds']:.2f}", f"{tail['resolve_at_now_us']:.2f}",
                         f"{tail['resolve_at_past_valid_us']:.2f}",
                         f"{tail['resolve_at_past_system_us']:.2f}"])
        lines += _table("**n conflicting values on one key** (`python -m benchmarks.bench_growth`"
                        "; exponent = least-squares log-log slope over all n, last decade = "
                        "slope between the two largest n; the targets take the larger; writes "
                        "are O(n) each: a write rewrites the key's projection row, which names "
                        "every live version, here all n):",
                        ["n", "events", "events/assertion", "writes (all n)",
                         "resolve_at now", "past valid time", "past system time"], body)
    check = results.get("check")
    if check:
        lines += _table("**Adya checker vs history size** (slowest workload per size; exponent = "
                        "log-log slope from the previous size):",
                        ["txns", "ops", "check", "txns/s", "peak RSS", "exponent"],
                        _with_slope(_check_sizes(check)))
    history = results.get("history")
    if history:
        body, prev = [], {}
        for r in sorted(history["runs"], key=lambda r: (r["format"], r["txns"])):
            p = prev.get(r["format"])
            slope = "—" if p is None else (
                f"{math.log(r['load_s'] / p['load_s']) / math.log(r['txns'] / p['txns']):.2f}")
            body.append([r["format"], fmt(r["txns"]), fmt(r["mb"], "MB"), fmt(r["load_s"], "s"),
                         fmt(r.get("load_cpu_s"), "s"), fmt(r["check_s"], "s"),
                         fmt(r["peak_rss_load_and_check_mb"], "MB"), slope,
                         f"{r['loadavg_1min'][0]:.1f}"])
            prev[r["format"]] = r
        lines += _table("**Loading + checking Elle histories from files** (`python -m "
                        "benchmarks.bench_history`; exponent = log-log slope of load time):",
                        ["format", "txns", "file", "load", "load CPU", "check",
                         "peak RSS (both)", "exponent", "load avg"], body)
    tc = results.get("toki_check")
    if tc:
        body = []
        for r in sorted(tc["runs"], key=lambda r: (r["format"], r["txns"])):
            body.append([r["format"], fmt(r["txns"]), fmt(r["mb"], "MB"), r["path"],
                         fmt(r["wall_s"], "s"), fmt(r["cpu_s"], "s"), fmt(r["txns_per_s"]),
                         fmt(r["txns_per_cpu_s"]), fmt(r["peak_rss_mb"], "MB"),
                         f"{r['loadavg_1min'][0]:.1f}"])
        for f, e in sorted(tc["exponents"].items()):
            body.append([f, "exponent", "—", "—", f"{e['wall']:.2f}", f"{e['cpu']:.2f}", "—",
                         "—", "—", "—"])
            body.append([f, "last decade", "—", "—", f"{e['wall_last_decade']:.2f}",
                         f"{e['cpu_last_decade']:.2f}", "—", "—", "—", "—"])
        lines += _table("**`toki check` end to end vs history size** (`python -m "
                        "benchmarks.bench_history --toki-check`; load + check in a fresh "
                        "process per file; exponent = least-squares log-log slope of time over "
                        "all sizes, last decade = between the two largest):",
                        ["format", "txns", "file", "path", "wall", "CPU", "txns/s", "txns/CPU s",
                         "peak RSS", "load avg"], body)
    proofs = results.get("proofs")
    if proofs and proofs.get("growth_with_k"):
        ks = sorted({p["k"] for ps in proofs["growth_with_k"].values() for p in ps})
        body = []
        for name, ps in sorted(proofs["growth_with_k"].items()):
            by_k = {p["k"]: p for p in ps}
            body.append([f"`{name}`", *(_proof_cell(by_k[k]) if k in by_k else "—" for k in ks)])
        lines += _table("**z3 proof time vs the transaction bound k** (seconds; at the "
                        "precondition / one level below):", ["proof", *(f"k={k}" for k in ks)],
                        body)
    sim = results.get("sim")
    if sim and sim.get("programs"):
        lines += _table(
            "**Schedules explored per strategy vs Mazurkiewicz trace classes** "
            f"(`{SOURCES['sim']}`, {sim.get('mode', '?')} mode, budget "
            f"{fmt(sim.get('budget'))}; + = budget reached, classes not countable):",
            ["program", "exhaustive", "bound 1", "bound 2", "DPOR", "classes", "DPOR / classes",
             "final states"],
            [[f"`{r['program']}`", fmt(r["exhaustive"]) + ("" if r["exhaustive_complete"] else "+"),
              fmt(r["bounded_1"]), fmt(r["bounded_2"]), fmt(r["dpor"]), fmt(r["classes"]),
              fmt(r["ratio"]), fmt(r["final_states"])] for r in sim["programs"]])
    if sim and sim.get("relay"):
        lines += _table(
            "**The outbox relay under DPOR** (one scheduled delivery failure, one crash of the "
            "writer and of the relay; flagged = a final state that loses or invents history, "
            "by cause):",
            ["level", "outbox rows", "schedules", "flagged", "lost", "relay time", "phantom"],
            [[r["level"], str(r["rows"]), fmt(r["schedules"]) + ("" if r["complete"] else "+"),
              fmt(r["flagged"]), fmt(r["lost_rows"]), fmt(r["relay_time_rows"]),
              fmt(r["phantom_rows"])] for r in sim["relay"]])
    if not lines:
        lines = ["No results file has several sizes yet.", ""]
    return lines


def machines(results: dict[str, dict[str, Any] | None]) -> list[str]:
    lines = []
    for name, d in results.items():
        if not d or "machine" not in d:
            continue
        m = d["machine"]
        parts = [m.get("cpu") or m.get("machine") or "cpu unknown",
                 f"{m.get('cpu_count', '?')} cores"]
        if m.get("memory_gib"):
            parts.append(f"{m['memory_gib']} GiB")
        parts.append(f"{m.get('implementation', 'Python')} {m.get('python', '?')}")
        parts.append(m.get("platform", ""))
        if m.get("measured_at"):
            parts.append(f"measured {m['measured_at']}")
        lines.append(f"- `results/{name}.json`: " + ", ".join(p for p in parts if p))
        for section, sm in sorted(d.get("section_machines", {}).items()):
            lines.append(f"  - its `{section}` section rerun on {sm.get('cpu') or 'cpu unknown'}, "
                         f"{sm.get('cpu_count', '?')} cores, {sm.get('platform', '')}, measured "
                         f"{sm.get('measured_at', '?')}")
    return lines or ["- no results yet"]


def render(results: dict[str, dict[str, Any] | None]) -> str:
    out = [BEGIN, "<!-- generated by `python -m benchmarks.report`; do not edit by hand -->", "",
           "| area | figure | measured | target | anchor (published, other tools) |",
           "|---|---|---|---|---|"]
    for r in rows(results):
        out.append(f"| {r.area} | {r.figure} | {r.measured} | {r.target} | {r.anchor} |")
    out += ["", "**Machines**", "", *machines(results), "", "**Growth with the work**", ""]
    out += growth(results)
    out.append(END)
    return "\n".join(out)


def update(text: str, block: str) -> str:
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        return head + block + tail
    return text.rstrip("\n") + "\n\n" + block + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the README is stale")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    old = args.readme.read_text() if args.readme.exists() else ""
    new = update(old, render(load(args.results)))
    if args.check:
        if new != old:
            print(f"{args.readme} is out of date: run python -m benchmarks.report")
            return 1
        print(f"{args.readme} is up to date")
        return 0
    args.readme.write_text(new)
    print(f"wrote {args.readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
