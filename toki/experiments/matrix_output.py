"""The verdict matrix's output files: matrix.csv (the columns below), matrix.md (the grid and
every cell with its reason), matrix.tex and matrix.png, all from the decided rows
(`toki.experiments.verdicts`); nothing here decides a verdict.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ANOMALY_NAMES",
    "COLUMNS",
    "FAULT_NAMES",
    "MatrixResult",
    "render_latex",
    "render_markdown",
    "short",
    "write_outputs",
]

COLUMNS = (
    "system",
    "kind",
    "version",
    "faults",
    "anomaly",
    "verdict",
    "rate",
    "ci_low",
    "ci_high",
    "draw_min",
    "draw_max",
    "draws",
    "runs",
    "undecided",
    "mode",
    "power",
    "witness",
    "workloads",
    "exhaustive_workloads",
    "worst_workload",
    "worst_runs",
    "n2_schedule",
    "n2_judge",
    "n2_bounded",
    "construction",
)
RECORD_COLUMNS = (
    "system",
    "faults",
    "workload",
    "anomaly",
    "dpor",
    "mode",
    "seeds",
    "checked",
    "found",
    "undecided",
    "recovery_judge_calls",
    "judged_runs",
    "outside_found",
    "dpor_cut_after",
)
ANOMALY_NAMES = {
    "N1": "N1 replay inconsistency (fresh judge)",
    "RD": "recovery divergence (other causes)",
    "N2": "N2 belief-drift skew",
    "N3": "N3 audit erasure",
}
FAULT_NAMES = {"none": "no faults", "crash": "one crash per agent"}


@dataclass(slots=True)
class MatrixResult:
    rows: list[dict[str, Any]]  # decide()'s rows plus kind/version, in CSV order
    tasks: list[dict[str, Any]]  # run_task()'s results, in plan order
    seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    budget: str = "default"
    notes: list[str] = field(default_factory=list)  # footnotes (rows that are one model)

    def csv_rows(self) -> list[dict[str, str]]:
        return [_csv_row(r) for r in self.rows]

    def records(self) -> list[dict[str, str]]:
        """One row per task and anomaly: how its workload was explored and, per judge draw
        (";"-separated, in seed order), the runs checked, anomalous and undecided. The
        cells' verdicts can be re-derived from these (tests/experiments)."""
        out = []
        anomalies = self.config.get("experiment", {}).get("anomalies", [])
        for t in self.tasks:
            for a in anomalies:
                modes = {d["mode"] for d in t["draws"]}
                out.append(
                    {
                        "system": t["system"],
                        "faults": t["fault"],
                        "workload": t["workload"],
                        "anomaly": a,
                        "dpor": "yes" if t["dpor"] else "no",
                        "mode": "/".join(sorted(modes)),
                        "seeds": ";".join(str(d["seed"]) for d in t["draws"]),
                        **{
                            k: ";".join(str(d["counts"][a][k]) for d in t["draws"])
                            for k in ("checked", "found", "undecided")
                        },
                        "recovery_judge_calls": ";".join(
                            str(d["recovery_judge_calls"]) for d in t["draws"]
                        ),
                        "judged_runs": ";".join(str(d["judged_runs"]) for d in t["draws"]),
                        "outside_found": str(t["outside_found"][a]),
                        "dpor_cut_after": str(t["dpor_cut_after"]),
                    }
                )
        return out


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return "" if math.isnan(x) else f"{x:.4f}"
    return str(x)


def _csv_row(row: Mapping[str, Any]) -> dict[str, str]:
    return {c: _fmt(row[c]) for c in COLUMNS}


# ---------------------------------------------------------------- outputs


