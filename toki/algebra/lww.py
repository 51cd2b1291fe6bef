"""Last-writer-wins: the latest system time wins, the version id breaks ties.

Precondition READ_COMMITTED: the decision reads one committed incumbent and writes; a
concurrent writer can only make the outcome a different serial one (max is a semilattice
join over (recorded_at, id), so any order of application gives the same winner).
"""

from __future__ import annotations

from collections.abc import Sequence

from toki.algebra.base import Choice, FoldOperator
from toki.algebra.context import ResolveContext
from toki.isolation import Isolation
from toki.model import FactVersion

__all__ = ["LWW", "LastWriterWins"]


class LastWriterWins(FoldOperator):
    name = "LWW"
    version = "1"
    requires = Isolation.READ_COMMITTED

    def choose(self, versions: Sequence[FactVersion], ctx: ResolveContext) -> Choice:
        ranking = sorted(versions, key=lambda v: (v.recorded_at, v.id), reverse=True)
        return Choice(ranking, "latest system time (version id breaks ties)")


LWW = LastWriterWins()
