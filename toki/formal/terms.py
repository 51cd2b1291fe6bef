"""The small terms the z3 encoding and its readers share (toki/formal/encoding.py builds
histories from them; serial.py and scenario.py read them), kept below the encoding so that
neither reader imports it at run time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import z3

__all__ = ["NONE", "Encoded", "Serial", "Step", "_fraction", "lex_gt"]

NONE = -1  # "no claim" (an empty head, no audit row)
Serial = tuple[z3.BoolRef, list[z3.BoolRef], list[z3.ArithRef] | None]


def _fraction(value: Any) -> list[int]:
    """An exact rational z3 value as [numerator, denominator]."""
    return [value.numerator_as_long(), value.denominator_as_long()]


def lex_gt(a: Sequence[z3.ArithRef], b: Sequence[z3.ArithRef]) -> z3.BoolRef:
    """(a0, a1, ...) > (b0, b1, ...) lexicographically."""
    if not a:
        return z3.BoolVal(False)
    return z3.Or(a[0] > b[0], z3.And(a[0] == b[0], lex_gt(a[1:], b[1:])))


@dataclass(frozen=True, slots=True)
class Step:
    """One transaction's effects in one run: what it writes (z3 terms)."""

    head: z3.BoolRef  # writes the head row
    holder: z3.ArithRef  # the claim it puts in the head
    audit: z3.ArithRef  # the claim its audit row names (NONE: no audit row)
    held: z3.BoolRef  # writes a held (PROPOSED) row for itself
    ev: dict[int, z3.BoolRef]  # writes ev[v]
    total: z3.ArithRef  # the total it writes (EWM)
    newest: tuple[z3.ArithRef, z3.ArithRef]  # the newest evidence stamp it writes (EWM)
    pol: z3.BoolRef  # writes the policy row


class Encoded(Protocol):
    """What the encoding's parts (dsg.py: SERIALIZABLE's order; serial.py: serial outcomes)
    read of the history they are building: `encoding.History` has it. Typed here, below
    the encoding, so that neither part imports the class that calls it."""

    txns: list[int]
    claims: list[int]
    op: str
    values: int
    tag: str
    weight: z3.FuncDeclRef
    read: z3.FuncDeclRef
    end: z3.FuncDeclRef
    live: dict[str, Any]
    serial_pos: z3.FuncDeclRef | None
    P: int | None  # the policy transaction (RULE), if any

    def com(self, i: int) -> z3.BoolRef: ...

    def val(self, i: int | z3.ArithRef) -> z3.ArithRef: ...

    def stamp(self, i: int | z3.ArithRef) -> list[z3.ArithRef]: ...

    def _rank(self, i: int | z3.ArithRef, pol: z3.BoolRef | bool) -> list[z3.ArithRef]: ...
