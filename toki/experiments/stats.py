"""Statistics for paired experiments: bootstrap intervals, McNemar's exact test, Wilson
intervals and achieved power.

Plain functions over plain sequences, seeded where random, so any experiment (LoCoMo
ablations, the verdict matrix, calibration) reports the same kind of numbers the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from toki.errors import InvalidInput

__all__ = [
    "Interval",
    "PairedComparison",
    "bootstrap_mean_ci",
    "cluster_bootstrap_ci",
    "cluster_interval",
    "cluster_sign_flip_p",
    "compare_paired",
    "holm",
    "mcnemar_counts",
    "mcnemar_exact",
    "mcnemar_power",
    "paired_bootstrap_ci",
    "paired_mean_power",
    "wilson_interval",
    "zero_upper_bound",
]

DEFAULT_SEED = 20240601
DEFAULT_RESAMPLES = 10_000


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with a two-sided confidence interval at level `1 - alpha`."""

    estimate: float
    low: float
    high: float
    alpha: float = 0.05

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise InvalidInput("alpha", f"must be in (0, 1), got {alpha}")


FloatArray = np.ndarray[Any, np.dtype[np.float64]]


def _array(xs: Sequence[float] | FloatArray, name: str) -> FloatArray:
    a = np.asarray(xs, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise InvalidInput(name, "must be a non-empty sequence of numbers")
    if not np.all(np.isfinite(a)):
        raise InvalidInput(name, "holds a non-finite value")
    return a


def wilson_interval(successes: int, n: int, alpha: float = 0.05) -> Interval:
    """Wilson score interval for a binomial proportion (good at small n and near 0 or 1,
    where the normal interval leaves [0, 1] or collapses)."""
    _check_alpha(alpha)
    if n <= 0 or not 0 <= successes <= n:
        raise InvalidInput("successes", f"need 0 <= successes <= n and n > 0, got {successes}/{n}")
    z = float(sps.norm.ppf(1 - alpha / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # the bounds are exactly 0 at no successes and 1 at all (rounding would leave 5.6e-17
    # above the estimate): an interval always contains its estimate
    low = 0.0 if successes == 0 else min(p, max(0.0, centre - half))
    high = 1.0 if successes == n else max(p, min(1.0, centre + half))
    return Interval(p, low, high, alpha)


def cluster_interval(rates: Sequence[float] | FloatArray, alpha: float = 0.05) -> Interval:
    """A rate estimated over clusters (e.g. judge draws), with the cluster as the unit: the
    mean of the per-cluster rates and a two-sided Student t interval with k − 1 degrees of
    freedom, clipped to [0, 1]. Runs inside one cluster share its cause (the same judge
    answers), so treating them as independent would make the interval too narrow. One
    cluster gives no interval ([0, 1]); identical clusters give a zero-width one."""
    _check_alpha(alpha)
    a = _array(rates, "rates")
    mean = float(a.mean())
    if a.size < 2:
        return Interval(mean, 0.0, 1.0, alpha)
    half = float(sps.t.ppf(1 - alpha / 2, a.size - 1)) * float(a.std(ddof=1)) / math.sqrt(a.size)
    return Interval(mean, max(0.0, mean - half), min(1.0, mean + half), alpha)


def zero_upper_bound(n: int, alpha: float = 0.05) -> float:
    """One-sided upper confidence bound on a rate after 0 events in n independent runs
    (Clopper–Pearson: the rate r with (1 − r)^n = alpha; about 3/n at alpha = 0.05)."""
    _check_alpha(alpha)
    if n <= 0:
        return 1.0
    return float(1.0 - alpha ** (1.0 / n))


def _cluster_sums(
    values: FloatArray, clusters: Sequence[str]
) -> tuple[FloatArray, FloatArray]:
    """Per cluster (in first-seen order): the sum of the values and the number of items."""
    if len(clusters) != values.size:
        raise InvalidInput("clusters", f"need one cluster per value, got {len(clusters)}")
    names = list(dict.fromkeys(clusters))
    at = {c: i for i, c in enumerate(names)}
    sums = np.zeros(len(names))
    sizes = np.zeros(len(names))
    for v, c in zip(values, clusters, strict=True):
        sums[at[c]] += v
        sizes[at[c]] += 1
    return sums, sizes


def cluster_bootstrap_ci(
    xs: Sequence[float] | FloatArray,
    clusters: Sequence[str],
    *,
    alpha: float = 0.05,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Percentile interval of the mean of items that come in clusters (e.g. LoCoMo questions
    of one conversation), resampling whole clusters: items of one cluster share its cause, so
    the cluster, not the item, is the unit. The estimate is the plain item mean."""
    _check_alpha(alpha)
    a = _array(xs, "xs")
    sums, sizes = _cluster_sums(a, clusters)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, sums.size, size=(resamples, sums.size))
    means = sums[idx].sum(axis=1) / sizes[idx].sum(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(float(a.mean()), float(low), float(high), alpha)


def cluster_sign_flip_p(
    diffs: Sequence[float] | FloatArray,
    clusters: Sequence[str],
    *,
    exact_up_to: int = 16,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> float:
    """Two-sided permutation test of a paired difference with clusters as the unit: under no
    effect, swapping the two arms inside a cluster flips the sign of its summed difference.
    All 2^k sign patterns are enumerated for k <= `exact_up_to` clusters (so with k clusters
    the smallest attainable p is 2 / 2^k: 0.002 for ten), sampled (seeded) beyond."""
    d = _array(diffs, "diffs")
    sums, _ = _cluster_sums(d, clusters)
    k = sums.size
    observed = abs(float(sums.sum()))
    if k <= exact_up_to:
        signs = 1 - 2 * ((np.arange(2**k)[:, None] >> np.arange(k)) & 1)
    else:
        rng = np.random.default_rng(seed)
        signs = rng.choice(np.array([-1, 1]), size=(resamples, k))
    stats = np.abs(signs @ sums)
    return float(np.mean(stats >= observed - 1e-12))


def bootstrap_mean_ci(
    xs: Sequence[float] | FloatArray,
    *,
    alpha: float = 0.05,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Percentile bootstrap interval of a mean (fixed seed: the same input gives the same
    interval on every run)."""
    _check_alpha(alpha)
    a = _array(xs, "xs")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(resamples, a.size))
    means = a[idx].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(float(a.mean()), float(low), float(high), alpha)


def paired_bootstrap_ci(
    a: Sequence[float] | FloatArray,
    b: Sequence[float] | FloatArray,
    *,
    alpha: float = 0.05,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Interval:
    """Percentile bootstrap interval of mean(a - b) resampling *pairs* (the same items are
    scored under both variants, so their scores are not independent)."""
    x, y = _array(a, "a"), _array(b, "b")
    if x.size != y.size:
        raise InvalidInput("b", f"must pair with a: {y.size} values for {x.size}")
    return bootstrap_mean_ci(x - y, alpha=alpha, resamples=resamples, seed=seed)


def mcnemar_counts(a: Sequence[bool], b: Sequence[bool]) -> tuple[int, int]:
    """Discordant pairs: (a right and b wrong, a wrong and b right)."""
    if len(a) != len(b):
        raise InvalidInput("b", f"must pair with a: {len(b)} values for {len(a)}")
    n10 = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    n01 = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    return n10, n01


def mcnemar_exact(n10: int, n01: int) -> float:
    """Two-sided exact McNemar p: under H0 the discordant pairs split Binomial(n10+n01, 1/2);
    p = min(1, 2 P(X <= min(n10, n01))). No discordant pairs gives p = 1."""
    if n10 < 0 or n01 < 0:
        raise InvalidInput("n10", f"counts must be non-negative, got {n10}, {n01}")
    d = n10 + n01
    if d == 0:
        return 1.0
    return float(min(1.0, 2.0 * sps.binom.cdf(min(n10, n01), d, 0.5)))


def mcnemar_power(n: int, p10: float, p01: float, alpha: float = 0.05) -> float:
    """Power of the two-sided exact McNemar test at level alpha for n pairs whose discordant
    cells have probabilities p10 and p01 (exact: sums over the number of discordant pairs).

    With the observed proportions this is the *achieved* (post-hoc) power: how likely the
    test was to detect a difference of the observed size. It is a function of the observed
    effect and says nothing the p value does not; report it to show which comparisons could
    not have detected anything, not to rescue a non-significant one.
    """
    _check_alpha(alpha)
    if n < 0 or p10 < 0 or p01 < 0 or p10 + p01 > 1 + 1e-12:
        raise InvalidInput("p10", f"need n >= 0 and p10 + p01 <= 1, got {n}, {p10}, {p01}")
    pd = p10 + p01
    if n == 0 or pd == 0:
        return 0.0
    q = p10 / pd
    power = 0.0
    ds = np.arange(0, n + 1)
    pmf_d = sps.binom.pmf(ds, n, min(pd, 1.0))
    for d, w in zip(ds, pmf_d, strict=True):
        if d == 0 or w < 1e-15:
            continue
        ks = np.arange(0, d + 1)
        p_two = np.minimum(1.0, 2.0 * sps.binom.cdf(np.minimum(ks, d - ks), d, 0.5))
        reject = p_two < alpha
        power += float(w) * float(sps.binom.pmf(ks[reject], d, q).sum())
    return min(1.0, power)


def paired_mean_power(diffs: Sequence[float] | FloatArray, alpha: float = 0.05) -> float:
    """Achieved power of a two-sided paired test of mean difference (normal approximation,
    effect and spread taken from `diffs`). Zero spread: 1 if the mean differs, else 0."""
    _check_alpha(alpha)
    d = _array(diffs, "diffs")
    mean = float(d.mean())
    if d.size < 2 or float(d.std(ddof=1)) == 0.0:
        return 1.0 if mean != 0.0 else 0.0
    se = float(d.std(ddof=1)) / math.sqrt(d.size)
    z = float(sps.norm.ppf(1 - alpha / 2))
    shift = abs(mean) / se
    return float(sps.norm.cdf(shift - z) + sps.norm.cdf(-shift - z))


def holm(pvalues: Sequence[float] | FloatArray) -> list[float]:
    """Holm-Bonferroni adjusted p values (same order as given), for a family of comparisons."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True, slots=True)
class PairedComparison:
    """a vs b on the same n items: mean difference with its paired-bootstrap interval, the
    exact McNemar test on the binary outcomes, and achieved power of both tests."""

    n: int
    mean_a: float
    mean_b: float
    diff: Interval
    n10: int
    n01: int
    mcnemar_p: float
    power_mcnemar: float
    power_mean: float


def compare_paired(
    a: Sequence[float] | FloatArray,
    b: Sequence[float] | FloatArray,
    *,
    correct_a: Sequence[bool] | None = None,
    correct_b: Sequence[bool] | None = None,
    threshold: float = 0.5,
    alpha: float = 0.05,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> PairedComparison:
    """Compare paired scores. Binary outcomes for McNemar are `correct_a/b` when given,
    else score >= threshold (for 0/1 scores that is the score itself)."""
    x, y = _array(a, "a"), _array(b, "b")
    ca = list(correct_a) if correct_a is not None else [bool(v >= threshold) for v in x]
    cb = list(correct_b) if correct_b is not None else [bool(v >= threshold) for v in y]
    n10, n01 = mcnemar_counts(ca, cb)
    n = int(x.size)
    diff = paired_bootstrap_ci(x, y, alpha=alpha, resamples=resamples, seed=seed)
    return PairedComparison(
        n=n,
        mean_a=float(x.mean()),
        mean_b=float(y.mean()),
        diff=diff,
        n10=n10,
        n01=n01,
        mcnemar_p=mcnemar_exact(n10, n01),
        power_mcnemar=mcnemar_power(n, n10 / n, n01 / n, alpha),
        power_mean=paired_mean_power(x - y, alpha),
    )
