"""The import graph of toki/, computed from the source (module-level and function-level
imports alike): no circles, few arrows from a lower layer up to a higher one, and a core that
imports no store, no clock, no `Memory` and no CLI. The layers are docs/architecture.md's."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

LAYERS: tuple[tuple[str, ...], ...] = (
    # 0 foundations: no toki imports but each other
    ("toki.errors", "toki.time", "toki.canonical", "toki.isolation", "toki.overlay",
     "toki.cli_parser"),
    # 1 values: facts, events, the chain, judges
    ("toki.model", "toki.log", "toki.chain", "toki.conflicts", "toki.judge", "toki.llm"),
    # 2 the algebra and the fold
    ("toki.algebra", "toki.replay", "toki.projection", "toki.partition", "toki.checkpoint"),
    # 3 the functional core: the state as a value, the planners, provenance of reads, shadows;
    # the operators' laws, checked through the planners
    (
        "toki.algebra.laws",
        "toki.db",
        "toki.plan",
        "toki.write",
        "toki.lifecycle",
        "toki.scratch",
        "toki.consumption",
        "toki.shadow",
    ),
    # 4 storage: the backends and the simulated MVCC store they can run on
    ("toki.store", "toki.sim", "toki.ops"),
    # 5 the imperative shell and the public API
    ("toki.memory", "toki.relay", "toki.sim.relay", "toki", "toki.cli_input", "toki.cli_output"),
    # 6 checkers, models of systems, proofs' vocabulary
    ("toki.history", "toki.check", "toki.systems", "toki.formal"),
    # 7 experiments, real libraries, LoCoMo, the pages of `toki show`
    ("toki.experiments", "toki.real", "toki.locomo", "toki.show"),
    # 8 the command line
    ("toki.cli", "toki.demo"),
)
"""Layers, lowest first; a module belongs to the layer of the longest prefix naming it."""

CORE = ("toki.db", "toki.plan", "toki.write", "toki.lifecycle", "toki.scratch", "toki.replay")
CORE_PREFIXES = ("toki.algebra",)
FORBIDDEN_IN_CORE = ("toki.store", "toki.memory", "toki.cli", "toki.sim")
MAX_UPWARD = 5


def modules() -> dict[str, Path]:
    out = {}
    for path in (ROOT / "toki").rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported(tree: ast.AST, known: dict[str, Path]) -> Iterator[str]:
    """Every toki module an import statement anywhere in the file names, at module level or
    inside a function, or under `if TYPE_CHECKING:` (a type-only import is still a dependency
    a reader follows) (`from p import m` names the module p.m when there is one, else p)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in known else node.module


def graph() -> dict[str, set[str]]:
    known = modules()
    edges: dict[str, set[str]] = {m: set() for m in known}
    for name, path in known.items():
        for target in _imported(ast.parse(path.read_text(encoding="utf-8")), known):
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("toki") and target != name:
                edges[name].add(target)
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    scc.append(top)
                    if top == node:
                        break
                if len(scc) > 1:
                    found.append(sorted(scc))
    return found


def layer(module: str) -> int:
    best, depth = -1, -1
    for n, names in enumerate(LAYERS):
        for prefix in names:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > depth:
                best, depth = n, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS and docs/architecture.md")
    return best


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((a, b) for a, bs in edges.items() for b in bs if layer(a) < layer(b))


def _in_core(module: str) -> bool:
    return module in CORE or any(_under(module, p) for p in CORE_PREFIXES)


def test_every_module_has_a_layer() -> None:
    for module in modules():
        layer(module)


def test_no_import_circles() -> None:
    assert circles(graph()) == []


def test_few_imports_point_up() -> None:
    up = upward(graph())
    assert len(up) <= MAX_UPWARD, up


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_core_imports_no_store_clock_memory_or_cli() -> None:
    edges = graph()
    bad = [
        (a, b)
        for a, bs in sorted(edges.items())
        if _in_core(a)
        for b in sorted(bs)
        if any(_under(b, f) for f in FORBIDDEN_IN_CORE)
    ]
    assert bad == []
    clocks = [
        module
        for module, path in sorted(modules().items())
        if _in_core(module) and "datetime.now(" in path.read_text(encoding="utf-8")
    ]
    assert clocks == []


def test_the_graph_sees_function_level_imports(tmp_path: Path) -> None:
    tree = ast.parse("def f():\n    from toki.memory import Memory\n")
    assert list(_imported(tree, {"toki.memory": tmp_path})) == ["toki.memory"]


def test_a_circle_is_found() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("module", ["toki.sim.relay", "toki.store.sqlite", "toki"])
def test_longest_prefix_decides_the_layer(module: str) -> None:
    assert layer(module) == {"toki.sim.relay": 5, "toki.store.sqlite": 4, "toki": 5}[module]


def test_the_matrix_toki_rows_run_the_library() -> None:
    """One statement of the write path: every TOKI row the matrix runs is the library's own
    (`TokiLibrary`), under the names verdict_matrix/matrix.toml uses."""
    from toki.systems.registry import SYSTEMS, get_system
    from toki.systems.toki_lib import TokiLibrary

    rows = sorted(name for name in SYSTEMS if name == "toki" or name.startswith("toki-"))
    assert rows == ["toki", "toki-await", "toki-ewm", "toki-ewm-nolog", "toki-lww", "toki-rule"]
    for name in rows:
        assert isinstance(get_system(name), TokiLibrary), name
        assert get_system(name).name == ("toki-ewm" if name == "toki" else name)


if __name__ == "__main__":  # the numbers docs/architecture.md and the report quote
    g = graph()
    print(
        f"{len(g)} modules in {len(LAYERS)} layers, {sum(map(len, g.values()))} import edges, "
        f"{len(upward(g))} upward: {upward(g)}, circles: {circles(g)}"
    )
