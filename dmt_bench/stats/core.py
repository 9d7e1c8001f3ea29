"""Intervals, resampling, percentiles, means and the estimate type (``dmt_bench.stats``).

One module for every interval and resampling scheme of ``dmt_bench`` (offline
model fitting is in ``dmt_proxy.audit.fit``):

- intervals: Wilson (``wilson_interval``), Newcombe's difference of two proportions
  (``newcombe_interval``), percentile intervals of replicates (``percentile_interval``);
- resampling of clusters (DIB contexts, timing blocks, items), each scheme named by
  what it draws, because committed results depend on its exact random stream:
  ``bootstrap_clusters`` (``random.Random``; one statistic at a time, DIB reports),
  ``paired_cluster_draws`` (numpy; one multiset of clusters shared by every condition
  of a simulation or dose run, so their differences are paired),
  ``bootstrap_items`` (``random.Random``; items resampled for a statistic of the
  sample, auditor F1), ``ratio_of_sums_bootstrap`` (numpy; Σnum/Σden over paired
  blocks, the perf scripts), ``permute_within_clusters`` (labels shuffled within
  each cluster, GBV's noise floor) and ``swap_patterns`` (paired swaps of two
  conditions' clusters, exact when few);
- replicates of a mean over parts (domains): ``mean_of_matched_replicates`` (NaN
  when any part's replicate is NaN: every part or none) and
  ``mean_of_finite_replicates`` (the mean over the parts finite in that replicate).
- the one estimate type, ``Estimate`` (a value, its ``Interval``, ``k`` of ``n`` for a
  proportion), written in the shape each result file always had (``FlatEstimate``,
  ``RateEstimate``, ``CountEstimate``, ``DifferenceEstimate``);
- few clusters (DIB contexts): ``dmt_bench.stats.clusters`` (the jackknife-t
  interval, t quantiles, MDE, permutation tests that say when they cannot reject, Holm).

Conventions (each tested on hand-computed cases in ``tests/unit/test_stats.py``):

- Undefined is NaN, never an exception: the mean or a percentile of no finite
  values, the Wilson interval of ``n = 0`` trials. Invalid input (``k > n``,
  negative counts, an unknown method) raises ``ValueError``.
- Non-finite inputs (NaN, ±inf, None) are dropped before a mean or a percentile.
- Power: ``minimum_detectable_effect`` turns an estimate's standard error into the
  smallest true effect a two-sided test of the same sample would detect with the
  stated power (formula and assumptions in its docstring).
- ``Interval`` is written to JSON as ``{"low": ..., "high": ...}``; NaN ends are
  written as ``null`` by the report writers, and ``null`` reads back as NaN, so
  every committed result file stays loadable.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from statistics import NormalDist
from typing import Annotated, Any, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer

NAN = float("nan")
Z95 = 1.959963984540054
"""The two-sided 95 % standard normal quantile, Φ⁻¹(0.975)."""

PercentileMethod = Literal["linear", "nearest_rank", "lower"]
"""How ``percentile`` picks a value (formulas in its docstring)."""


def _none_to_nan(value: Any) -> Any:
    return NAN if value is None else value


NanFloat = Annotated[float, BeforeValidator(_none_to_nan)]
"""A float that reads JSON ``null`` (how reports write NaN) back as NaN."""


class Interval(BaseModel):
    """A closed two-sided interval ``[low, high]``; NaN ends when it is undefined."""

    model_config = ConfigDict(frozen=True)

    low: NanFloat
    high: NanFloat

    @classmethod
    def undefined(cls) -> Interval:
        """``[NaN, NaN]``: no data to bound."""
        return cls(low=NAN, high=NAN)


class Estimate(BaseModel):
    """A point estimate with its confidence interval; ``k`` of ``n`` when it is a proportion.

    The one estimate type of every benchmark. Undefined is NaN (the value, or the ends of
    ``ci``), as everywhere in this module. Committed result files write it in one of the
    shapes below (``FlatEstimate``, ``RateEstimate``, ``CountEstimate``); a field's type
    names its shape, so every file keeps the format it was written in.
    """

    model_config = ConfigDict(frozen=True)

    value: NanFloat
    ci: Interval = Interval(low=NAN, high=NAN)
    k: int | None = None
    """Successes, when the estimate is the proportion ``k/n``."""
    n: int | None = None
    """Trials (the denominator), when the estimate is a proportion."""

    @property
    def defined(self) -> bool:
        """Whether the point estimate exists (is finite)."""
        return math.isfinite(self.value)

    @classmethod
    def of(cls, value: float | None, ci: Interval | None = None) -> Estimate:
        """``value`` (None: undefined) with ``ci`` (None: no interval)."""
        return cls(value=NAN if value is None else value, ci=ci or Interval.undefined())

    @classmethod
    def proportion(cls, k: int, n: int, z: float = Z95) -> Estimate:
        """``k/n`` with its Wilson interval (``wilson_interval``); NaN for ``n = 0``."""
        return cls(value=k / n if n else NAN, ci=wilson_interval(k, n, z), k=k, n=n)


def or_none(x: float) -> float | None:
    """``x``, or None when it is not finite (how result files write an undefined number)."""
    return float(x) if math.isfinite(x) else None


_S = TypeVar("_S", bound=BaseModel)


def _shape(shape: type[_S], read: Callable[[_S], Estimate], write: Callable[[Estimate], _S]) -> Any:
    """The Annotated validators/serializer that read and write ``Estimate`` as ``shape``."""

    def before(value: Any) -> Any:
        if isinstance(value, Estimate):
            return value
        return read(value if isinstance(value, shape) else shape.model_validate(value))

    return (BeforeValidator(before), PlainSerializer(write, return_type=shape))


class _FlatShape(BaseModel):
    model_config = ConfigDict(frozen=True)
    value: float | None
    low: float | None = None
    high: float | None = None


def _of_flat(d: _FlatShape) -> Estimate:
    return Estimate(
        value=_none_to_nan(d.value), ci=Interval(low=_none_to_nan(d.low), high=_none_to_nan(d.high))
    )


def _to_flat(e: Estimate) -> _FlatShape:
    return _FlatShape(value=or_none(e.value), low=or_none(e.ci.low), high=or_none(e.ci.high))


FlatEstimate = Annotated[Estimate, *_shape(_FlatShape, _of_flat, _to_flat)]
"""Written ``{"value", "low", "high"}``, null where undefined (simulation and dose results)."""


class _RateShape(BaseModel):
    model_config = ConfigDict(frozen=True)
    value: NanFloat
    ci: Interval
    numerator: int | None = None
    denominator: int | None = None


def _of_rate(d: _RateShape) -> Estimate:
    return Estimate(value=d.value, ci=d.ci, k=d.numerator, n=d.denominator)


def _to_rate(e: Estimate) -> _RateShape:
    return _RateShape(value=e.value, ci=e.ci, numerator=e.k, denominator=e.n)


RateEstimate = Annotated[Estimate, *_shape(_RateShape, _of_rate, _to_rate)]
"""Written ``{"value", "ci": {"low", "high"}, "numerator", "denominator"}``, NaN kept for
the writer to null (auditor evaluation reports)."""


class _CountShape(BaseModel):
    model_config = ConfigDict(frozen=True)
    k: int
    n: int
    value: float | None
    ci: Interval


def _of_count(d: _CountShape) -> Estimate:
    return Estimate(value=_none_to_nan(d.value), ci=d.ci, k=d.k, n=d.n)


def _to_count(e: Estimate) -> _CountShape:
    assert e.k is not None and e.n is not None  # a CountEstimate is a proportion
    return _CountShape(k=e.k, n=e.n, value=or_none(e.value), ci=e.ci)


CountEstimate = Annotated[Estimate, *_shape(_CountShape, _of_count, _to_count)]
"""Written ``{"k", "n", "value", "ci": {"low", "high"}}``, value null when undefined (IAT)."""


class _DifferenceShape(BaseModel):
    model_config = ConfigDict(frozen=True)
    value: float | None
    ci: Interval | None


def _of_difference(d: _DifferenceShape) -> Estimate:
    return Estimate(value=_none_to_nan(d.value), ci=d.ci or Interval.undefined())


def _to_difference(e: Estimate) -> _DifferenceShape:
    return _DifferenceShape(value=or_none(e.value), ci=e.ci if e.defined else None)


DifferenceEstimate = Annotated[Estimate, *_shape(_DifferenceShape, _of_difference, _to_difference)]
"""Written ``{"value", "ci": {"low", "high"}}``, both null when undefined (IAT drift)."""


def finite(values: Iterable[float | None]) -> list[float]:
    """The finite values as floats (NaN, ±inf and None dropped), in order."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def mean(values: Iterable[float | None]) -> float:
    """Arithmetic mean of the finite values, ``Σx / n``; NaN when there are none."""
    xs = finite(values)
    return sum(xs) / len(xs) if xs else NAN


