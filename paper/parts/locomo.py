"""Paper assets from the LoCoMo ablations (paper/data/locomo_ablations.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from paper.parts.common import (
    Assets,
    Macros,
    missing_block,
    num,
    read,
    tabular,
    tex,
)

LOCOMO = Path("paper/data/locomo_ablations.json")

_LOCOMO_WORDS = {
    "typed_layer": "typed layer", "audit_rows": "audit rows", "operator": "operator",
    "answerable": "answerable", "superseded": "superseded", "control_single": "stated once",
    "control_latest": "last stated", "qa_superseded": "questions on superseded evidence",
    "dual_row": "dual-row", "overwrite": "overwrite", "typed": "typed", "flat": "flat",
    "llm_judge": "J", "f1": "F1", "accuracy": "exact",
}  # fmt: skip


def _lw(x: Any) -> str:
    return tex(_LOCOMO_WORDS.get(str(x), str(x)))


def locomo(root: Path, m: Macros) -> Assets:
    cmd = "toki locomo ablate --json > paper/data/locomo_ablations.json"
    text = read(root, LOCOMO)
    names = ["LocomoN", "LocomoTyped", "LocomoFlat", "LocomoTypedDiff", "LocomoTypedLo",
             "LocomoTypedHi", "LocomoTypedP", "LocomoTypedHolm", "LocomoAuditN",
             "LocomoAuditDiff", "LocomoQaN", "LocomoQaDiff", "LocomoQaLo", "LocomoQaHi",
             "LocomoQaGained", "LocomoQaLost", "LocomoQaHolm", "LocomoChecks",
             "LocomoChecksHold", "LocomoFamily", "LocomoAwaitDiff", "LocomoAwaitHolm",
             "LocomoConversations", "LocomoMinP", "LocomoTypedQuestionP", "LocomoQaP",
             "LocomoAwaitP", "LocomoConfidence"]
    if text is None:
        m.missing(names, cmd)
        block = missing_block("LoCoMo ablations", cmd)
        return {"tab_locomo.tex": block, "tab_locomo_asof.tex": block}
    rows = [r for r in json.loads(text) if r.get("kind") != "run"]

    def find(**kw: Any) -> dict[str, Any] | None:
        for r in rows:
            if all(r.get(k) == v for k, v in kw.items()):
                return dict(r)
        return None

    def holm(r: dict[str, Any], fmt: str = ".2g") -> str:
        return format(r["holm_p"], fmt) if "holm_p" in r else "---"

    def lo(r: dict[str, Any]) -> float:  # the conversation as the unit where given
        return float(r.get("conv_ci_low", r["ci_low"]))

    def hi(r: dict[str, Any]) -> float:
        return float(r.get("conv_ci_high", r["ci_high"]))

    def p(r: dict[str, Any]) -> str:
        return format(r["conv_p"], ".2g") if "conv_p" in r else "---"

    typed = find(ablation="typed_layer", kind="comparison", category="all",
                 metric="f1 difference")
    ts = find(ablation="typed_layer", kind="score", variant="typed", category="all", metric="f1")
    fs = find(ablation="typed_layer", kind="score", variant="flat", category="all", metric="f1")
    dual = find(ablation="audit_rows", kind="check", slice="superseded", variant="dual_row")
    over = find(ablation="audit_rows", slice="superseded", variant="overwrite")
    qa = find(ablation="audit_rows", kind="comparison", slice="qa_superseded",
              metric="f1 difference")
    wait = find(ablation="operator", kind="comparison", slice="answerable", baseline="AWAIT",
                metric="f1 difference")
    checks = [r for r in rows if r["kind"] == "check"]
    comparisons = [r for r in rows if r["kind"] == "comparison"]
    if typed and ts and fs:
        m.set("LocomoN", f"{typed['n']:,}".replace(",", "{,}"))
        m.set("LocomoTyped", num(ts["score"]))
        m.set("LocomoFlat", num(fs["score"]))
        m.set("LocomoTypedDiff", f"{typed['score']:+.3f}")
        m.set("LocomoTypedLo", num(lo(typed)))
        m.set("LocomoTypedHi", num(hi(typed)))
        m.set("LocomoTypedP", p(typed))
        m.set("LocomoTypedHolm", holm(typed))
        m.set("LocomoTypedQuestionP", f"{typed['mcnemar_p']:.1e}")
        m.set("LocomoConfidence", f"{100 * typed.get('ci_level', float('nan')):g}")
        k = int(typed.get("conversations", 0))
        m.set("LocomoConversations", k or "---")
        m.set("LocomoMinP", format(2 / 2**k, ".3f") if k else "---")
    else:
        m.missing([*names[:8], "LocomoTypedQuestionP", "LocomoConversations", "LocomoMinP",
                   "LocomoConfidence"], cmd)
    if dual and over:
        m.set("LocomoAuditN", dual["n"])
        m.set("LocomoAuditDiff", f"{dual['score'] - over['score']:+.2f}")
    else:
        m.missing(names[8:10], cmd)
    if qa:
        m.set("LocomoQaN", qa["n"])
        m.set("LocomoQaDiff", f"{qa['score']:+.3f}")
        m.set("LocomoQaLo", num(lo(qa)))
        m.set("LocomoQaHi", num(hi(qa)))
        m.set("LocomoQaP", p(qa))
        m.set("LocomoQaGained", qa["n10"])
        m.set("LocomoQaLost", qa["n01"])
        m.set("LocomoQaHolm", holm(qa))
    else:
        m.missing([*names[10:17], "LocomoQaP"], cmd)
    m.set("LocomoChecks", len(checks))
    m.set("LocomoChecksHold", sum(1 for r in checks if r["holds"]))
    m.set("LocomoFamily", len(comparisons))
    if wait:
        m.set("LocomoAwaitDiff", f"{wait['score']:+.3f}")
        m.set("LocomoAwaitHolm", holm(wait))
        m.set("LocomoAwaitP", p(wait))
    else:
        m.missing([*names[20:22], "LocomoAwaitP"], cmd)
    body = []
    for r in comparisons:
        base = find(ablation=r["ablation"], kind="score", variant=r["variant"],
                    category=r["category"], slice=r["slice"], metric=r["metric"].split()[0])
        other = find(ablation=r["ablation"], kind="score", variant=r["baseline"],
                     category=r["category"], slice=r["slice"], metric=r["metric"].split()[0])
        scores = (f"{num(base['score'])} vs {num(other['score'])}" if base and other else "---")
        where = _lw(r["slice"]) if r["category"] == "all" else f"cat. {r['category']}"
        power = r.get("power_mcnemar")
        body.append([_lw(r["ablation"]), where,
                     f"{_lw(r['variant'])} vs {_lw(r['baseline'])}",
                     _lw(r["metric"].split()[0]),
                     f"{r['n']} ({r.get('conversations', '?')})", scores,
                     f"{r['score']:+.3f} [{num(lo(r))}, {num(hi(r))}]",
                     p(r), holm(r), f"{r['mcnemar_p']:.2g}",
                     "---" if power is None else f"{power:.2f}"])
    asof = []
    for r in rows:
        if r["metric"] != "accuracy" or r["kind"] not in ("check", "score"):
            continue
        if r["kind"] == "check":
            what = f"check: expected {num(r['expected'])}, " + ("holds" if r["holds"] else "FAILS")
        else:
            what = f"measured [{num(lo(r))}, {num(hi(r))}] (unit: conversation)"
        asof.append([_lw(r["ablation"]), _lw(r["slice"]), _lw(r["variant"]), str(r["n"]),
                     num(r["score"]), tex(what)])
    return {
        "tab_locomo.tex": tabular("@{}llllrllllll@{}",
                                  ["ablation", "slice", "variant vs baseline", "metric",
                                   "$n$ (conv.)", "scores",
                                   r"difference [95\% CI, conv.]", "perm.\\ $p$ (conv.)",
                                   "Holm $p$", "McNemar $p$ (quest.)", "power (quest.)"],
                                  body, r"\scriptsize"),
        "tab_locomo_asof.tex": tabular("@{}lllrrl@{}",
                                       ["ablation", "as-of slice", "variant", "$n$", "exact",
                                        "kind"], asof, r"\scriptsize"),
    }  # fmt: skip
