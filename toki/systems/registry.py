"""Every system model by name, for `toki explore --system` and the verdict matrix."""

from __future__ import annotations

from collections.abc import Callable

from toki.errors import InvalidInput
from toki.systems.base import SystemModel
from toki.systems.toki_model import TokiModel

__all__ = ["SYSTEMS", "get_system", "register"]

SYSTEMS: dict[str, Callable[[], SystemModel]] = {
    "toki": lambda: TokiModel("EWM"),  # the full configuration: EWM + keyed log at SI
    "toki-lww": lambda: TokiModel("LWW"),
    "toki-ewm": lambda: TokiModel("EWM"),
    "toki-await": lambda: TokiModel("AWAIT"),
    "toki-rule": lambda: TokiModel("RULE"),
    "toki-ewm-nolog": lambda: TokiModel("EWM", keyed_log=False),
}


def register(name: str, factory: Callable[[], SystemModel]) -> None:
    """Add a model (other modules call this at import; see toki/systems/__init__.py)."""
    SYSTEMS[name] = factory


def get_system(name: str) -> SystemModel:
    try:
        return SYSTEMS[name]()
    except KeyError:
        raise InvalidInput(
            "system", f"unknown system {name!r}", f"use one of {', '.join(sorted(SYSTEMS))}"
        ) from None