def wilson_interval(k: int, n: int, z: float = Z95) -> Interval:
    """Wilson score interval for ``k`` successes in ``n`` trials.

    With ``p = k/n``: centre ``(p + z²/2n) / (1 + z²/n)``, half-width
    ``z / (1 + z²/n) · sqrt(p(1−p)/n + z²/4n²)``; ends clamped to [0, 1], and
    exactly 0 for ``k = 0`` and exactly 1 for ``k = n``.

    Empty input: ``n = 0`` gives ``[NaN, NaN]`` (no trials, nothing to bound; the
    formula divides by n). ``k < 0``, ``n < 0`` or ``k > n`` raise ``ValueError``.
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return Interval.undefined()
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    # clamp float noise so k == 0 gives exactly 0 and k == n exactly 1
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return Interval(low=low, high=high)


def percentile(
    values: Iterable[float | None], q: float, *, method: PercentileMethod = "linear"
) -> float:
    """The ``q``-th percentile (``0 <= q <= 100``) of the finite values; NaN when none.

    With the finite values sorted, ``v_0 <= ... <= v_{n-1}``:

    - ``linear`` (numpy's default, Hyndman–Fan type 7; bootstrap intervals, GBV
      noise floors, benchmark latencies): ``r = (n−1)·q/100``,
      ``v_⌊r⌋ + (r − ⌊r⌋)·(v_⌈r⌉ − v_⌊r⌋)``.
    - ``nearest_rank`` (load-test latency percentiles: always a measured value):
      ``v_{k−1}`` with ``k = ⌈q·n/100⌉`` clamped to ``[1, n]``.
    - ``lower`` (the auditor evaluation's F1 bootstrap): ``v_⌊(n−1)·q/100⌋``.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q must be in [0, 100], got {q}")
    xs = sorted(finite(values))
    if not xs:
        return NAN
    n = len(xs)
    if method == "linear":
        pos = (n - 1) * q / 100.0
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)
    if method == "nearest_rank":
        # ceil, not round(x + 0.5): Python rounds halves to even, which made p95 of 1..100 96.
        # q * n / 100, not q / 100 * n: 0.07 * 100 is 7.000000000000001, whose ceil is 8.
        rank = max(1, min(n, math.ceil(q * n / 100)))
        return xs[rank - 1]
    if method == "lower":
        return xs[int(q / 100.0 * (n - 1))]
    raise ValueError(f"unknown percentile method {method!r}")


