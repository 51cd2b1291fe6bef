"""Executable models of memory systems, for the verdict matrix (see docs/systems.md)."""

from toki.systems.amem import AMemModel
from toki.systems.base import AgentContext, SimJudge, SystemModel, build_program
from toki.systems.cognee import CogneeModel
from toki.systems.graphiti import GraphitiModel
from toki.systems.langgraph_store import LangGraphStoreModel
from toki.systems.langmem import LangMemModel
from toki.systems.letta import LettaModel
from toki.systems.mem0 import Mem0AddOnly, Mem0Judge
from toki.systems.memoryos import MemoryOSModel
from toki.systems.memos import MemOSModel
from toki.systems.mirix import MirixModel
from toki.systems.toki_model import TokiModel
from toki.systems.worlddb import WorldDBModel
from toki.systems.zep import ZepCEModel

__all__ = [
    "AMemModel",
    "AgentContext",
    "CogneeModel",
    "GraphitiModel",
    "LangGraphStoreModel",
    "LangMemModel",
    "LettaModel",
    "Mem0AddOnly",
    "Mem0Judge",
    "MemOSModel",
    "MemoryOSModel",
    "MirixModel",
    "SimJudge",
    "SystemModel",
    "TokiModel",
    "WorldDBModel",
    "ZepCEModel",
    "build_program",
]
