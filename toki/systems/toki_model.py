"""TOKI's own write path as an executable model, one operator at a time.

Rows (SimStore keys):
- ("cur", k): the current row {value, cid, recorded} (the dual-row schema's current row);
- ("ver", cid): the claim, written once (a duplicate delivery finds it and does nothing);
- ("aud", cid): an audit row for every loser {loser value, winner cid, operator};
- ("ev", k, value): EWM's accumulated evidence {total, newest};
- ("dec", k, question): the keyed judge log: the verdict, written in the same transaction
  before the decision commits;
- ("prop", cid): an AWAIT proposal, pending until confirmed;
- ("policy", k): the RULE policy row.

Write path per claim: begin → duplicate check → read the key's partition → judge (a
scheduling point) → log the verdict → write version, evidence, current and audit rows →
commit; a refused commit is retried. LWW's current-row update is one conditional statement
(UPDATE … WHERE recorded < mine), which PostgreSQL re-checks after a lock wait at read
committed: that is why read committed suffices for it. EWM reads and rewrites evidence
totals, which only snapshot isolation's first-updater-wins protects.

Recovery (N1) rebuilds the current rows from the durable rows: versions, the keyed judge log
and the audit rows; with `keyed_log=False` it has to ask the judge again.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

from toki.algebra import OPERATORS
from toki.isolation import Isolation
from toki.sim.program import Agent, Begin, Commit, Local, Read, UpdateWhere, Write
from toki.sim.workload import SimClaim, Workload
from toki.systems.base import AgentContext, Beliefs, SimJudge, SystemModel

__all__ = ["TokiModel"]

_EMPTY = {"value": None, "cid": "", "recorded": -1, "start": -1}
MAX_RETRIES = 8


def _newer(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """LWW's order: (recorded, cid)."""
    return (a["recorded"], a["cid"]) > (b["recorded"], b["cid"])


