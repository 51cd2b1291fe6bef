"""Shared helpers for benchmarks: machine description and the results file."""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on (they mean little without it)."""
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem_gib = round(pages / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gib": mem_gib,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_results(name: str, data: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    print(f"wrote {path}")
    return path


def best(repeat: int, fn: Callable[[], Any]) -> float:
    """The fastest of `repeat` runs of `fn`, in seconds (on a shared machine the minimum is
    the least disturbed)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)