def percentile_interval(
    values: Iterable[float | None],
    confidence: float = 0.95,
    *,
    method: PercentileMethod = "linear",
) -> Interval:
    """Central ``confidence`` interval of the finite ``values`` (percentile method).

    ``[P(α/2), P(100 − α/2)]`` with ``α = (1 − confidence)·100`` and ``P`` the
    ``percentile`` of ``method``; ``[NaN, NaN]`` when there is no finite value.
    """
    xs: Sequence[float] = finite(values)
    tail = (1.0 - confidence) / 2.0 * 100.0
    return Interval(
        low=percentile(xs, tail, method=method), high=percentile(xs, 100.0 - tail, method=method)
    )


def spans_zero(interval: Interval) -> bool | None:
    """Whether ``interval`` contains 0; None when it is undefined (a NaN end).

    NaN compares false both ways, so a bare ``not (low > 0 or high < 0)`` would
    call an interval that does not exist "spanning zero".
    """
    if not (math.isfinite(interval.low) and math.isfinite(interval.high)):
        return None
    return interval.low <= 0.0 <= interval.high


def standard_deviation(values: Iterable[float | None]) -> float:
    """Sample standard deviation ``sqrt(Σ(x − x̄)² / (n − 1))`` of the finite values.

    NaN with fewer than two finite values. Of bootstrap replicates, this is the
    bootstrap standard error of the statistic they replicate.
    """
    xs = finite(values)
    if len(xs) < 2:
        return NAN
    centre = sum(xs) / len(xs)
    return math.sqrt(sum((x - centre) ** 2 for x in xs) / (len(xs) - 1))


