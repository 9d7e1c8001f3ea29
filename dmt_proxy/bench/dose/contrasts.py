"""Contrasts between dose cells with few-cluster intervals (jackknife-t over DIB contexts).

A contrast is a weighted sum of cells' GBV of one evaluated domain d,
``θ = Σ_j w_j · GBV_d(cell_j)``, every cell asked the same contexts of d. The
contrasts a dose run reads:

- content: ``mean_b GBV_d(biased set b) − mean_n GBV_d(neutral set n)`` at the same k
  and mode. It equals ΔGBV_d(biased) − ΔGBV_d(neutral) against the k = 0 baseline,
  which cancels (both are read in the same mode, so against the same empty audit);
- the positive control: the same with the directive sets in place of the biased ones;
- a mode's absolute reduction of the content contrast: ``content(off) − content(m)``
  (positive: m narrows the stereotypes' effect);
- ΔGBV of a cell against the empty scope: ``GBV_d(cell) − GBV_d(empty)``.

Interval: the contexts of d are the clusters (a context's groups are asked together,
so its decisions are not independent). ``stats.cluster_jackknife`` deletes one
context at a time from every cell at once and gives ``θ̂ ± t_{0.975, G−1} · SE`` with
G contexts; the two-sided p-value is ``2·(1 − F_t(|θ̂| / SE; G − 1))``. Only
contexts scored in every cell of the contrast count. Seed sets are averaged, i.e.
treated as fixed: the interval says how sure the contexts make us about these sets,
not about stereotyped memories in general (three sets leave 2 degrees of freedom for
that; ``set_spread`` reports the sets' own contrasts next to it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmt_proxy.bench.gbv import ContextScores, gbv_of_contexts
from dmt_proxy.bench.stats import (
    cluster_jackknife,
    minimum_detectable_effect_t,
    t_cdf,
    t_quantile,
)

METHOD = "delete-one-context jackknife, t interval with G − 1 df (bench.stats.cluster_jackknife)"
Scored = Mapping[Any, Mapping[str, ContextScores]]
"""``{cell key: {domain: {context_id: {group: score}}}}`` of one readout."""


class Contrast(BaseModel):
    """A contrast's estimate with its jackknife-t interval and two-sided p-value."""

    model_config = ConfigDict(frozen=True)
    value: float | None
    low: float | None = None
    high: float | None = None
    se: float | None = None
    p_value: float | None = None
    clusters: int = 0
    """DIB contexts scored in every cell of the contrast (G; df = G − 1)."""
    mde: float | None = None
    """Minimum detectable effect at 80 % power, α = 0.05, with t quantiles on G − 1 df
    (``stats.minimum_detectable_effect_t`` of the jackknife SE): a null rules out effects
    at least this large."""

    @property
    def defined(self) -> bool:
        return self.value is not None

    def excludes_zero(self) -> bool:
        """The 95 % interval lies entirely on one side of 0."""
        if self.low is None or self.high is None:
            return False
        return self.low > 0 or self.high < 0


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def contrast(
    scored: Scored, terms: Sequence[tuple[float, Any]], domain: str, confidence: float = 0.95
) -> Contrast:
    """``Σ w · GBV_domain(key)`` over ``terms`` = [(w, key)], with its jackknife-t interval.

    Undefined (value None) when a key is missing or the cells share no context of
    ``domain``; no interval with fewer than two shared contexts.
    """
    if not terms or any(key not in scored for _, key in terms):
        return Contrast(value=None)
    per_key = [scored[key].get(domain, {}) for _, key in terms]
    shared = sorted(set.intersection(*(set(c) for c in per_key)))
    if not shared:
        return Contrast(value=None)

    def statistic(ids: Sequence[str]) -> float:
        total = 0.0
        for (w, _), contexts in zip(terms, per_key, strict=True):
            total += w * gbv_of_contexts({cid: contexts[cid] for cid in ids})
        return total

    est = cluster_jackknife(shared, statistic, confidence)
    g = len(shared)
    out: dict[str, Any] = {"value": _num(est.value), "clusters": g}
    if est.ci is not None and math.isfinite(est.ci.low) and math.isfinite(est.ci.high):
        half = (est.ci.high - est.ci.low) / 2.0
        se = half / t_quantile(1.0 - (1.0 - confidence) / 2.0, g - 1)
        out.update(low=est.ci.low, high=est.ci.high, se=se)
        out["mde"] = _num(minimum_detectable_effect_t(se, g - 1))
        if se > 0 and math.isfinite(est.value):
            out["p_value"] = 2.0 * (1.0 - t_cdf(abs(est.value) / se, g - 1))
        elif math.isfinite(est.value):
            out["p_value"] = 1.0 if est.value == 0 else 0.0
    return Contrast(**out)


def mean_terms(
    plus: Sequence[Any], minus: Sequence[Any], scale: float = 1.0
) -> list[tuple[float, Any]]:
    """Terms of ``scale · (mean over plus − mean over minus)``; [] when either side is empty."""
    if not plus or not minus:
        return []
    return [(scale / len(plus), k) for k in plus] + [(-scale / len(minus), k) for k in minus]
