"""Every system model by name, for `toki explore --system` and the verdict matrix."""

from __future__ import annotations

from collections.abc import Callable

from toki.errors import InvalidInput
from toki.systems.amem import AMemModel
from toki.systems.base import SystemModel
from toki.systems.cognee import CogneeModel
from toki.systems.graphiti import GraphitiModel
from toki.systems.langgraph_store import LangGraphStoreModel
from toki.systems.langmem import LangMemModel
from toki.systems.letta import LettaModel
from toki.systems.mem0 import Mem0AddOnly, Mem0Judge
from toki.systems.memoryos import MemoryOSModel
from toki.systems.memos import MemOSModel
from toki.systems.mirix import MirixModel
from toki.systems.toki_lib import TokiLibrary
from toki.systems.toki_model import TokiModel
from toki.systems.worlddb import WorldDBModel
from toki.systems.zep import ZepCEModel

__all__ = ["LIBRARY", "MODELS", "SYSTEMS", "get_system", "register"]

SYSTEMS: dict[str, Callable[[], SystemModel]] = {
    # TOKI's rows run the library's own write path (toki/systems/toki_lib.py), one per operator
    "toki": lambda: TokiLibrary("EWM", prefix="toki"),  # the full configuration: EWM + log
    "toki-lww": lambda: TokiLibrary("LWW", prefix="toki"),
    "toki-ewm": lambda: TokiLibrary("EWM", prefix="toki"),
    "toki-await": lambda: TokiLibrary("AWAIT", prefix="toki"),
    "toki-rule": lambda: TokiLibrary("RULE", prefix="toki"),
    "toki-ewm-nolog": lambda: TokiLibrary("EWM", keyed_log=False, prefix="toki"),
    # models of other memory systems (docs/systems.md)
    "mem0-1.0.11": Mem0Judge,
    "mem0-2.x": Mem0AddOnly,
    "graphiti": GraphitiModel,
    "zep": ZepCEModel,
    "mirix": MirixModel,
    "letta": LettaModel,
    "worlddb": WorldDBModel,
    "langgraph-store": LangGraphStoreModel,
    "langmem": LangMemModel,
    "a-mem": AMemModel,
    "memoryos": MemoryOSModel,
    "cognee": CogneeModel,
    "memos": MemOSModel,
}


LIBRARY: dict[str, Callable[[], SystemModel]] = {
    "toki-lib": lambda: TokiLibrary("EWM"),
    "toki-lib-lww": lambda: TokiLibrary("LWW"),
    "toki-lib-ewm": lambda: TokiLibrary("EWM"),
    "toki-lib-await": lambda: TokiLibrary("AWAIT"),
    "toki-lib-rule": lambda: TokiLibrary("RULE"),
    "toki-lib-ewm-nolog": lambda: TokiLibrary("EWM", keyed_log=False),
    "toki-lib-lww-nohead": lambda: TokiLibrary("LWW", head_check=False),
    "toki-lib-ewm-nohead": lambda: TokiLibrary("EWM", head_check=False),
    "toki-lib-await-nohead": lambda: TokiLibrary("AWAIT", head_check=False),
    "toki-lib-rule-nohead": lambda: TokiLibrary("RULE", head_check=False),
}
"""The library itself under the simulator (`Memory.write` over toki.store.sim), by name, for
`toki explore --system`. Not (yet) rows of the verdict matrix, whose "all" is `SYSTEMS`."""


def register(name: str, factory: Callable[[], SystemModel]) -> None:
    """Add a model (other modules call this at import; see toki/systems/__init__.py)."""
    SYSTEMS[name] = factory


MODELS: dict[str, Callable[[], SystemModel]] = {
    "toki-model-lww": lambda: TokiModel("LWW"),
    "toki-model-ewm": lambda: TokiModel("EWM"),
    "toki-model-await": lambda: TokiModel("AWAIT"),
    "toki-model-rule": lambda: TokiModel("RULE"),
    "toki-model-ewm-nolog": lambda: TokiModel("EWM", keyed_log=False),
}
"""The retired model of TOKI's write path (toki/systems/toki_model.py), outside the matrix:
kept for `toki pg-grid` and as a fixture (docs/architecture.md); histories it wrote name it."""


def get_system(name: str) -> SystemModel:
    factory = SYSTEMS.get(name) or LIBRARY.get(name) or MODELS.get(name)
    if factory is None:
        raise InvalidInput(
            "system",
            f"unknown system {name!r}",
            f"use one of {', '.join(sorted([*SYSTEMS, *LIBRARY]))}",
        )
    return factory()
