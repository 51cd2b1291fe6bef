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
    models = _models(args.consistency_model or ["strict-serializable"])
    extra = [a for spec in args.anomalies or [] for a in spec.split(",") if a.strip()]
    options = {
        "wfr_keys": args.wfr_keys,
        "sequential_keys": args.sequential_keys,
        "linearizable_keys": args.linearizable_keys,
        "search_budget": args.search_budget,
    }
    if fmt == "toki":
        return _check_toki(args, models, extra, options)
    from pathlib import Path

    from toki.check.columnar import check_file
    from toki.errors import HistoryFormatError
    from toki.show.histories import not_a_history

    try:
        checked = check_file(args.file, fmt, models=models, anomalies=extra, **options)
    except HistoryFormatError as exc:
        raise not_a_history(Path(args.file), exc, args.format == "auto") from None
    v = checked.verdict
    if args.workload != "auto" and v.workload not in (args.workload, "empty"):
        raise InvalidInput(
            "--workload", f"the history is {v.workload}, not {args.workload}", "drop --workload"
        )
    if args.json:
        print_json(
            {"file": args.file, "format": fmt, "transactions": checked.transactions, **v.to_json()}
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
            f"{args.file}: {fmt}, {v.workload}, {checked.transactions:,} transactions; "
            f"checked for {', '.join(v.models)} ({graphs})"
        )
        print(v.render(args.limit))
    return _exit_code(v.valid)


def _models(specs: list[str]) -> list[str]:
    """Elle's consistency-model names, repeatable or comma-separated; an unknown one is
    named with the closest known name, not the whole list."""
    from toki.check.adya.models import MODEL_NAMES
    from toki.cli_parser import did_you_mean

    models = [m.strip() for spec in specs for m in spec.split(",") if m.strip()]
    for m in models:
        name = m.lstrip(":")
        if name != "none" and name not in MODEL_NAMES:
            raise InvalidInput(
                "--consistency-model",
                f"unknown model {name!r}{did_you_mean(name, sorted(MODEL_NAMES))}",
                "e.g. serializable, snapshot-isolation, strict-serializable; every name: "
                "docs/anomalies.md",
            )
    return models


def _exit_code(valid: bool | str) -> int:
    return 0 if valid is True else 1 if valid is False else 3


def _check_toki(
    args: argparse.Namespace, models: list[str], extra: list[str], options: dict[str, Any]
) -> int:
    from toki.check.runner import check_history_file
    from toki.history import read_history

    result = check_history_file(read_history(args.file), models=models, anomalies=extra, **options)
    if not result["checks"]:  # nothing could be checked: not a pass (exit 3, not 0)
        result["valid?"] = "unknown"
    if args.json:
        print_json(result)
    else:
        rows = [[name, *_check_status(res)] for name, res in result["checks"].items()]
        rows += [[name, "could not run", why] for name, why in result["could_not_run"].items()]
        print(table(["check", "result", "details"], rows))
        print(f"valid? {str(result['valid?']).lower()}")
        if result["valid?"] == "unknown" and not result["checks"]:
            print("no check could run: nothing was checked (exit 3)")
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


def _cmd_show(args: argparse.Namespace) -> int:
    """Draw a witness or history as one self-contained HTML page (docs/show.md)."""
    from pathlib import Path

    from toki.cli_input import out_dir, writable_file
    from toki.show import load_page, render_page

    source = Path(args.file)
    if not source.is_file():
        what = "is a folder" if source.is_dir() else "no such file"
        raise InvalidInput("file", f"{source}: {what}", "give a witness or a history file")
    out = None
    if args.out is not None:
        if not args.out.endswith((".html", ".htm")):
            raise InvalidInput("--out", f"{args.out} is not an .html file", "e.g. --out x.html")
        out = writable_file("--out", args.out)
    page = load_page(source, replay_real=not args.no_replay)  # before any folder is made
    if out is None:
        out = out_dir(None, "show") / f"{source.stem}.html"
    out.write_text(render_page(page), encoding="utf-8")
    summary = {
        "out": str(out),
        "kind": page.kind,
        "verdict": page.verdict,
        "steps": len(page.rows),
        "lanes": list(page.lanes),
        "marked": sum(1 for r in page.rows if r.mark),
        "cycles": len(page.cycles),
    }
    if args.json:
        print_json(summary)
    else:
        print(
            f"{page.kind}: {page.title}; {page.verdict}; {len(page.rows):,} steps on "
            f"{len(page.lanes)} lane(s), {summary['marked']} marked"
            + (f", {len(page.cycles)} cycle(s)" if page.cycles else "")
        )
        print(f"wrote {out} (open it in a browser; it needs no network)")
    return 0


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
        "--model",  # elle-cli's name for it
        "-m",
        dest="workload",
        default="auto",
        choices=["auto", "list-append", "rw-register"],
        help="refuse a history of another workload (default: detect; elle-cli's --model)",
    )
    chk.add_argument(
        "--consistency-model",
        "--consistency-models",  # Elle's spelling
        dest="consistency_model",
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

    shw = sub.add_parser(
        "show",
        help="draw a witness or history as one self-contained HTML page (a timeline)",
        description="Any file toki writes: a model, relay or real witness, a toki history "
        "(explore --history-out) or a Jepsen/Elle history. Exit 0 when the page is written.",
    )
    shw.add_argument("file", help="the witness or history file")
    shw.add_argument(
        "--out", metavar="FILE.html", help="the page (default: a new folder under ./toki-out)"
    )
    shw.add_argument(
        "--no-replay",
        action="store_true",
        help="real witnesses: draw the story saved in the file instead of re-running the "
        "library for each gate point's full record",
    )
    shw.add_argument("--json", action="store_true", help="machine-readable output")
    shw.set_defaults(handler=_cmd_show)
