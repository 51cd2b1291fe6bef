"""Real memory libraries under toki's scheduler (Jepsen's split: the real code, toki's
explorer and checkers).

A library runs in its own virtual environment (`toki real setup SYSTEM`, from a lock file in
`toki/real/locks/`) inside a worker process (`toki/real/inenv/`) that gates its boundary
calls: each gate point becomes one step of toki's explorer with a declared footprint, so the
random, PCT, bounded and DPOR strategies apply unchanged, and only one agent runs at a time.
The stub LLM answers from the workload's judge; clock, uuid and embeddings are deterministic;
a network guard refuses anything but loopback. See docs/real.md.

    from toki.real import get_real_system, explore_real
"""

from toki.real.adapter import HostAdapter, Picker, RealSystem, ScriptedJudge
from toki.real.driver import RealRun, open_session, real_program, real_runs, serial_orders
from toki.real.errors import EnvironmentMissing, NetworkRefused, SetupFailed, WorkerError
from toki.real.explore import RealReport, explore_real
from toki.real.gate import GatePoint
from toki.real.systems import SYSTEMS, get_real_system, setup_system
from toki.real.witness import RealWitness, explain_real, replay_real

__all__ = [
    "SYSTEMS",
    "EnvironmentMissing",
    "GatePoint",
    "HostAdapter",
    "NetworkRefused",
    "Picker",
    "RealReport",
    "RealRun",
    "RealSystem",
    "RealWitness",
    "ScriptedJudge",
    "SetupFailed",
    "WorkerError",
    "explain_real",
    "explore_real",
    "get_real_system",
    "open_session",
    "real_program",
    "real_runs",
    "replay_real",
    "serial_orders",
    "setup_system",
]
