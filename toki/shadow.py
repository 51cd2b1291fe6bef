"""Shadow projections: the whole log folded under another configuration, compared key by key
with the projection that serves reads, every difference classified; promote and rollback.

A configuration is operators per fact key, RULE policies and scope chains (`Config`). The
shadow re-runs the log's inputs (claims through `write`, and the explicit lifecycle operations:
assert_fact, supersede, insert_segment, revoke, confirm/reject, POLICY) on a fresh in-memory
store under that configuration; the operators' own events (DECISION, the pieces and
supersessions of a decision, CONFLICT_*) are not inputs and are decided again. Promote records
a configuration as a CONFIG event; reads (`resolve_at`, `current`) then answer from the fold
under the configuration in force at their system time; rollback switches back. Nothing is
deleted and no time is rewritten. docs/shadow.md defines the four classes of difference.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toki.algebra import OPERATORS
from toki.algebra.base import Operator
from toki.algebra.rule import Policy
from toki.canonical import canonical_json, check_text, digest, shown
from toki.db import Db, resolution_json, resolve_in, same_answer
from toki.errors import InvalidInput, LifecycleError, TokiError
from toki.isolation import Isolation
from toki.judge import Judge, JudgeLog
from toki.lifecycle import (
    plan_assert,
    plan_config,
    plan_revoke,
    plan_segment,
    plan_settle,
    plan_supersede,
)
from toki.log import CONFIG_KEY, Event, EventKind
from toki.model import FactKey, FactVersion, Resolution, Scope
from toki.partition import Partition
from toki.plan import LOG_KEY, POLICY_SUBJECT
from toki.replay import KeyState, Snapshot, replay
from toki.scratch import Scratch
from toki.time import BoundSource, format_instant
from toki.write import WriteRequest

__all__ = [
    "CLASSES",
    "Config",
    "Difference",
    "ShadowReport",
    "config_stack",
    "fold_under",
    "in_force",
    "plan_promote",
    "plan_rollback",
    "refold",
    "serving_db",
    "shadow_report",
]

CLASSES = ("corrected", "conflict found", "scope change", "unexplained")
"""The classes of a shadow difference, in the order they are tried (docs/shadow.md)."""

_EARLIEST = datetime(1, 1, 1, tzinfo=UTC)
"""When a configuration's RULE policies come into force in its fold: before every claim."""