class TokiModel(SystemModel):
    """TOKI at one operator; `keyed_log=False` is the ablation without the judge log."""

    title: ClassVar[str] = "TOKI"
    release: ClassVar[str] = "toki 0.1 (this repository)"
    sources: ClassVar[tuple[str, ...]] = (
        "toki/write.py: Memory.write (the write path)",
        "toki/algebra/lww.py, ewm.py, await_.py, rule.py: the operators",
        "../shared/research/toki.md: the TOKI paper's write path and dual-row schema",
    )

    def __init__(
        self, operator: str = "LWW", *, keyed_log: bool = True, judge: bool | None = None
    ) -> None:
        if operator not in ("LWW", "EWM", "AWAIT", "RULE"):
            raise ValueError(f"operator: unknown operator {operator!r}")
        self.operator = operator
        self.keyed_log = keyed_log
        self.uses_judge = operator == "EWM" if judge is None else judge
        # the declared precondition lives in one place: the operator (toki/algebra)
        self.isolation_level: Isolation = OPERATORS[operator].requires
        suffix = "" if keyed_log else "-nolog"
        # not "toki-<op>": those names are the library's rows (toki/systems/registry.py)
        self.model_name = f"toki-model-{operator.lower()}{suffix}"

    # SystemModel reads these as attributes; instances differ by operator
    @property
    def name(self) -> str:  # type: ignore[override]
        return self.model_name

    @property
    def isolation(self) -> Isolation:  # type: ignore[override]
        return self.isolation_level

    @property
    def encodes(self) -> Mapping[str, str]:  # type: ignore[override]
        return {
            "who decides": f"the {self.operator} operator"
            + (" with a judge scoring the contradiction" if self.uses_judge else ""),
            "old values kept": "yes: every loser gets an audit row; versions are immutable",
            "decision logged with inputs": "yes (keyed judge log)" if self.keyed_log else "no",
            "concurrency control": f"runs at {self.isolation_level.value} (its precondition)",
            "idempotency on retry": "a version row per claim id: a redelivery is a no-op",
            "recovery": "rebuild current rows from versions, decisions and audit rows",
        }

    def initial(self, workload: Workload) -> dict[Hashable, Any]:
        rows: dict[Hashable, Any] = {("cur", k): dict(_EMPTY) for k in workload.keys}
        if self.operator == "RULE":
            rows.update({("policy", k): "newest_valid_time" for k in workload.keys})
        return rows

    # -- the write path ------------------------------------------------------------------

    def agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        return self._agent(inbox, ctx)

    def _agent(self, inbox: Sequence[SimClaim], ctx: AgentContext) -> Agent:
        done = []
        for claim in inbox:
            for _attempt in range(MAX_RETRIES):
                outcome = yield from self._one(claim, ctx)
                if outcome != "retry":
                    done.append(outcome)
                    break
            else:
                done.append("gave-up")
        return tuple(done)

    def _one(self, c: SimClaim, ctx: AgentContext) -> Agent:
        yield Begin()
        if (yield Read(("ver", c.cid))) is not None:
            result = yield Commit()
            return "retry" if isinstance(result, Exception) else "noop"
        cur = yield Read(("cur", c.key))
        if isinstance(cur, Exception):
            return "retry"
        cur = cur or dict(_EMPTY)
        mine = {"value": c.value, "cid": c.cid, "recorded": c.recorded, "start": c.start}
        yield Write(("ver", c.cid), c.to_json())
        op = self.operator
        decision: dict[str, Any] = {"judge": None, "bonus": {}}
        if op == "LWW":  # one conditional statement, re-checked after a lock wait
            replaced: list[Any] = []
            key_ = ("cur", c.key)

            def newer(key: Hashable, row: Any) -> bool:
                return bool(key == key_ and _newer(mine, row))

            def take(key: Hashable, row: Any) -> Any:
                replaced.append(row)
                return {**mine, "n": row.get("n", 0) + 1}

            result = yield UpdateWhere(newer, take, name=f"lww {c.key}")
            if isinstance(result, Exception):
                return "retry"
            if result:
                old = replaced[-1]
                yield from self._log_decision(c.key, {**mine, "n": old.get("n", 0) + 1}, decision)
                if old["value"] is not None and old["value"] != c.value:
                    yield from self._audit(c.key, old, c.cid)
            else:
                yield from self._audit(c.key, mine, None)
        elif op == "AWAIT":
            # Insert only into an empty or agreeing current row, in one conditional statement
            # (re-checked after a lock wait at read committed); otherwise hold a proposal.
            replaced_a: list[Any] = []
            key_a = ("cur", c.key)

            def vacant(key: Hashable, row: Any) -> bool:
                return bool(key == key_a and row["value"] in (None, c.value))

            def claim_it(key: Hashable, row: Any) -> Any:
                replaced_a.append(row)
                base = mine if row["value"] is None else row
                return {**base, "n": row.get("n", 0) + 1}

            applied: Any = {}
            if cur["value"] in (None, c.value):
                applied = yield UpdateWhere(vacant, claim_it, name=f"await {c.key}")
            if isinstance(applied, Exception):
                return "retry"
            if applied:
                old = replaced_a[-1]
                new_cur = {**(mine if old["value"] is None else old), "n": old.get("n", 0) + 1}
                yield from self._log_decision(c.key, new_cur, decision)
            else:
                yield Write(("prop", c.cid), {"key": c.key, "value": c.value, "status": "pending"})
        else:
            if op == "EWM" and self.uses_judge and cur["value"] not in (None, c.value):
                question = f"{c.key}: {cur['value']} vs {c.value}"
                yield Local("judge", question)
                pick = ctx.judge.pick(question, [cur["value"], c.value])
                decision = {"judge": question, "bonus": {pick: 1.0}}
            if op == "RULE":
                policy = yield Read(("policy", c.key))
                if isinstance(policy, Exception):
                    return "retry"
            evidence: dict[str, Any] = {}
            if op == "EWM":
                for value in dict.fromkeys(v for v in (c.value, cur["value"]) if v is not None):
                    row = yield Read(("ev", c.key, value))
                    if isinstance(row, Exception):
                        return "retry"
                    evidence[value] = row
            winner, evidence = decide(op, cur, mine, c.weight, decision["bonus"], evidence)
            for value, row in evidence.items():
                yield Write(("ev", c.key, value), row)
            new_cur = {**winner, "n": cur.get("n", 0) + 1}
            yield Write(("cur", c.key), new_cur)
            yield from self._log_decision(c.key, new_cur, decision)
            loser = cur if winner["cid"] == c.cid else mine
            if loser["value"] is not None and loser["value"] != winner["value"]:
                yield from self._audit(c.key, loser, winner["cid"])
        result = yield Commit()
        return "retry" if isinstance(result, Exception) else "ok"

    def _log_decision(
        self, key: str, new_cur: Mapping[str, Any], decision: Mapping[str, Any]
    ) -> Agent:
        """The decision record (keyed log): the new current row and the judge's verdict."""
        if self.keyed_log:
            yield Write(("dec", key, new_cur["n"]), {"cur": dict(new_cur), **decision})
        return None

    def _audit(self, key: str, loser: Mapping[str, Any], winner: str | None) -> Agent:
        yield Write(
            ("aud", loser["cid"]),
            {"key": key, "value": loser["value"], "winner": winner, "op": self.operator},
        )
        return None

    # -- what the checkers ask ------------------------------------------------------------

    def beliefs(self, state: Mapping[Hashable, Any], keys: Iterable[str]) -> Beliefs:
        out: Beliefs = {}
        for k in keys:
            cur = state.get(("cur", k)) or _EMPTY
            entry: dict[str, Any] = {"value": cur["value"]}
            if self.operator == "EWM":
                entry["evidence"] = {
                    str(key[2]): round(float(row["total"]), 9)
                    for key, row in sorted(state.items(), key=lambda kv: repr(kv[0]))
                    if isinstance(key, tuple) and key[:2] == ("ev", k)
                }
            out[k] = entry
        return out

    def recover(
        self, state: Mapping[Hashable, Any], keys: Iterable[str], judge: SimJudge
    ) -> Beliefs:
        """With the keyed log: the current row is the last logged decision per key and the
        evidence is every claim's weight plus the logged verdicts. Without it: re-decide
        every durable claim in (recorded, cid) order, asking `judge` again."""
        keys = list(keys)
        rows: dict[Hashable, Any] = {("cur", k): dict(_EMPTY) for k in keys}
        claims = sorted(
            (
                SimClaim.from_json(v)
                for key, v in state.items()
                if isinstance(key, tuple) and key[0] == "ver"
            ),
            key=lambda c: (c.recorded, c.cid),
        )
        if self.keyed_log:
            decisions = sorted(
                (
                    (key[1], key[2], v)
                    for key, v in state.items()
                    if isinstance(key, tuple) and key[0] == "dec"
                ),
                key=lambda d: (d[0], d[1]),
            )
            for k, _n, rec in decisions:
                rows[("cur", k)] = dict(rec["cur"])
            if self.operator == "EWM":
                for c in claims:
                    _credit(rows, c.key, c.value, c.weight, (c.recorded, c.cid))
                for k, _n, rec in decisions:
                    for value, extra in rec["bonus"].items():
                        _credit(rows, k, value, float(extra), None)
            return self.beliefs(rows, keys)
        for c in claims:
            cur = rows.get(("cur", c.key)) or dict(_EMPTY)
            mine = {"value": c.value, "cid": c.cid, "recorded": c.recorded, "start": c.start}
            if self.operator == "AWAIT" and cur["value"] not in (None, c.value):
                continue
            if self.operator == "LWW":
                if _newer(mine, cur):
                    rows[("cur", c.key)] = mine
                continue
            bonus: dict[str, float] = {}
            if self.operator == "EWM" and self.uses_judge and cur["value"] not in (None, c.value):
                question = f"{c.key}: {cur['value']} vs {c.value}"
                bonus = {judge.pick(question, [cur["value"], c.value]): 1.0}
            evidence = {
                v: rows.get(("ev", c.key, v)) for v in (c.value, cur["value"]) if v is not None
            }
            winner, new_ev = decide(self.operator, cur, mine, c.weight, bonus, evidence)
            for value, row in new_ev.items():
                rows[("ev", c.key, value)] = row
            rows[("cur", c.key)] = winner
        return self.beliefs(rows, keys)

    def recoverable(self, state: Mapping[Hashable, Any], key: str) -> set[str]:
        values = set()
        for k, v in state.items():
            if not isinstance(k, tuple) or not isinstance(v, dict):
                continue
            current = k == ("cur", key) and v.get("value") is not None
            kept = k[0] in ("ver", "aud") and v.get("key") == key
            if current or kept:
                values.add(str(v["value"]))
        return values


