"""The statistics every benchmark shares: one interval type, Wilson, percentiles, means.

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
from collections.abc import Iterable, Sequence
from statistics import NormalDist
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

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
