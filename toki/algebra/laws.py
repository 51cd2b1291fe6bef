"""The laws table: for each operator × law, hypothesis searches for a counterexample.

A law "holds" when hypothesis finds no counterexample within the stated budget, and "fails"
with the shrunk counterexample it found. `docs/laws.md` is generated from these results
(`python -m toki.algebra.laws --write docs/laws.md`); a test fails when it is out of date.

Every law is checked through the real write path (`toki.write.plan_write`, what `Memory.write`
runs, on an in-memory `toki.scratch.Scratch`), on claims about one key:
values from {A, B, C}, valid-time starts from a few days, distinct recording times, weights
in {0.5, 1, 2}, sources in {crm, chat, web}. The observable outcome is the belief: the
`resolve_at` answer at a grid of valid times. The algebraic laws run without a judge (the
operator's own rule decides); the two replay laws give every operator a StochasticJudge(0.5)
(only EWM consults it: the others decide structurally). RULE runs under a prefer_source
policy (crm > chat > web).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from toki.algebra.base import Operator
from toki.algebra.context import ResolveContext
from toki.algebra.rule import Policy
from toki.cli_parser import TokiParser
from toki.isolation import Isolation
from toki.judge import StochasticJudge
from toki.model import Claim, FactKey, FactVersion
from toki.plan import POLICY_SUBJECT
from toki.scratch import Scratch, rejudge
from toki.time import Interval

__all__ = ["LAWS", "LawResult", "check_law", "laws_table", "render_markdown"]

KEY = FactKey("laws", "subject", "attribute")
BASE = datetime(2026, 1, 1, tzinfo=UTC)
GRID = tuple(BASE + timedelta(days=d) for d in range(0, 90, 5))
POLICY = Policy("prefer_source", ("crm", "chat", "web"))
BUDGET = 150


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    value: str
    start: int
    recorded: int
    weight: float
    source: str

    def claim(self) -> Claim:
        return Claim(
            KEY,
            self.value,
            self.source,
            valid_from=BASE + timedelta(days=self.start),
            recorded_at=BASE + timedelta(days=self.recorded, hours=1),
            weight=self.weight,
        )

    def version(self) -> FactVersion:
        recorded = BASE + timedelta(days=self.recorded, hours=1)
        return FactVersion(
            KEY,
            self.value,
            Interval(BASE + timedelta(days=self.start), None),
            recorded,
            self.source,
            f"h-{self.source}-{self.value}",
            weight=self.weight,
        )


def _claims(min_size: int, max_size: int) -> st.SearchStrategy[list[ClaimSpec]]:
    spec = st.builds(
        ClaimSpec,
        value=st.sampled_from(["A", "B", "C"]),
        start=st.sampled_from([0, 20, 40]),
        recorded=st.integers(50, 80),
        weight=st.sampled_from([0.5, 1.0, 2.0]),
        source=st.sampled_from(["crm", "chat", "web"]),
    )
    return st.lists(spec, min_size=min_size, max_size=max_size, unique_by=lambda c: c.recorded)


def _memory(judge_seed: int = 0) -> tuple[Scratch, StochasticJudge]:
    """An empty state with RULE's policy in force (the write path runs on it in memory)."""
    scratch = Scratch()
    scratch.set_policy(FactKey(KEY.tenant, POLICY_SUBJECT, KEY.fact_key), POLICY, BASE)
    return scratch, StochasticJudge(0.5, stream_seed=judge_seed)


def belief(op: Operator, specs: Sequence[ClaimSpec]) -> tuple[Any, ...]:
    """What the store believes after writing the claims in this order (no judge: the
    operator's own rule decides)."""
    mem, _ = _memory()
    for spec in specs:
        mem.claim(spec.claim(), op)
    db = mem.db(BASE + timedelta(days=400))
    return tuple((r.kind, r.value) for r in (db.resolve_at(KEY, t) for t in GRID))


def _ctx() -> ResolveContext:
    return ResolveContext(
        decided_at=BASE + timedelta(days=100),
        judge=None,
        policy=lambda key, at: POLICY.to_json(),
    )


def _fold_winner(op: Operator, versions: Sequence[FactVersion]) -> str | None:
    return op.fold(list(versions), _ctx()).winner


def _binary_chain(op: Operator, versions: Sequence[FactVersion]) -> str | None:
    """((v1 ∘ v2) ∘ v3) ∘ …: fold pairwise, carrying the winner forward (HOLD stops)."""
    current = versions[0]
    by_id = {v.id: v for v in versions}
    for nxt in versions[1:]:
        winner = _fold_winner(op, [current, nxt])
        if winner is None:
            return None
        current = by_id[winner]
    return current.id


# -- the laws: each returns True when the example VIOLATES the law -------------------------


def _commutative(op: Operator, specs: list[ClaimSpec]) -> bool:
    a, b = specs
    return belief(op, [a, b]) != belief(op, [b, a])


def _associative(op: Operator, specs: list[ClaimSpec]) -> bool:
    a, b, c = (s.version() for s in specs)
    by_id = {v.id: v for v in (a, b, c)}
    left = _fold_winner(op, [a, b])
    right = _fold_winner(op, [b, c])
    if left is None or right is None:
        return (left is None) != (right is None)
    return _fold_winner(op, [by_id[left], c]) != _fold_winner(op, [a, by_id[right]])