@dataclass(frozen=True, slots=True)
class Config:
    """Operators per fact key, RULE policies per (tenant, fact key), scope chains per fact key.

    default: the operator of a claim whose fact key `operators` does not name; None keeps the
    operator the log says decided it (its DECISION's provenance; LWW where none is logged).
    A scope chain is read most specific first ('task:42', 'project:web', 'global')."""

    operators: tuple[tuple[str, str], ...] = ()
    policies: tuple[tuple[str, str, Policy], ...] = ()
    scope_chains: tuple[tuple[str, tuple[str, ...]], ...] = ()
    default: str | None = None
    name: str = ""

    def __post_init__(self) -> None:
        check_text(self.name, "config.name")  # issue #36: a lone surrogate broke its id
        for fact_key, op in self.operators:
            _need_operator(op, f"operators.{fact_key}")
            FactKey("config", "config", fact_key)  # the same rules as a key's fact_key
        if self.default is not None:
            _need_operator(self.default, "default")
        for tenant, fact_key, policy in self.policies:
            FactKey(tenant, "config", fact_key)
            if not isinstance(policy, Policy):
                raise InvalidInput(
                    f"policies.{tenant}.{fact_key}", f"{shown(policy)} is not a Policy"
                )
        for fact_key, chain in self.scope_chains:
            if not chain:
                raise InvalidInput(f"scope_chains.{fact_key}", "is empty", "name a scope")
            for scope in chain:
                Scope.from_resource(scope)
        object.__setattr__(self, "operators", tuple(sorted(self.operators)))
        object.__setattr__(
            self, "policies", tuple(sorted(self.policies, key=lambda p: (p[0], p[1])))
        )
        object.__setattr__(self, "scope_chains", tuple(sorted(self.scope_chains)))

    @property
    def id(self) -> str:
        return "cfg-" + digest(canonical_json(self.to_json()), 16)

    def operator(self, fact_key: str) -> str | None:
        return dict(self.operators).get(fact_key, self.default)

    def chain(self, fact_key: str) -> tuple[str, ...] | None:
        return dict(self.scope_chains).get(fact_key)

    def policy(self, tenant: str, fact_key: str) -> Policy | None:
        for t, f, p in self.policies:
            if (t, f) == (tenant, fact_key):
                return p
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "default": self.default,
            "operators": dict(self.operators),
            "policies": [
                {"tenant": t, "fact_key": f, "policy": p.to_json()} for t, f, p in self.policies
            ],
            "scope_chains": {f: list(c) for f, c in self.scope_chains},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Config:
        try:
            return cls(
                operators=tuple((str(f), str(o)) for f, o in dict(data["operators"]).items()),
                policies=tuple(
                    (str(p["tenant"]), str(p["fact_key"]), Policy.from_json(p["policy"]))
                    for p in data["policies"]
                ),
                scope_chains=tuple(
                    (str(f), tuple(str(s) for s in c))
                    for f, c in dict(data["scope_chains"]).items()
                ),
                default=None if data.get("default") is None else str(data["default"]),
                name=str(data.get("name", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidInput("config", f"is not a toki configuration: {exc!r}") from exc

    @classmethod
    def from_toml(cls, path: str | Path) -> Config:
        """Read a configuration file (docs/shadow.md shows the format)."""
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidInput("--config", f"cannot read {path}: {exc.strerror}") from exc
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # not UTF-8: exit 2
            raise InvalidInput("--config", f"{path} is not valid TOML: {exc}") from exc
        policies = []
        for table in ("policies", "scope_chains"):
            if not isinstance(data.get(table, {}), dict):
                raise InvalidInput(table, "must be a table")
        for tenant, by_key in dict(data.get("policies", {})).items():
            if not isinstance(by_key, dict):
                raise InvalidInput(f"policies.{tenant}", "must be a table of fact_key = policy")
            for fact_key, raw in by_key.items():
                if not isinstance(raw, dict) or "kind" not in raw:
                    raise InvalidInput(
                        f"policies.{tenant}.{fact_key}", "must be a table with a kind"
                    )
                policies.append((tenant, fact_key, Policy.from_json(raw)))
        chains = dict(data.get("scope_chains", {}))
        for fact_key, chain in chains.items():
            if not isinstance(chain, list) or not all(isinstance(s, str) for s in chain):
                raise InvalidInput(f"scope_chains.{fact_key}", "must be a list of scope names")
        operators = data.get("operators", {})
        if not isinstance(operators, dict):
            raise InvalidInput("operators", "must be a table of fact_key = operator name")
        return cls(
            operators=tuple((str(f), o) for f, o in operators.items()),
            policies=tuple(policies),
            scope_chains=tuple((str(f), tuple(c)) for f, c in chains.items()),
            default=data.get("default"),
            name=str(data.get("name", Path(path).stem)),
        )


def _need_operator(name: object, field: str) -> Operator:
    if not isinstance(name, str) or name not in OPERATORS:
        raise InvalidInput(field, f"unknown operator {name!r}", f"use one of {sorted(OPERATORS)}")
    return OPERATORS[name]


# -- the fold under a configuration -----------------------------------------------------


def refold(
    events: Iterable[Event], config: Config, *, clock: Any = None, judge: Judge | None = None
) -> Db:
    """The state `events`' inputs give re-run under `config` (module doc), as a value whose
    `now` is clock() (default: the earliest instant). See `fold_under` for judge."""
    snapshot, _ = fold_under(events, config, judge=judge)
    now = _EARLIEST if clock is None else clock()
    return Db(snapshot, snapshot, snapshot.watermark, None, now)


def fold_under(
    events: Iterable[Event], config: Config, *, judge: Judge | None = None
) -> tuple[Snapshot, tuple[tuple[int, str], ...]]:
    """The fold of `events`' inputs re-run under `config` on a scratch state, and the inputs
    with no counterpart in it, as (seq, why).

    judge: the judge the live writes used, if any; a question it answered before is read
    from the keyed judge log (never asked again), a new one is asked."""
    ordered = sorted(events, key=lambda e: e.seq)
    fresh = Scratch()
    keyed = JudgeLog.from_events(ordered)  # judge verdicts as logged
    notes: list[tuple[int, str]] = []
    overridden = {(t, f) for t, f, _ in config.policies}
    for tenant, fact_key, policy in config.policies:
        fresh.set_policy(FactKey(tenant, POLICY_SUBJECT, fact_key), policy, _EARLIEST)
    logged_op = {
        str(e.body["claim"]): str(e.body["provenance"]["operator"])
        for e in ordered
        if e.kind is EventKind.DECISION and e.body.get("decision") == "resolution"
    }
    user_supersede: dict[str, str] = {}  # new version id -> the old one (Memory.supersede)
    middles: set[str] = set()  # insert_segment's middle versions
    versions = {e.version.id: e.version for e in ordered if e.version is not None}
    for e in ordered:
        if e.kind is EventKind.SUPERSEDE and "reason" not in e.body:
            new = list(e.body["new"])
            if len(new) == 1 and _supersedes(versions, new[0]) == e.body["old"]:
                user_supersede[new[0]] = str(e.body["old"])
            else:
                middles.update(n for n in new if _supersedes(versions, n) is None)
    rerun = _Rerun(fresh, config, logged_op, user_supersede, middles, overridden, versions)
    for e in ordered:
        try:
            rerun.input(e, judge, keyed)
        except TokiError as exc:
            notes.append((e.seq, f"{e.kind.value} {e.key}: {exc}"))
    return fresh.snapshot, tuple(notes)


def _cut_from_revoked(
    state: KeyState | None, versions: Mapping[str, FactVersion], vid: str
) -> bool:
    """Whether `vid` repeats (same value and source) a version this fold has revoked: its
    REVOKE was the cascade of that one's (Memory.revoke revokes the pieces cut from it)."""
    piece = versions.get(vid)
    while piece is not None and piece.supersedes is not None:
        parent = versions.get(piece.supersedes)
        if parent is None or (parent.value_json, parent.source_id) != (
            piece.value_json,
            piece.source_id,
        ):
            return False
        if state is not None and parent.id in state.versions and state.is_revoked(parent.id):
            return True
        piece = parent
    return False


def _supersedes(versions: Mapping[str, FactVersion], vid: str) -> str | None:
    v = versions.get(vid)
    return None if v is None else v.supersedes


@dataclass(frozen=True, slots=True)
class _Rerun:
    """What a refold knows of the log's inputs, and the scratch state it re-runs them on."""

    fresh: Scratch
    config: Config
    logged_op: Mapping[str, str]
    user_supersede: Mapping[str, str]
    middles: set[str]
    overridden: set[tuple[str, str]]
    versions: Mapping[str, FactVersion]

    def input(self, e: Event, judge: Judge | None, keyed: JudgeLog) -> None:
        """Re-run one logged input; derived events are skipped; an input with no counterpart
        in this fold raises (fold_under lists it)."""
        fresh, kind = self.fresh, e.kind
        snapshot = fresh.snapshot
        if kind is EventKind.POLICY:
            if (e.key.tenant, e.key.fact_key) not in self.overridden:
                fresh.set_policy(e.key, Policy.from_json(e.body["policy"]), e.recorded_at)
        elif kind is EventKind.ASSERT and e.version is not None:
            v = e.version
            if e.body.get("claim"):
                name = self.config.operator(v.key.fact_key) or self.logged_op.get(v.id, "LWW")
                request = WriteRequest(
                    v,
                    OPERATORS[name],
                    Isolation.SERIALIZABLE,
                    judge=judge,
                    allow_weaker_isolation=True,
                    judge_log=keyed,
                )
                fresh.write(request)
            elif v.id in self.user_supersede:
                old = self.user_supersede[v.id]
                fresh.run(
                    [fresh.key_of(old, "old")],
                    lambda p: plan_supersede(
                        p,
                        old,
                        v.value,
                        v.valid,
                        v.recorded_at,
                        v.source_id,
                        v.source_hash,
                        v.weight,
                    )[1],
                )
            elif v.id in self.middles:
                fresh.run([v.key], lambda p: plan_segment(p, v))
            elif v.supersedes is None:
                fresh.run([v.key], lambda p: plan_assert(p, v))
            # else: a piece a decision or a segment cut: derived, decided again
        elif kind is EventKind.REVOKE:
            vid = str(e.body["version"])
            state = snapshot.state(e.key)
            if "token" in e.body:  # a rejection: only if this fold held the claim too
                token = str(e.body["token"])
                if token in snapshot.holds:
                    self._settle(token, False, e)
            elif state is not None and vid in state.versions:
                if not state.is_revoked(vid):  # else: revoked with the version it was cut from
                    reason = str(e.body["reason"])
                    fresh.run([e.key], lambda p: plan_revoke(p, vid, e.recorded_at, reason))
            elif not _cut_from_revoked(state, self.versions, vid):
                raise LifecycleError(
                    f"the log revokes {vid}, a piece the old decisions cut that this fold never "
                    "made: the correction has no counterpart here"
                )
        elif kind is EventKind.CONFIRM and str(e.body.get("token")) in snapshot.holds:
            self._settle(str(e.body["token"]), True, e)

    def _settle(self, token: str, accept: bool, e: Event) -> None:
        key = self.fresh.hold_key(token)
        self.fresh.run([key], lambda p: plan_settle(p, key, token, accept, e.recorded_at)[1])


# -- differences ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Difference:
    """One read whose answer differs between the serving projection and the shadow."""

    key: FactKey
    chain_before: tuple[str, ...]
    chain_after: tuple[str, ...]
    before: Resolution
    after: Resolution
    kind: str  # one of CLASSES
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "key": str(self.key),
            "chain_before": list(self.chain_before),
            "chain_after": list(self.chain_after),
            "before": resolution_json(self.before),
            "after": resolution_json(self.after),
            "class": self.kind,
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class ShadowReport:
    """Every difference between the projection serving reads and the shadow, classified."""

    config_id: str
    serving_id: str | None  # the configuration in force (None: the log as decided)
    valid_at: datetime
    compared: int
    differences: tuple[Difference, ...]
    notes: tuple[tuple[int, str], ...]  # inputs the shadow could not re-run (seq, why)

    @property
    def unexplained(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.kind == "unexplained")

    @property
    def counts(self) -> dict[str, int]:
        return {c: sum(d.kind == c for d in self.differences) for c in CLASSES}

    @property
    def ok(self) -> bool:
        """True when nothing is unexplained and every input re-ran (the rollout gate)."""
        return not self.unexplained and not self.notes

    def to_json(self) -> dict[str, Any]:
        return {
            "config_id": self.config_id,
            "serving": self.serving_id,
            "valid_at": format_instant(self.valid_at),
            "compared": self.compared,
            "counts": self.counts,
            "ok": self.ok,
            "differences": [d.to_json() for d in self.differences],
            "notes": [{"seq": s, "why": w} for s, w in self.notes],
        }

    def describe(self) -> str:
        counts = ", ".join(f"{n} {c}" for c, n in self.counts.items())
        lines = [
            f"shadow {self.config_id} vs {self.serving_id or 'the log as decided'} at "
            f"{format_instant(self.valid_at)}: {self.compared} reads compared, "
            f"{len(self.differences)} differ ({counts})"
        ]
        for d in self.differences:
            lines.append(f"  [{d.kind}] {d.key}: {_show(d.before)} -> {_show(d.after)} ({d.why})")
        for seq, why in self.notes:
            lines.append(f"  not re-run: seq {seq}: {why}")
        return "\n".join(lines)


def _show(answer: Resolution) -> str:
    return canonical_json(answer.value) if answer.kind == "value" else answer.kind


_RESERVED = {POLICY_SUBJECT, LOG_KEY.subject, CONFIG_KEY.subject}


def _reads(
    keys: Iterable[FactKey], before: Config | None, after: Config
) -> list[tuple[FactKey, tuple[str, ...], tuple[str, ...]]]:
    """What is compared: one read per key through its default chain (its scope, then
    global), or, when either configuration names a scope chain for the fact key, one read
    per (tenant, subject, fact key) through each side's chain (the global scope alone on a
    side that names none). Returns (key, chain before, chain after), sorted."""
    out: dict[FactKey, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for key in keys:
        if key.subject in _RESERVED:
            continue
        old = None if before is None else before.chain(key.fact_key)
        new = after.chain(key.fact_key)
        if old is None and new is None:
            scope = str(key.scope)
            default = (scope,) if key.scope_kind == "global" else (scope, "global/*")
            out[key] = (default, default)
        else:
            base = FactKey(key.tenant, key.subject, key.fact_key)
            out[base] = (old or ("global/*",), new or ("global/*",))
    return [(k, *out[k]) for k in sorted(out)]


def _chain_keys(key: FactKey, chain: Sequence[str]) -> list[FactKey]:
    return [key.in_scope(Scope.from_resource(s)) for s in chain]


def _classify(
    live: Snapshot,
    shadow: Snapshot,
    key: FactKey,
    chains: tuple[tuple[str, ...], tuple[str, ...]],
    at: datetime,
) -> Difference | None:
    old, new = chains
    before = resolve_in(live, _chain_keys(key, old), at, None)
    after = resolve_in(shadow, _chain_keys(key, new), at, None)
    if same_answer(before, after):
        return None
    if old != new and same_answer(resolve_in(shadow, _chain_keys(key, old), at, None), before):
        return Difference(key, old, new, before, after, "scope change", "the new scope chain")
    if after.kind == "conflict" and before.kind == "value":
        why = f"open conflict among {', '.join(after.version_ids)}"
        return Difference(key, old, new, before, after, "conflict found", why)
    correction = _correction(live, shadow, before, after)
    if correction is not None:
        return Difference(key, old, new, before, after, "corrected", correction)
    return Difference(key, old, new, before, after, "unexplained", _unexplained(before, after))


def _version(snap: Snapshot, vid: str) -> FactVersion:
    v = snap.version(vid)
    assert v is not None
    return v


def _correction(
    live: Snapshot, shadow: Snapshot, before: Resolution, after: Resolution
) -> str | None:
    """The documented correction the new answer follows, if any (docs/shadow.md)."""
    if after.kind != "value" or not before.version_ids:
        return None
    for vid in before.version_ids:
        key = live.version_key.get(vid)
        state = None if key is None else shadow.state(key)
        if state is not None and vid in state.versions and state.is_revoked(vid):
            return f"{vid} is revoked in the log; the old projection still served it"
    value = canonical_json(after.value)
    olds = [_version(live, v) for v in before.version_ids]
    olds = [v for v in olds if v.value_json != value]
    for vid in after.version_ids:
        new = _version(shadow, vid)
        start = new.valid.start
        if start is None or new.valid.start_source is not BoundSource.EVIDENCE:
            continue
        if olds and all(o.valid.start is None or o.valid.start < start for o in olds):
            return (
                f"{vid} states a change from {format_instant(start)}, later than "
                f"{', '.join(o.id for o in olds)}: a supersession the old rule ignored"
            )
    return None


def _unexplained(before: Resolution, after: Resolution) -> str:
    if before.kind == "conflict" and after.kind == "value":
        return "the new rule decides a conflict the old one left open, with no logged correction"
    if after.kind == "value" and before.kind == "value":
        return "another winner, with no logged correction or later stated change"
    return f"{before.kind} became {after.kind}"


# -- the configuration in force, and a shadow's report: functions of the state -------------


def config_stack(snapshot: Snapshot, as_of: datetime | None) -> list[Mapping[str, Any]]:
    """Promotions in force at `as_of`, oldest first: promote pushes, rollback pops."""
    state = snapshot.state(CONFIG_KEY)
    stack: list[Mapping[str, Any]] = []
    if state is None:
        return stack
    for at, body in state.configs:
        if as_of is not None and at > as_of:
            continue
        if body["action"] == "promote":
            stack.append(body)
        elif stack:
            stack.pop()
    return stack


def serving_db(events: Iterable[Event], now: datetime) -> Db:
    """The replay of `events` as the value reads are served from: under the configuration
    promoted last in them, if any (what a Memory holding them serves)."""
    ordered = list(events)
    snapshot = replay(ordered)
    config = in_force(snapshot, None)
    view = snapshot if config is None else fold_under(ordered, config)[0]
    return Db(snapshot, view, snapshot.watermark, None, now)


def plan_promote(
    p: Partition, config: Config, operators_before: Mapping[str, str], recorded: datetime
) -> list[Event]:
    """A CONFIG event serving reads from the fold under `config` from `recorded` on; none
    when `config` is already in force. `operators_before`: the routing it replaces."""
    current = in_force(p.snapshot, None)
    if current is not None and current.id == config.id:
        return []
    body = {
        "action": "promote",
        "id": config.id,
        "config": config.to_json(),
        "replaces": None if current is None else current.id,
        "operators_before": dict(sorted(operators_before.items())),
    }
    return plan_config(p, body, recorded)


def plan_rollback(
    p: Partition, recorded: datetime
) -> tuple[Mapping[str, Any], Config | None, list[Event]]:
    """A CONFIG event popping the last promotion still in force: (that promotion's event
    body, the configuration in force again (None: the log as decided), the events)."""
    stack = config_stack(p.snapshot, None)
    if not stack:
        raise LifecycleError("rollback: no promoted configuration is in force")
    top = stack[-1]
    previous = stack[-2] if len(stack) > 1 else None
    body = {
        "action": "rollback",
        "id": top["id"],
        "to": None if previous is None else previous["id"],
    }
    again = None if previous is None else Config.from_json(previous["config"])
    return top, again, plan_config(p, body, recorded)


def in_force(snapshot: Snapshot, as_of: datetime | None) -> Config | None:
    """The promoted configuration serving reads at `as_of` (None: the log as decided)."""
    stack = config_stack(snapshot, as_of)
    return None if not stack else Config.from_json(stack[-1]["config"])


def shadow_report(
    live: Snapshot,
    folded: Snapshot,
    notes: tuple[tuple[int, str], ...],
    config: Config,
    serving: Config | None,
    before: Config,
    at: datetime,
) -> ShadowReport:
    """Every read whose answer at `at` differs between `live` (served under `before`) and
    `folded` (the shadow under `config`), classified."""
    keys = set(live.keys) | set(folded.keys)
    reads = _reads(keys, before, config)
    diffs = []
    for key, old, new in reads:
        d = _classify(live, folded, key, (old, new), at)
        if d is not None:
            diffs.append(d)
    return ShadowReport(
        config.id,
        None if serving is None else serving.id,
        at,
        len(reads),
        tuple(diffs),
        notes,
    )
