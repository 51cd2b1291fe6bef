"""Which code a committed notebook's outputs come from: the toki modules its code cells import
and a hash of their source, stored in the notebook's metadata (`toki.calls`,
`toki.source_hash`) when it is executed and saved (`make reproduce`), so a test can say when
its outputs are older than that code.

Only the modules the notebook imports are hashed, not everything they import in turn: a
change to one of the functions a notebook calls marks it stale; a change deep in the store
does not (the test suite guards that code).
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toki.errors import InvalidInput

__all__ = ["called_modules", "source_hash", "stale", "stamp"]


def _code(nb: Mapping[str, Any]) -> list[str]:
    return [
        "".join(c["source"]) if isinstance(c["source"], list) else str(c["source"])
        for c in nb.get("cells", [])
        if c.get("cell_type") == "code"
    ]


def called_modules(nb: Mapping[str, Any]) -> list[str]:
    """The toki modules the notebook's code cells import, sorted (a cell that does not parse,
    e.g. IPython magics, is read line by line)."""
    found: set[str] = set()
    for src in _code(nb):
        try:
            trees = [ast.parse(src)]
        except SyntaxError:
            trees = []
            for line in src.splitlines():
                try:
                    trees.append(ast.parse(line.strip()))
                except SyntaxError:
                    continue
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                found |= {n for n in names if n == "toki" or n.startswith("toki.")}
    return sorted(found)


def source_hash(modules: list[str]) -> str:
    """sha256 over each module's name and source file bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(modules):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise InvalidInput("notebook", f"imports {name}, which does not exist")
        h.update(name.encode() + b"\0" + Path(spec.origin).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def stamp(path: Path) -> dict[str, Any]:
    """Record in the notebook's metadata the modules it calls and their source hash (after
    executing it); returns the new `toki` metadata."""
    nb = json.loads(path.read_text())
    mods = called_modules(nb)
    meta = {
        **nb.get("metadata", {}).get("toki", {}),
        "calls": mods,
        "source_hash": source_hash(mods),
    }
    nb.setdefault("metadata", {})["toki"] = meta
    path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    return meta


def stale(path: Path) -> str | None:
    """Why the notebook's outputs may be older than the code they call, or None."""
    nb = json.loads(path.read_text())
    meta = nb.get("metadata", {}).get("toki", {})
    if "source_hash" not in meta:
        return f"{path.name} records no source hash: execute and stamp it (make reproduce)"
    mods = called_modules(nb)
    if mods != meta.get("calls"):
        return f"{path.name} imports {mods}, but was stamped for {meta.get('calls')}"
    now = source_hash(mods)
    if now != meta["source_hash"]:
        return (
            f"{path.name}: the code it calls ({', '.join(mods)}) changed since its outputs "
            "were made: re-execute it (python scripts/reproduce.py --only notebooks)"
        )
    return None


def main(argv: list[str] | None = None) -> int:
    """python -m toki.experiments.notebooks NOTEBOOK... : stamp executed notebooks."""
    import sys

    for arg in argv if argv is not None else sys.argv[1:]:
        print(f"{arg}: {stamp(Path(arg))['source_hash']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
