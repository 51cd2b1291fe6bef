"""Faults of real runs beyond a crash, chosen by the explorer like crashes (`--faults`).

* `crash:<n>`: each agent may be abandoned n times where it is parked (the engine's crash
  choice, "crash:<i>").
* `raise:<n>[:<kind>]`: each agent may see n of its boundary calls fail. Choice
  "raise:<i>" arms agent i: its next released gate point does not make the call; the worker
  raises the store's error there instead, and the library handles it as it would the real
  failure. Kinds: `timeout`, `locked` ("database is locked"), `unique` (a unique
  violation), `reset` (connection reset), or `auto` (default: by the point — history,
  messages and SQL statements `locked`, inserts `unique`, LLM calls `timeout`, anything
  else `reset`).
* `restart:1`: the process dies between two gate points (choice "restart"): every agent
  stops where it is, the library's files stay as last written, and the worker process is
  killed (SIGKILL). Then a new worker process reopens the library from its own files, each
  client retries the claims it was not acknowledged, serially, and the reopened state is
  checked (`toki.real.restart`).
* `torn:1`: as restart (choice "torn"), but the process dies *during* the last write of one
  of the library's durable files: that file keeps only the first half of what the write
  wrote.
* `tasks:<n>`: not a fault but a choice of the same kind, for asynchronous libraries: an
  agent whose call has several units parked at once (asyncio tasks, executor threads) runs
  its oldest by default; choice "task:<i>" makes agent i's next step release the next
  parked unit instead (fired k times before the step: the k-th next, cyclically), at most
  n times per agent and run. The step's footprint is the union of its parked units' (any
  of them may be the one released), so DPOR explores every order of the units of one
  agent that needs at most n such choices, with the interleavings between agents.

A raise choice is one `toki.sim` fault per agent (`affects` = that agent: DPOR orders it
against every step of the agent, so it explores the fault before each of them). A death is
one fault that affects every agent: it is ordered against every step. A run has at most one
death (the restart after it is not explored), hence `restart:1` / `torn:1`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toki.errors import InvalidInput
from toki.real.gate import GatePoint

__all__ = [
    "ERROR_KINDS",
    "FaultPlan",
    "crash_budget",
    "error_for",
    "parse_faults",
    "plan_from_json",
]

ERROR_KINDS = ("timeout", "locked", "unique", "reset")
_HELP = (
    "use crash:<n>, raise:<n>[:timeout|locked|unique|reset|auto], restart:1, torn:1 or "
    "tasks:<n>, comma-separated (docs/real.md, Faults)"
)


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """The faults a real run may contain (per agent for crash and raise, per run for a
    death)."""

    crash: int = 0
    raises: int = 0
    error: str = "auto"
    restart: int = 0
    torn: int = 0
    tasks: int = 0

    @property
    def dies(self) -> bool:
        return bool(self.restart or self.torn)

    def __bool__(self) -> bool:
        return bool(self.crash or self.raises or self.dies or self.tasks)

    def spec(self) -> str:
        """The `--faults` text that parses back to this plan ("" for none)."""
        parts = []
        if self.crash:
            parts.append(f"crash:{self.crash}")
        if self.raises:
            kind = "" if self.error == "auto" else f":{self.error}"
            parts.append(f"raise:{self.raises}{kind}")
        if self.restart:
            parts.append(f"restart:{self.restart}")
        if self.torn:
            parts.append(f"torn:{self.torn}")
        if self.tasks:
            parts.append(f"tasks:{self.tasks}")
        return ",".join(parts)


def parse_faults(text: str | None) -> FaultPlan:
    """`--faults` text -> a plan; InvalidInput (one line) for anything else."""
    fields: dict[str, Any] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        kind, _, rest = part.partition(":")
        count, _, extra = (rest or "1").partition(":")
        if kind not in ("crash", "raise", "restart", "torn", "tasks") or not count.isdigit():
            raise InvalidInput("--faults", f"{part!r} is not a fault of real runs", _HELP)
        if extra and kind != "raise":
            raise InvalidInput("--faults", f"{part!r}: only raise takes an error kind", _HELP)
        n = int(count)
        if kind in ("restart", "torn") and n > 1:
            raise InvalidInput("--faults", f"{part!r}: a run has at most one process death", _HELP)
        if kind == "raise":
            if extra and extra not in (*ERROR_KINDS, "auto"):
                raise InvalidInput("--faults", f"{part!r}: unknown error kind {extra!r}", _HELP)
            fields["raises"] = n
            fields["error"] = extra or "auto"
        else:
            fields[kind] = n
    plan = FaultPlan(**fields)
    if plan.restart and plan.torn:
        raise InvalidInput("--faults", "restart and torn are two kinds of one death", _HELP)
    return plan


def plan_from_json(spec: str | None, crash_budget: int = 0) -> FaultPlan:
    """A witness's faults (its spec text; older witnesses only have a crash budget)."""
    return parse_faults(spec) if spec else FaultPlan(crash=crash_budget)


def error_for(point: GatePoint, kind: str) -> str:
    """The error kind an injected failure of `point` raises."""
    if kind != "auto":
        return kind
    family = point.name.split(".", 1)[0]
    if family in ("history", "messages", "events", "sql", "store", "kuzu") or point.kind in (
        "history",
        "lock",
    ):
        return "locked"
    if point.name.endswith(".insert"):
        return "unique"
    if family in ("llm", "judge") or point.kind == "llm":
        return "timeout"
    return "reset"


def crash_budget(text: str | None) -> int:
    """`crash:N` (N crashes per agent) -> N, for callers that take only crashes; the other
    kinds need the whole plan (`parse_faults`) and are refused here rather than dropped."""
    parsed = parse_faults(text)
    if parsed != FaultPlan(crash=parsed.crash):
        raise InvalidInput(
            "--faults",
            f"{text!r} has faults beyond crashes",
            "pass the plan of toki.real.faults.parse_faults to explore_real(faults=...)",
        )
    return parsed.crash
