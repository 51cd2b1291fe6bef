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

__all__ = ["LIBRARY", "SYSTEMS", "get_system", "register"]

SYSTEMS: dict[str, Callable[[], SystemModel]] = {
    # TOKI's rows: the model of its write path (toki/systems/toki_model.py) until the committed
    # matrix is regenerated with the library's rows (toki-lib-*; docs/architecture.md)
    "toki": lambda: TokiModel("EWM"),  # the full configuration: EWM + keyed log at SI
    "toki-lww": lambda: TokiModel("LWW"),
    "toki-ewm": lambda: TokiModel("EWM"),
    "toki-await": lambda: TokiModel("AWAIT"),
    "toki-rule": lambda: TokiModel("RULE"),
    "toki-ewm-nolog": lambda: TokiModel("EWM", keyed_log=False),
    # models of other memory systems (docs/systems.md)
    "mem0-1.0.11": Mem0Judge,
    "mem0-2.0.18": Mem0AddOnly,
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


def get_system(name: str) -> SystemModel:
    factory = SYSTEMS.get(name) or LIBRARY.get(name)
    if factory is None:
        raise InvalidInput(
            "system",
            f"unknown system {name!r}",
            f"use one of {', '.join(sorted([*SYSTEMS, *LIBRARY]))}",
        )
    return factory()
