"""Workloads as small programs of a library's own operations (`toki real scenario`).

A `SimClaim` workload can only say "key is value". Users report bugs in terms of the
library's API: add, update the id a search returned, delete, delete_all, get_all under
another user. An `OpProgram` is one sequence of `OpStep`s per agent; the worker runs each
step through the library's public API, and a read step can `bind` its answer so that a later
step of the same agent uses it (`"$found"` is the id of the first record it returned,
`"$found.1"` the second's). Binding names are qualified by the agent when a program is
built (`a0.found`), so a serial run of several agents' steps in one worker never mixes them.

An `OpProgram` has the attributes of a `Workload` the driver uses (`name`, `inboxes` of
items with `to_json`, `keys`, `to_json`), so the explorer, the strategies, crashes and
`replay_schedule` run it unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toki.errors import InvalidInput

__all__ = ["EXPANDS", "OPS", "READS", "SCOPE_ARGS", "OpProgram", "OpStep", "program_from_json"]

# each system's operations and the arguments each takes (required, optional)
OPS: dict[str, dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "mem0": {
        "add": (("text",), ("user_id", "agent_id", "run_id")),
        "update": (("memory_id", "text"), ("metadata",)),
        "delete": (("memory_id",), ()),
        "delete_all": ((), ("user_id", "agent_id", "run_id")),
        "get": (("memory_id",), ()),
        "get_all": ((), ("user_id", "agent_id", "run_id")),
        "search": (("query",), ("user_id", "agent_id", "run_id")),
        "history": (("memory_id",), ()),
    },
    "store": {
        "put": (("namespace", "key", "value"), ()),
        "get": (("namespace", "key"), ()),
        "search": (("namespace",), ()),
        "delete": (("namespace", "key"), ()),
    },
    "langmem": {
        "manage": (("text",), ("user_id",)),
        "search": ((), ("user_id",)),
    },
    "checkpoint": {
        "run": (("thread",), ()),
    },
    "graphiti": {
        "add_episode": (("text",), ("group_id", "day")),
        "add_episode_bulk": (("texts",), ("group_id", "day")),
        "remove_episode": (("episode_id",), ()),
        "search": (("query",), ("group_id", "group_ids")),
        "get_edges": ((), ("group_id",)),
    },
    "letta": {
        "insert": (("text",), ()),
        "remember": (("text",), ()),
        "search": (("query",), ()),
        "decide": (("query",), ()),
    },
}
READS = frozenset({"get", "get_all", "search", "history", "get_edges"})
# a batch operation and the single one it is documented to equal, one item at a time: the
# serial runs `duplicate` compares with run the batch's items one by one
# (family, batch op) -> (single op, list argument, item argument)
EXPANDS = {("graphiti", "add_episode_bulk"): ("add_episode", "texts", "text")}
SCOPE_ARGS = ("user_id", "agent_id", "run_id", "group_id", "namespace")
_REF = re.compile(r"^\$([A-Za-z_][\w.]*?)(?:\.(\d+))?$")


@dataclass(frozen=True, slots=True)
class OpStep:
    """One call of the library's API: `op` with `args`; `bind` names its answer."""

    op: str
    args: tuple[tuple[str, Any], ...] = ()
    bind: str | None = None

    def arg(self, name: str, default: Any = None) -> Any:
        return dict(self.args).get(name, default)

    @property
    def scope(self) -> dict[str, str]:
        """The scope ids the step names (user_id, agent_id, run_id, group_id)."""
        return {k: str(v) for k, v in self.args if k in SCOPE_ARGS}

    @property
    def key(self) -> str:
        """What the step is about, for reports: its text, query or id."""
        for name in ("text", "query", "memory_id"):
            if name in dict(self.args):
                return str(self.arg(name))
        return self.op

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op, **{k: _thawed(v) for k, v in self.args}}
        if self.bind is not None:
            out["bind"] = self.bind
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OpStep:
        if not isinstance(data, Mapping) or not isinstance(data.get("op"), str):
            raise InvalidInput("step", f"{data!r} is not a step", 'write {{ op = "add", ... }}')
        bind = data.get("bind")
        args = tuple(
            sorted((str(k), _frozen(v)) for k, v in data.items() if k not in ("op", "bind"))
        )
        return cls(str(data["op"]), args, None if bind is None else str(bind))


