"""The headless browser of the `toki show` tests, and where their screenshots go.

Chromium and its driver come from the system's packages (Debian `chromium`,
`chromium-driver`; .ci/run installs them); Selenium is pointed at /usr/bin/chromedriver and
never downloads anything. Missing, the browser tests skip with the reason, except under
CI=true, where they fail: CI installs the browser, so a skip there would hide a broken setup.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Screenshots and the render timing: a CI artefact, under the git-ignored toki-out/.
ARTIFACTS = Path(os.environ.get("TOKI_ARTIFACTS", ROOT / "toki-out" / "browser-tests"))


def _unavailable() -> str:
    from benchmarks.bench_show import chromium

    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    if chromium() is None:
        return "chromium / chromedriver not installed (apt-get install chromium chromium-driver)"
    return ""


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    why = _unavailable()
    if why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)
    from benchmarks.bench_show import open_browser

    driver = open_browser()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
