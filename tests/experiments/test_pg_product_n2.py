"""N2 of the product grid (`toki.experiments.pg_product.n2_serial`), without a server: the
belief state of any serial execution that keeps each writer's order is found whatever order
the log reports first (no false alarm), and a state with a claim no writer made is flagged.
Derandomized hypothesis (tests/conftest.py profile): the examples are fixed and printed on a
failure."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from toki.experiments.pg_product import OPERATORS_ORDER, n2_serial, serial_beliefs
from toki.sim.workload import SimClaim, synthetic


def _merge(inboxes: tuple[tuple[SimClaim, ...], ...], rng: random.Random) -> list[SimClaim]:
    """A random interleaving that keeps each inbox's order."""
    heads = [0] * len(inboxes)
    out: list[SimClaim] = []
    while any(h < len(box) for h, box in zip(heads, inboxes, strict=True)):
        i = rng.choice([i for i, box in enumerate(inboxes) if heads[i] < len(box)])
        out.append(inboxes[i][heads[i]])
        heads[i] += 1
    return out


workloads = st.tuples(
    st.sampled_from(OPERATORS_ORDER),
    st.integers(2, 3),  # writers
    st.integers(1, 2),  # claims per writer
    st.integers(0, 10_000),  # workload seed
    st.integers(0, 10_000),  # interleaving seed
)


@settings(max_examples=25, deadline=None)
@given(workloads)
def test_a_serial_state_is_never_flagged(case: tuple[str, int, int, int, int]) -> None:
    op, writers, per, seed, order_seed = case
    inboxes = synthetic(agents=writers, claims_per_agent=per, keys=1, seed=seed).inboxes
    every = [c for box in inboxes for c in box]
    rng = random.Random(order_seed)
    actual = _merge(inboxes, rng)  # the order the writes really took
    reported = _merge(inboxes, rng)  # the order N2 tries first (need not be the real one)
    live = serial_beliefs(op, actual, every)
    found, _ = n2_serial(op, inboxes, reported, live)
    assert found is False


@settings(max_examples=15, deadline=None)
@given(workloads.filter(lambda c: c[0] != "AWAIT"))
def test_a_claim_no_writer_made_is_flagged(case: tuple[str, int, int, int, int]) -> None:
    """A foreign claim, newest and heaviest on the key, wins under LWW, EWM and RULE: no order
    of the round's claims gives that state (AWAIT holds it PROPOSED instead)."""
    op, writers, per, seed, order_seed = case
    inboxes = synthetic(agents=writers, claims_per_agent=per, keys=1, seed=seed).inboxes
    every = [c for box in inboxes for c in box]
    order = _merge(inboxes, random.Random(order_seed))
    foreign = SimClaim(every[0].key, "Atlantis", start=10**4 - 1, recorded=10**6, weight=99.0)
    live = serial_beliefs(op, [*order, foreign], every)
    found, details = n2_serial(op, inboxes, order, live)
    assert found is True, details
