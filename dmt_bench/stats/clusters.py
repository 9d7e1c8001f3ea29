"""Statistics for few clusters: t quantiles, the jackknife-t interval, MDE, permutation, Holm.

A DIB readout is clustered: the decisions of one context (one question asked of every
group) move together, so the unit of replication is the context, and a domain has 2
(simulation), 4 (the exploratory dose run) or 24+ (a confirmatory run) of them. With
so few clusters a normal quantile or a percentile bootstrap over clusters is too
narrow (a bootstrap over 4 clusters has 35 distinct resamples and ignores that the
standard error itself is estimated from 4 numbers). What every report uses instead:

- **the jackknife-t interval** (``jackknife_t``, ``cluster_jackknife``): the
  delete-one-cluster jackknife standard error, stratified by domain when a statistic
  spans several, with Student's t quantile on ``Σ_h (G_h − 1)`` degrees of freedom
  (``G − 1`` for one domain): ``θ̂ ± t_{0.975, df} · SE``. For the mean of cluster values
  it is exactly the one-sample t interval; ``tests/unit/test_stats.py`` shows its
  coverage by simulation at 4 and 24 clusters, and that the percentile bootstrap
  undercovers at 4;
- **its test and power**: ``p`` of ``t = θ̂ / SE`` on the same df (two-sided), and the
  MDE ``(t_{1−α/2, df} + t_{power, df}) · SE`` at α = 0.05 and 80 % power
  (``minimum_detectable_effect_t``);
- **label-permutation tests that say when they cannot reject**: ``label_permutation_test``
  (treated vs control clusters) and ``within_cluster_min_p`` (GBV's noise floor: group
  labels shuffled within each context) report the smallest p the design can produce,
  and ``testability_note`` says "not testable at α with this design" when it exceeds α;
- **Holm's correction** (``holm``) over a family of primary comparisons declared before
  looking at the numbers; every other interval is exploratory (``multiplicity_note``).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from itertools import combinations
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from dmt_bench.stats.core import NAN, Estimate, Interval, NanFloat

T = TypeVar("T")
ALPHA = 0.05
"""The level of every test in the reports (two-sided)."""
POWER = 0.8
"""The power every MDE is stated at."""
INTERVAL_NAME = "jackknife-t"
INTERVAL_NOTE = (
    "95% CIs: delete-one-context jackknife standard error with Student's t quantile on "
    "(contexts − 1) degrees of freedom, summed over domains for a statistic over several "
    "(dmt_bench.stats.jackknife_t); p: the t test of the same SE; MDE: "
    "(t_0.975 + t_0.8) × SE, the smallest true effect this design detects with 80% power "
    "at α = 0.05, two-sided."
)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):  # fmt: skip
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function (``0 <= x <= 1``)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))  # fmt: skip
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T ≤ t) for Student's t with ``df`` degrees of freedom: ``1 − ½ I_{df/(df+t²)}(df/2, ½)``."""
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """t_{p, df}: the ``p`` quantile of Student's t (``0 < p < 1``), by bisection on ``t_cdf``."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
        if hi - lo < 1e-13 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def minimum_detectable_effect_t(
    se: float, df: float, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """``minimum_detectable_effect`` with t quantiles: ``(t_{1−α/2, df} + t_{power, df}) · SE``.

    For an estimate over G clusters, ``df = G − 1``; at 4 clusters the factor is
    ``3.182 + 0.978 = 4.16`` rather than the normal 2.80. NaN when SE is NaN or ≤ 0.
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"need 0 < alpha < 1 and 0 < power < 1, got {alpha}, {power}")
    if not math.isfinite(se) or se <= 0:
        return NAN
    return (t_quantile(1.0 - alpha / 2.0, df) + t_quantile(power, df)) * se


class PermutationTest(BaseModel):
    """A label-permutation test and whether its design can reach ``alpha`` at all."""

    model_config = ConfigDict(frozen=True)
    statistic: float
    """mean(treated clusters) − mean(control clusters)."""
    p_value: float
    min_p: float
    """The smallest p-value this design can produce, whatever the data."""
    n_assignments: int
    """Label assignments compared (every one when ``exact``)."""
    exact: bool
    alpha: float
    testable: bool
    """``min_p <= alpha``: otherwise no data could reject, and ``verdict`` says so."""
    verdict: Literal["reject", "do not reject", "not testable at alpha"]


