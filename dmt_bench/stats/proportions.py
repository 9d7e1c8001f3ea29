"""Paired proportions: the same items answered under two conditions, right or wrong.

Two conditions that ask the same questions are compared question by question, not as
two independent samples: the questions both get right (or both miss) say nothing about
the difference, only the discordant ones do. For correct flags ``a`` and ``b`` over the
same n items, with ``only_a`` items right under A alone and ``only_b`` right under B
alone:

- the difference ``d = p_a − p_b = (only_a − only_b) / n``;
- its interval: Newcombe's (1998, *Statistics in Medicine* 17, 2635–2650) method 10,
  the Wilson intervals of the two marginal proportions combined with the correlation φ
  of the 2 × 2 table (with his continuity adjustment of φ's numerator);
- the test: McNemar's exact two-sided test, the discordant items' split against
  Binomial(only_a + only_b, ½) (p = 1 with no discordant item);
- the MDE: ``(z_{1−α/2} + z_power) · sqrt(ψ / n)`` with ψ the observed share of
  discordant items, the standard error of ``d`` under the null; the smallest difference
  a run of this size and discordance detects with that power.

A unit test checks the interval's coverage by simulation at n = 200.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dmt_bench.stats.clusters import ALPHA, POWER
from dmt_bench.stats.core import (
    NAN,
    Interval,
    minimum_detectable_effect,
    normal_quantile,
    wilson_interval,
)


class PairedCounts(BaseModel):
    """The paired 2 × 2 table of two conditions over the same items."""

    model_config = ConfigDict(frozen=True)
    both: int
    only_a: int
    only_b: int
    neither: int

    @property
    def n(self) -> int:
        return self.both + self.only_a + self.only_b + self.neither


def paired_counts(a: Sequence[bool], b: Sequence[bool]) -> PairedCounts:
    """Tabulate two equally long sequences of correct flags (item i under A and under B)."""
    if len(a) != len(b):
        raise ValueError(f"paired flags need equal lengths, got {len(a)} and {len(b)}")
    pairs = list(zip(a, b, strict=True))
    return PairedCounts(
        both=sum(x and y for x, y in pairs),
        only_a=sum(x and not y for x, y in pairs),
        only_b=sum(y and not x for x, y in pairs),
        neither=sum(not x and not y for x, y in pairs),
    )


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """McNemar's exact two-sided p: 2 · P(X ≤ min) for X ~ Binomial(only_a + only_b, ½)."""
    m = only_a + only_b
    if m == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(m, i) for i in range(k + 1)) / 2.0**m
    return min(1.0, 2.0 * tail)


def paired_interval(t: PairedCounts, z: float) -> Interval:
    """Newcombe's method-10 interval for ``p_a − p_b`` (NaN ends for an empty table)."""
    n = t.n
    if n == 0:
        return Interval.undefined()
    right_a, right_b = t.both + t.only_a, t.both + t.only_b
    p1, p2 = right_a / n, right_b / n
    ci1, ci2 = wilson_interval(right_a, n, z), wilson_interval(right_b, n, z)
    margins = right_a * (n - right_a) * right_b * (n - right_b)
    phi = 0.0
    if margins > 0:
        cross = t.both * t.neither - t.only_a * t.only_b
        adjusted = cross - n / 2 if cross > n / 2 else (cross if cross < 0 else 0.0)
        phi = adjusted / math.sqrt(margins)
    d = p1 - p2
    dl1, du1, dl2, du2 = p1 - ci1.low, ci1.high - p1, p2 - ci2.low, ci2.high - p2
    low = d - math.sqrt(max(0.0, dl1**2 - 2 * phi * dl1 * du2 + du2**2))
    high = d + math.sqrt(max(0.0, dl2**2 - 2 * phi * dl2 * du1 + du1**2))
    return Interval(low=max(-1.0, low), high=min(1.0, high))


class PairedDifference(BaseModel):
    """``p_a − p_b`` over the same items: interval, exact test and MDE."""

    model_config = ConfigDict(frozen=True)
    counts: PairedCounts
    difference: float
    low: float
    high: float
    p_value: float
    mde: float


def paired_difference(
    a: Sequence[bool], b: Sequence[bool], *, alpha: float = ALPHA, power: float = POWER
) -> PairedDifference:
    """Everything the report says about A against B on the same items."""
    t = paired_counts(a, b)
    n = t.n
    ci = paired_interval(t, z=normal_quantile(1.0 - alpha / 2.0))
    discordant = (t.only_a + t.only_b) / n if n else NAN
    se = math.sqrt(discordant / n) if n else NAN
    return PairedDifference(
        counts=t,
        difference=(t.only_a - t.only_b) / n if n else NAN,
        low=ci.low,
        high=ci.high,
        p_value=mcnemar_exact_p(t.only_a, t.only_b),
        mde=minimum_detectable_effect(se, alpha=alpha, power=power),
    )
