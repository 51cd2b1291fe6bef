"""A z3 model of a `History` as plain data: the raw model and a small concrete scenario
(claims, the schedule with what each read saw and each write did, the rows, the beliefs and
the anomalies; format in docs/proofs.md) that `toki.formal.simulate.replay` runs."""

from __future__ import annotations

from typing import Any

import z3

from toki.formal.encoding import History
from toki.formal.prover import as_json
from toki.formal.terms import NONE, Step, _fraction

__all__ = ["describe", "to_scenario"]


def describe(h: History, m: z3.ModelRef) -> tuple[dict[str, Any], dict[str, Any]]:
    """(raw model, scenario) for a counterexample: see `to_scenario`."""

    def ev(e: Any) -> Any:
        return as_json(m.eval(e, model_completion=True))

    raw: dict[str, Any] = {}
    for name, f in (
        ("value", h.value),
        ("weight", h.weight),
        ("recorded_at", h.recorded),
        ("id", h.vid),
        ("source", h.source),
        ("valid_from", h.valid_from),
        ("valid_to", h.valid_to),
    ):
        raw[name] = {str(i): ev(f(i)) for i in h.claims}
    for name, f in (
        ("begin", h.begin),
        ("read", h.read),
        ("write", h.write),
        ("end", h.end),
        ("committed", h.committed),
    ):
        raw[name] = {str(i): ev(f(i)) for i in h.txns}
    raw["valid_point"] = ev(h.point)
    return raw, to_scenario(h, m)


def to_scenario(h: History, m: z3.ModelRef) -> dict[str, Any]:
    """A counterexample as a small concrete scenario (format: docs/proofs.md)."""

    def ev(e: Any) -> Any:
        return as_json(m.eval(e, model_completion=True))

    def name(i: int) -> str:
        return "P" if i == h.P else f"T{i}"

    def claim(i: Any) -> str | None:
        return None if i == NONE else f"T{i}"

    claims = [
        {
            "txn": name(i),
            "id": ev(h.vid(i)),
            "value": ev(h.value(i)),
            "weight": ev(h.weight(i)),
            "weight_q": _fraction(m.eval(h.weight(i), model_completion=True)),
            "recorded_at": ev(h.recorded(i)),
            "source": ev(h.source(i)),
            "valid": [ev(h.valid_from(i)), ev(h.valid_to(i))],
        }
        for i in h.claims
    ]
    lv = h.live
    st: dict[int, Step] = lv["steps"]
    steps: list[tuple[int, dict[str, Any]]] = []
    for i in h.txns:
        rd = lv["reads"][i]
        read: dict[str, Any] = {
            "txn": name(i),
            "op": "read",
            "head": claim(ev(rd["head_read"])),
        }
        if "totals" in rd:
            read["totals"] = {str(v): ev(x) for v, x in rd["totals"].items()}
        if "policy" in rd:
            read["policy"] = 1 if ev(rd["policy"]) else 0
        if "best" in rd:
            read["claims"] = [name(c) for c in h.claims if ev(lv["pv"](c, i))]
            read["best"] = claim(ev(rd["best"]))
        write = {
            "txn": name(i),
            "op": "write",
            "update": bool(ev(rd["update"])),
            "head_seen": claim(ev(rd["head_write"])),
            "takes_head": bool(ev(st[i].head)),
            "audit": claim(ev(st[i].audit)),
            "held": bool(ev(st[i].held)),
        }
        steps.append((ev(h.begin(i)), {"txn": name(i), "op": "begin"}))
        steps.append((ev(h.read(i)), read))
        steps.append((ev(h.write(i)), write))
        end = "commit" if ev(h.committed(i)) else "abort"
        steps.append((ev(h.end(i)), {"txn": name(i), "op": end}))
    steps.sort(key=lambda s: s[0])
    schedule = [dict(step, t=t) for t, step in steps]

    def belief(run: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"current": [v for v in range(h.values) if ev(run["belief"][v])]}
        if "totals" in run:
            out["totals"] = {str(v): ev(x) for v, x in enumerate(run["totals"])}
        return out

    rows: dict[str, str] = {}
    for j in h.claims:
        if not ev(h.committed(j)):
            continue
        kind = "none"
        if ev(lv["head"]) == j:
            kind = "head"
        elif ev(lv["audited"][j]):
            kind = "audit"
        elif ev(lv["held"][j]):
            kind = "held"
        rows[name(j)] = kind
    serial = []
    for g, b, totals in h.serial_beliefs():
        if not ev(g):
            continue
        entry: dict[str, Any] = {"current": [v for v in range(h.values) if ev(b[v])]}
        if totals is not None:
            entry["totals"] = {str(v): ev(x) for v, x in enumerate(totals)}
        if entry not in serial:
            serial.append(entry)
    scenario: dict[str, Any] = {
        "format": "toki-proof-scenario/2",
        "operator": h.op,
        "level": h.level.value,
        "values": h.values,
        "variant": {
            f: getattr(h.variant, f)
            for f in ("no_conflict", "audit_write", "locked_decision", "audit_from_write")
        },
        "claims": claims,
        "schedule": schedule,
        "rows": rows,
        "final": belief(lv),
        "replay": belief(h.replay),
        "serial": serial,
        "anomalies": {
            "N1": bool(ev(h.n1())),
            "N2": bool(ev(h.n2())),
            "N3": bool(ev(h.n3())),
        },
    }
    if h.P is not None:
        scenario["policy_change"] = {"txn": "P", "from": "prefer s0", "to": "prefer s1"}
    return scenario
