"""Workloads: which agent receives which claims, generated from a seed or named from the seeds.

A claim here is a plain value (`SimClaim`): key, value, valid start (a day number), recording
time (the source's write time, an integer tick), weight and source. Integer times keep
schedules and witnesses small and exact; `toki.model.Claim` is what the real store takes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toki.errors import InvalidInput

__all__ = [
    "SCENARIOS",
    "SimClaim",
    "Workload",
    "capacity",
    "scenario",
    "synthetic",
]


@dataclass(frozen=True, slots=True)
class SimClaim:
    """One belief an agent will try to write. `key` is (subject, predicate)."""

    key: str
    value: str
    start: int = 0  # valid-from, in days
    recorded: int = 0  # knowledge time: the source's write tick
    weight: float = 1.0
    source: str = "user"
    cid: str = ""  # a stable id (duplicates share it)

    def __post_init__(self) -> None:
        if not self.key or not isinstance(self.key, str):
            raise InvalidInput("claim.key", f"must be a non-empty string, got {self.key!r}")
        if not self.cid:
            object.__setattr__(
                self, "cid", f"{self.key}={self.value}@{self.start}/{self.recorded}/{self.source}"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "start": self.start,
            "recorded": self.recorded,
            "weight": self.weight,
            "source": self.source,
            "cid": self.cid,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SimClaim:
        return cls(
            str(data["key"]),
            str(data["value"]),
            int(data.get("start", 0)),
            int(data.get("recorded", 0)),
            float(data.get("weight", 1.0)),
            str(data.get("source", "user")),
            str(data.get("cid", "")),
        )


@dataclass(frozen=True, slots=True)
class Workload:
    """Inboxes, one per agent, processed in order; plus named faults to inject."""

    name: str
    inboxes: tuple[tuple[SimClaim, ...], ...]
    faults: tuple[str, ...] = ()
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def claims(self) -> tuple[SimClaim, ...]:
        return tuple(c for inbox in self.inboxes for c in inbox)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(sorted({c.key for c in self.claims}))

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "inboxes": [[c.to_json() for c in inbox] for inbox in self.inboxes],
            "faults": list(self.faults),
            "params": dict(self.params),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Workload:
        try:
            inboxes = tuple(
                tuple(SimClaim.from_json(c) for c in inbox) for inbox in data["inboxes"]
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput("workload", f"malformed workload: {exc}") from exc
        return cls(
            str(data.get("name", "workload")),
            inboxes,
            tuple(data.get("faults", ())),
            dict(data.get("params", {})),
        )

    def restricted(self, keep: Sequence[Sequence[int]]) -> Workload:
        """The same workload with only the claims at the given (inbox, position) indices."""
        inboxes = tuple(
            tuple(self.inboxes[a][i] for i in positions) for a, positions in enumerate(keep)
        )
        return Workload(self.name, inboxes, self.faults, self.params)


def synthetic(
    agents: int = 2,
    claims_per_agent: int = 2,
    keys: int = 1,
    contradiction_rate: float = 1.0,
    zipf: float = 0.0,
    duplicate_rate: float = 0.0,
    late_rate: float = 0.0,
    seed: int = 0,
) -> Workload:
    """A random workload. Keys are drawn with Zipf skew `zipf` (0: uniform); a claim
    contradicts the previous value of its key with probability `contradiction_rate`
    (else it repeats it); duplicates re-deliver an earlier claim; late claims carry an older
    recording time and valid start than the claims around them."""
    for name, rate in (
        ("contradiction_rate", contradiction_rate),
        ("duplicate_rate", duplicate_rate),
        ("late_rate", late_rate),
    ):
        if not 0.0 <= rate <= 1.0:
            raise InvalidInput(name, f"{rate} is not a probability in [0, 1]")
    if agents < 1 or claims_per_agent < 0 or keys < 1:
        raise InvalidInput("workload", "agents >= 1, claims_per_agent >= 0 and keys >= 1")
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** zipf for i in range(keys)]
    key_names = [f"user{i}:city" for i in range(keys)]
    last: dict[str, str] = {}
    values = ["Lisbon", "Berlin", "Prague", "Oslo", "Rome"]
    tick = 0
    inboxes: list[list[SimClaim]] = [[] for _ in range(agents)]
    made: list[SimClaim] = []
    for i in range(agents * claims_per_agent):
        agent = i % agents
        if made and rng.random() < duplicate_rate:
            inboxes[agent].append(rng.choice(made))
            continue
        tick += 1
        key = rng.choices(key_names, weights)[0]
        prev = last.get(key)
        if prev is None or rng.random() < contradiction_rate:
            value = rng.choice([v for v in values if v != prev])
        else:
            value = prev
        late = rng.random() < late_rate
        claim = SimClaim(
            key,
            value,
            start=0 if late else tick,
            recorded=tick - 1 if late else tick * 2,
            weight=rng.choice([0.5, 1.0, 2.0]),
            source=f"agent{agent}",
        )
        last[key] = value
        made.append(claim)
        inboxes[agent].append(claim)
    params = {
        "agents": agents,
        "claims_per_agent": claims_per_agent,
        "keys": keys,
        "contradiction_rate": contradiction_rate,
        "zipf": zipf,
        "duplicate_rate": duplicate_rate,
        "late_rate": late_rate,
        "seed": seed,
    }
    return Workload("synthetic", tuple(tuple(x) for x in inboxes), (), params)


def capacity(limit: int, name: str = "", key: str = "user:city") -> Workload:
    """A workload that crosses a capacity of `limit` entries (a bounded deque, a top-k
    search): agent 0 states `limit` + 1 values of one key, one after another, each
    contradicting the last; agent 1 races one more contradicting value against them. Agent 1
    has a single claim so that the serial orders N2 compares with (agent 0's order kept)
    number only `limit` + 3."""
    if limit < 1:
        raise InvalidInput("limit", f"{limit} < 1", "a capacity holds at least one entry")
    width = len(str(limit + 1))
    first = tuple(
        SimClaim(key, f"v{i:0{width}d}", start=i, recorded=i, source=f"msg-{i}")
        for i in range(limit + 1)
    )
    middle = (limit + 1) // 2
    racer = SimClaim(key, "racer", start=middle, recorded=middle, source="msg-racer")
    label = name or f"capacity-{limit}"
    return Workload(label, (first, (racer,)), (), {"capacity": limit})


def _two(name: str, key: str, first: SimClaim, second: SimClaim) -> Workload:
    return Workload(name, ((first,), (second,)))


SCENARIOS: dict[str, Workload] = {
    # "Alice's manager is Bob", then "... is Carol" (the TOKI paper's mem0 v3 N3 case)
    "manager": _two(
        "manager",
        "alice:manager",
        SimClaim("alice:manager", "Bob", start=1, recorded=1, source="msg-1"),
        SimClaim("alice:manager", "Carol", start=5, recorded=5, source="msg-2"),
    ),
    "lisbon-berlin": _two(
        "lisbon-berlin",
        "user:city",
        SimClaim("user:city", "Lisbon", start=0, recorded=30, source="msg-1"),
        SimClaim("user:city", "Berlin", start=183, recorded=224, source="msg-2"),
    ),
    "npm-pnpm": _two(
        "npm-pnpm",
        "repo:package_manager",
        SimClaim("repo:package_manager", "npm", start=0, recorded=1, source="msg-1"),
        SimClaim("repo:package_manager", "pnpm", start=181, recorded=170, source="msg-2"),
    ),
    "lead-status": _two(
        "lead-status",
        "lead7:status",
        SimClaim("lead7:status", "warm", start=0, recorded=1, source="call-1"),
        SimClaim("lead7:status", "cold", start=59, recorded=60, source="call-2"),
    ),
    # two agents raise the confidence of contradicting values concurrently (EWM's N2 case)
    "evidence-race": Workload(
        "evidence-race",
        (
            (SimClaim("user:city", "Berlin", start=0, recorded=1, weight=1.0, source="a"),),
            (SimClaim("user:city", "Berlin", start=0, recorded=2, weight=1.0, source="b"),),
            (SimClaim("user:city", "Lisbon", start=0, recorded=3, weight=1.5, source="c"),),
        ),
    ),
    # the same contradiction written twice by a retrying relay
    "duplicate-delivery": Workload(
        "duplicate-delivery",
        (
            (SimClaim("user:city", "Lisbon", start=0, recorded=1, source="msg-1"),),
            (
                SimClaim("user:city", "Berlin", start=0, recorded=2, source="msg-2"),
                SimClaim("user:city", "Berlin", start=0, recorded=2, source="msg-2"),
            ),
        ),
    ),
}


def scenario(name: str) -> Workload:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise InvalidInput(
            "workload", f"unknown scenario {name!r}", f"use one of {sorted(SCENARIOS)}"
        ) from None