def write_outputs(result: MatrixResult, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "matrix.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(result.csv_rows())
    with open(folder / "workloads.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(RECORD_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(result.records())
    (folder / "matrix.md").write_text(render_markdown(result))
    (folder / "matrix.tex").write_text(render_latex(result))
    plot(result, folder / "matrix.png")


def core(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The rows of N1-N3 (the grids, the figure and the LaTeX table), without the
    derived-state classes, which have a section of their own (`derived_section`)."""
    from toki.real.derived import DERIVED

    return [r for r in rows if r["anomaly"] not in DERIVED]


def derived_section(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown: the real rows' derived-state cells, a table per fault setting (model
    rows abstain there by rule, so they are left out)."""
    from toki.experiments.verdicts import MODEL_DERIVED
    from toki.real.derived import DERIVED

    derived = [r for r in rows if r["anomaly"] in DERIVED]
    if not derived:
        return []
    mine = [r for r in derived if r.get("kind") == "real"]
    lines = [
        "## Derived state (real rows)",
        "",
        "The derived-state classes (docs/anomalies.md) on the real rows, by the same rules; "
        "a cell abstains where the library's adapter cannot read what the check needs. Every "
        f"model row abstains on them by rule ({MODEL_DERIVED}); those cells are in "
        "matrix.csv, not in the table of cells below.",
        "",
    ]
    if not mine:
        return [*lines, "No real rows were run (`toki matrix --real`).", ""]
    systems, faults, anomalies, at = _grid(mine)
    for f in faults:
        lines += [
            f"### {FAULT_NAMES.get(f, f)}",
            "",
            "| system | " + " | ".join(anomalies) + " |",
            "|---|" + "---|" * len(anomalies),
        ]
        for s in systems:
            cells = [short(at[s, f, a]) if (s, f, a) in at else "" for a in anomalies]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _grid(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[list[str], list[str], list[str], dict[Any, Any]]:
    systems = list(dict.fromkeys(r["system"] for r in rows))
    faults = list(dict.fromkeys(r["faults"] for r in rows))
    anomalies = list(dict.fromkeys(r["anomaly"] for r in rows))
    return systems, faults, anomalies, {(r["system"], r["faults"], r["anomaly"]): r for r in rows}


def short(row: Mapping[str, Any]) -> str:
    """A cell in a few characters: the rate and interval of an admits, the bound of a not
    found, and no number where nothing was measured."""
    v = row["verdict"]
    if v == "admits" and row["mode"] == "fault-free":
        return "admits (fault-free witness)"
    if v == "admits":
        return f"admits {row['rate']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    if v == "excludes":
        return "excludes (check)" if row["mode"] == "check" else "excludes"
    if v == "not found":
        return f"not found (< {row['ci_high']:.3f} per run of {row['worst_workload']})"
    return str(v)


def render_markdown(result: MatrixResult) -> str:
    exp = result.config.get("experiment", {})
    b = result.config.get("budgets", {}).get(result.budget, {})
    systems, faults, anomalies, at = _grid(core(result.rows))
    level = 100 * (1 - float(exp.get("alpha", 0.05)))
    lines = [
        "# Verdict matrix",
        "",
        f"Generated by `toki matrix --budget {result.budget}` from `matrix.toml`; the rules are "
        f"in `docs/verdict-matrix.md`. Judge p = {exp.get('judge_p')}; {b.get('draws')} judge "
        f"draws (seeds 0–{int(b.get('draws', 1)) - 1}); per draw and workload DPOR up to "
        f"{b.get('dpor')} runs ({b.get('dpor_crash')} with crashes), else random "
        f"{b.get('random')} + PCT {b.get('pct')} runs. Rate = mean over judge draws of the "
        f"fraction of checked runs showing the anomaly, with a {level:.0f} % Student-t interval "
        "over the draws (unit: the judge draw) and the lowest and highest draw. Excludes needs "
        "every workload of the cell explored to completion (DPOR finished in every draw); "
        "otherwise a cell without an anomalous run is not found, with the one-sided "
        f"{level:.0f} % upper bound of the rate per run on its sampled workload with the fewest "
        "runs (unit: a run of that workload) and the power there. `exh.` counts the "
        "workloads explored to completion. N2 witnesses are classified per workload by "
        "enumerating the judge's answers: judge-induced when a serial execution reaches the "
        "state under some answers, schedule-induced when none does under any answers, "
        f"bounded when {exp.get('n2_answer_runs')} serial runs did not finish the enumeration.",
        "",
    ]
    for note in result.notes:
        lines.append(f"Note: {note}.")
    if result.notes:
        lines.append("")
    for f in faults:
        lines += [
            f"## {FAULT_NAMES.get(f, f)}",
            "",
            "| system | " + " | ".join(ANOMALY_NAMES.get(a, a) for a in anomalies) + " |",
            "|---|" + "---|" * len(anomalies),
        ]
        for s in systems:
            lines.append(f"| {s} | " + " | ".join(short(at[s, f, a]) for a in anomalies) + " |")
        lines.append("")
    lines += derived_section(result.rows)
    changed = changed_by_faults(core(result.rows))
    if changed:
        lines += [
            "## Verdicts that change with crashes",
            "",
            "A run of the crash setting may crash each agent once, at any point (DPOR: every "
            "point; samples: a point drawn uniformly, or none), so its rates mix runs with and "
            "without crashes and are not comparable with the fault-free ones; compare the "
            "verdicts.",
            "",
        ]
        lines += [f"- {s} {ANOMALY_NAMES.get(a, a)}: {v0} → {v1}" for s, a, v0, v1 in changed]
        lines.append("")
    lines += n2_summary(result.rows)
    lines += [
        "## Cells",
        "",
        "| system | faults | anomaly | verdict | rate | CI | draws (min–max) | runs | "
        "undecided | mode | exh. | power | witness | why |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result.rows:
        if r.get("kind") != "real" and r["anomaly"] not in anomalies:
            continue  # a model row's derived-state cell: abstains by rule (above)
        w = f"[{Path(r['witness']).name}]({r['witness']})" if r["witness"] else ""
        if r["serial_other_draws"]:
            hits, tried = r["serial_other_draws"]
            w += f" (serially reachable under {hits} of {tried} other judge draws)"
        ci = "" if math.isnan(r["ci_high"]) else f"[{r['ci_low']:.4f}, {r['ci_high']:.4f}]"
        spread = "" if math.isnan(r["draw_min"]) else f"{r['draw_min']:.3f}–{r['draw_max']:.3f}"
        power = "" if math.isnan(r["power"]) else f"{r['power']:.3f}"
        lines.append(
            f"| {r['system']} | {r['faults']} | {r['anomaly']} | {r['verdict']} | "
            f"{_fmt(r['rate'])} | {ci} | {r['draws']}: {spread} | {r['runs']} | "
            f"{r['undecided']} | {r['mode']} | {r['exhaustive_workloads']}/{r['workloads']} | "
            f"{power} | {w} | {r['reason']} |"
        )
    return "\n".join(lines) + "\n"


def n2_split(rows: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Over the N2 admits with their own witnesses: how many cells have a schedule-induced
    witness on some workload, how many only judge-induced ones, and the workload counts."""
    own = [r for r in rows if r["anomaly"] == "N2" and r["verdict"] == "admits"]
    own = [r for r in own if r["mode"] != "fault-free"]
    return {
        "cells": len(own),
        "schedule_cells": sum(1 for r in own if r["n2_schedule"] > 0),
        "judge_only_cells": sum(1 for r in own if r["n2_schedule"] == 0 and r["n2_judge"] > 0),
        "schedule_workloads": sum(r["n2_schedule"] for r in own),
        "judge_workloads": sum(r["n2_judge"] for r in own),
        "bounded_workloads": sum(r["n2_bounded"] for r in own),
    }


def n2_summary(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    split = n2_split([r for r in rows if r.get("kind", "model") == "model"])
    if not split["cells"]:
        return []
    return [
        "## N2: schedule-induced or judge-induced",
        "",
        f"Of {split['cells']} model N2 admits with their own witnesses, "
        f"{split['schedule_cells']} have a schedule-induced witness on some workload (no serial "
        f"execution reaches its state under any answers of the judge, all enumerated) and "
        f"{split['judge_only_cells']} only judge-induced ones (a serial execution reaches the "
        f"state when the judge answers differently). Over workloads: "
        f"{split['schedule_workloads']} schedule-induced, {split['judge_workloads']} "
        f"judge-induced and {split['bounded_workloads']} bounded (the enumeration did not "
        "finish within its budget: neither is claimed) witnesses. Only schedule-induced N2 is "
        "a finding about interleavings.",
        "",
    ]


def changed_by_faults(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, str]]:
    """(system, anomaly, fault-free verdict, crash verdict) where the two differ."""
    systems, faults, anomalies, at = _grid(rows)
    if "none" not in faults or "crash" not in faults:
        return []
    out = []
    for s in systems:
        for a in anomalies:
            v0, v1 = at[s, "none", a]["verdict"], at[s, "crash", a]["verdict"]
            if v0 != v1:
                out.append((s, a, v0, v1))
    return out


def _tex(text: str) -> str:
    return text.replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")


def _tex_cell(r: Mapping[str, Any]) -> str:
    v = r["verdict"]
    if v == "admits" and r["mode"] == "fault-free":
        return r"adm.$^{f}$"
    if v == "admits":
        return f"{r['rate']:.2f}"
    if v == "excludes":
        return r"$\checkmark^{c}$" if r["mode"] == "check" else r"$\checkmark$"
    if v == "not found":
        return rf"$<${r['ci_high']:.3f}"
    return {"abstains": "abst.", "undecided": "und."}.get(str(v), str(v))


def render_latex(result: MatrixResult) -> str:
    systems, faults, anomalies, at = _grid(core(result.rows))
    n = len(anomalies)
    lines = [
        "% generated by `toki matrix` -- do not edit",
        r"\begin{tabular}{l" + ("c" * n + "|") * (len(faults) - 1) + "c" * n + "}",
        r"\toprule",
        " & "
        + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{FAULT_NAMES.get(f, f)}}}" for f in faults)
        + r" \\",
        "System & " + " & ".join(a for _ in faults for a in anomalies) + r" \\",
        r"\midrule",
    ]
    for s in systems:
        lines.append(
            _tex(s)
            + " & "
            + " & ".join(_tex_cell(at[s, f, a]) for f in faults for a in anomalies)
            + r" \\"
        )
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


# Okabe–Ito colours (distinguishable with the common colour-vision deficiencies); abstains
# and not found also carry a hatch, so they differ from measured zeros in grey print too.
STYLE = {
    "admits": ("#D55E00", ""),
    "excludes": ("#0072B2", ""),
    "not found": ("#56B4E9", "///"),
    "undecided": ("#F0E442", "..."),
    "abstains": ("#FFFFFF", "xxx"),
}


def plot(result: MatrixResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    systems, faults, anomalies, at = _grid(core(result.rows))
    ncol = len(anomalies)
    fig, axes = plt.subplots(
        1,
        len(faults),
        figsize=(2.0 * ncol * len(faults) + 2.6, 0.36 * len(systems) + 2.4),
        sharey=True,
        squeeze=False,
    )
    for k, f in enumerate(faults):
        ax = axes[0][k]
        for i, s in enumerate(systems):
            for j, a in enumerate(anomalies):
                r = at[s, f, a]
                colour, hatch = STYLE[r["verdict"]]
                moved = f != faults[0] and at[s, faults[0], a]["verdict"] != r["verdict"]
                ax.add_patch(
                    Rectangle(
                        (j - 0.5, i - 0.5),
                        1,
                        1,
                        facecolor=colour,
                        hatch=hatch,
                        edgecolor="black" if moved else "#555555",
                        linewidth=2.0 if moved else 0.5,
                    )
                )
                dark = r["verdict"] in ("admits", "excludes")
                box = None if dark else {"facecolor": "white", "edgecolor": "none", "pad": 1.0}
                ax.text(
                    j,
                    i,
                    _figure_text(r),
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="white" if dark else "black",
                    bbox=box,
                )
        ax.set_xlim(-0.5, ncol - 0.5)
        ax.set_ylim(len(systems) - 0.5, -0.5)
        ax.set_xticks(
            range(ncol),
            [
                ANOMALY_NAMES.get(a, a)
                .replace(" (", "\n(", 1)
                .replace("N1 replay", "N1 replay\n")
                .replace("skew", "\nskew")
                for a in anomalies
            ],
            fontsize=7,
            rotation=0,
        )
        ax.xaxis.tick_top()
        ax.set_yticks(range(len(systems)), systems, fontsize=8)
        ax.set_title(FAULT_NAMES.get(f, f), fontsize=9, pad=34)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.tick_params(length=0)
    legend = [
        Patch(facecolor=c, hatch=h, edgecolor="#555555", label=v) for v, (c, h) in STYLE.items()
    ]
    fig.legend(handles=legend, loc="lower center", ncol=len(STYLE), fontsize=7, frameon=False)
    notes = "; ".join(result.notes)
    caption = (
        "admits: rate of anomalous runs (mean over judge draws and workloads); excludes: none, "
        "DPOR exhaustive on every workload ('check': the model has no judge); not found: none, "
        "rate per run < the bound shown\n(on the sampled workload with the fewest runs). A "
        "thick border marks a verdict that changes with crashes (at most one crash per agent, "
        "at uniformly drawn points)."
    )
    fig.text(0.5, 0.045, caption + (f"\n{notes}" if notes else ""), ha="center", fontsize=6.5)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    fig.savefig(path, dpi=150, metadata={"Software": None})
    plt.close(fig)


def _figure_text(r: Mapping[str, Any]) -> str:
    v = r["verdict"]
    if v == "admits" and r["mode"] == "fault-free":
        return "admits\n(fault-free)"
    if v == "admits":
        return f"{r['rate']:.2f}" if r["rate"] >= 0.095 else f"{r['rate']:.3f}"
    if v == "excludes":
        return "0 (no judge)" if r["mode"] == "check" else "0 (exhaustive)"
    if v == "not found":
        return f"< {r['ci_high']:.3f}"
    return str(v)
