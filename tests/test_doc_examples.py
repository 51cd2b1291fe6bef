"""Every Python example in the README and docs/ runs as written.

The blocks of one page run in order in one namespace (a later block may use an earlier one's
names). A block preceded by `<!-- example: not run (reason) -->` is skipped: it needs
something a test machine does not have (an LLM client, a named server). A PostgreSQL schema
an example opens on the test server (`…@127.0.0.1:5432/<db>?schema=<name>`) is dropped
before the page runs and after it, as every test's own schema is.
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


PG_SCHEMA = re.compile(r"postgresql://postgres@127\.0\.0\.1:5432/(\w+)\?schema=(\w+)")

RUNNABLE = [p for p in PAGES if any(why is None for _, why, _ in blocks(p))]


def _drop_schemas(page: Path) -> list[tuple[str, str]]:
    """Drop the test server's schemas the page's runnable examples open; which ones."""
    found = sorted(
        {m.groups() for _, why, code in blocks(page) if why is None for m in PG_SCHEMA.finditer(code)}
    )
    if found:
        import psycopg
        from psycopg import sql

        for db, schema in found:
            with psycopg.connect(f"postgresql://postgres@127.0.0.1:5432/{db}", autocommit=True) as c:
                c.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return found


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: p.name)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files (a history, a database)
    namespace: dict[str, object] = {"__name__": f"doc_{page.stem}"}
    _drop_schemas(page)  # a fresh schema, whatever an earlier run left
    try:
        for line, why, code in blocks(page):
            if why is None:
                exec(compile(code, f"{page.relative_to(ROOT)}:{line}", "exec"), namespace)
    finally:
        _drop_schemas(page)


def test_the_schema_the_postgres_example_opens_is_dropped() -> None:
    """The PostgreSQL page's example schema is found, and dropping it leaves none behind."""
    import psycopg

    assert ("test", "agent_memory") in _drop_schemas(ROOT / "docs" / "postgres.md")
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test") as conn:
        row = conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", ("agent_memory",)
        ).fetchone()
    assert row is None


def test_the_examples_are_found() -> None:
    """The block pattern must not silently match nothing (then every page would pass)."""
    assert len(RUNNABLE) >= 5
    assert sum(len(blocks(p)) for p in PAGES) >= 10


def test_skipped_examples_say_why() -> None:
    for page in PAGES:
        for line, why, _ in blocks(page):
            assert why is None or why.strip(), f"{page.name}:{line} is skipped without a reason"