def normal_quantile(p: float) -> float:
    """Φ⁻¹(p), the standard normal quantile (``0 < p < 1``)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    return NormalDist().inv_cdf(p)


def minimum_detectable_effect(se: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true effect a two-sided level-``alpha`` test detects with ``power``.

    ``MDE = (z_{1−α/2} + z_{power}) · SE``; at α = 0.05 and 80 % power that is
    ``(1.95996 + 0.84162) · SE = 2.80158 · SE``. ``SE`` is the standard error of
    the effect's estimator (here: the bootstrap standard deviation of its
    replicates, ``standard_deviation``). NaN when ``SE`` is NaN, negative or 0:
    a zero SE (every replicate equal, as when a model writes the same integer for
    every decision) measures no variability at all, and an MDE of 0 would claim
    that any effect is detectable.

    Assumes the estimator is approximately normal and unbiased, with the same
    standard error under the alternative as under the null (a local alternative),
    and ignores the other tail (``≤ α/2``). An effect of the MDE's size or larger
    would be detected in ``power`` of repeated runs of this size; a null result
    therefore rules out (at that power) effects at least this large, and says
    nothing about smaller ones. For GBV, a standard deviation bounded below by 0
    and biased upwards near 0, the normal approximation is rough when GBV is near
    0 and the MDE is best read as an order of magnitude.
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"need 0 < alpha < 1 and 0 < power < 1, got {alpha}, {power}")
    if not math.isfinite(se) or se <= 0:
        return NAN
    return (normal_quantile(1.0 - alpha / 2.0) + normal_quantile(power)) * se


def newcombe_interval(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> Interval:
    """Newcombe's hybrid score interval for ``d = k2/n2 − k1/n1`` (independent samples).

    With Wilson intervals ``[l1, u1]`` of ``p1 = k1/n1`` and ``[l2, u2]`` of ``p2 = k2/n2``:
    ``low = d − sqrt((p2 − l2)² + (u1 − p1)²)``, ``high = d + sqrt((u2 − p2)² + (p1 − l1)²)``,
    clamped to [−1, 1] (method 10 of Newcombe 1998). ``n1 = 0`` or ``n2 = 0`` raises
    ``ValueError`` (no proportion to compare).
    """
    if n1 <= 0 or n2 <= 0:
        raise ValueError(f"need two non-empty samples, got n1={n1}, n2={n2}")
    p1, p2 = k1 / n1, k2 / n2
    ci1, ci2 = wilson_interval(k1, n1, z), wilson_interval(k2, n2, z)
    l1, u1, l2, u2 = ci1.low, ci1.high, ci2.low, ci2.high
    d = p2 - p1
    low = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return Interval(low=max(-1.0, low), high=min(1.0, high))


Clusters = Mapping[str, Mapping[str, float]]
"""``{cluster_id: {label: value}}``: e.g. a DIB context's score per group."""
Pooled = Mapping[str, Sequence[float]]
"""``{label: [values]}``: the clusters of one resample, pooled by label."""


