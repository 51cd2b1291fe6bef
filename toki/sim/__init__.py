"""The concurrency simulator: a multi-version transactional store (agents and scheduling
strategies live in sibling modules)."""

from toki.errors import Deadlock, SerializationFailure, TransactionError, WouldBlock
from toki.sim.store import Op, OpKind, Seen, SimStore, TxnStatus, Version

__all__ = [
    "Deadlock",
    "Op",
    "OpKind",
    "Seen",
    "SerializationFailure",
    "SimStore",
    "TransactionError",
    "TxnStatus",
    "Version",
    "WouldBlock",
]

# The explorer: program model, engine, strategies (appended; the store's names stay above).
from toki.errors import ProgramError, ScheduleError
from toki.sim.dpor import DPOR
from toki.sim.engine import Execution
from toki.sim.explore import (
    BoundedDFS,
    ExploreResult,
    PCTStrategy,
    RandomStrategy,
    Run,
    Strategy,
    canonical_schedule,
    count_trace_classes,
    explore,
    history_hash,
    iter_runs,
    replay_schedule,
    trace_class,
    trace_classes,
)
from toki.sim.program import (
    ALL,
    CRASHED,
    Abort,
    Agent,
    Begin,
    Commit,
    Crash,
    Delete,
    DeleteWhere,
    Fault,
    Footprint,
    Local,
    Program,
    Read,
    Select,
    Step,
    UpdateWhere,
    World,
    Write,
    dependent,
    program,
)

__all__ += [
    "ALL",
    "CRASHED",
    "DPOR",
    "Abort",
    "Agent",
    "Begin",
    "BoundedDFS",
    "Commit",
    "Crash",
    "Delete",
    "DeleteWhere",
    "Execution",
    "ExploreResult",
    "Fault",
    "Footprint",
    "Local",
    "PCTStrategy",
    "Program",
    "ProgramError",
    "RandomStrategy",
    "Read",
    "Run",
    "ScheduleError",
    "Select",
    "Step",
    "Strategy",
    "UpdateWhere",
    "World",
    "Write",
    "canonical_schedule",
    "count_trace_classes",
    "dependent",
    "explore",
    "history_hash",
    "iter_runs",
    "program",
    "replay_schedule",
    "trace_class",
    "trace_classes",
]
