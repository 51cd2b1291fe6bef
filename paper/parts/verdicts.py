"""Paper assets from the verdict matrix, the model-versus-real agreement table and the
PostgreSQL grid (files `toki matrix` and `toki pg-grid` write)."""

from __future__ import annotations

import csv
import io
import json
import re
import tomllib
from pathlib import Path
from typing import Any

from paper.parts.common import (
    Assets,
    Macros,
    _figure,
    code,
    missing_block,
    num,
    read,
    tabular,
    tex,
)

PG_GRID = (Path("verdict_matrix/pg_grid.csv"), Path("verdict_matrix/pg-grid.csv"),
           Path("benchmarks/results/pg_grid.json"), Path("verdict_matrix/pg_grid.json"))


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _generic_table(rows: list[dict[str, Any]], limit: int = 40) -> str:
    cols = list(rows[0])[:8]
    body = [[tex(r.get(c, "")) for c in cols] for r in rows[:limit]]
    note = "" if len(rows) <= limit else f"% {len(rows) - limit} more rows in the result file\n"
    return tabular("@{}" + "l" * len(cols) + "@{}", [tex(c) for c in cols], body,
                   r"\scriptsize") + note


MATRIX_NAMES = {"N1": "N1", "RD": "RD", "N2": "N2", "N3": "N3"}
FAULT_TITLES = {"none": "no faults", "crash": "one crash per agent"}


def _matrix_cell(r: dict[str, str]) -> str:
    """A verdict in a few characters: an admits' rate, a not found's bound, marks otherwise;
    then how many of the cell's workloads were explored to completion (k/n), a `b` for true
    by construction and, for N2, the schedule-induced / judge-induced witness counts."""
    v, mode = r["verdict"], r.get("mode", "")
    if v == "admits" and mode == "fault-free":
        return r"adm.$^{f}$"
    if v == "admits":
        text = num(float(r["rate"]), 2) if r["rate"] else "adm."
    elif v == "excludes":
        text = r"excl.$^{c}$" if mode == "check" else "excl."
    elif v == "not found":
        text = r"$<$" + num(float(r["ci_high"]), 3)
    else:
        return {"abstains": "abst.", "undecided": "und."}.get(v, tex(v))
    marks = []
    if r.get("workloads"):
        marks.append(f"{r['exhaustive_workloads']}/{r['workloads']}")
    if r.get("construction") == "yes":
        marks.append(r"\dagger")
    out = text + (r"$^{" + ",".join(marks) + "}$" if marks else "")
    if r["anomaly"] == "N2" and v == "admits" and r.get("n2_schedule", "") != "":
        out += rf"$_{{{r['n2_schedule']}s/{r['n2_judge']}j}}$"
    return out


