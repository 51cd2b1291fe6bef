"""Executable models of memory systems, for the verdict matrix (see docs/systems.md)."""

from toki.systems.base import AgentContext, SimJudge, SystemModel, build_program
from toki.systems.toki_model import TokiModel

__all__ = ["AgentContext", "SimJudge", "SystemModel", "TokiModel", "build_program"]
