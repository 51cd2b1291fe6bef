"""The isolation lattice is a partial order with RR and SI incomparable."""

from __future__ import annotations

import itertools

import pytest

from toki.errors import InvalidInput, IsolationViolation
from toki.isolation import Isolation, check_precondition, dominates, join

L = list(Isolation)


def test_partial_order_laws() -> None:
    for a in L:
        assert dominates(a, a)
    for a, b in itertools.permutations(L, 2):
        assert not (dominates(a, b) and dominates(b, a))  # antisymmetric
    for a, b, c in itertools.product(L, repeat=3):
        if dominates(a, b) and dominates(b, c):
            assert dominates(a, c)


def test_shape_of_the_lattice() -> None:
    rr, si = Isolation.REPEATABLE_READ, Isolation.SNAPSHOT
    assert not dominates(rr, si) and not dominates(si, rr)
    assert join(rr, si) is Isolation.SERIALIZABLE
    assert all(dominates(Isolation.SERIALIZABLE, x) for x in L)
    assert all(dominates(x, Isolation.READ_UNCOMMITTED) for x in L)
    assert dominates(si, Isolation.READ_COMMITTED) and dominates(rr, Isolation.READ_COMMITTED)


def test_precondition_and_parse() -> None:
    assert check_precondition(Isolation.SERIALIZABLE, Isolation.SNAPSHOT, what="x")
    with pytest.raises(IsolationViolation, match="requires isolation snapshot"):
        check_precondition(Isolation.REPEATABLE_READ, Isolation.SNAPSHOT, what="x")
    assert Isolation.parse("Read Committed") is Isolation.READ_COMMITTED
    assert Isolation.parse("SI") is Isolation.SNAPSHOT
    with pytest.raises(InvalidInput, match="isolation"):
        Isolation.parse("chaos")
