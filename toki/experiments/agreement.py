"""Model verdicts against real verdicts, as a held-out test (issue #34).

A model row is trusted as far as it agrees with the real library beside it on runs it was not
fitted to. The table is a function of the files `toki matrix --real` writes (matrix.csv and
the per-workload records workloads.csv), so it can be rebuilt and checked without re-running
anything (`python -m toki.experiments.agreement verdict_matrix`):

- **the same judge draws**: the model cell is re-decided (`verdicts.decide_cells`) on the
  seeds the real row ran (the real budget has fewer draws), from the per-workload records;
- **held out**: the comparison is repeated on `[agreement] held_out` workloads of matrix.toml
  (workloads no real witness was ever taken from, so no model was corrected on them);
- **frozen models**: each model's source hash, the date its file last changed and whether it
  changed after its real library's adapter existed (`fitted`: it may have been corrected
  against real witnesses, so its agreement is not an independent test);
- **distinct comparisons**: real deployments beside one model that give the same verdict on
  a cell count once; toki against its own library is a self-comparison, counted apart;
- **rates**: both rates over the same draws and their ratio (real / model) with a percentile
  bootstrap interval over the draws (the draw is the unit).

Every disagreement needs a resolution in `RESOLUTIONS`; one without is `unresolved`.
"""

from __future__ import annotations

import csv
import hashlib
import inspect
import math
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from toki.experiments.verdicts import cell_of, decide_cells

__all__ = [
    "AGREEMENT_COLUMNS",
    "NEGATIVE",
    "RESOLUTIONS",
    "agree",
    "agreement",
    "model_provenance",
    "rate_ratio",
    "read_records",
    "read_rows",
    "render_agreement",
    "resolution",
    "write_agreement",
]

AGREEMENT_COLUMNS = (
    "model",
    "model_version",
    "model_hash",
    "model_changed",
    "fitted",
    "real",
    "version",
    "comparison",
    "faults",
    "anomaly",
    "seeds",
    "model_verdict",
    "real_verdict",
    "agree",
    "model_rate",
    "real_rate",
    "ratio",
    "ratio_ci",
    "held_out_model",
    "held_out_real",
    "held_out_agree",
    "duplicate_of",
    "resolution",
)
NEGATIVE = ("excludes", "not found")
RESAMPLES = 2000
SEED = 20240601

# Every disagreement between a model cell and its real cell, explained: (real system,
# anomaly) -> why. "*" matches any anomaly. Written after investigating the real witness.
RESOLUTIONS: dict[tuple[str, str], str] = {
    ("mem0-1.0.11", "RD"): (
        "A stated simplification of the model: it writes a FAISS `update` as one atomic "
        "upsert, while mem0's FAISS store deletes the point and inserts it again (two steps, "
        "docs/real.md). The real witness (duplicate-delivery) has two updates of one memory "
        "interleave inside their delete/insert pairs, so the point written last is the one "
        "whose clock read came first; `Memory.history` lists the rows by that time and "
        "re-applies the other value. The simplification entered the model in the same commit "
        "as this resolution, after the real witness was seen: the model is fitted here and "
        "its verdict on this cell is not evidence of agreement."
    ),
    ("cognee-1.6.5", "RD"): (
        "Different versions, not a race: the model row describes Cognee at a8f9760b, whose "
        "opt-in `functional_relationships` keeps only the most recently updated edge of a "
        "functional relation, so a recovery that re-runs cognify with the replay's clock can "
        "move the winner (RD without faults). Release 1.6.5 has no such option (cognify "
        "raises TypeError for it) and keeps every edge whatever the order, so a recovery "
        "rebuilds the same graph: 0 of 96 real runs without faults diverged. With crashes "
        "both admit RD (a crashed cognify leaves a claim stored without its edge). The model "
        "is not corrected: it is right about the revision it models; a real row of that "
        "revision would need a release that has it."
    ),
}


