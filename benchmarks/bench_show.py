"""How fast a `toki show` page renders in headless Chromium (issue #39: a witness of 500 gate
points in under 1 s).

The witness is a real witness with a 500-entry gate-point trace (two agents, two tasks each,
an LLM decision every fifth point, a crash); the page is written by `toki.show`, loaded from
file:// and timed by the browser's own navigation timing (load event end, in ms from the
start of navigation: parsing, style, layout and the script). The best of `--repeat` loads is
reported, beside the time Python took to build and write the page (after the one-off
import of the modules, reported apart).

    python -m benchmarks.bench_show            # writes results/show.json
    python -m benchmarks.bench_show --quick    # 1 load, writes nothing

Needs Debian's `chromium` and `chromium-driver` (or TOKI_CHROMIUM / TOKI_CHROMEDRIVER): the
system driver is used, Selenium never downloads one. `tests/show` uses the same helpers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine_info, write_results

TARGET_S = 1.0


def chromium() -> tuple[str, str] | None:
    """(browser, driver) paths, or None when either is missing."""
    browser = os.environ.get("TOKI_CHROMIUM") or shutil.which("chromium") or ""
    driver = os.environ.get("TOKI_CHROMEDRIVER") or shutil.which("chromedriver") or ""
    if not (browser and driver and os.access(browser, os.X_OK) and os.access(driver, os.X_OK)):
        return None
    return browser, driver


def open_browser(width: int = 1400, height: int = 1000, *, javascript: bool = True) -> Any:
    """Headless Chromium through the system chromedriver, with the network log on (so a
    test can list every request the page made); `javascript=False` turns scripts off.
    Never downloads a driver or browser."""
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    paths = chromium()
    if paths is None:
        raise RuntimeError("chromium and chromedriver are not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    return webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)


def requested_urls(driver: Any) -> list[str]:
    """Every URL the browser requested since the last call (Network.requestWillBeSent)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(str(message["params"]["request"]["url"]))
    return urls


def big_real_witness(path: Path, points: int = 500) -> Path:
    """A real witness whose trace has `points` gate points (agents 0 and 1, tasks 0 and 1,
    an LLM decision every fifth point, one crash near the end)."""
    claim = {"cid": "c", "key": "alice:manager", "recorded": 1, "source": "m", "start": 1}
    trace: list[dict[str, Any]] = []
    for i in range(points - 1):
        agent, task = i % 2, (i // 2) % 2
        point = ("llm.decide", "vector.search", "clock.now", "vector.insert", "history.add")[i % 5]
        detail = {"claim": {**claim, "value": f"v{i}"}, "n": i}
        trace.append(
            {
                "agent": agent,
                "task": task,
                "point": point,
                "claim": i // 50,
                "detail": detail,
                "reply": json.dumps({"memory": [{"event": "ADD", "text": f"v{i}"}]})
                if point == "llm.decide"
                else None,
            }
        )
    trace.insert(points - 10, {"crash": 1, "before": "vector.insert", "claim": 9})
    data = {
        "format": "toki-real-witness",
        "version": 1,
        "system": "toki-memory",
        "library_version": "",
        "anomaly": "N2",
        "workload": {
            "name": "synthetic",
            "inboxes": [[{**claim, "value": "Bob", "weight": 1.0}], []],
            "faults": [],
            "params": {},
        },
        "schedule": [i % 2 for i in range(points)],
        "judge": {"kind": "sim", "p": 0.5, "seed": 0},
        "recovery": {"kind": "sim", "p": 0.5, "seed": 1},
        "keys": ["alice:manager"],
        "expected": "the beliefs of a serial run of the real code",
        "observed": {"alice:manager": {"live": ["Bob", "Carol"], "value": None}},
        "steps": ["a synthetic witness for the render benchmark"],
        "trace": trace,
    }
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def render_ms(driver: Any, page: Path) -> float:
    """Milliseconds from navigation start to the end of the load event of `page`."""
    driver.get(page.resolve().as_uri())
    nav = driver.execute_script(
        "var n = performance.getEntriesByType('navigation')[0];"
        "return n ? n.loadEventEnd : (performance.timing.loadEventEnd -"
        " performance.timing.navigationStart);"
    )
    return float(nav)


def measure(folder: Path, points: int = 500, repeat: int = 5) -> dict[str, Any]:
    """Write the witness and its page in `folder`, load it `repeat` times; the numbers."""
    t0 = time.perf_counter()
    import toki.real.witness  # noqa: F401  (the real-witness reader; imported once per process)
    from toki.show import write_page

    imports = time.perf_counter() - t0
    witness = big_real_witness(folder / "big-real-witness.json", points)
    t0 = time.perf_counter()
    page = write_page(witness, folder / "big-real-witness.html", replay_real=False)
    build = time.perf_counter() - t0
    driver = open_browser()
    try:
        loads = [render_ms(driver, folder / "big-real-witness.html") for _ in range(repeat)]
    finally:
        driver.quit()
    return {
        "gate_points": len(page.rows),
        "lanes": list(page.lanes),
        "page_bytes": (folder / "big-real-witness.html").stat().st_size,
        "imports_s": round(imports, 4),
        "build_and_write_s": round(build, 4),
        "render_s_best": round(min(loads) / 1000, 4),
        "render_s_all": [round(x / 1000, 4) for x in loads],
        "target_s": TARGET_S,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one load, write nothing")
    ap.add_argument("--points", type=int, default=500, help="gate points (default 500)")
    args = ap.parse_args(argv)
    if chromium() is None:
        print("bench_show: chromium/chromedriver not installed; skipped")
        return 0
    load = os.getloadavg()[0]  # the machine is shared: how busy it was is part of the number
    with tempfile.TemporaryDirectory() as tmp:
        numbers = measure(Path(tmp), args.points, 1 if args.quick else 5)
    numbers["load_average_1min_before"] = round(load, 2)
    print(
        f"{numbers['gate_points']} gate points: page built in {numbers['build_and_write_s']} s, "
        f"rendered in {numbers['render_s_best']} s (best of {len(numbers['render_s_all'])}; "
        f"target < {TARGET_S} s)"
    )
    if not args.quick:
        from selenium import __version__ as selenium_version

        write_results(
            "show",
            {
                "benchmark": "toki show: a real witness of 500 gate points in headless Chromium",
                "command": "python -m benchmarks.bench_show",
                "machine": machine_info(),
                "browser": _browser_version(),
                "selenium": selenium_version,
                "summary": {  # what benchmarks/README.md shows
                    "render_s_500_gate_points_best_of_5": numbers["render_s_best"],
                    "page_build_s": numbers["build_and_write_s"],
                    "page_kib": round(numbers["page_bytes"] / 1024),
                },
                "results": numbers,
            },
        )
    return 0


def _browser_version() -> str:
    import subprocess

    paths = chromium()
    if paths is None:
        return ""
    out = subprocess.run([paths[0], "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
