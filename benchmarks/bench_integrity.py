"""What tamper evidence costs when a store is opened (issue 18): the chain walk on open.

Writes benchmarks/results/integrity.json. On one SQLite store of n claims (LWW, a third of
them contradicting an earlier one, so the log has DECISION and CLOSE events beside the
ASSERTs), best of `--repeat`:

- `read`: the store's rows decoded into events (`SQLiteStore.load`), no check;
- `chain walk`: `ChainCheck` over those events (a sha256 link per event, compared with the
  stored one), what opening adds for tamper evidence;
- `open`: `Memory.open(url)` (read, chain walk, fold, projection reconciled);
- `verify`: `Memory.verify(digest)` (what `toki verify URL --digest D` runs), and the same
  in keyed mode (HMAC-SHA256).

Events per second for each, and the chain walk's share of `open`. The machine has 2 cores
shared with other work: the numbers are comparable with each other, not absolute.

    python -m benchmarks.bench_integrity            # 20,000 claims
    python -m benchmarks.bench_integrity --quick    # 2,000 claims
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchmarks.common import best, machine_info, write_results
from toki import Claim, FactKey, Memory
from toki.chain import ChainCheck
from toki.store.sqlite import SQLiteStore

BASE = datetime(2025, 1, 1, tzinfo=UTC)
ANCHOR = "issue 18: measure the cost of verification on open (events per second)"


def _clock() -> datetime:
    return BASE + timedelta(days=3650)


def build(path: Path, claims: int) -> None:
    mem = Memory.open(f"sqlite:///{path}", clock=_clock)
    try:
        for i in range(claims):
            key = FactKey("bench", f"s{i % max(1, claims // 3)}", "city")
            at = BASE + timedelta(hours=i)
            mem.write(Claim(key, f"c{i}", f"src{i % 7}", at, None, at))
    finally:
        mem.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    claims = 2_000 if args.quick else 20_000
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        t = time.perf_counter()
        build(path, claims)
        build_s = time.perf_counter() - t
        url = f"sqlite:///{path}"
        store = SQLiteStore(str(path))
        try:
            events = list(store.load(0))
            read_s = best(args.repeat, lambda: list(store.load(0)))
        finally:
            store.close()

        def walk() -> None:
            check = ChainCheck(url)
            for e in events:
                check.add(e, e.chain)

        walk_s = best(args.repeat, walk)
        open_s = best(args.repeat, lambda: Memory.open(url, clock=_clock).close())
        mem = Memory.open(url, clock=_clock)
        try:
            digest = mem.digest()
            key = b"bench-key"
            keyed = mem.digest(key=key)
            verify_s = best(args.repeat, lambda: mem.verify(digest))
            keyed_s = best(args.repeat, lambda: mem.verify(keyed, key=key))
            assert mem.verify(digest).ok and mem.verify(keyed, key=key).ok
        finally:
            mem.close()
    n = len(events)
    result: dict[str, Any] = {
        "claims": claims,
        "events": n,
        "build_s": build_s,
        "seconds": {
            "read": read_s,
            "chain walk": walk_s,
            "open": open_s,
            "verify": verify_s,
            "verify keyed": keyed_s,
        },
        "events_per_s": {
            "read": n / read_s,
            "chain walk": n / walk_s,
            "open": n / open_s,
            "verify": n / verify_s,
            "verify keyed": n / keyed_s,
        },
        "chain_share_of_open": walk_s / open_s,
        "anchor": ANCHOR,
        "note": "2 cores shared with other work; best of --repeat runs",
        "machine": machine_info(),
    }
    write_results("integrity", result)
    print({k: v for k, v in result.items() if k not in ("machine",)})


if __name__ == "__main__":
    main()
