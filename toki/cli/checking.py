"""`toki check`, `replay` and `show`: read a history or a witness, say what it shows."""

from __future__ import annotations

import argparse
from typing import Any

from toki.cli.common import print_json
from toki.cli_output import table
from toki.errors import InvalidInput


def _cmd_check(args: argparse.Namespace) -> int:
    """Check a history file: toki's JSONL (N1/N2/N3 and Adya) or Jepsen/Elle's EDN or JSON
    (Elle's verdict for the consistency models asked for). Exit 0 valid, 1 invalid, 3 unknown."""
    from toki.history import detect_format

    fmt = args.format if args.format != "auto" else detect_format(args.file)
    models = [
        m
        for spec in args.consistency_model or ["strict-serializable"]
        for m in spec.split(",")
        if m.strip()
    ]
    extra = [a for spec in args.anomalies or [] for a in spec.split(",") if a.strip()]
    options = {
        "wfr_keys": args.wfr_keys,
        "sequential_keys": args.sequential_keys,
        "linearizable_keys": args.linearizable_keys,
        "search_budget": args.search_budget,
    }
    if fmt == "toki":
        return _check_toki(args, models, extra, options)
    from toki.check.adya import verdict, workload
    from toki.check.elle import load

    history = load(args.file, fmt)
    found = workload(history)
    if args.workload != "auto" and found not in (args.workload, "empty"):
        raise InvalidInput(
            "--workload", f"the history is {found}, not {args.workload}", "drop --workload"
        )
    v = verdict(history, models=models, anomalies=extra, **options)
    if args.json:
        print_json(
            {"file": args.file, "format": fmt, "transactions": len(history.txns), **v.to_json()}
        )
    else:
        graphs = " + ".join(
            [
                "ww/wr/rw",
                *(
                    n
                    for n, on in (("process", v.process_edges), ("realtime", v.realtime_edges))
                    if on
                ),
            ]
        )
        print(
            f"{args.file}: {fmt}, {v.workload}, {len(history.txns):,} transactions; "
            f"checked for {', '.join(v.models)} ({graphs})"
        )
        print(v.render(args.limit))
    return _exit_code(v.valid)


def _exit_code(valid: bool | str) -> int:
    return 0 if valid is True else 1 if valid is False else 3


def _check_toki(
    args: argparse.Namespace, models: list[str], extra: list[str], options: dict[str, Any]
) -> int:
    from toki.check.runner import check_history_file
    from toki.history import read_history

    result = check_history_file(read_history(args.file), models=models, anomalies=extra, **options)
    if args.json:
        print_json(result)
    else:
        rows = [[name, *_check_status(res)] for name, res in result["checks"].items()]
        rows += [[name, "could not run", why] for name, why in result["could_not_run"].items()]
        print(table(["check", "result", "details"], rows))
        print(f"valid? {str(result['valid?']).lower()}")
    return _exit_code(result["valid?"])


def _check_status(res: dict[str, Any]) -> tuple[str, str]:
    """One check's verdict in a word, and what it found (shortened) in a phrase."""
    import json

    if "valid?" in res:  # the Adya part: Elle's verdict
        word = {True: "valid", False: "anomaly"}.get(res["valid?"], "unknown")
        return word, "; ".join(res["explanations"][:3]) or ", ".join(res["found"]) or "-"
    details = res.get("details") or {}
    if not res.get("found"):
        if res.get("ran", True):
            return "clean", "-"
        return (
            ("abstains", str(details["abstains"]))
            if "abstains" in details
            else (
                "undecided",
                "-",
            )
        )
    parts = []
    if res.get("keys"):
        parts.append("keys " + ", ".join(str(k) for k in res["keys"]))
    if res.get("erased"):
        parts.append("erased " + ", ".join(f"{k}={v}" for k, v in res["erased"]))
    for name in ("expected", "observed"):
        if res.get(name) is not None:
            parts.append(f"{name} {json.dumps(res[name], default=str, sort_keys=True)}")
    text = "; ".join(parts) or "-"
    return "anomaly", text if len(text) <= 100 else text[:97] + "..."


def _cmd_replay(args: argparse.Namespace) -> int:
    """Re-run a witness step by step and say whether the anomaly reproduced."""
    from toki.check.relay import RelayWitness
    from toki.check.witness import Witness, explain, read_witness_json, replay_witness
    from toki.systems.registry import get_system

    data = read_witness_json(args.witness)
    if data["format"] == "toki-relay-witness":
        relay = RelayWitness.from_json(data)
        relay_run, relay_verdict = relay.replay()
        lines = relay.explain(relay_run, relay_verdict)
        if args.json:
            print_json(
                {
                    "reproduced": relay_verdict.found,
                    "verdict": relay_verdict.to_json(),
                    "steps": lines,
                }
            )
        else:
            print("\n".join(lines))
            print(f"reproduced: {relay_verdict.found}")
        return 0 if relay_verdict.found else 1
    witness = Witness.from_json(data)
    system = get_system(witness.system)
    run, verdict = replay_witness(witness, system)
    if args.json:
        print_json(
            {
                "reproduced": verdict.found,
                "verdict": verdict.to_json(),
                "steps": explain(witness, run, system),
            }
        )
    else:
        print("\n".join(explain(witness, run, system)))
        print(f"reproduced: {verdict.found}")
    return 0 if verdict.found else 1


def add_parsers(sub: Any) -> None:
    chk = sub.add_parser(
        "check",
        help="check a history (toki JSONL, Jepsen/Elle EDN or JSON) for anomalies",
        description="Exit status: 0 valid, 1 invalid, 3 unknown (e.g. an empty dependency "
        "graph), 2 bad input.",
    )
    chk.add_argument("file", help="the history file (docs/history-format.md)")
    chk.add_argument(
        "--format",
        default="auto",
        choices=["auto", "toki", "elle-edn", "elle-json"],
        help="%(choices)s (default: detected from the content)",
    )
    chk.add_argument(
        "--workload",
        default="auto",
        choices=["auto", "list-append", "rw-register"],
        help="refuse a history of another workload (default: detect)",
    )
    chk.add_argument(
        "--consistency-model",
        action="append",
        metavar="MODEL",
        help="Elle's model names, repeatable or comma-separated (default strict-serializable)",
    )
    chk.add_argument(
        "--anomalies",
        action="append",
        metavar="TYPES",
        help="extra anomaly types that must not occur (Elle's names)",
    )
    chk.add_argument(
        "--sequential-keys",
        action="store_true",
        help="registers: infer version orders from each process's order",
    )
    chk.add_argument(
        "--linearizable-keys",
        action="store_true",
        help="registers: infer version orders from real-time order",
    )
    chk.add_argument(
        "--wfr-keys",
        action="store_true",
        help="registers: a txn's writes follow its reads of the same key",
    )
    chk.add_argument(
        "--search-budget",
        type=int,
        default=2_000_000,
        help="edge relaxations per cycle type and component",
    )
    chk.add_argument("--limit", type=int, default=10, help="anomalies shown per type")
    chk.add_argument("--json", action="store_true", help="machine-readable output")
    chk.set_defaults(handler=_cmd_check)

    rep = sub.add_parser(
        "replay", help="re-run a witness step by step (exit 0 reproduced, 1 not reproduced)"
    )
    rep.add_argument("witness", help="a witness file (toki explore, matrix or relay)")
    rep.add_argument("--json", action="store_true", help="machine-readable output")
    rep.set_defaults(handler=_cmd_replay)