def matrix(root: Path, m: Macros) -> Assets:
    cmd = "toki matrix"
    names = ["MatrixSystems", "MatrixCells", "MatrixAdmits", "MatrixExcludes", "MatrixNotFound",
             "MatrixAbstains", "MatrixUndecided", "MatrixDraws", "MatrixCrashChanged",
             "MatrixCrashAdmits", "MatrixSameModel", "MatrixExhaustiveCells",
             "MatrixNoneExhaustive", "MatrixWorkloads", "MatrixCheckCells", "MatrixConstruction",
             "MatrixNTwoAdmits", "MatrixNTwoSchedule", "MatrixNTwoJudgeOnly",
             "MatrixNTwoScheduleWl", "MatrixNTwoJudgeWl", "MatrixNTwoBoundedWl",
             "MatrixWorstBound", "MatrixConfidence",
             "MatrixOtherDraws", "MatrixRealChecked", "MatrixModelOnly"]
    text = read(root, "verdict_matrix/matrix.csv")
    if not text or not text.strip():
        m.missing(names, cmd)
        return {"tab_matrix.tex": missing_block("Verdict matrix", cmd),
                **_figure("fig_matrix", "Verdict-matrix figure", cmd, None)}
    rows = _csv_rows(text)
    if rows and "kind" in rows[0]:  # real rows (toki matrix --real) have a table of their own
        rows = [r for r in rows if r["kind"] != "real"] or rows
    # the derived-state classes (model rows abstain there by rule) are not in this table
    rows = [r for r in rows if r.get("anomaly") in MATRIX_NAMES] or rows
    if not {"system", "anomaly", "verdict", "faults"} <= set(rows[0]):
        m.missing(names, cmd)
        return {"tab_matrix.tex": _generic_table(rows),
                **_figure("fig_matrix", "Verdict-matrix figure", cmd, None)}
    systems = list(dict.fromkeys(r["system"] for r in rows))
    faults = list(dict.fromkeys(r["faults"] for r in rows))
    anomalies = list(dict.fromkeys(r["anomaly"] for r in rows))
    at = {(r["system"], r["faults"], r["anomaly"]): r for r in rows}
    verdicts = [r["verdict"] for r in rows]
    m.set("MatrixSystems", len(systems))
    m.set("MatrixCells", len(rows))
    for macro, verdict in (("MatrixAdmits", "admits"), ("MatrixExcludes", "excludes"),
                           ("MatrixNotFound", "not found"), ("MatrixAbstains", "abstains"),
                           ("MatrixUndecided", "undecided")):
        m.set(macro, verdicts.count(verdict))
    m.set("MatrixDraws", max(int(r["draws"]) for r in rows if r["draws"]))
    changed = [(s, a) for s in systems for a in anomalies
               if "none" in faults and "crash" in faults
               and at[s, "none", a]["verdict"] != at[s, "crash", a]["verdict"]]
    m.set("MatrixCrashChanged", len(changed))
    m.set("MatrixCrashAdmits", tex(", ".join(
        f"{s} {a}" for s, a in changed if at[s, "crash", a]["verdict"] == "admits") or "none"))
    _matrix_split_macros(rows, m, *_experiment(root))
    same = _same_model_note(read(root, "verdict_matrix/matrix.md") or "")
    m.set("MatrixSameModel", same or "no two rows are the same model")
    checked = real_checked(root)
    m.set("MatrixRealChecked", tex(", ".join(s for s in systems if s in checked) or "none"))
    m.set("MatrixModelOnly", sum(1 for s in systems if s not in checked))
    n = len(anomalies)
    spec = "@{}l" + "|".join("c" * n for _ in faults) + "@{}"
    lines = ["% generated by paper/assets.py; do not edit", r"{\scriptsize",
             r"\begin{tabular}{" + spec + "}", r"\toprule",
             " & " + " & ".join(rf"\multicolumn{{{n}}}{{c}}{{{tex(FAULT_TITLES.get(f, f))}}}"
                                for f in faults) + r" \\",
             "system & " + " & ".join(tex(MATRIX_NAMES.get(a, a)) for _ in faults
                                      for a in anomalies) + r" \\",
             r"\midrule"]
    for s in systems:
        mark = r"$^{\mathrm{R}}$" if s in checked else ""
        lines.append(code(s) + mark + " & " + " & ".join(
            _matrix_cell(at[s, f, a]) for f in faults for a in anomalies) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}}", ""]
    png = root / "verdict_matrix" / "matrix.png"
    figure: Assets = {}
    if png.exists():
        figure = {"fig_matrix.png": png.read_bytes(),
                  "fig_matrix.tex": "% generated by paper/assets.py; do not edit\n"
                  r"\includegraphics[width=\linewidth]{generated/fig_matrix.png}" + "\n"}
    else:
        figure = _figure("fig_matrix", "Verdict-matrix figure", cmd, None)
    return {"tab_matrix.tex": "\n".join(lines), **figure}


def real_checked(root: Path) -> set[str]:
    """The model rows a real library was run beside (the `model` column of
    verdict_matrix/agreement.csv, `toki matrix --real`, and of the agreement tables of
    single-row runs in its subfolders, such as letta-small/): the table marks them R; every
    other row is checked only on its model."""
    files = ["verdict_matrix/agreement.csv"] + sorted(
        str(p.relative_to(root)) for p in (root / "verdict_matrix").glob("*/agreement.csv")
    )
    rows = []
    for rel in files:
        text = read(root, rel)
        rows += _csv_rows(text) if text and text.strip() else []
    return {r["model"] for r in rows if r.get("model") and r.get("real")}