def decide(
    op: str,
    cur: Mapping[str, Any],
    mine: Mapping[str, Any],
    weight: float,
    bonus: Mapping[str, float],
    evidence: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One decision as a pure function: (the winning row, the evidence rows to write).

    EWM adds the claim's weight (and the judge's bonus) to the evidence totals, then keeps
    the value with the larger total (ties: newest evidence); RULE prefers the newest valid
    time; an empty current row takes the claim, an agreeing one stays."""
    new_evidence: dict[str, Any] = {}
    if op == "EWM":
        for value in evidence:
            row = dict(evidence[value] or {"total": 0.0, "newest": [-1, ""]})
            extra = bonus.get(value, 0.0)
            if value == mine["value"]:
                extra += weight
                row["newest"] = list(max(tuple(row["newest"]), (mine["recorded"], mine["cid"])))
            elif value == cur["value"] and list(row["newest"]) == [-1, ""]:
                row["newest"] = [cur["recorded"], cur["cid"]]
            row["total"] = round(float(row["total"]) + extra, 9)
            new_evidence[value] = row
    if cur["value"] is None:
        return dict(mine), new_evidence
    if cur["value"] == mine["value"]:
        if op == "RULE" and _rule_rank(mine) > _rule_rank(cur):
            # an agreeing claim with a newer valid time is what a later contradiction is
            # ranked against (the library keeps both versions and ranks the newest)
            return dict(mine), new_evidence
        return dict(cur), new_evidence
    if op == "EWM":
        wins = _ev_key(new_evidence.get(mine["value"])) > _ev_key(new_evidence.get(cur["value"]))
    elif op == "RULE":
        wins = _rule_rank(mine) > _rule_rank(cur)
    else:
        wins = _newer(mine, cur)
    return (dict(mine) if wins else dict(cur)), new_evidence


def _rule_rank(row: Mapping[str, Any]) -> tuple[int, int, str]:
    """RULE's newest_valid_time order: (valid start, recorded, id)."""
    return (int(row["start"]), int(row["recorded"]), str(row["cid"]))


def _credit(
    rows: dict[Hashable, Any], key: str, value: str, extra: float, stamp: tuple[int, str] | None
) -> None:
    row = rows.get(("ev", key, value)) or {"total": 0.0, "newest": [-1, ""]}
    newest = tuple(row["newest"]) if stamp is None else max(tuple(row["newest"]), stamp)
    rows[("ev", key, value)] = {
        "total": round(float(row["total"]) + extra, 9),
        "newest": list(newest),
    }


def _ev_key(row: Mapping[str, Any] | None) -> tuple[float, tuple[int, str]]:
    if not row:
        return (0.0, (-1, ""))
    return (round(float(row["total"]), 9), (int(row["newest"][0]), str(row["newest"][1])))
