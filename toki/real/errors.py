"""What `toki.real` refuses, each with a message that says what to do."""

from __future__ import annotations

from toki.errors import TokiError

__all__ = ["EnvironmentMissing", "NetworkRefused", "RealError", "SetupFailed", "WorkerError"]


class RealError(TokiError):
    """Base class of the real-library errors."""


class EnvironmentMissing(RealError):
    """The system's virtual environment has not been created (one line: the setup command)."""

    def __init__(self, system: str, where: str) -> None:
        self.system = system
        super().__init__(
            f"system {system!r}: its environment is missing ({where}); "
            f"create it with `toki real setup {system}`"
        )


class SetupFailed(RealError):
    """Creating an environment from its lock file failed; the message carries pip's reason."""


class NetworkRefused(RealError):
    """The library tried to reach the network; the guard refused and the run is void."""

    def __init__(self, system: str, attempts: list[dict[str, object]]) -> None:
        self.system = system
        self.attempts = attempts
        first = attempts[0]
        super().__init__(
            f"system {system!r}: the library tried to reach the network "
            f"({first.get('call')} to {first.get('target')} from {first.get('caller')}"
            f"{f', and {len(attempts) - 1} more' if len(attempts) > 1 else ''}); the guard "
            "refused it and the run is void (switch the library's telemetry off)"
        )


class WorkerError(RealError):
    """The worker process running the library failed or answered out of protocol."""
