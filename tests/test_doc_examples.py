"""Every Python example in the README and docs/ runs as written.

The blocks of one page run in order in one namespace (a later block may use an earlier one's
names). A block preceded by `<!-- example: not run (reason) -->` is skipped: it needs
something a test machine does not have (an LLM client, a named server).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(<!-- example: not run \((?P<why>[^)]*)\) -->\n)?```python\n(?P<code>.*?)```", re.S
)


def blocks(page: Path) -> list[tuple[int, str | None, str]]:
    text = page.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start("code")) + 1, m.group("why"), m.group("code"))
        for m in BLOCK.finditer(text)
    ]


RUNNABLE = [p for p in PAGES if any(why is None for _, why, _ in blocks(p))]


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: p.name)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files (a history, a database)
    namespace: dict[str, object] = {"__name__": f"doc_{page.stem}"}
    for line, why, code in blocks(page):
        if why is None:
            exec(compile(code, f"{page.relative_to(ROOT)}:{line}", "exec"), namespace)


def test_the_examples_are_found() -> None:
    """The block pattern must not silently match nothing (then every page would pass)."""
    assert len(RUNNABLE) >= 5
    assert sum(len(blocks(p)) for p in PAGES) >= 10


def test_skipped_examples_say_why() -> None:
    for page in PAGES:
        for line, why, _ in blocks(page):
            assert why is None or why.strip(), f"{page.name}:{line} is skipped without a reason"