def agree(model: str, real: str) -> str:
    """yes: both admit, or neither found it (excludes / not found); not compared: either
    abstains or is undecided; no otherwise."""
    if model == "admits" and real == "admits":
        return "yes"
    if model in NEGATIVE and real in NEGATIVE:
        return "yes"
    if {model, real} & {"abstains", "undecided"}:
        return "not compared"
    return "no"


def resolution(real: str, anomaly: str) -> str:
    return RESOLUTIONS.get((real, anomaly)) or RESOLUTIONS.get((real, "*")) or ""


# ---------------------------------------------------------------- the written files


def read_rows(path: Path) -> list[dict[str, Any]]:
    """matrix.csv back as rows: numbers as floats (NaN where empty), counts as ints."""
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            row: dict[str, Any] = dict(r)
            for k in ("rate", "ci_low", "ci_high", "draw_min", "draw_max", "power"):
                row[k] = float(r[k]) if r.get(k) else math.nan
            out.append(row)
    return out


def read_records(path: Path) -> list[dict[str, Any]]:
    """workloads.csv back as task records (`exploration.explore_task`'s shape, without the
    witnesses): one per system × fault setting × workload."""
    tasks: dict[tuple[str, str, str], dict[str, Any]] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            key = (r["system"], r["faults"], r["workload"])
            seeds = [int(s) for s in r["seeds"].split(";")]
            t = tasks.setdefault(
                key,
                {
                    "system": r["system"],
                    "fault": r["faults"],
                    "workload": r["workload"],
                    "dpor": r["dpor"] == "yes",
                    "outside_found": {},
                    "draws": [
                        {
                            "seed": s,
                            "mode": r["mode"],
                            "recovery_judge_calls": int(c),
                            "judged_runs": int(j),
                            "counts": {},
                        }
                        for s, c, j in zip(
                            seeds,
                            r["recovery_judge_calls"].split(";"),
                            r["judged_runs"].split(";"),
                            strict=True,
                        )
                    ],
                },
            )
            t["outside_found"][r["anomaly"]] = int(r["outside_found"])
            parts = {
                k: [int(x) for x in r[k].split(";")] for k in ("checked", "found", "undecided")
            }
            for i, d in enumerate(t["draws"]):
                d["counts"][r["anomaly"]] = {k: v[i] for k, v in parts.items()}
    return list(tasks.values())


def _subset(
    records: Sequence[Mapping[str, Any]], seeds: set[int] | None, workloads: set[str] | None
) -> list[dict[str, Any]]:
    out = []
    for r in records:
        if workloads is not None and r["workload"].split(":")[0] not in workloads:
            continue
        draws = [d for d in r["draws"] if seeds is None or d["seed"] in seeds]
        out.append({**r, "draws": draws})
    return out


def redecide(
    system: str,
    records: Sequence[Mapping[str, Any]],
    rows: Mapping[tuple[str, str, str], Mapping[str, Any]],
    experiment: Mapping[str, Any],
    *,
    judge_free: bool,
    abstains: Mapping[str, str],
) -> dict[tuple[str, str], dict[str, Any]]:
    """The cells of one row re-decided on a subset of its records, by the same rules; an
    admits keeps the full cell's replayed witness ((faults, anomaly) -> row)."""
    cells = []
    for fault in experiment.get("faults", ["none"]):
        rs = [r for r in records if r["fault"] == fault]
        if not rs or not rs[0]["draws"]:
            continue
        for anomaly in experiment["anomalies"]:
            full = rows.get((system, fault, anomaly), {})
            witness = str(full.get("witness", "")) if full.get("mode") != "fault-free" else ""
            cell = cell_of(
                system,
                fault,
                anomaly,
                rs,
                judge_free=judge_free,
                abstain_reason=str(abstains.get(anomaly, "")),
            )
            if witness and full.get("verdict") == "admits":
                cell = replace(cell, witness=witness, witness_replays=True)
            cells.append(cell)
    return {(r["faults"], r["anomaly"]): r for r in decide_cells(cells, experiment)}