def bootstrap_clusters(
    clusters: Clusters,
    statistic: Callable[[Pooled], float],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> list[float]:
    """``statistic`` of the pooled ``{label: values}`` of resamples of whole clusters.

    Clusters are drawn with replacement, ``len(clusters)`` per resample, with
    ``random.Random(seed).choices`` over the sorted ids; keeping a cluster together
    preserves its pairing. Empty with fewer than 2 clusters (no variability to
    resample). The draws depend on ``seed`` and the ids only, so two statistics with
    one seed see the same resamples.
    """
    ids = sorted(clusters)
    if len(ids) < 2:
        return []
    rng = random.Random(seed)
    out: list[float] = []
    for _ in range(n_resamples):
        pooled: dict[str, list[float]] = {}
        for cid in rng.choices(ids, k=len(ids)):
            for label, value in clusters[cid].items():
                pooled.setdefault(label, []).append(value)
        out.append(statistic(pooled))
    return out


def permute_within_clusters(
    clusters: Clusters,
    statistic: Callable[[Pooled], float],
    *,
    n_permutations: int = 1000,
    seed: int = 0,
) -> list[float]:
    """``statistic`` of the pooled values with labels shuffled within each cluster (the null).

    Per permutation, each cluster (sorted ids) shuffles its values over its labels with
    one ``random.Random(seed)``. Empty without clusters.
    """
    ids = sorted(clusters)
    if not ids:
        return []
    rng = random.Random(seed)
    null: list[float] = []
    for _ in range(n_permutations):
        pooled: dict[str, list[float]] = {}
        for cid in ids:
            labels = list(clusters[cid].keys())
            values = list(clusters[cid].values())
            rng.shuffle(values)
            for label, value in zip(labels, values, strict=True):
                pooled.setdefault(label, []).append(value)
        null.append(statistic(pooled))
    return null


def paired_cluster_draws(
    n_clusters: int, *, n_resamples: int, seed: int, stratum: str
) -> np.ndarray:
    """Cluster indices of ``n_resamples`` bootstrap resamples, ``[resample, draw]``.

    ``n_clusters`` draws with replacement per resample from
    ``numpy.random.default_rng([seed mod 2³², *stratum's UTF-8 bytes])``: the same
    draws for one (seed, stratum) whatever is computed from them, so every condition
    given them is resampled alike and differences between conditions stay paired.
    """
    rng = np.random.default_rng([seed % 2**32, *stratum.encode()])
    return rng.integers(0, n_clusters, size=(n_resamples, n_clusters))


def swap_patterns(n_clusters: int, *, n_permutations: int, seed: int) -> tuple[np.ndarray, bool]:
    """Which clusters swap their two conditions, ``[pattern, cluster]``, and whether exhaustive.

    When the ``2^C`` patterns of ``C`` clusters number no more than ``n_permutations``,
    every pattern once (``exact`` = True: a permutation p-value is then exact, never below
    ``2 / 2^C``); otherwise ``n_permutations`` patterns, each cluster swapped with
    probability ½ by ``numpy.random.default_rng([seed mod 2³², C])``.
    """
    exact = 2**n_clusters <= n_permutations
    if exact:
        codes = np.arange(2**n_clusters)[:, None] >> np.arange(n_clusters)[None, :]
        return (codes & 1).astype(bool), True
    rng = np.random.default_rng([seed % 2**32, n_clusters])
    return rng.random((n_permutations, n_clusters)) < 0.5, False


T = TypeVar("T")


def bootstrap_items(
    items: Sequence[T],
    statistic: Callable[[list[T]], float],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
) -> list[float]:
    """``statistic`` of ``n_resamples`` resamples of ``items`` (with replacement); NaN dropped.

    Each resample draws ``len(items)`` indices with ``random.Random(seed).randrange``.
    Empty without items.
    """
    if not items:
        return []
    rng = random.Random(seed)
    values: list[float] = []
    for _ in range(n_resamples):
        sample = [items[rng.randrange(len(items))] for _ in items]
        value = statistic(sample)
        if not math.isnan(value):
            values.append(value)
    return values


def ratio_of_sums_bootstrap(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> Interval:
    """Percentile bootstrap CI of ``Σ numerator / Σ denominator`` over paired units (blocks).

    Each resample draws ``B`` unit indices with replacement
    (``numpy.random.default_rng(seed).integers``) and computes ``Σnum[idx] / Σden[idx]``;
    the CI is the central ``confidence`` interval of those ratios (``percentile_interval``,
    linear). ``[NaN, NaN]`` with fewer than 2 units or unpaired lengths.
    """
    if len(numerator) < 2 or len(numerator) != len(denominator):
        return Interval.undefined()
    a, b = np.asarray(numerator, float), np.asarray(denominator, float)
    idx = np.random.default_rng(seed).integers(0, len(a), size=(n_resamples, len(a)))
    return percentile_interval((a[idx].sum(axis=1) / b[idx].sum(axis=1)).tolist(), confidence)


def mean_of_matched_replicates(replicates_by_part: Mapping[str, Sequence[float]]) -> list[float]:
    """Replicate i = ``(1/P) Σ_p r_p[i]`` over every part; NaN when any part's i-th is not finite.

    For parts resampled independently (DIB domains) this is a bootstrap of the mean
    over parts. As long as the shortest part; empty if there is no part or one is empty.
    """
    lists = list(replicates_by_part.values())
    if not lists or any(len(r) == 0 for r in lists):
        return []
    n = min(len(r) for r in lists)
    out: list[float] = []
    for i in range(n):
        values = [float(r[i]) for r in lists]
        out.append(NAN if any(not math.isfinite(v) for v in values) else sum(values) / len(values))
    return out


def mean_of_finite_replicates(reps: Mapping[str, np.ndarray]) -> np.ndarray:
    """Replicate i = the mean of ``reps[p][i]`` over the parts p finite in replicate i.

    NaN where no part is finite; empty without parts. (Simulation and dose runs: a
    domain whose resample has no two scored groups drops out of that replicate only.)
    """
    if not reps:
        return np.array([])
    stack = np.stack(list(reps.values()))
    ok = ~np.isnan(stack)
    n = ok.sum(axis=0)
    return np.where(n > 0, np.where(ok, stack, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan)
