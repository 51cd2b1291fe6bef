"""Mutation test of the z3 encoding (toki/formal/): named, deliberate defects, each an edit of
the source, and whether `toki prove` or the two-way agreement kills it.

A mutant is applied to a copy of `toki/` and `proofs/` in a temporary directory and judged
in a fresh interpreter whose path puts that copy first:

1. `toki prove` for the bounded statements (isolation_*, schema_soundness) at the default k:
   any result that is not what it should be (a statement no longer proved, a false variant
   with no counterexample, a premise witness the simulator cannot replay) kills it;
2. otherwise the two-way agreement on a fixed sample of pinned workloads
   (`toki.formal.twoway.compare`: z3 vs DPOR anomaly sets, every z3 model replayed field by
   field, the interleaving probes): any disagreement kills it;
3. otherwise it survived.

`python -m tests.mutants.encoding` runs every mutant and writes proofs/mutants.json (the
score and who killed what); `--only NAME` runs one. tests/mutants/test_encoding_mutants.py
runs a fast subset and checks the recorded score.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ENC = "toki/formal/encoding.py"
DSG = "toki/formal/dsg.py"
SERIAL = "toki/formal/serial.py"
TERMS = "toki/formal/terms.py"
RESULTS = ROOT / "proofs" / "mutants.json"
BOUNDED = (
    "isolation_lww",
    "isolation_ewm",
    "isolation_await",
    "isolation_rule",
    "schema_soundness",
)


@dataclass(frozen=True, slots=True)
class Edit:
    path: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class EncodingMutant:
    name: str
    defect: str
    edits: tuple[Edit, ...]


def _m(name: str, defect: str, *edits: tuple[str, str, str]) -> EncodingMutant:
    return EncodingMutant(name, defect, tuple(Edit(*e) for e in edits))


SI_READ = "        return z3.And(self.com(j), self.end(j) < self.begin(i))"
RC_READ = "            return z3.And(self.com(j), self.end(j) < self.read(i))"
SER_AXIOM = "        if level is Isolation.SERIALIZABLE:\n            from toki.formal.dsg"
LOCK = "                        z3.Or(self.write(i) < self.write(j), self.end(j) < self.write(i)),"
NOCONFLICT = "            if self.level in SNAPSHOT_READS and self.variant.no_conflict:"

MUTANTS: tuple[EncodingMutant, ...] = (
    _m(
        "ser-commit-order",
        "SERIALIZABLE as total visibility in commit order (the serial-by-construction axiom)",
        (
            ENC,
            SI_READ,
            "        if lvl is Isolation.SERIALIZABLE:\n"
            "            return self._serial_view(j, i)\n" + SI_READ,
        ),
        (ENC, SER_AXIOM, SER_AXIOM.replace("Isolation.SERIALIZABLE", "None")),
        (ENC, NOCONFLICT, NOCONFLICT.replace("in SNAPSHOT_READS", "is Isolation.SNAPSHOT")),
    ),
    _m(
        "ser-without-write-locks",
        "SERIALIZABLE without write locks (writers of a row may overlap)",
        (
            ENC,
            LOCK,
            "                        z3.Or(self.level is Isolation.SERIALIZABLE, "
            "self.write(i) < self.write(j), self.end(j) < self.write(i)),",
        ),
    ),
    _m(
        "ser-without-serial-order",
        "SERIALIZABLE without the serial-order axiom (= snapshot isolation)",
        (ENC, SER_AXIOM, SER_AXIOM.replace("Isolation.SERIALIZABLE", "None")),
    ),
    _m(
        "dsg-without-anti-dependencies",
        "the serial order ignores rw anti-dependencies",
        (
            DSG,
            "                conds[(i, j)].append(z3.And(w, z3.Not(view(j, i))))  # rw",
            "                pass  # rw",
        ),
    ),
    _m(
        "dsg-without-ww-edges",
        "the serial order ignores the version order of writes",
        (
            DSG,
            "            conds[(j, i)].append(z3.And(ws[j], ws[i], h.end(j) < h.end(i)))",
            "            pass",
        ),
    ),
    _m(
        "si-without-first-committer-wins",
        "snapshot isolation without NOCONFLICT (two concurrent writers of a row commit)",
        (ENC, NOCONFLICT, NOCONFLICT.replace("in SNAPSHOT_READS", "is Isolation.SERIALIZABLE")),
    ),
    _m(
        "snapshot-taken-at-read",
        "SI/SER read the transactions committed before the read, not before begin",
        (ENC, SI_READ, SI_READ.replace("self.begin(i)", "self.read(i)")),
    ),
    _m(
        "rc-reads-uncommitted",
        "READ COMMITTED plain reads see writes not yet committed",
        (ENC, RC_READ, "            return z3.And(self.write(j) < self.read(i))"),
    ),
    _m(
        "rc-reads-aborted",
        "READ COMMITTED plain reads see transactions that aborted",
        (ENC, RC_READ, "            return z3.And(self.end(j) < self.read(i))"),
    ),
    _m(
        "rc-update-evaluated-at-read",
        "READ COMMITTED's conditional update sees the head as of the read (no re-check)",
        (
            ENC,
            "            return z3.And(self.com(j), self.end(j) < self.write(i))",
            "            return z3.And(self.com(j), self.end(j) < self.read(i))",
        ),
    ),
    _m(
        "ru-reads-committed-only",
        "READ UNCOMMITTED plain reads see committed data only",
        (
            ENC,
            "                self.write(j) < self.read(i), z3.Or(self.com(j), self.read(i) < "
            "self.end(j))",
            "                self.com(j), self.end(j) < self.read(i)",
        ),
    ),
    _m(
        "ru-update-ignores-dirty-head",
        "READ UNCOMMITTED's conditional update ignores an uncommitted head",
        (
            ENC,
            "                self.write(j) < self.write(i), z3.Or(self.com(j), self.write(i) < "
            "self.end(j))",
            "                self.com(j), self.end(j) < self.write(i)",
        ),
    ),
    _m(
        "no-write-locks",
        "no level holds write locks",
        (ENC, LOCK, "                        z3.BoolVal(True),"),
    ),
    _m(
        "last-writer-by-begin",
        "a read takes the writer that began last, not the last to write or commit",
        (ENC, "        order = self.write if dirty else self.end", "        order = self.begin"),
    ),
    _m(
        "await-never-refuses-on-plain-read",
        "AWAIT never refuses on its plain read (contradiction checked only at the update)",
        (
            ENC,
            "                refused = z3.And(hp != NONE, self.val(hp) != mine)",
            "                refused = z3.BoolVal(False)",
        ),
    ),
    _m(
        "await-takes-a-contradicting-head",
        "AWAIT's update ignores the value of the head it sees",
        (
            ENC,
            "                take = z3.And(z3.Not(refused), z3.Or(h == NONE, self.val(h) == mine))",
            "                take = z3.Not(refused)",
        ),
    ),
    _m(
        "await-held-row-not-written",
        "an AWAIT claim that may not take the head writes no held row",
        (ENC, "                held = z3.Not(take)", "                held = z3.BoolVal(False)"),
    ),
    _m(
        "no-id-tiebreak",
        "claims compared by recorded_at only (no id tie-break)",
        (
            ENC,
            "        return [self.recorded(i), self.vid(i)]",
            "        return [self.recorded(i)]",
        ),
    ),
    _m(
        "ties-win",
        "an equal rank counts as higher (lex_gt of equals is true)",
        (
            TERMS,
            "    if not a:\n        return z3.BoolVal(False)",
            "    if not a:\n        return z3.BoolVal(True)",
        ),
    ),
    _m(
        "stamp-ignores-recorded-at",
        "claims compared by id only (recorded_at ignored)",
        (ENC, "        return [self.recorded(i), self.vid(i)]", "        return [self.vid(i)]"),
    ),
    _m(
        "ewm-forgets-own-weight",
        "EWM compares the total it read, without its own weight",
        (
            ENC,
            "                my_t = self._by_value(mine, tot) + self.weight(i)",
            "                my_t = self._by_value(mine, tot)",
        ),
    ),
    _m(
        "ewm-ties-to-oldest",
        "EWM breaks equal totals towards the older evidence",
        (
            ENC,
            "z3.And(my_t == tot[u], lex_gt(list(newest), list(new[u]))),",
            "z3.And(my_t == tot[u], lex_gt(list(new[u]), list(newest))),",
        ),
    ),
    _m(
        "ewm-rewrites-own-value-head",
        "EWM takes the head even when it already says its value",
        (
            ENC,
            "                take = z3.And(wins, z3.Or(h == NONE, self.val(h) != mine))",
            "                take = wins",
        ),
    ),
    _m(
        "rule-ignores-policy",
        "RULE claims rank under π0 whatever policy they read",
        (
            ENC,
            "                pol = pv(self.P, i) if self.P is not None else z3.BoolVal(False)",
            "                pol = z3.BoolVal(False)",
        ),
    ),
    _m(
        "policy-txn-sees-every-claim",
        "the policy transaction picks the best of every claim, visible or not",
        (
            ENC,
            "                        pv(c, i),\n                        z3.Or(best == NONE",
            "                        z3.BoolVal(True),\n                        z3.Or(best == NONE",
        ),
    ),
    _m(
        "policy-txn-never-updates-head",
        "the policy change re-adjudicates nothing",
        (
            ENC,
            "                take = z3.And(pb != NONE, pb != h)",
            "                take = z3.BoolVal(False)",
        ),
    ),
    _m(
        "losing-claim-writes-no-audit-row",
        "a claim that does not take the head writes no audit row of itself",
        (ENC, "z3.If(held, z3.IntVal(NONE), z3.IntVal(i))", "z3.IntVal(NONE)"),
    ),
    _m(
        "audit-row-names-the-taker",
        "the displacing transaction's audit row names itself, not the claim it displaced",
        (
            ENC,
            "            displaced = z3.If(self.variant.audit_write, gone, z3.IntVal(NONE))",
            "            displaced = z3.If(self.variant.audit_write, z3.IntVal(i), z3.IntVal(NONE))",
        ),
    ),
    _m(
        "replay-in-begin-order",
        "replay re-runs the log in begin order, not commit order",
        (
            ENC,
            "        return z3.And(self.com(j), self.end(j) < self.end(i))",
            "        return z3.And(self.com(j), self.begin(j) < self.begin(i))",
        ),
    ),
    _m(
        "beliefs-compared-without-totals",
        "N1/N2 compare the head's value only, not EWM's totals",
        (ENC, "        if a[1] is not None and b[1] is not None:", "        if False:"),
    ),
    _m(
        "lww-serial-outcome-is-the-oldest",
        "LWW's serial outcome is the oldest committed claim",
        (
            SERIAL,
            "z3.Implies(h.com(m), lex_gt(h.stamp(j), h.stamp(m)))",
            "z3.Implies(h.com(m), lex_gt(h.stamp(m), h.stamp(j)))",
        ),
    ),
    _m(
        "n3-counts-aborted-claims",
        "N3 also asks for the rows of aborted claims",
        (
            ENC,
            "        return z3.Or(*[z3.And(self.com(j), z3.Not(self.in_rows(j))) for j in self.claims])",
            "        return z3.Or(*[z3.Not(self.in_rows(j)) for j in self.claims])",
        ),
    ),
    _m(
        "final-head-by-begin-order",
        "the final head is the committed writer that began last",
        (
            ENC,
            "            (j, z3.And(c, *[z3.Implies(cw[m], self.end(m) < self.end(j)) for m in cw if m != j]))",
            "            (j, z3.And(c, *[z3.Implies(cw[m], self.begin(m) < self.begin(j)) for m in cw if m != j]))",
        ),
    ),
    _m(
        "await-serial-outcome-fixed",
        "AWAIT's serial outcome is always value 0",
        (
            SERIAL,
            "        return outs + [(h.com(j), [h.val(j) == v for v in V], None) for j in C]",
            "        return outs + [(h.com(j), [z3.BoolVal(v == 0) for v in V], None) for j in C]",
        ),
    ),
)

FAST = ("ser-without-write-locks", "await-never-refuses-on-plain-read")


def apply(mutant: EncodingMutant, into: Path) -> None:
    """Copy toki/ and proofs/ into `into` and apply the mutant's edits (each old text must
    occur exactly once: the catalogue follows the code)."""
    ignore = shutil.ignore_patterns("__pycache__")
    for pkg in ("toki", "proofs"):
        shutil.copytree(ROOT / pkg, into / pkg, ignore=ignore)
    for e in mutant.edits:
        path = into / e.path
        text = path.read_text()
        if text.count(e.old) != 1:
            raise AssertionError(f"{mutant.name}: {e.path} has {text.count(e.old)} of {e.old!r}")
        path.write_text(text.replace(e.old, e.new))


def sample() -> list[Any]:
    """The pinned workloads of the agreement stage: two claims, every operator and level,
    all committing and the last aborting; RULE's policy change at RC and SI."""
    from proofs.agreement import LEVELS, pinned_workload
    from toki.formal.encoding import OPERATORS
    from toki.isolation import Isolation

    out = [
        pinned_workload(op, lvl, 2, False, ends, 0)
        for op in OPERATORS
        for lvl in LEVELS
        for ends in ("all commit", "last aborts")
    ]
    out += [
        pinned_workload("RULE", lvl, 2, True, "all commit", 0)
        for lvl in (Isolation.READ_COMMITTED, Isolation.SNAPSHOT)
    ]
    return out


