"""Regenerate the mutant table in docs/anomalies.md: `python -m tests.mutants.make_table`."""

from __future__ import annotations

from pathlib import Path

from tests.mutants.catalog import BUDGET, MUTANTS

DOC = Path(__file__).parents[2] / "docs" / "anomalies.md"
BEGIN, END = "<!-- mutants:begin -->", "<!-- mutants:end -->"


def render() -> str:
    lines = [
        f"| mutant | defect | checker | caught | schedules needed (budget {BUDGET}) "
        "| anomalies on the correct configuration |",
        "|---|---|---|---|---|---|",
    ]
    for m in MUTANTS:
        r = m.run()
        needed = "-" if r.needed is None else str(r.needed)
        lines.append(
            f"| {m.name} | {m.defect} | {m.checker} | {'yes' if r.caught else 'NO'} "
            f"| {needed} | {r.correct_anomalies} |"
        )
    return "\n".join(lines)


def main() -> None:
    text = DOC.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{render()}\n{END}{tail}")
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
