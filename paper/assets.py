"""Generate paper/generated/: every table, figure and number the paper uses.

    python paper/assets.py                 # write paper/generated/ (what `make paper-assets` runs)
    python paper/assets.py --out DIR       # write elsewhere
    python paper/assets.py --check         # exit 1 when paper/generated/ is out of date

Reads only result files (proofs/results.json, proofs/agreement.json, docs/laws.md,
docs/anomalies.md,
verdict_matrix/*.csv, paper/data/locomo_ablations.json, benchmarks/results/*.json) and never
imports toki. A missing result file gives an asset that says "not generated yet (run X)".
Figures are PDFs written with fixed metadata, so regenerating them gives the same bytes
(except the embedded font programs, which follow the installed fontTools: `--check` and the
tests compare the rest, `paper.parts.common.comparable`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from paper.parts.calibration import calibration  # noqa: E402
from paper.parts.common import Assets, Macros, comparable  # noqa: E402
from paper.parts.locomo import locomo  # noqa: E402
from paper.parts.performance import performance  # noqa: E402
from paper.parts.proofs import cited, laws, mutants, proofs  # noqa: E402
from paper.parts.verdicts import agreement, matrix, pg_grid  # noqa: E402

GENERATED = ROOT / "paper" / "generated"

PARTS: list[Callable[[Path, Macros], Assets]] = [
    proofs, laws, mutants, calibration, matrix, agreement, pg_grid, locomo, performance, cited,
]


def build(root: Path = ROOT) -> Assets:
    m = Macros()
    assets: Assets = {}
    for part in PARTS:
        assets.update(part(root, m))
    assets["macros.tex"] = m.render()
    return dict(sorted(assets.items()))


def write(assets: Assets, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    for old in out.iterdir():
        if old.is_file() and old.name not in assets:
            old.unlink()
    paths = []
    for name, content in assets.items():
        path = out / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        paths.append(path)
    return paths


def stale(assets: Assets, out: Path) -> list[str]:
    """Names whose committed file differs from (or is missing beside) the regenerated one."""
    diffs = []
    for name, content in assets.items():
        path = out / name
        data = content.encode() if isinstance(content, str) else content
        if not path.exists() or comparable(name, path.read_bytes()) != comparable(name, data):
            diffs.append(name)
    if out.exists():
        diffs += [p.name for p in out.iterdir() if p.is_file() and p.name not in assets]
    return sorted(diffs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=GENERATED)
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when --out differs from what the result files give")
    args = parser.parse_args(argv)
    assets = build(args.root)
    if args.check:
        diffs = stale(assets, args.out)
        if diffs:
            print("out of date in", args.out, ":", ", ".join(diffs))
            print("run: make paper-assets")
            return 1
        print(f"{args.out} is up to date ({len(assets)} files)")
        return 0
    paths = write(assets, args.out)
    missing = [n for n, c in assets.items() if isinstance(c, str) and "result file missing" in c]
    print(f"wrote {len(paths)} files to {args.out}")
    if missing:
        print("missing result files (assets say how to make them):", ", ".join(missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
