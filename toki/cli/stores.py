"""`toki verify`, `checkpoint` and `shadow`: commands that read a store (`checkpoint` also
writes its checkpoint record, nothing else)."""

from __future__ import annotations

import argparse
from typing import Any

from toki.cli.common import print_json
from toki.errors import InvalidInput


def _cmd_verify(args: argparse.Namespace) -> int:
    """Walk a store's hash chain (without opening it as a Memory, which would refuse a
    tampered log) and compare it with a digest saved earlier; exit 1 names the first change."""
    from pathlib import Path

    from toki.chain import Digest
    from toki.store.audit import verify_url

    digest = None if args.digest is None else Digest.parse(args.digest)
    key = None
    if args.key_file is not None:
        try:
            key = Path(args.key_file).read_bytes().strip()
        except OSError as exc:
            raise InvalidInput(
                "--key-file", f"cannot read {args.key_file}: {exc.strerror}"
            ) from None
        if not key:
            raise InvalidInput("--key-file", f"{args.key_file} is empty", "put the key in it")
    report = verify_url(args.url, digest, key=key)
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "events": report.events,
                "digest": str(report.digest),
                "keyed": key is not None,
                "checked_against": None if digest is None else str(digest),
                "first_bad_seq": report.first_bad,
                "problem": report.problem,
            }
        )
    else:
        print(report.describe())
    return 0 if report.ok else 1


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    """Replay and chain-check a store's whole log and write a checkpoint at its head from
    that state (never from the previous checkpoint), so that the next open folds nothing
    (docs/integrity.md, "Checkpoints")."""
    from toki.memory import Memory
    from toki.store.audit import open_existing
    from toki.store.open import open_store

    open_existing(args.url).close()  # refuses a missing store: nothing is created
    with Memory(open_store(args.url), from_checkpoint=False) as mem:
        report = mem.open_report
        made = mem.checkpoint()
        if made is None:
            raise InvalidInput(
                "url", f"{args.url} keeps no checkpoints (memory:// does not), or is empty"
            )
    opened = "" if report is None else report.opened_from
    if args.json:
        print_json({"seq": made.seq, "head": made.head, "keys": len(made.keys), "opened": opened})
    else:
        print(
            f"{args.url}: checkpoint at seq {made.seq} ({len(made.keys)} keys); opened by {opened}"
        )
    return 0


def _cmd_shadow(args: argparse.Namespace) -> int:
    """Fold a store's log under another configuration (docs/shadow.md) and print every read
    whose answer differs, classified; exit 1 when anything is unexplained or an input could
    not be re-run (the rollout gate), 0 otherwise. The store is read, never written."""
    from toki.memory import Memory
    from toki.shadow import Config
    from toki.store.audit import open_existing

    config = Config.from_toml(args.config)
    with Memory(open_existing(args.url)) as mem:  # never creates a store (issue #36)
        report = mem.shadow(config, valid_at=args.valid_at)
    if args.json:
        print_json(report.to_json())
    else:
        print(report.describe())
    return 0 if report.ok else 1


def add_parsers(sub: Any) -> None:
    ver = sub.add_parser(
        "verify", help="walk a store's hash chain; prove it unchanged up to a saved digest"
    )
    ver.add_argument("url", help="the store: sqlite:///path.db, postgresql://…")
    ver.add_argument("--digest", help="'seq:head' saved earlier (Memory.digest(), or this command)")
    ver.add_argument(
        "--key-file", help="keyed mode: a file holding the HMAC key (never stored with the data)"
    )
    ver.add_argument("--json", action="store_true", help="machine-readable output")
    ver.set_defaults(handler=_cmd_verify)
    ckp = sub.add_parser(
        "checkpoint", help="replay a store's log, write a checkpoint at its head (faster opens)"
    )
    ckp.add_argument("url", help="the store: sqlite:///path.db")
    ckp.add_argument("--json", action="store_true", help="machine-readable output")
    ckp.set_defaults(handler=_cmd_checkpoint)
    shd = sub.add_parser(
        "shadow", help="a store's projection under another configuration, differences classified"
    )
    shd.add_argument("url", help="the store (sqlite:///path.db, postgresql://…)")
    shd.add_argument("--config", required=True, help="the new configuration (TOML)")
    shd.add_argument("--valid-at", help="the valid time compared (default now)")
    shd.add_argument("--json", action="store_true", help="machine-readable output")
    shd.set_defaults(handler=_cmd_shadow)