def label_permutation_test(
    values: Sequence[float],
    treated: Sequence[bool],
    *,
    alpha: float = 0.05,
    n_permutations: int = 10_000,
    seed: int = 0,
) -> PermutationTest:
    """Two-sided test of ``mean(treated) − mean(control)`` by permuting the cluster labels.

    Every one of the ``C(G, G_t)`` assignments of the treated labels when they number no
    more than ``n_permutations`` (exact: ``p = #{|T_a| ≥ |T_obs|} / N``, smallest ``1/N``,
    or ``2/N`` when the arms are the same size, since swapping them gives the same |T|);
    otherwise ``n_permutations`` random assignments (``p = (1 + #) / (1 + n)``, smallest
    ``1/(1 + n)``). When that smallest p exceeds ``alpha`` the verdict is "not testable
    at alpha" whatever the data: 4 clusters split 2/2 give ``min_p = 2/6``.
    """
    if len(values) != len(treated):
        raise ValueError("one label per cluster value")
    g, g_t = len(values), sum(bool(t) for t in treated)
    if g_t == 0 or g_t == g:
        raise ValueError("need at least one treated and one control cluster")

    def diff(labels: Sequence[bool]) -> float:
        a = [v for v, t in zip(values, labels, strict=True) if t]
        b = [v for v, t in zip(values, labels, strict=True) if not t]
        return sum(a) / len(a) - sum(b) / len(b)

    observed = diff(treated)
    total = math.comb(g, g_t)
    exact = total <= n_permutations
    if exact:
        draws = [[i in chosen for i in range(g)] for chosen in combinations(range(g), g_t)]
    else:
        rng = random.Random(seed)
        draws = []
        for _ in range(n_permutations):
            chosen = set(rng.sample(range(g), g_t))
            draws.append([i in chosen for i in range(g)])
    exceed = sum(abs(diff(d)) >= abs(observed) - 1e-12 for d in draws)
    if exact:
        p, min_p = exceed / total, (2 if 2 * g_t == g else 1) / total
    else:
        p, min_p = (1 + exceed) / (1 + n_permutations), 1 / (1 + n_permutations)
    testable = min_p <= alpha
    verdict: Literal["reject", "do not reject", "not testable at alpha"] = (
        "not testable at alpha" if not testable else "reject" if p <= alpha else "do not reject"
    )
    return PermutationTest(
        statistic=observed, p_value=p, min_p=min_p, n_assignments=len(draws), exact=exact,
        alpha=alpha, testable=testable, verdict=verdict,
    )  # fmt: skip


class HolmResult(BaseModel):
    """One hypothesis of a family after Holm's step-down correction."""

    model_config = ConfigDict(frozen=True)
    p_value: float
    adjusted: float
    reject: bool


def holm(p_values: Mapping[str, float], *, alpha: float = 0.05) -> dict[str, HolmResult]:
    """Holm's step-down correction over the declared family ``p_values`` (name → p).

    Sorted ascending, ``p_(1) ≤ … ≤ p_(m)``: ``adj_(i) = max_{j ≤ i} min(1, (m − j + 1)·p_(j))``;
    a hypothesis is rejected when its adjusted p is at most ``alpha`` (family-wise error
    ≤ alpha). A NaN p still counts in ``m`` (the family is what was declared, not what
    could be computed), gets a NaN adjusted p and is not rejected. Names keep their order.
    """
    m = len(p_values)
    order = sorted((p, name) for name, p in p_values.items() if math.isfinite(p))
    adjusted: dict[str, float] = {}
    running = 0.0
    for j, (p, name) in enumerate(order):
        running = max(running, min(1.0, (m - j) * p))
        adjusted[name] = running
    return {
        name: HolmResult(
            p_value=p,
            adjusted=adjusted.get(name, NAN),
            reject=name in adjusted and adjusted[name] <= alpha,
        )
        for name, p in p_values.items()
    }


class ClusterEstimate(BaseModel):
    """A cluster-level estimate with its jackknife-t interval, t test and MDE.

    ``df = 0`` (and NaN interval, p and MDE) when it has no interval: a stratum with
    fewer than two clusters, or a non-finite leave-one-out value. Written to JSON with
    null for NaN.
    """

    model_config = ConfigDict(frozen=True)
    value: NanFloat
    low: NanFloat = NAN
    high: NanFloat = NAN
    se: NanFloat = NAN
    df: int = 0
    p_value: NanFloat = NAN
    """Two-sided p of ``t = value / se`` on ``df`` degrees of freedom."""
    mde: NanFloat = NAN
    """``(t_{1−α/2, df} + t_{power, df}) · se`` at α = 0.05, 80 % power."""

    @property
    def estimate(self) -> Estimate:
        """The value and interval as the shared ``Estimate``."""
        return Estimate(value=self.value, ci=Interval(low=self.low, high=self.high))

    @property
    def excludes_zero(self) -> bool:
        """The interval exists and does not contain 0."""
        return (
            math.isfinite(self.low) and math.isfinite(self.high) and (self.low > 0 or self.high < 0)
        )


