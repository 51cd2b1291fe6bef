"""Paper assets from the proofs and the generated markdown tables: proofs/results.json,
proofs/agreement.json, docs/laws.md, the mutant table of docs/anomalies.md."""

from __future__ import annotations

import json
import re
from pathlib import Path

from paper.parts.common import (
    Assets,
    Macros,
    code,
    missing_block,
    num,
    read,
    tabular,
    tex,
)

# the largest bound k each bounded statement is proved in within 60 s (bench_proofs)
LARGEST_K = {
    "isolation_lww": "ProofMaxKLww",
    "isolation_ewm": "ProofMaxKEwm",
    "isolation_await": "ProofMaxKAwait",
    "isolation_rule": "ProofMaxKRule",
    "schema_soundness": "ProofMaxKSchema",
}


def proofs(root: Path, m: Macros) -> Assets:
    cmd = "toki prove"
    text = read(root, "proofs/results.json")
    names = ["ProofCount", "ProofLemmas", "ProofProved", "ProofLemmasOk", "ProofVariants",
             "ProofVariantsCex",
             "ProofAllOk", "ProofSeconds", "ProofUnexpected"]
    if text is None:
        m.missing(names, cmd)
        return {"tab_proofs.tex": missing_block("Proof results", cmd)}
    res = json.loads(text)
    primary = [p for p in res if not p.get("false_variant_of")]
    variants = [p for p in res if p.get("false_variant_of")]
    m.set("ProofCount", len(res))
    m.set("ProofLemmas", len(primary))
    m.set("ProofProved", sum(p["status"] == "proved" for p in primary))
    m.set("ProofLemmasOk", sum(p["ok"] for p in primary))
    m.set("ProofVariants", len(variants))
    m.set("ProofVariantsCex", sum(p["status"] == "counterexample" for p in variants))
    m.set("ProofAllOk", "all" if all(p["ok"] for p in res) else "not all")
    m.set("ProofSeconds", num(sum(p["seconds"] for p in res), 2))
    m.set("ProofUnexpected", sum(not p["ok"] for p in res))
    body = []
    for p in res:
        if p.get("false_variant_of"):
            name = r"\quad " + code("@" + p["name"].split("@", 1)[1])
            what = r"\emph{false variant:} " + tex(p["notes"] or p["statement"])
            bounds = ""
        else:
            name = code(p["name"])
            what = tex(p["statement"])
            b = {k: v for k, v in p["bounds"].items() if k not in ("variant", "operators")}
            bounds = tex(", ".join(f"{k}={v}" for k, v in b.items()))
        ok = "" if p["ok"] else r" \textbf{(expected " + tex(p["expected"]) + ")}"
        body.append([name, what, bounds, tex(p["status"]) + ok, num(p["seconds"], 2)])
    table = tabular(r"@{}P{3.6cm}P{6.6cm}P{2.9cm}lr@{}",
                    ["statement", "claim", "bounds", "result", "s"], body, r"\scriptsize")
    proof_agreement(root, m)
    return {"tab_proofs.tex": table}


def proof_agreement(root: Path, m: Macros) -> None:
    """z3 <-> simulator agreement counts (proofs/agreement.json)."""
    names = ["ProofReplayAgree", "ProofReplayed", "ProofReplayVariants", "ProofDporClean",
             "ProofDporChecks", "ProofDporRuns"]
    text = read(root, "proofs/agreement.json")
    if text is None:
        m.missing(names, "python -m proofs.agreement --out proofs --docs docs/proofs.md")
        return
    s = json.loads(text)["summary"]
    m.set("ProofReplayAgree", s["counterexamples_agreeing"])
    m.set("ProofReplayed", s["counterexamples_replayed"])
    m.set("ProofReplayVariants", s["false_variants_replayed"])
    m.set("ProofDporClean", s["proved_checks_clean"])
    m.set("ProofDporChecks", s["proved_checks"])
    m.set("ProofDporRuns", f"{s['dpor_runs']:,}".replace(",", "{,}"))


# --- laws and mutants (generated markdown tables) ------------------------------------------


def _md_table(text: str, after: str = "") -> list[list[str]]:
    start = text.find(after) if after else 0
    rows: list[list[str]] = []
    for line in text[max(start, 0):].splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-", ":"} for c in cells):
                rows.append(cells)
        elif rows:
            break
    return rows


def _md_cell(s: str) -> str:
    s = re.sub(r"\*\*(.+?)\*\*", lambda mm: "\x00b" + mm.group(1) + "\x00e", s)
    s = re.sub(r"`(.+?)`", lambda mm: "\x00c" + mm.group(1) + "\x00e", s)
    out = tex(s)
    return out.replace("\x00b", r"\textbf{").replace("\x00c", r"\texttt{").replace("\x00e", "}")


def laws(root: Path, m: Macros) -> Assets:
    cmd = "python -m toki.algebra.laws --write docs/laws.md"
    text = read(root, "docs/laws.md")
    rows = _md_table(text or "")
    if not rows:
        m.missing(["LawCells", "LawHolds", "LawFails"], cmd)
        return {"tab_laws.tex": missing_block("Operator-law table", cmd)}
    header, body = rows[0], rows[1:]
    cells = [c for r in body for c in r[1:]]
    m.set("LawCells", len(cells))
    m.set("LawHolds", sum(c == "holds" for c in cells))
    m.set("LawFails", sum("fails" in c for c in cells))
    budget = re.search(r"Budget: (\d+) examples", text or "")
    m.set("LawBudget", budget.group(1) if budget else r"\missing{" + tex(cmd) + "}")
    return {"tab_laws.tex": tabular("@{}l" + "c" * (len(header) - 1) + "@{}",
                                    [_md_cell(h) for h in header],
                                    [[_md_cell(c) for c in r] for r in body])}


def mutants(root: Path, m: Macros) -> Assets:
    cmd = "python -m tests.mutants.make_table"
    text = read(root, "docs/anomalies.md") or ""
    rows = _md_table(text, "<!-- mutants:begin -->") if "<!-- mutants:begin -->" in text else []
    if not rows:
        m.missing(["MutantCount", "MutantCaught", "MutantFalsePositives"], cmd)
        return {"tab_mutants.tex": missing_block("Planted-defect table", cmd)}
    body = rows[1:]
    m.set("MutantCount", len(body))
    m.set("MutantCaught", sum(r[3] == "yes" for r in body))
    m.set("MutantFalsePositives", sum(int(r[5]) for r in body if r[5].isdigit()))
    hdr = ["mutant", "defect", "checker", "caught", "schedules", "FP"]
    return {"tab_mutants.tex": tabular(r"@{}P{4.4cm}P{6.4cm}lccc@{}", hdr,
                                       [[code(r[0]), *[_md_cell(c) for c in r[1:]]] for r in body],
                                       r"\scriptsize")}


def cited(root: Path, m: Macros) -> Assets:
    """Figures quoted from other work (paper/data/cited.json), each with its source, as
    macros \\tkCited<Name>: the paper types no number, not even a quoted one."""
    text = read(root, "paper/data/cited.json")
    if text is None:
        return {}
    for name, entry in json.loads(text).items():
        if not name.startswith("_"):
            m.set(f"Cited{name}", tex(entry["value"]))
    return {}
