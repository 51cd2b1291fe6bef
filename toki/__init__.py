"""toki: contradiction resolution in LLM-agent memory as write-time concurrency control.

The bitemporal core: `Memory` (the store facade) and `FactKey` (a fact's identity).
"""

from toki.memory import UNKNOWN, Memory
from toki.model import Claim, FactKey, FactVersion, HistoryEntry, Lifecycle, Resolution, Scope
from toki.time import BoundSource, Interval

__version__ = "0.1.0"

__all__ = [
    "UNKNOWN",
    "BoundSource",
    "Claim",
    "FactKey",
    "FactVersion",
    "HistoryEntry",
    "Interval",
    "Lifecycle",
    "Memory",
    "Resolution",
    "Scope",
    "__version__",
]
