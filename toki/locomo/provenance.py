"""Issue 20 on LoCoMo's typed memory: shadow LWW against EWM and RULE, and revoke a source.

For each selected conversation, the typed memory is built under LWW (`build_typed_memory`);
then

1. the whole log is folded under EWM and under RULE (newest valid time, per fact key) and
   every read (one per key, at one day after the last session) is classified (toki.shadow);
2. every question of the conversation is answered with the typed retriever, and each fact
   key a retrieved version belongs to is read with the question as consumer, at the valid
   time the version states (its start, else its recording time): the consumption log then
   says which versions fed which question;
3. the source whose versions fed the most questions (ties: the smaller source id) is revoked
   with `revoke_source`; the report gives its impact, each consuming question's read then and
   now (stale / unchanged), and whether the question's extractive answer changed.

No model is involved; the run is deterministic. `toki locomo provenance` writes the results.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from toki.algebra import LWW, Policy
from toki.locomo.data import LocomoDataset
from toki.locomo.flat import answer_one
from toki.locomo.typed import TypedAnswerer, TypedMemory, TypedRetriever, build_typed_memory
from toki.shadow import Config
from toki.time import format_instant

__all__ = ["RESULTS", "configs_for", "conversation_report", "run"]

RESULTS = "notebooks/results/locomo_provenance.json"


def configs_for(typed: TypedMemory) -> dict[str, Config]:
    """The two configurations shadowed against LWW: EWM everywhere, and RULE with the
    newest-valid-time policy for every fact key of the conversation."""
    fact_keys = sorted({f.key.fact_key for f in typed.facts})
    rule = Policy("newest_valid_time")
    return {
        "EWM": Config(default="EWM", name="EWM"),
        "RULE": Config(
            default="RULE",
            policies=tuple((typed.sample_id, fk, rule) for fk in fact_keys),
            name="RULE newest_valid_time",
        ),
    }


def conversation_report(
    dataset: LocomoDataset, sample_id: str, *, k: int = 5, examples: int = 3
) -> dict[str, Any]:
    """Shadow, named reads and a source revocation on one conversation (module doc)."""
    conv = dataset.conversation(sample_id)
    typed = build_typed_memory(conv, operator=LWW)
    mem = typed.memory
    at = max(typed.session_times.values()) + timedelta(days=1)
    shadows: dict[str, Any] = {}
    for name, config in configs_for(typed).items():
        report = mem.shadow(config, valid_at=at)
        by_class: dict[str, list[dict[str, Any]]] = {}
        for d in report.differences:
            by_class.setdefault(d.kind, []).append(d.to_json())
        shadows[name] = {
            "config_id": report.config_id,
            "reads_compared": report.compared,
            "differences": len(report.differences),
            "counts": report.counts,
            "ok": report.ok,
            "inputs_not_rerun": len(report.notes),
            "examples": {c: rows[:examples] for c, rows in sorted(by_class.items())},
        }

    by_version = typed.by_version()
    retriever = TypedRetriever(typed)
    answerer = TypedAnswerer()
    before: dict[str, str] = {}
    for q in conv.qa:
        consumer = f"{sample_id}/q{q.index}"
        result = answer_one(sample_id, q, retriever, answerer, k)
        before[consumer] = result.prediction
        for vid in result.retrieved:
            fact = by_version.get(vid)
            if fact is None:
                continue
            version = mem.version(vid)
            when = version.valid.start or version.recorded_at
            mem.resolve_at(fact.key, when, consumer=consumer)
    reads = mem._consumption()
    fed: Counter[str] = Counter()
    for src in {mem.version(v).source_id for r in reads for v in r.answer.version_ids}:
        fed[src] = len({c.consumer for c in mem.impact(src).consumers})
    source = min(fed, key=lambda s: (-fed[s], s)) if fed else None
    revocation: dict[str, Any] = {"source_id": source}
    if source is not None:
        impact = mem.revoke_source(source, reason="demonstration: this source is taken to be wrong")
        questions = sorted({c.consumer for c in impact.consumers})
        changed = []
        qa = {f"{sample_id}/q{q.index}": q for q in conv.qa}
        for consumer in questions:
            again = answer_one(sample_id, qa[consumer], TypedRetriever(typed), answerer, k)
            if again.prediction != before[consumer]:
                changed.append(consumer)
        revocation.update(
            versions=len(impact.versions),
            keys=len(impact.keys),
            dependents=len(impact.dependents),
            reads=len(impact.consumers),
            stale_reads=len(impact.stale),
            questions=len(questions),
            questions_with_a_stale_read=len({c.consumer for c in impact.stale}),
            answers_changed=len(changed),
            reads_detail=[
                {k: v for k, v in c.to_json().items() if k != "read_at"}  # the wall clock
                for c in impact.consumers[:examples]
            ],
            # consumed_by re-derives every record from its log prefix, or raises
            reads_reproduced=sum(len(mem.consumed_by(c)) for c in questions),
        )
    return {
        "sample_id": sample_id,
        "facts": len(typed.facts),
        "keys": len(typed.keys()),
        "events": len(mem.events()),
        "valid_at": format_instant(at),
        "shadow": shadows,
        "questions": len(conv.qa),
        "named_reads": len(reads),
        "revocation": revocation,
    }


def run(dataset: LocomoDataset, *, limit: int = 2, k: int = 5) -> dict[str, Any]:
    """`conversation_report` for the first `limit` conversations, with totals."""
    rows: Sequence[dict[str, Any]] = [
        conversation_report(dataset, c.sample_id, k=k) for c in dataset.conversations[:limit]
    ]
    totals: dict[str, dict[str, int]] = {}
    for name in ("EWM", "RULE"):
        counts: Counter[str] = Counter()
        for row in rows:
            counts.update(row["shadow"][name]["counts"])
            counts["reads_compared"] += row["shadow"][name]["reads_compared"]
        totals[name] = dict(counts)
    return {
        "what": "issue 20 on LoCoMo typed memory (toki.locomo.provenance; deterministic, no model)",
        "conversations": [r["sample_id"] for r in rows],
        "k": k,
        "shadow_totals": totals,
        "rows": list(rows),
    }