# ---------------------------------------------------------------- provenance


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def model_provenance(model: str, real: str) -> dict[str, str]:
    """The model's source file hash, the date it last changed (git) and whether it changed
    after the real library's adapter was added (`fitted`; "unknown" outside a git checkout)."""
    from toki.errors import TokiError
    from toki.real.systems import get_real_system
    from toki.systems.registry import get_system

    source = Path(inspect.getfile(type(get_system(model))))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    root = Path(__file__).resolve().parents[2]
    rel = source.resolve().relative_to(root).as_posix() if source.is_relative_to(root) else ""
    try:
        adapter = f"toki/real/adapters/{get_real_system(real).adapter}.py"
    except TokiError:
        adapter = ""
    changed = _git("-C", str(root), "log", "-1", "--format=%cs", "--", rel) if rel else ""
    added = (
        _git("-C", str(root), "log", "--format=%H", "--diff-filter=A", "--", adapter)
        if adapter
        else ""
    )
    fitted = "unknown"
    if rel and added:
        first = added.split()[-1]
        later = _git("-C", str(root), "rev-list", "--count", f"{first}..HEAD", "--", rel)
        fitted = "unknown" if not later else ("yes" if int(later) > 0 else "no")
    return {"model_hash": digest, "model_changed": changed or "unknown", "fitted": fitted}


# ---------------------------------------------------------------- rates


def _draw_rates(records: Sequence[Mapping[str, Any]], anomaly: str) -> dict[int, float]:
    """Per seed, the mean over workloads of each workload's anomalous fraction."""
    by_seed: dict[int, list[float]] = {}
    for r in records:
        for d in r["draws"]:
            c = d["counts"][anomaly]
            if c["checked"] > 0:
                by_seed.setdefault(d["seed"], []).append(c["found"] / c["checked"])
    return {s: sum(v) / len(v) for s, v in by_seed.items()}


def rate_ratio(
    model: Mapping[int, float], real: Mapping[int, float], alpha: float = 0.05
) -> tuple[float, float, float] | None:
    """(real mean / model mean, bootstrap interval) over the seeds both ran, resampling
    seeds in pairs; None where the model's mean is 0 or no seed is shared."""
    seeds = sorted(set(model) & set(real))
    if not seeds:
        return None
    m = np.array([model[s] for s in seeds])
    r = np.array([real[s] for s in seeds])
    if m.mean() <= 0:
        return None
    rng = np.random.default_rng(SEED)
    idx = rng.integers(0, len(seeds), size=(RESAMPLES, len(seeds)))
    mm, rr = m[idx].mean(axis=1), r[idx].mean(axis=1)
    ratios = rr[mm > 0] / mm[mm > 0]
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    return float(r.mean() / m.mean()), float(low), float(high)


# ---------------------------------------------------------------- the table


