"""The proofs live in the top-level `proofs/` package: put the checkout root on the path
(pytest runs in importlib mode, which does not)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