def _idempotent(op: Operator, specs: list[ClaimSpec]) -> bool:
    return belief(op, specs) != belief(op, [*specs, *specs])


def _confluent(op: Operator, specs: list[ClaimSpec]) -> bool:
    outcomes = {belief(op, list(p)) for p in itertools.permutations(specs)}
    return len(outcomes) > 1


def _fold_is_nary(op: Operator, specs: list[ClaimSpec]) -> bool:
    versions = [s.version() for s in specs]
    return _binary_chain(op, versions) != _fold_winner(op, versions)


def _replay(op: Operator, specs: list[ClaimSpec], keyed: bool) -> bool:
    mem, judge = _memory(judge_seed=1)
    for spec in specs:
        mem.claim(spec.claim(), op, judge=judge)
    live = mem.snapshot.state_hash()
    for seed in range(2, 6):  # several fresh judges: any disagreement is a counterexample
        again = rejudge(
            mem.events,
            {},
            op,
            judge=StochasticJudge(0.5, stream_seed=seed),
            use_keyed_log=keyed,
            level=Isolation.SERIALIZABLE,
        )
        if again.snapshot.state_hash() != live:
            return True
    return False


@dataclass(frozen=True, slots=True)
class Law:
    name: str
    description: str
    strategy: st.SearchStrategy[list[ClaimSpec]]
    violated: Callable[[Operator, list[ClaimSpec]], bool]


LAWS: tuple[Law, ...] = (
    Law(
        "commutative",
        "write(a); write(b) believes what write(b); write(a) believes",
        _claims(2, 2),
        _commutative,
    ),
    Law(
        "associative",
        "fold(fold(a, b), c) = fold(a, fold(b, c)) (winner)",
        _claims(3, 3),
        _associative,
    ),
    Law(
        "idempotent",
        "writing every claim twice believes what writing it once does",
        _claims(1, 3),
        _idempotent,
    ),
    Law(
        "confluent",
        "every delivery order of 3 claims gives the same belief",
        _claims(3, 3),
        _confluent,
    ),
    Law(
        "binary fold = n-ary",
        "folding pairwise left to right picks the n-ary winner",
        _claims(2, 4),
        _fold_is_nary,
    ),
    Law(
        "replay-deterministic (keyed log)",
        "re-adjudicating the logged claims with fresh judges and the keyed log "
        "reproduces the state",
        _claims(2, 3),
        lambda op, s: _replay(op, s, keyed=True),
    ),
    Law(
        "replay-deterministic (no log)",
        "re-adjudicating the logged claims with fresh judges and no log reproduces the state",
        _claims(2, 3),
        lambda op, s: _replay(op, s, keyed=False),
    ),
)


@dataclass(frozen=True, slots=True)
class LawResult:
    operator: str
    law: str
    holds: bool
    counterexample: str | None
    budget: int


def check_law(op: Operator, law: Law, budget: int = BUDGET) -> LawResult:
    """Search for a counterexample (derandomized: the same answer on every run)."""
    try:
        example = find(
            law.strategy,
            lambda specs: law.violated(op, specs),
            settings=settings(
                max_examples=budget,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            ),
        )
    except NoSuchExample:
        return LawResult(op.name, law.name, True, None, budget)
    shown = "; ".join(
        f"{s.value}@day{s.start} rec{s.recorded} w{s.weight:g} {s.source}" for s in example
    )
    return LawResult(op.name, law.name, False, shown, budget)


def laws_table(budget: int = BUDGET) -> list[LawResult]:
    from toki.algebra import OPERATORS

    return [check_law(op, law, budget) for op in OPERATORS.values() for law in LAWS]


def render_markdown(results: Sequence[LawResult]) -> str:
    ops = list(dict.fromkeys(r.operator for r in results))
    lines = [
        "# Operator laws",
        "",
        "Generated by `python -m toki.algebra.laws --write docs/laws.md`; do not edit.",
        "A law holds when hypothesis found no counterexample within the budget (derandomized);",
        "a failing law shows the shrunk counterexample (claims as value@valid-start, recording",
        "day, weight, source). Setup: see the docstring of `toki/algebra/laws.py`.",
        "",
        "| law | " + " | ".join(ops) + " |",
        "|---|" + "---|" * len(ops),
    ]
    by = {(r.operator, r.law): r for r in results}
    for law in LAWS:
        cells = ["holds" if by[(o, law.name)].holds else "**fails**" for o in ops]
        lines.append(f"| {law.name} | " + " | ".join(cells) + " |")
    lines += ["", "## Laws", ""]
    lines += [f"- **{law.name}**: {law.description}." for law in LAWS]
    lines += ["", "## Counterexamples", ""]
    for r in results:
        if not r.holds:
            lines.append(f"- {r.operator}, {r.law}: `{r.counterexample}`")
    budget = results[0].budget if results else BUDGET
    lines += ["", f"Budget: {budget} examples per cell.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = TokiParser(
        prog="python -m toki.algebra.laws", description="Establish the operator laws table."
    )
    parser.add_argument("--write", type=Path, help="write the markdown table to this path")
    parser.add_argument("--budget", type=int, default=BUDGET)
    args = parser.parse_args(argv)
    text = render_markdown(laws_table(args.budget))
    if args.write:
        args.write.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