def agreement(
    rows: Sequence[Mapping[str, Any]],
    records: Sequence[Mapping[str, Any]],
    pairs: Sequence[tuple[str, str]],
    config: Mapping[str, Any],
) -> list[dict[str, str]]:
    """Cell by cell: each real cell beside its model cell, on the same seeds, then on the
    held-out workloads."""
    from toki.systems.registry import get_system

    exp = config["experiment"]
    held = set(config.get("agreement", {}).get("held_out", []))
    at = {(r["system"], r["faults"], r["anomaly"]): r for r in rows}
    seen: dict[tuple[str, ...], str] = {}
    out = []
    for model, name in pairs:
        real_row = f"{name} (real)"
        real_recs = [r for r in records if r["system"] == real_row]
        if not real_recs:
            continue
        seeds = {d["seed"] for r in real_recs for d in r["draws"]}
        sysm = get_system(model)
        free = not getattr(sysm, "uses_judge", True)
        abstains = {a: str(why) for a, why in dict(sysm.abstains).items()}
        model_recs = [r for r in records if r["system"] == model]

        same, m_held, r_held = (
            redecide(system, recs, at, exp, judge_free=free, abstains=abstains)
            for system, recs in (
                (model, _subset(model_recs, seeds, None)),
                (model, _subset(model_recs, seeds, held)),
                (real_row, _subset(real_recs, None, held)),
            )
        )
        prov = model_provenance(model, name)
        self_test = model.startswith("toki")
        for (fault, anomaly), m in same.items():
            r = at.get((real_row, fault, anomaly))
            if r is None:
                continue
            verdict = agree(m["verdict"], r["verdict"])
            held_m, held_r = m_held.get((fault, anomaly)), r_held.get((fault, anomaly))
            ratio = None
            if m["verdict"] == "admits" and r["verdict"] == "admits":
                ratio = rate_ratio(
                    _draw_rates(
                        [x for x in _subset(model_recs, seeds, None) if x["fault"] == fault],
                        anomaly,
                    ),
                    _draw_rates([x for x in real_recs if x["fault"] == fault], anomaly),
                    float(exp["alpha"]),
                )
            # one model cell against two deployments that say the same is one comparison
            key = (model, fault, anomaly, m["verdict"], r["verdict"])
            held_agree = (
                agree(held_m["verdict"], held_r["verdict"]) if held_m and held_r else ""
            )
            differs = verdict == "no" or held_agree == "no"
            why = resolution(name, anomaly) if differs else ""
            out.append(
                {
                    "model": model,
                    "model_version": str(at.get((model, fault, anomaly), {}).get("version", "")),
                    **prov,
                    "real": name,
                    "version": str(r["version"]),
                    "comparison": "self" if self_test else "third-party",
                    "faults": fault,
                    "anomaly": anomaly,
                    "seeds": f"{min(seeds)}-{max(seeds)}",
                    "model_verdict": m["verdict"],
                    "real_verdict": r["verdict"],
                    "agree": verdict,
                    "model_rate": _num(m["rate"]),
                    "real_rate": _num(r["rate"]),
                    "ratio": "" if ratio is None else f"{ratio[0]:.2f}",
                    "ratio_ci": "" if ratio is None else f"[{ratio[1]:.2f}, {ratio[2]:.2f}]",
                    "held_out_model": held_m["verdict"] if held_m else "",
                    "held_out_real": held_r["verdict"] if held_r else "",
                    "held_out_agree": held_agree,
                    "duplicate_of": seen.get(key, ""),
                    "resolution": why or ("unresolved" if differs else ""),
                }
            )
            seen.setdefault(key, name)
    return out


def _num(x: Any) -> str:
    return "" if not isinstance(x, float) or math.isnan(x) else f"{x:.4f}"


def counts(table: Sequence[Mapping[str, str]]) -> dict[str, dict[str, int]]:
    """Per comparison kind (self / third-party): distinct comparisons by outcome, on the
    same seeds and on the held-out workloads; agreements split by what agreed."""
    out: dict[str, dict[str, int]] = {}
    for kind in ("third-party", "self"):
        rs = [r for r in table if r["comparison"] == kind and not r["duplicate_of"]]
        fitted = [r for r in rs if r["fitted"] != "no"]
        out[kind] = {
            "distinct": len(rs),
            "duplicates": sum(1 for r in table if r["comparison"] == kind and r["duplicate_of"]),
            "agree_admits": sum(
                1 for r in rs if r["agree"] == "yes" and r["model_verdict"] == "admits"
            ),
            "agree_absent": sum(
                1 for r in rs if r["agree"] == "yes" and r["model_verdict"] != "admits"
            ),
            "disagree": sum(1 for r in rs if r["agree"] == "no"),
            "not_compared": sum(1 for r in rs if r["agree"] == "not compared"),
            "fitted": len(fitted),
            "held_out_yes": sum(1 for r in rs if r["held_out_agree"] == "yes"),
            "held_out_no": sum(1 for r in rs if r["held_out_agree"] == "no"),
            "held_out_nc": sum(1 for r in rs if r["held_out_agree"] == "not compared"),
            "held_out_unfitted_yes": sum(
                1 for r in rs if r["held_out_agree"] == "yes" and r["fitted"] == "no"
            ),
            "held_out_unfitted": sum(
                1 for r in rs if r["held_out_agree"] in ("yes", "no") and r["fitted"] == "no"
            ),
        }
    return out