def judge_here() -> dict[str, Any]:
    """Run in the mutated tree: who kills this encoding?"""
    import proofs._isolation
    from proofs.run import run_all
    from toki.formal.twoway import compare

    proofs._isolation.K_MAX = proofs._isolation.K  # judged at k = 3 only: no larger retries

    try:
        for name in BOUNDED:
            bad = [r for r in run_all(name) if not r.ok]
            if bad:
                return {
                    "killed": True,
                    "by": "toki prove",
                    "detail": f"{bad[0].name}: {bad[0].status.value}",
                }
    except Exception as exc:  # a mutant may break the encoding outright
        return {"killed": True, "by": "toki prove", "detail": f"error: {type(exc).__name__}: {exc}"}
    for spec in sample():
        row = compare(spec, budget=5_000)
        if not row["agree"]:
            what = row["mismatches"][:1] or [f"z3 {row['z3']} vs DPOR {row['sim']}"]
            failed = [n for n, p in row["probes"].items() if not p["ok"]]
            if failed:
                what = [f"{failed[0]} probe: {row['probes'][failed[0]]['rejected']}"]
            elif row["z3_not_replayed"]:
                what = [f"z3 sets with no replayable model: {row['z3_not_replayed']}"]
            return {
                "killed": True,
                "by": "agreement",
                "detail": f"{spec.operator} at {spec.level.value}: {what[0]}",
            }
    return {"killed": False, "by": None, "detail": "survived"}


