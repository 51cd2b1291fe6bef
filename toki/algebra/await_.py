"""Await-confirmation: a contradicting claim waits PROPOSED, with its conflict OPEN, until an
external confirmation or rejection arrives under the decision's token.

Precondition READ_COMMITTED plus an idempotent confirmation callback: the hold itself only
appends; what must not happen twice is the confirmation, so a repeated token is a no-op.
"""

from __future__ import annotations

from collections.abc import Sequence

from toki.algebra.base import Choice, FoldOperator
from toki.algebra.context import ResolveContext
from toki.isolation import Isolation
from toki.model import FactVersion

__all__ = ["AWAIT", "AwaitConfirmation"]


class AwaitConfirmation(FoldOperator):
    name = "AWAIT"
    version = "1"
    requires = Isolation.READ_COMMITTED
    callback_idempotent = True

    def choose(self, versions: Sequence[FactVersion], ctx: ResolveContext) -> Choice:
        return Choice(None, "held for external confirmation")


AWAIT = AwaitConfirmation()
