"""toki.experiments.stats against hand-computed and textbook values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toki.errors import InvalidInput
from toki.experiments.stats import (
    bootstrap_mean_ci,
    cluster_bootstrap_ci,
    cluster_interval,
    cluster_sign_flip_p,
    compare_paired,
    holm,
    mcnemar_counts,
    mcnemar_exact,
    mcnemar_power,
    paired_bootstrap_ci,
    paired_mean_power,
    wilson_interval,
    zero_upper_bound,
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


@settings(derandomize=True, max_examples=300, database=None)
@given(st.integers(1, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_interval_contains_its_estimate_inside_0_1(case: tuple[int, int]) -> None:
    k, n = case
    w = wilson_interval(k, n)
    assert 0.0 <= w.low <= w.estimate <= w.high <= 1.0
    assert (w.low == 0.0) == (k == 0) and (w.high == 1.0) == (k == n)


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


# ------------------------------------------------------------- clustered rates (the matrix)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=2, max_size=30))
def test_cluster_interval_is_a_t_interval_around_the_mean(rates: list[float]) -> None:
    ci = cluster_interval(rates)
    assert ci.estimate == pytest.approx(float(np.mean(rates)))
    assert 0.0 <= ci.low <= ci.estimate + 1e-12 and ci.estimate - 1e-12 <= ci.high <= 1.0
    if max(rates) == min(rates):
        assert ci.low == pytest.approx(ci.high)  # no spread between draws: no uncertainty


def test_cluster_interval_known_value_and_one_cluster() -> None:
    # mean 0.5, sd 0.1 over 4 draws: half-width t(0.975, 3) * 0.1 / 2 = 3.1824 * 0.05
    ci = cluster_interval([0.4, 0.5, 0.6, 0.5])
    sd = float(np.std([0.4, 0.5, 0.6, 0.5], ddof=1))
    assert ci.high - ci.estimate == pytest.approx(3.182446 * sd / 2, rel=1e-5)
    one = cluster_interval([0.3])
    assert (one.estimate, one.low, one.high) == (0.3, 0.0, 1.0)


def test_cluster_interval_covers_where_wilson_over_runs_does_not() -> None:
    """Runs clustered by draw (each draw has its own rate): the t interval over draws keeps
    about its nominal coverage, Wilson over all runs as if independent falls far short. The
    matrix's judge draws are such clusters (issue #17, item 4)."""
    seed = 17
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    draws, runs, truth = 8, 200, 0.3
    cover_t = cover_w = 0
    trials = 400
    for _ in range(trials):
        per_draw = rng.beta(1.5, 3.5, size=draws)  # mean 0.3, wide spread between draws
        hits = rng.binomial(runs, per_draw)
        cover_t += cluster_interval(hits / runs).contains(truth)
        cover_w += wilson_interval(int(hits.sum()), draws * runs).contains(truth)
    assert cover_t / trials > 0.9
    assert cover_w / trials < 0.6


def test_zero_upper_bound() -> None:
    assert zero_upper_bound(0) == 1.0
    for n in (1, 10, 100, 1000):
        b = zero_upper_bound(n, 0.05)
        assert (1 - b) ** n == pytest.approx(0.05)
    assert zero_upper_bound(1000) < zero_upper_bound(100) < zero_upper_bound(10)
    assert zero_upper_bound(1000) == pytest.approx(3 / 1000, rel=0.01)  # the rule of three


def test_sign_flip_over_ten_conversations_cannot_go_below_2_in_1024() -> None:
    """Ten conversations all pointing the same way: the exact p is 2 / 2^10 however many
    questions each holds (a question-level test would print a far smaller p)."""
    clusters = [f"conv-{i // 30}" for i in range(300)]
    assert cluster_sign_flip_p([0.2] * 300, clusters) == pytest.approx(2 / 1024)
    assert mcnemar_exact(300, 0) < 1e-80  # the question as the unit: not the same claim
    assert cluster_sign_flip_p([0.0] * 300, clusters) == 1.0


@settings(derandomize=True, max_examples=100, database=None, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=40), st.integers(1, 8))
def test_sign_flip_p_is_a_probability_unchanged_by_swapping_the_arms(
    diffs: list[float], k: int
) -> None:
    clusters = [str(i % k) for i in range(len(diffs))]
    p = cluster_sign_flip_p(diffs, clusters)
    assert 2 / 2 ** len(set(clusters)) - 1e-12 <= p <= 1.0
    assert p == pytest.approx(cluster_sign_flip_p([-d for d in diffs], clusters))


def test_cluster_bootstrap_is_zero_width_for_identical_clusters_and_wider_than_items() -> None:
    same = cluster_bootstrap_ci([1.0, 0.0, 1.0] * 10, [str(i // 3) for i in range(30)])
    assert same.low == same.high == same.estimate == pytest.approx(2 / 3)
    # two kinds of conversation: all right or all wrong; resampling questions would be narrow
    xs = [1.0] * 50 + [0.0] * 50
    clusters = [str(i // 10) for i in range(100)]
    conv = cluster_bootstrap_ci(xs, clusters)
    item = bootstrap_mean_ci(xs)
    assert conv.high - conv.low > 2 * (item.high - item.low)
    with pytest.raises(InvalidInput):
        cluster_bootstrap_ci([1.0, 0.0], ["a"])