def kill(mutant: EncodingMutant) -> dict[str, Any]:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"toki-mutant-{mutant.name}-") as tmp:
        apply(mutant, Path(tmp))
        env = {**os.environ, "PYTHONPATH": tmp}
        proc = subprocess.run(
            [sys.executable, __file__, "--judge-here"],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        lines = (proc.stderr or "no output").strip().splitlines()
        verdict = {"killed": True, "by": "toki prove", "detail": f"crash: {lines[-1]}"}
    else:
        verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "name": mutant.name,
        "defect": mutant.defect,
        **verdict,
        "seconds": round(time.perf_counter() - start, 1),
    }


BEGIN, END = (
    "<!-- mutants:begin (generated by python -m tests.mutants.encoding) -->",
    "<!-- mutants:end -->",
)
DOC = ROOT / "docs" / "proofs.md"


def render(data: dict[str, Any]) -> str:
    lines = [
        BEGIN,
        "",
        f"Mutation score: **{data['killed']}/{data['mutants']}** mutant kinds killed "
        f"({data['killed_by_prove']} by `toki prove`, {data['killed_by_agreement']} by the "
        f"two-way agreement); survived: {', '.join(data['survived']) or 'none'}.",
        "",
        "| mutant | defect | killed by | how |",
        "|---|---|---|---|",
    ]
    for r in data["rows"]:
        how = str(r["detail"]).replace("|", "/")[:120]
        lines.append(f"| `{r['name']}` | {r['defect']} | {r['by'] or '**survived**'} | {how} |")
    return "\n".join([*lines, "", END])


def write_docs(data: dict[str, Any], path: Path = DOC) -> None:
    text = path.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + render(data) + tail)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants.encoding")
    parser.add_argument("--only", metavar="NAME")
    parser.add_argument("--judge-here", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.judge_here:
        print(json.dumps(judge_here()))
        return 0
    chosen = [m for m in MUTANTS if args.only in (None, m.name)]
    rows = []
    for m in chosen:
        rows.append(kill(m))
        print(json.dumps(rows[-1]), flush=True)
    killed = sum(r["killed"] for r in rows)
    if args.only is None:
        data = {
            "command": "python -m tests.mutants.encoding",
            "mutants": len(rows),
            "killed": killed,
            "killed_by_prove": sum(r["by"] == "toki prove" for r in rows),
            "killed_by_agreement": sum(r["by"] == "agreement" for r in rows),
            "survived": [r["name"] for r in rows if not r["killed"]],
            "rows": rows,
        }
        args.out.write_text(json.dumps(data, indent=2) + "\n")
        write_docs(data)
    print(f"killed {killed}/{len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