def _frozen(value: Any) -> Any:
    """A list argument (Graphiti's bulk texts) as a tuple, a table (mem0's metadata) as
    sorted pairs: steps are hashable values."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, Mapping):
        return _Table(sorted((str(k), _frozen(v)) for k, v in value.items()))
    return value


class _Table(tuple[tuple[str, Any], ...]):
    """A mapping argument, frozen; `to_json` gives the mapping back."""

    __slots__ = ()


def _thawed(value: Any) -> Any:
    if isinstance(value, _Table):
        return {k: _thawed(v) for k, v in value}
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


def _qualify(step: OpStep, agent: int) -> OpStep:
    """Binding names and references made the agent's own (`found` -> `a0.found`)."""

    def ref(value: Any) -> Any:
        if isinstance(value, str) and (m := _REF.match(value)) is not None:
            name = m.group(1)
            if not name.startswith(f"a{agent}."):
                name = f"a{agent}.{name}"
            return "$" + name + (f".{m.group(2)}" if m.group(2) is not None else "")
        return value

    bind = step.bind
    if bind is not None and not bind.startswith(f"a{agent}."):
        bind = f"a{agent}.{bind}"
    return OpStep(step.op, tuple((k, ref(v)) for k, v in step.args), bind)


@dataclass(frozen=True, slots=True)
class OpProgram:
    """One sequence of steps per agent, for one kind of library (`family`: "mem0")."""

    name: str
    family: str
    inboxes: tuple[tuple[OpStep, ...], ...]
    faults: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def build(cls, name: str, family: str, agents: Sequence[Iterable[OpStep]]) -> OpProgram:
        """Checks every step against the family's operations and qualifies bindings."""
        ops = OPS.get(family)
        if ops is None:
            raise InvalidInput(
                "scenario", f"no operations for {family!r}", f"use one of {', '.join(OPS)}"
            )
        inboxes = []
        for i, steps in enumerate(agents):
            bound: set[str] = set()
            inbox = []
            for n, step in enumerate(steps):
                where = f"agent {i} step {n}"
                if step.op not in ops:
                    raise InvalidInput(
                        "scenario",
                        f"{where}: {family} has no operation {step.op!r}",
                        f"use one of {', '.join(sorted(ops))}",
                    )
                required, optional = ops[step.op]
                given = {k for k, _ in step.args}
                if missing := [r for r in required if r not in given]:
                    raise InvalidInput("scenario", f"{where} ({step.op}): missing {missing}")
                if extra := sorted(given - set(required) - set(optional)):
                    raise InvalidInput(
                        "scenario",
                        f"{where} ({step.op}): unknown arguments {extra}",
                        f"it takes {', '.join([*required, *optional]) or 'none'}",
                    )
                for _, v in step.args:
                    if isinstance(v, str) and (m := _REF.match(v)) and m.group(1) not in bound:
                        raise InvalidInput(
                            "scenario",
                            f"{where} ({step.op}): {v} names no earlier `bind` of agent {i}",
                        )
                if step.bind is not None:
                    bound.add(step.bind)
                inbox.append(_qualify(step, i))
            inboxes.append(tuple(inbox))
        if not inboxes or not any(inboxes):
            raise InvalidInput("scenario", f"{name}: no steps", "give [[agents]] with steps")
        return cls(name, family, tuple(inboxes))

    def serial_inboxes(self) -> tuple[tuple[OpStep, ...], ...]:
        """The inboxes with each batch step replaced by its items one at a time (`EXPANDS`):
        what a serial execution of the same requests is."""
        out = []
        for inbox in self.inboxes:
            steps: list[OpStep] = []
            for step in inbox:
                single = EXPANDS.get((self.family, step.op))
                if single is None:
                    steps.append(step)
                    continue
                op, many, one = single
                rest = tuple((k, v) for k, v in step.args if k != many)
                for item in step.arg(many) or ():
                    steps.append(OpStep(op, tuple(sorted((*rest, (one, item))))))
            out.append(tuple(steps))
        return tuple(out)

    @property
    def claims(self) -> tuple[OpStep, ...]:
        return tuple(s for inbox in self.inboxes for s in inbox)

    @property
    def keys(self) -> tuple[str, ...]:
        """The texts the program writes (what reports and the serial checks name)."""
        return tuple(sorted({s.key for s in self.claims if s.op not in READS}))

    @property
    def scopes(self) -> tuple[str, ...]:
        """Every user / agent / run / group id the program names."""
        return tuple(sorted({v for s in self.claims for v in s.scope.values()}))

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "program",
            "name": self.name,
            "family": self.family,
            "agents": [[s.to_json() for s in inbox] for inbox in self.inboxes],
        }


def program_from_json(data: Mapping[str, Any]) -> OpProgram:
    """The program a witness or scenario file stores (bindings already qualified)."""
    agents = [[OpStep.from_json(s) for s in steps] for steps in data.get("agents") or []]
    return OpProgram.build(str(data.get("name", "")), str(data.get("family", "")), agents)