def jackknife_t(
    value: float,
    loo: Mapping[str, Sequence[float]],
    *,
    confidence: float = 0.95,
    alpha: float = ALPHA,
    power: float = POWER,
) -> ClusterEstimate:
    """``value`` with a stratified delete-one-cluster jackknife-t interval.

    ``loo[h][i]`` is the statistic recomputed without cluster ``i`` of stratum ``h`` (a
    DIB domain; its contexts are the clusters), every other cluster kept. With ``G_h``
    clusters in stratum h and ``θ̄_h`` the mean of its leave-one-out values:
    ``SE² = Σ_h (G_h − 1)/G_h · Σ_i (θ_(hi) − θ̄_h)²``, ``df = Σ_h (G_h − 1)`` and the
    interval ``value ± t_{1−(1−confidence)/2, df} · SE``; one stratum gives the ordinary
    jackknife on ``G − 1`` df. Also ``p`` (two-sided t test of 0) and the MDE.

    Undefined interval (``df = 0``) when ``value`` is not finite, there is no stratum,
    a stratum has fewer than two clusters (it cannot measure its own variability) or
    a leave-one-out value is not finite. A zero SE (every leave-one-out value equal)
    gives a zero-width interval, a NaN p and a NaN MDE: no variability was measured.
    """
    if not math.isfinite(value) or not loo:
        return ClusterEstimate(value=value)
    var, df = 0.0, 0
    for values in loo.values():
        g = len(values)
        if g < 2 or not all(math.isfinite(v) for v in values):
            return ClusterEstimate(value=value)
        centre = sum(values) / g
        var += (g - 1) / g * sum((v - centre) ** 2 for v in values)
        df += g - 1
    se = math.sqrt(var)
    half = t_quantile(1.0 - (1.0 - confidence) / 2.0, df) * se
    p = 2.0 * (1.0 - t_cdf(abs(value) / se, df)) if se > 0 else NAN
    return ClusterEstimate(
        value=value,
        low=value - half,
        high=value + half,
        se=se,
        df=df,
        p_value=p,
        mde=minimum_detectable_effect_t(se, df, alpha=alpha, power=power),
    )


def cluster_jackknife(
    clusters: Sequence[T], statistic: Callable[[Sequence[T]], float], confidence: float = 0.95
) -> Estimate:
    """``statistic`` of all G clusters with a delete-one-cluster jackknife t interval.

    With ``θ_(i)`` the statistic without cluster i and ``θ̄`` their mean:
    ``SE² = (G − 1)/G · Σ_i (θ_(i) − θ̄)²`` and the interval ``θ̂ ± t_{1−α/2, G−1} · SE``
    (``jackknife_t`` with one stratum). For the mean of cluster values this is exactly
    the one-sample t interval. Undefined (NaN interval) with fewer than 2 clusters or a
    non-finite leave-one-out value.
    """
    value = statistic(list(clusters))
    g = len(clusters)
    if g < 2:
        return Estimate(value=value)
    loo = [statistic([c for j, c in enumerate(clusters) if j != i]) for i in range(g)]
    return jackknife_t(value, {"": loo}, confidence=confidence).estimate


def within_cluster_min_p(groups_per_cluster: Sequence[int]) -> float:
    """Smallest p-value of a test that shuffles group labels within each cluster.

    GBV's noise floor shuffles the K group labels of each DIB context independently.
    GBV does not change when every context's labels are permuted the same way (it is
    a spread over groups, whatever their names), so with C contexts of K groups the
    ``(K!)^C`` assignments fall into ``(K!)^(C−1)`` classes of equal GBV, and the
    observed labelling's class holds at least ``1/(K!)^(C−1)`` of them: that is the
    smallest attainable p, ``1/K!`` with two contexts (0.5, 0.167, 0.042 for K = 2, 3,
    4) and 1 with one. Contexts with different K: ``K_max! / Π_c K_c!`` (the common
    relabelling of the largest context). NaN without a cluster.
    """
    ks = [k for k in groups_per_cluster if k > 0]
    if not ks:
        return NAN
    log_p = math.lgamma(max(ks) + 1) - sum(math.lgamma(k + 1) for k in ks)
    return min(1.0, math.exp(log_p))


def testability_note(min_p: float, *, alpha: float = ALPHA, formula: str = "") -> str | None:
    """ "not testable at α=… with this design (smallest attainable p = …)" when ``min_p > α``.

    None when the design can reach ``alpha`` (then the test's own verdict stands).
    ``formula`` names how the smallest p was computed (e.g. ``1/K!``).
    """
    if not math.isfinite(min_p) or min_p <= alpha:
        return None
    how = f"{formula} = " if formula else ""
    return (
        f"not testable at α={alpha:g} with this design (smallest attainable p = {how}{min_p:.3g})"
    )


def multiplicity_note(total: int, primary: Sequence[str], *, alpha: float = ALPHA) -> str:
    """The one multiplicity statement of a report: how many intervals, which are primary."""
    if not primary:
        return (
            f"Multiplicity: this report shows {total} intervals; none is primary (no family "
            "was declared for this design), so every interval is exploratory and none is a "
            "confirmed effect."
        )
    return (
        f"Multiplicity: this report shows {total} intervals. The {len(primary)} primary "
        f"comparisons ({'; '.join(primary)}) are tested with Holm's correction at "
        f"family-wise α = {alpha:g}; every other interval is exploratory: unadjusted, "
        "a CI excluding 0 there is a lead to test, not a finding."
    )
