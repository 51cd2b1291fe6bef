"""Large locked environments of issue #33: Letta (tests/real/test_letta.py) and Cognee
(tests/real/test_cognee.py), both driven by adapters.

`toki real setup letta|cognee` must make their environment from the lock file; `setup all`
(what CI runs) makes both, as it makes every system an adapter drives; a library that only
installs (an `ENVIRONMENTS` entry, none today) would be left out."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from toki.real import envs, systems
from toki.real.cli import main
from toki.real.errors import EnvironmentMissing
from toki.real.systems import ENVIRONMENTS, SYSTEMS, setup_name

pytestmark = pytest.mark.real


@pytest.mark.parametrize("name", ["cognee-1.6.5", "letta-0.16.8", *sorted(ENVIRONMENTS)])
def test_each_lock_pins_every_package_and_the_library(name: str) -> None:
    library = ENVIRONMENTS[name] if name in ENVIRONMENTS else SYSTEMS[name]
    assert library.lock is not None
    lines = [
        ln
        for ln in envs.lock_file(library.lock).read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[A-Za-z0-9_.+\-]+", ln) for ln in lines)
    names = [ln.split("==")[0].lower() for ln in lines]
    assert len(names) == len(set(names)), "a package pinned twice"
    assert f"{library.library}=={library.version}" in lines
    assert not (name in SYSTEMS and name in ENVIRONMENTS), "an adapter's library is a system"


def test_setup_names_the_library_or_the_system() -> None:
    assert setup_name("letta") == "letta-0.16.8"
    assert setup_name("cognee") == "cognee-1.6.5"
    assert setup_name("cognee-1.6.5") == "cognee-1.6.5"
    assert setup_name("graphiti") == "graphiti-0.31.2"  # systems still resolve as before


def test_setup_all_leaves_out_libraries_without_an_adapter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def fake(name: str, *, force: bool = False) -> envs.SetupReport:
        asked.append(name)
        return envs.SetupReport(name, "/nowhere", False, 0.0, 0)

    monkeypatch.setattr(systems, "setup_system", fake)
    assert main(["setup", "all", "--json"]) == 0
    assert asked and not set(asked) & set(ENVIRONMENTS)
    assert "letta-0.16.8" in asked and "cognee-1.6.5" in asked
    asked.clear()
    assert main(["setup", "letta", "--json"]) == 0
    assert asked == ["letta-0.16.8"]


def test_an_unknown_setup_name_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["setup", "lettuce"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown real system" in err[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("letta-0.16.8", "from letta.server.server import SyncServer; print(SyncServer.__name__)"),
        ("cognee-1.6.5", "import cognee; print(cognee.add.__name__)"),
    ],
)
def test_the_made_environment_imports_the_library(name: str, code: str) -> None:
    """Only where `toki real setup NAME` was run (CI does not make these environments)."""
    python, env = _python(name)
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=300,
            env={**env, "HOME": home, "PATH": "/usr/bin:/bin"},
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] in {"SyncServer", "add"}


def _python(name: str) -> tuple[str, dict[str, str]]:
    """The environment's interpreter (skips where it was not made) and its variables."""
    library = ENVIRONMENTS[name] if name in ENVIRONMENTS else SYSTEMS[name]
    try:
        return envs.python_for(name, library.lock), dict(library.env)
    except EnvironmentMissing as exc:
        pytest.skip(str(exc))


@pytest.mark.slow
def test_letta_runs_on_its_own_postgres_with_pgvector_and_no_network() -> None:
    """The Letta smoke run (toki/real/inenv/letta_db.py): pgserver's PostgreSQL 16 on a Unix
    socket, Letta's schema, an agent with a core-memory block, the block updated through the
    block manager; Letta's own engine must be served by that server, not the machine's."""
    python, _ = _python("letta-0.16.8")
    real = str(Path(envs.__file__).parent)
    done = subprocess.run(
        [python, "-m", "inenv.letta_db"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": real},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    assert out["network"] == []
    assert out["letta_engine_server"].startswith("PostgreSQL 16.")
    assert "0.6.2" in out["server"]  # pgvector's extversion
    assert out["value_before"] == "alice lives in paris"
    assert out["value_after"] == "alice lives in rome" and out["agent_sees"] == [out["value_after"]]
    assert out["block_row"] == ["alice lives in rome", 2]  # the ORM's optimistic-lock version
    assert not Path(out["uri"].split("host=", 1)[1]).exists(), "the temp dir is left behind"
