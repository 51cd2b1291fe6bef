"""Execute every notebook in notebooks/ with nbclient; any cell error fails the test.

A notebook that needs the LoCoMo file declares it in its metadata
(`"toki": {"requires": ["locomo"]}`); it is skipped, with the reason printed, when the file
is absent. The kernel is the `python3` kernel of the interpreter running pytest (ipykernel's
native kernel), so the notebooks import the same `toki` as the tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
ALL = sorted(NOTEBOOKS.glob("*.ipynb"))


def _missing_requirements(nb: nbformat.NotebookNode) -> str | None:
    needs = nb.metadata.get("toki", {}).get("requires", [])
    if "locomo" in needs:
        from toki.errors import DataNotFound
        from toki.locomo import locate_locomo

        try:
            locate_locomo()
        except DataNotFound as e:
            return f"needs the LoCoMo data file, which is absent: {e}"
    return None


def _run(nb: nbformat.NotebookNode, cwd: Path, timeout: int = 600) -> None:
    NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()


def test_kernel_is_this_interpreter(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import sys, toki\nprint(sys.prefix)")]
    _run(nb, tmp_path, timeout=120)
    out = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert out.strip() == sys.prefix


def test_a_failing_cell_fails() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("raise ValueError('boom')")]
    with pytest.raises(Exception, match="boom"):
        _run(nb, NOTEBOOKS, timeout=120)


@pytest.mark.slow
@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_runs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    reason = _missing_requirements(nb)
    if reason is not None:
        print(f"{path.name}: skipped: {reason}")
        pytest.skip(reason)
    _run(nb, path.parent)


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_notebook_outputs_are_not_older_than_the_code_they_call(path: Path) -> None:
    """Each committed notebook records the toki modules it imports and their source hash
    when executed (`python scripts/reproduce.py --only notebooks`); a change to that code
    without re-executing the notebook leaves outputs that the code no longer produces."""
    from toki.experiments.notebooks import stale

    reason = stale(path)
    assert reason is None, reason


def test_a_notebook_is_stale_when_the_code_it_calls_changes(tmp_path: Path) -> None:
    import json

    from toki.experiments.notebooks import called_modules, stale, stamp

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import numpy\nfrom toki.experiments.stats import holm\n%matplotlib inline"
        )
    ]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    assert "records no source hash" in str(stale(path))
    stamp(path)
    assert stale(path) is None
    assert called_modules(json.loads(path.read_text())) == ["toki.experiments.stats"]
    data = json.loads(path.read_text())
    data["metadata"]["toki"]["source_hash"] = "0" * 16  # as if the code changed since
    path.write_text(json.dumps(data))
    assert "changed since its outputs were made" in str(stale(path))