def render_agreement(
    table: Sequence[Mapping[str, str]],
    *,
    budget: str,
    missing: Sequence[str],
    held_out: Sequence[str],
) -> str:
    c = counts(table)
    lines = [
        "# Model verdicts against real verdicts",
        "",
        f"Generated by `toki matrix --real` (real budget `{budget}`) and rebuilt from "
        "matrix.csv and workloads.csv by `python -m toki.experiments.agreement "
        "verdict_matrix`. Every cell of a real row (the library itself, `toki.real`) beside "
        "its model's cell, by the same rules (`docs/verdict-matrix.md`), on the same judge "
        "draws: the model cell is re-decided on the seeds the real row ran (`seeds`) from the "
        "per-workload records. Agree: both admit, or neither found the anomaly (excludes / "
        "not found); abstains and undecided cells are not compared. Only N1-N3 are compared: "
        "the derived-state columns are left out (every model abstains there by rule). The "
        "ratio is real rate / "
        "model rate over those seeds with a 95 % percentile bootstrap interval (unit: the "
        "judge draw); a real schedule has many more steps than the model's, so rates are "
        "compared as a ratio, not read as equal.",
        "",
        f"**Held out**: the same comparison on the workloads no real witness was taken from "
        f"({', '.join(held_out) or 'none'}; `[agreement] held_out` in matrix.toml). "
        "**Fitted**: the model's file changed after its real library's adapter was added, so "
        "it may have been corrected against real runs; its agreement is not an independent "
        "test. **Distinct**: a second real deployment beside one model that gives the same "
        "verdict on a cell is listed but not counted again. **Self**: toki's model against "
        "toki's own library, counted apart.",
        "",
        "| comparisons | distinct | agree: both admit | agree: neither found | disagree | "
        "not compared | fitted model | held out: agree / disagree / not compared | held out, "
        "unfitted model: agree of compared |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind in ("third-party", "self"):
        k = c[kind]
        lines.append(
            f"| {kind} | {k['distinct']} (+{k['duplicates']} duplicates) | {k['agree_admits']} "
            f"| {k['agree_absent']} | {k['disagree']} | {k['not_compared']} | {k['fitted']} | "
            f"{k['held_out_yes']} / {k['held_out_no']} / {k['held_out_nc']} | "
            f"{k['held_out_unfitted_yes']} of {k['held_out_unfitted']} |"
        )
    lines.append("")
    if missing:
        lines += ["Real rows missing (not in matrix.csv: no environment, or not run):", ""]
        lines += [f"- {m}" for m in missing]
        lines.append("")
    lines += [
        "## Models",
        "",
        "| model | revision modelled | source hash | last changed | fitted | real | real version |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in {(r["model"], r["real"]): r for r in table}.values():
        lines.append(
            f"| {r['model']} | {r['model_version']} | `{r['model_hash']}` | "
            f"{r['model_changed']} | {r['fitted']} | {r['real']} | {r['version']} |"
        )
    lines += [
        "",
        "## Cells",
        "",
        "| model | real | faults | anomaly | seeds | model | real | agree | model rate | "
        "real rate | ratio [95 % CI] | held out (model / real) | duplicate of |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table:
        held = (
            f"{r['held_out_model']} / {r['held_out_real']}: {r['held_out_agree']}"
            if r["held_out_agree"]
            else ""
        )
        lines.append(
            f"| {r['model']} | {r['real']} | {r['faults']} | {r['anomaly']} | {r['seeds']} | "
            f"{r['model_verdict']} | {r['real_verdict']} | {r['agree']} | {r['model_rate']} | "
            f"{r['real_rate']} | {r['ratio']} {r['ratio_ci']} | {held} | {r['duplicate_of']} |"
        )
    lines += [
        "",
        "## Abstentions and cells true by construction",
        "",
        "A real row takes its model's abstentions (`toki.systems.base.abstentions`): N1 and RD "
        "abstain for a system that records neither its inputs nor its decisions but keeps its "
        "rows (LangGraph's store, in memory or PostgresStore alike): a restart reads the rows "
        "back as they are, so no recovery rebuilds a second state to compare. A system that "
        "records nothing at all (A-MEM) does have a recovery, a restart that rebuilds an empty "
        "memory, so its RD is 1.000 by construction (matrix.csv marks it `construction`), "
        "not a finding about interleavings.",
        "",
        "## Disagreements and their resolution",
        "",
    ]
    disagreements = [r for r in table if r["agree"] == "no" or r["held_out_agree"] == "no"]
    if not disagreements:
        lines.append("None.")
    for r in disagreements:
        lines.append(
            f"- **{r['real']} {r['anomaly']} ({r['faults']})**: model {r['model_verdict']}, "
            f"real {r['real_verdict']}; held out {r['held_out_model'] or '-'} / "
            f"{r['held_out_real'] or '-'}; model fitted: {r['fitted']}. "
            f"{resolution(r['real'], r['anomaly']) or 'unresolved'}"
        )
    lines.append("")
    return "\n".join(lines)


def write_agreement(
    folder: Path,
    config: Mapping[str, Any],
    pairs: Sequence[tuple[str, str]],
    *,
    budget: str,
    missing: Sequence[str] = (),
) -> list[dict[str, str]]:
    """Build the table from folder's matrix.csv and workloads.csv; write agreement.csv/.md."""
    table = agreement(
        read_rows(folder / "matrix.csv"), read_records(folder / "workloads.csv"), pairs, config
    )
    with open(folder / "agreement.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(AGREEMENT_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
    held = list(config.get("agreement", {}).get("held_out", []))
    text = render_agreement(table, budget=budget, missing=missing, held_out=held)
    (folder / "agreement.md").write_text(text)
    return table


def main(argv: Sequence[str] | None = None) -> int:
    """python -m toki.experiments.agreement [FOLDER] [--config matrix.toml]"""
    from toki.cli_parser import TokiParser
    from toki.errors import TokiError
    from toki.experiments.matrix_plan import load_config
    from toki.real.systems import SYSTEMS

    parser = TokiParser(
        prog="python -m toki.experiments.agreement",
        description="Rebuild agreement.csv/.md from a matrix folder",
    )
    parser.add_argument("folder", nargs="?", default="verdict_matrix", type=Path)
    parser.add_argument("--config", type=Path, default=None)
    parser.add_argument("--real-budget", default="real")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config or args.folder / "matrix.toml")
        rows = read_rows(args.folder / "matrix.csv")
        models = list(dict.fromkeys(r["system"] for r in rows if r.get("kind") != "real"))
        present = {r["system"] for r in rows if r.get("kind") == "real"}
        ready, missing = [], []
        for model in models:
            for name, system in sorted(SYSTEMS.items()):
                if system.model != model:
                    continue
                if f"{name} (real)" in present:
                    ready.append((model, name))
                else:
                    missing.append(f"{name}: no real row in matrix.csv")
        write_agreement(args.folder, config, ready, budget=args.real_budget, missing=missing)
    except (TokiError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.folder / 'agreement.csv'} and agreement.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