def _matrix_split_macros(
    rows: list[dict[str, str]], m: Macros, confidence: str, other_draws: str
) -> None:
    """How many cells were explored to completion, N1 checks, true by construction, and the
    N2 admits split into schedule-induced and judge-induced witnesses."""
    measured = [r for r in rows if r["verdict"] not in ("abstains", "") and r.get("workloads")]
    m.set("MatrixExhaustiveCells", sum(
        1 for r in measured if r["exhaustive_workloads"] == r["workloads"]))
    m.set("MatrixNoneExhaustive", sum(1 for r in measured if r["exhaustive_workloads"] == "0"))
    m.set("MatrixWorkloads", max((int(r["workloads"]) for r in measured), default=0))
    m.set("MatrixCheckCells", sum(1 for r in rows if r["mode"] == "check"))
    m.set("MatrixConstruction", tex(", ".join(
        f"{r['system']} {r['anomaly']}" for r in rows
        if r.get("construction") == "yes" and r["verdict"] == "admits"
        and r["faults"] == "none") or "none"))
    n2 = [r for r in rows if r["anomaly"] == "N2" and r["verdict"] == "admits"
          and r["mode"] != "fault-free" and r.get("n2_schedule", "") != ""]
    m.set("MatrixNTwoAdmits", len(n2))
    m.set("MatrixNTwoSchedule", sum(1 for r in n2 if int(r["n2_schedule"]) > 0))
    m.set("MatrixNTwoJudgeOnly", sum(
        1 for r in n2 if int(r["n2_schedule"]) == 0 and int(r["n2_judge"]) > 0))
    m.set("MatrixNTwoScheduleWl", sum(int(r["n2_schedule"]) for r in n2))
    m.set("MatrixNTwoJudgeWl", sum(int(r["n2_judge"]) for r in n2))
    m.set("MatrixNTwoBoundedWl", sum(int(r.get("n2_bounded") or 0) for r in n2))
    bounds = [float(r["ci_high"]) for r in rows if r["verdict"] == "not found" and r["ci_high"]]
    m.set("MatrixWorstBound", num(max(bounds), 3) if bounds else "--")
    m.set("MatrixConfidence", confidence)
    m.set("MatrixOtherDraws", other_draws)


def _experiment(root: Path) -> tuple[str, str]:
    """From matrix.toml: the confidence level in percent (from alpha) and the number of
    other judge draws an N2 witness is re-run under."""
    text = read(root, "verdict_matrix/matrix.toml")
    if text is None:
        return "--", "--"
    exp = tomllib.loads(text)["experiment"]
    return f"{100 * (1 - float(exp['alpha'])):g}", str(exp.get("other_draws", "--"))


def _same_model_note(markdown: str) -> str:
    found = re.search(r"^Note: (.+ are the same model[^.]*)\.$", markdown, re.M)
    return tex(found.group(1)) if found else ""


