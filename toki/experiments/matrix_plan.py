"""The verdict-matrix experiment as written in matrix.toml: reading it, the systems it names,
and the tasks it plans (one per system × workload × fault setting, each with its seeds).

Both matrix builders (`matrix` for model rows, `real_matrix` for real libraries) plan from
here, so a real row runs exactly the workloads, faults and draws of the model row it stands
beside.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from toki.errors import InvalidInput

__all__ = [
    "BUDGETS",
    "DEFAULT_CONFIG",
    "FAULTS",
    "SAMPLERS",
    "load_config",
    "plan",
    "systems_of",
    "workload_of",
]

BUDGETS = ("small", "default")
DEFAULT_CONFIG = Path("verdict_matrix") / "matrix.toml"
SAMPLERS = ("random", "pct")
FAULTS = {"none": 0, "crash": 1}  # fault setting -> crashes per agent


def load_config(path: str | Path = DEFAULT_CONFIG) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            config = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput("matrix.toml", f"cannot read {path}: {exc}") from exc
    for key in ("experiment", "workloads", "budgets"):
        if key not in config:
            raise InvalidInput("matrix.toml", f"{path} has no [{key}] section")
    unknown = [f for f in config["experiment"].get("faults", ["none"]) if f not in FAULTS]
    if unknown:
        raise InvalidInput(
            "matrix.toml", f"unknown fault settings {unknown}", f"use {list(FAULTS)}"
        )
    from toki.real.derived import DERIVED

    unknown = [d for d in config["experiment"].get("derived", []) if d not in DERIVED]
    if unknown:
        raise InvalidInput(
            "matrix.toml", f"unknown derived-state classes {unknown}", f"use {list(DERIVED)}"
        )
    return config


def systems_of(config: Mapping[str, Any]) -> list[str]:
    """The systems the config names ("all": every registered model, in registry order)."""
    from toki.systems.registry import SYSTEMS

    spec = config.get("systems", {})
    include = spec.get("include", "all")
    names = list(SYSTEMS) if include == "all" else list(include)
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise InvalidInput("matrix.toml", f"unknown systems {unknown}", f"use {sorted(SYSTEMS)}")
    return [n for n in names if n not in set(spec.get("exclude", []))]


def _strategies(wl: Mapping[str, Any], fault: str) -> list[str]:
    key = "strategies" if fault == "none" else f"{fault}_strategies"
    out = list(wl.get(key, []))
    bad = [s for s in out if s not in ("dpor", *SAMPLERS)]
    if bad:
        raise InvalidInput("matrix.toml", f"workload {wl.get('name')!r}: unknown strategy {bad}")
    return out


def _instances(wl: Mapping[str, Any], system: str) -> list[dict[str, Any]]:
    """The workload specs a [[workloads]] entry stands for, for one system: itself, or (with
    `capacity = true`) one workload per capacity limit the model declares."""
    drop = {"capacity", *SAMPLERS}
    base = {k: v for k, v in wl.items() if not k.endswith("strategies") and k not in drop}
    if not wl.get("capacity"):
        return [base]
    from toki.systems.registry import get_system

    out = []
    for label, limit in sorted(get_system(system).capacities.items()):
        name = f"{wl['name']}:{label.replace(' ', '-')}={limit}"
        out.append({**base, "name": name, "capacity_limit": int(limit), "capacity_of": label})
    return out


def plan(
    config: Mapping[str, Any], budget: str = "default", systems: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Every task of the experiment, in a fixed order; each carries its own seeds."""
    if budget not in config["budgets"]:
        raise InvalidInput(
            "budget", f"unknown budget {budget!r}", f"use {sorted(config['budgets'])}"
        )
    b = config["budgets"][budget]
    exp = config["experiment"]
    draws = [int(d) for d in range(int(b["draws"]))]
    if not draws:
        raise InvalidInput("matrix.toml", f"budget {budget!r} needs draws >= 1")
    tasks: list[dict[str, Any]] = []
    for system in systems if systems is not None else systems_of(config):
        for fault in exp.get("faults", ["none"]):
            for wl in config["workloads"]:
                strategies = _strategies(wl, fault)
                if not strategies:
                    continue
                runs = {s: min(int(b[s]), int(wl.get(s, b[s]))) for s in SAMPLERS}  # may lower
                for spec in _instances(wl, system):
                    tasks.append(
                        {
                            "index": len(tasks),
                            "system": system,
                            "workload": spec,
                            "fault": fault,
                            "crash_budget": FAULTS[fault],
                            "strategies": strategies,
                            "draws": draws,
                            "budget": {
                                "dpor": int(b["dpor"] if fault == "none" else b[f"dpor_{fault}"]),
                                **runs,
                            },
                            "judge_p": float(exp["judge_p"]),
                            "pct_depth": int(exp.get("pct_depth", 3)),
                            "anomalies": list(exp["anomalies"]),
                        }
                    )
    return tasks


def workload_of(spec: Mapping[str, Any]) -> Any:
    """The `toki.sim.workload.Workload` a task's workload spec names."""
    from toki.sim.workload import Workload, capacity, scenario, synthetic

    if "scenario" in spec:
        base = scenario(str(spec["scenario"]))
    elif "synthetic" in spec:
        base = synthetic(**spec["synthetic"])
    elif "capacity_limit" in spec:
        base = capacity(int(spec["capacity_limit"]))
    else:
        raise InvalidInput(
            "matrix.toml", f"workload {spec.get('name')!r} needs scenario/synthetic/capacity"
        )
    return Workload(str(spec["name"]), base.inboxes, base.faults, base.params)
