"""Paper assets from the benchmark results (benchmarks/results/*.json)."""

from __future__ import annotations

from pathlib import Path

from benchmarks import report as bench_report
from paper.parts.common import (
    Assets,
    Macros,
    _figure,
    _pdf,
    _plt,
    num,
    tabular,
    tex,
)
from paper.parts.proofs import LARGEST_K


def performance(root: Path, m: Macros) -> Assets:
    results = bench_report.load(root / "benchmarks" / "results")
    body = [[tex(r.area), tex(r.figure), tex(r.measured), tex(r.target), tex(r.anchor)]
            for r in bench_report.rows(results)]
    out: Assets = {"tab_perf.tex": tabular(r"@{}lP{4.4cm}P{2.6cm}P{2.1cm}P{4.6cm}@{}",
                                           ["area", "figure", "measured", "target", "anchor"],
                                           body, r"\scriptsize")}
    machines = [d["machine"] for d in results.values() if d and "machine" in d]
    if machines:
        mm = machines[0]
        m.set("BenchMachine", tex(f"{mm.get('cpu') or mm.get('machine')}, "
                                  f"{mm.get('cpu_count')} cores, Python {mm.get('python')}"))
    else:
        m.missing(["BenchMachine"], "make bench")
    check = results.get("check")
    cmd = bench_report.SOURCES["check"]
    if not check:
        m.missing(["CheckTxns", "CheckSeconds", "CheckRss"], cmd)
        out.update(_figure("fig_check", "Checker scaling figure", cmd, None))
    else:
        sizes = bench_report._check_sizes(check)
        big = sizes[-1]
        m.set("CheckTxns", f"{big['txns']:,}".replace(",", "{,}"))
        m.set("CheckSeconds", num(big["check_s"], 1))
        m.set("CheckRss", num(big["peak_rss_during_check_mb"] / 1024, 1))

        def draw() -> bytes:
            plt = _plt()
            fig, ax = plt.subplots(figsize=(3.4, 2.3))
            for wl, mark in (("register", "o"), ("append", "s")):
                pts = sorted((r["txns"], r["check_s"]) for r in check["runs"]
                             if r["workload"] == wl and r["planted"] == 0)
                ax.loglog([p[0] for p in pts], [p[1] for p in pts], mark + "-", ms=3,
                          label=f"{wl}, no planted anomaly")
            xs = [s["txns"] for s in sizes]
            ax.loglog(xs, [big["check_s"] * x / big["txns"] for x in xs], ":", color="0.5",
                      lw=1, label="linear reference")
            ax.set_xlabel("committed transactions")
            ax.set_ylabel("check time (s)")
            ax.legend(frameon=False, fontsize=7)
            data = _pdf(fig)
            plt.close(fig)
            return data

        out.update(_figure("fig_check", "Checker scaling figure", cmd, draw))
    sim = results.get("sim")
    sim_cmd = bench_report.SOURCES["sim"]
    if sim and sim.get("programs"):
        progs = sim["programs"]
        m.set("DporPrograms", len(progs))
        m.set("DporCounted", sum(r["classes"] is not None for r in progs))
        m.set("DporMaxRatio", num(sim["summary"]["max_dpor_ratio"] or 0, 2))
        m.set("ExhaustiveMax", f"{max(r['exhaustive'] for r in progs):,}".replace(",", "{,}"))
        m.set("SimStepsPerS", f"{sim['summary']['random_walk_steps_per_s']:,}".replace(",", "{,}"))
        ser = {r["program"]: r for r in progs}.get("doctors-ser")
        if ser:
            m.set("DporDoctorsSer", f"{ser['dpor']:,}".replace(",", "{,}"))
            m.set("ExhaustiveDoctorsSer", f"{ser['exhaustive']:,}".replace(",", "{,}"))
        else:
            m.missing(["DporDoctorsSer", "ExhaustiveDoctorsSer"], sim_cmd)
    else:
        m.missing(["DporPrograms", "DporCounted", "DporMaxRatio", "ExhaustiveMax",
                   "SimStepsPerS", "DporDoctorsSer", "ExhaustiveDoctorsSer"], sim_cmd)
    relay = {r["level"]: r for r in (sim or {}).get("relay", [])}
    if {"read_uncommitted", "read_committed", "snapshot"} <= relay.keys():
        ru, rc, si = relay["read_uncommitted"], relay["read_committed"], relay["snapshot"]
        m.set("RelayRows", ru["rows"])
        m.set("RelayRUSchedules", f"{ru['schedules']:,}".replace(",", "{,}"))
        m.set("RelayRUFlagged", f"{ru['flagged']:,}".replace(",", "{,}"))
        m.set("RelayRUPhantom", f"{ru['phantom_rows']:,}".replace(",", "{,}"))
        m.set("RelayCleanSchedules", f"{rc['schedules'] + si['schedules']:,}".replace(",", "{,}"))
        m.set("RelayCleanFlagged", rc["flagged"] + si["flagged"])
    else:
        m.missing(["RelayRows", "RelayRUSchedules", "RelayRUFlagged", "RelayRUPhantom",
                   "RelayCleanSchedules", "RelayCleanFlagged"], sim_cmd)
    proofs_b = results.get("proofs")
    if proofs_b:
        m.set("ProofBenchSeconds", num(proofs_b["default_bounds_total_seconds"], 1))
        m.set("ProofBenchTarget", f"{proofs_b.get('target_seconds', 60):g}")
        largest = proofs_b.get("largest_k_within_60s", {})
        for stmt, macro in LARGEST_K.items():
            m.set(macro, largest.get(stmt, "--"))
    else:
        m.missing(["ProofBenchSeconds", "ProofBenchTarget", *LARGEST_K.values()],
                  bench_report.SOURCES["proofs"])
    back = results.get("backends")
    if back and isinstance(back.get("postgres"), dict):
        pg = back["postgres"]
        m.set("PgAppend", f"{round(pg['batched_append_events_per_s']):,}".replace(",", "{,}"))
        m.set("PgReplay", f"{round(pg['open_and_replay_events_per_s']):,}".replace(",", "{,}"))
        sq = back["sqlite"]  # as the performance table prints it (three significant figures)
        m.set("SqliteAppend", _fig(sq["batched_append_events_per_s"]))
        m.set("SqliteEvents", _fig(sq["events"]))
    else:
        m.missing(["PgAppend", "PgReplay", "SqliteAppend", "SqliteEvents"],
                  bench_report.SOURCES["backends"])
    core_sq = (results.get("core") or {}).get("sqlite")
    if isinstance(core_sq, dict):
        m.set("SqliteCoreAppend", _fig(core_sq["batched_append_events_per_s"]))
        m.set("SqliteCoreEvents", _fig(core_sq["events"]))
    else:
        m.missing(["SqliteCoreAppend", "SqliteCoreEvents"], bench_report.SOURCES["core"])
    return out


def _fig(x: float) -> str:
    """A figure exactly as the performance table prints it (`benchmarks.report.fmt`)."""
    return tex(bench_report.fmt(x)).replace(",", "{,}")