def _isfloat(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


def pg_grid(root: Path, m: Macros) -> Assets:
    cmd = "toki pg-grid"
    for rel in PG_GRID:
        text = read(root, rel)
        if not text or not text.strip():
            continue
        if rel.suffix == ".json":
            data = json.loads(text)
            rows = data if isinstance(data, list) else data.get("rows", data.get("cells", []))
        else:
            rows = _csv_rows(text)
        if rows:
            m.set("PgGridCells", len(rows))
            m.set("PgGridSource", code(str(rel)))
            return {"tab_pg_grid.tex": _generic_table(rows)}
    m.missing(["PgGridCells", "PgGridSource"], cmd)
    return {"tab_pg_grid.tex": missing_block("PostgreSQL grid", cmd)}



def _tally(rows: list[dict[str, str]], col: str) -> str:
    return "/".join(str(sum(r[col] == k for r in rows)) for k in ("yes", "no", "not compared"))


def agreement(root: Path, m: Macros) -> Assets:
    """Model verdicts against real verdicts as a held-out test (verdict_matrix/agreement.csv,
    `toki matrix --real`): per (model, real) pair, the model's revision and whether it was
    fitted, distinct comparisons on the real rows' seeds and on the held-out workloads, and
    every disagreement flagged."""
    cmd = "toki matrix --real"
    names = ["RealRows", "RealCells", "RealDuplicates", "RealUnresolved", "RealSeeds",
             *(f"Real{k}{x}" for k in ("Third", "Self") for x in (
                 "Distinct", "AgreeAdmits", "AgreeAbsent", "Disagree", "NotCompared", "Fitted",
                 "HeldAgree", "HeldDisagree", "HeldNotCompared", "HeldUnfittedAgree",
                 "HeldUnfitted"))]
    text = read(root, "verdict_matrix/agreement.csv")
    if not text or not text.strip():
        m.missing(names, cmd)
        return {"tab_agreement.tex": missing_block("Model against real verdicts", cmd)}
    rows = _csv_rows(text)
    if "comparison" not in rows[0]:
        m.missing(names, cmd)
        return {"tab_agreement.tex": _generic_table(rows)}
    pairs = list(dict.fromkeys((r["model"], r["real"]) for r in rows))
    m.set("RealRows", len(pairs))
    m.set("RealCells", len(rows))
    m.set("RealDuplicates", sum(1 for r in rows if r["duplicate_of"]))
    m.set("RealUnresolved", sum(1 for r in rows if r["resolution"] == "unresolved"))
    m.set("RealSeeds", tex(rows[0]["seeds"].replace("-", "–")))
    for kind, key in (("third-party", "Third"), ("self", "Self")):
        rs = [r for r in rows if r["comparison"] == kind and not r["duplicate_of"]]
        compared = [r for r in rs if r["held_out_agree"] in ("yes", "no") and r["fitted"] == "no"]
        values = {
            "Distinct": len(rs),
            "AgreeAdmits": sum(r["agree"] == "yes" and r["model_verdict"] == "admits" for r in rs),
            "AgreeAbsent": sum(r["agree"] == "yes" and r["model_verdict"] != "admits" for r in rs),
            "Disagree": sum(r["agree"] == "no" for r in rs),
            "NotCompared": sum(r["agree"] == "not compared" for r in rs),
            "Fitted": sum(r["fitted"] != "no" for r in rs),
            "HeldAgree": sum(r["held_out_agree"] == "yes" for r in rs),
            "HeldDisagree": sum(r["held_out_agree"] == "no" for r in rs),
            "HeldNotCompared": sum(r["held_out_agree"] == "not compared" for r in rs),
            "HeldUnfittedAgree": sum(r["held_out_agree"] == "yes" for r in compared),
            "HeldUnfitted": len(compared),
        }
        for x, v in values.items():
            m.set(f"Real{key}{x}", v)
    body = []
    for model, real in pairs:
        mine = [r for r in rows if (r["model"], r["real"]) == (model, real)]
        first = mine[0]
        dup = all(r["duplicate_of"] for r in mine)
        off = [f"{r['anomaly']} ({r['faults']}): {r['model_verdict']} / {r['real_verdict']}"
               + (" [fitted]" if r["fitted"] != "no" else "")
               for r in mine if r["agree"] == "no" or r["held_out_agree"] == "no"]
        body.append([
            code(model) + (r"$^{s}$" if first["comparison"] == "self" else ""),
            tex(first["model_version"]), code(real), tex(first["version"]),
            tex(first["fitted"]) + r" 	exttt{" + tex(first["model_hash"][:7]) + "}",
            _tally(mine, "agree") + (r"$^{d}$" if dup else ""), _tally(mine, "held_out_agree"),
            tex("; ".join(off) or "none")])
    return {"tab_agreement.tex": tabular(
        "@{}lP{1.9cm}lP{1.3cm}lccP{3.4cm}@{}",
        ["model", "revision modelled", "real row", "real version", "fitted (hash)",
         "agree/differ/n.c.", "held out", "disagreements (model / real)"], body,
        r"\scriptsize")}
