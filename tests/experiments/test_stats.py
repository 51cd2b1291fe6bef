"""toki.experiments.stats against hand-computed and textbook values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from toki.errors import InvalidInput
from toki.experiments.stats import (
    bootstrap_mean_ci,
    compare_paired,
    holm,
    mcnemar_counts,
    mcnemar_exact,
    mcnemar_power,
    paired_bootstrap_ci,
    paired_mean_power,
    wilson_interval,
)


def test_mcnemar_exact_known_table() -> None:
    # 10 vs 2 discordant pairs: p = 2 * P(X <= 2), X ~ Bin(12, 1/2) = 2 * (1 + 12 + 66) / 4096
    assert mcnemar_exact(10, 2) == pytest.approx(2 * 79 / 4096, rel=1e-12)
    assert mcnemar_exact(2, 10) == mcnemar_exact(10, 2)
    # all discordance one way, 5 pairs: 2 / 32
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(6, 6) == 1.0  # capped at 1


def test_mcnemar_counts() -> None:
    a = [True, True, False, False, True]
    b = [True, False, True, False, False]
    assert mcnemar_counts(a, b) == (2, 1)
    with pytest.raises(InvalidInput):
        mcnemar_counts([True], [True, False])


def test_wilson_textbook_cases() -> None:
    # 0 of 10 at 95%: upper bound z^2/(n+z^2) = 3.8415/13.8415 (closed form when p = 0)
    w = wilson_interval(0, 10)
    z2 = 1.959963984540054**2
    assert w.low == 0.0
    assert w.high == pytest.approx(z2 / (10 + z2), rel=1e-9)
    # Newcombe (1998), Statistics in Medicine 17:857, Table I: 81/263 -> 0.2553 to 0.3662
    w = wilson_interval(81, 263)
    assert w.estimate == pytest.approx(81 / 263)
    assert w.low == pytest.approx(0.2553, abs=5e-4)
    assert w.high == pytest.approx(0.3662, abs=5e-4)
    # symmetric: k of n mirrors n-k of n
    a, b = wilson_interval(3, 20), wilson_interval(17, 20)
    assert a.low == pytest.approx(1 - b.high) and a.high == pytest.approx(1 - b.low)
    with pytest.raises(InvalidInput):
        wilson_interval(5, 4)


def test_paired_bootstrap_contains_true_difference() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(0.5, 0.2, size=400)
    a = base + 0.1 + rng.normal(0, 0.05, size=400)  # true mean difference 0.1
    ci = paired_bootstrap_ci(a, base, seed=11, resamples=4000)
    assert ci.estimate == pytest.approx(float(np.mean(a - base)))
    assert ci.low < ci.estimate < ci.high
    assert ci.low > 0.05  # pairing removes the shared spread of `base`
    # coverage: over many synthetic data sets the 95% interval holds the truth ~95% of the time
    covered = 0
    for i in range(200):
        x = rng.normal(0.0, 1.0, size=60)
        y = x + rng.normal(0.3, 0.5, size=60)  # true difference y - x = 0.3
        covered += paired_bootstrap_ci(y, x, seed=i, resamples=1000).contains(0.3)
    assert 0.89 <= covered / 200 <= 0.99


def test_bootstrap_is_seeded() -> None:
    xs = list(np.random.default_rng(0).normal(size=50))
    assert bootstrap_mean_ci(xs, seed=3) == bootstrap_mean_ci(xs, seed=3)
    assert bootstrap_mean_ci(xs, seed=3) != bootstrap_mean_ci(xs, seed=4)
    const = bootstrap_mean_ci([0.4] * 30)
    assert const.low == pytest.approx(0.4) and const.high == pytest.approx(0.4)


def test_mcnemar_power_matches_simulation() -> None:
    n, p10, p01 = 60, 0.2, 0.05
    exact = mcnemar_power(n, p10, p01)
    rng = np.random.default_rng(5)
    hits = 0
    trials = 4000
    for _ in range(trials):
        cells = rng.multinomial(n, [p10, p01, 1 - p10 - p01])
        hits += mcnemar_exact(int(cells[0]), int(cells[1])) < 0.05
    assert exact == pytest.approx(hits / trials, abs=0.03)
    # under H0 (p10 == p01) the exact test rejects at most alpha of the time
    assert mcnemar_power(80, 0.1, 0.1) <= 0.05
    assert mcnemar_power(500, 0.3, 0.0) == pytest.approx(1.0)
    assert mcnemar_power(50, 0.0, 0.0) == 0.0


def test_paired_mean_power_normal_approximation() -> None:
    rng = np.random.default_rng(1)
    d = rng.normal(0.0, 1.0, size=100)
    d = d - d.mean() + 0.2  # mean 0.2 exactly
    se = float(np.std(d, ddof=1)) / 10
    z = 1.959963984540054
    expected = 0.5 * math.erfc(-(0.2 / se - z) / math.sqrt(2)) + 0.5 * math.erfc(
        (0.2 / se + z) / math.sqrt(2)
    )
    assert paired_mean_power(d) == pytest.approx(expected, rel=1e-6)
    assert paired_mean_power([0.0, 0.0, 0.0]) == 0.0


def test_holm_known_example() -> None:
    # m = 3: sorted 0.01, 0.02, 0.04 -> 0.03, 0.04, 0.04 (monotone)
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])


def test_compare_paired_binary() -> None:
    a = [1.0] * 10 + [0.0] * 2 + [1.0] * 5
    b = [0.0] * 10 + [1.0] * 2 + [1.0] * 5
    c = compare_paired(a, b, seed=2, resamples=2000)
    assert (c.n10, c.n01) == (10, 2)
    assert c.mcnemar_p == pytest.approx(mcnemar_exact(10, 2))
    assert c.diff.estimate == pytest.approx(8 / 17)
    assert 0.0 < c.power_mcnemar < 1.0
