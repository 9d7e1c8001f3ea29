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
so its decisions are not independent). The one jackknife-t computation of the bench
(``paired.leave_one_out`` and ``paired.linear_jackknife``, i.e. ``stats.jackknife_t``,
the same the per-cell ``*_jk`` fields of ``results.py`` use) deletes one context at a
time from every cell at once and gives ``θ̂ ± t_{0.975, G−1} · SE`` with G contexts, the
two-sided t test and the MDE, as a ``stats.ClusterEstimate`` (undefined numbers NaN,
``df = G − 1``). Only contexts scored in every cell of the contrast count. Seed sets
are averaged, i.e. treated as fixed: the interval says how sure the contexts make us
about these sets, not about stereotyped memories in general (three sets leave 2
degrees of freedom for that).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dmt_bench import paired
from dmt_bench.gbv import ContextScores
from dmt_bench.stats import ClusterEstimate

METHOD = (
    "delete-one-context jackknife, t interval with G − 1 df "
    "(bench.paired.linear_jackknife, bench.stats.jackknife_t)"
)
Scored = Mapping[Any, Mapping[str, ContextScores]]
"""``{cell key: {domain: {context_id: {group: score}}}}`` of one readout."""


def contexts_of(est: ClusterEstimate) -> int:
    """G, the DIB contexts of a one-domain contrast's interval (``df + 1``; 0 without one)."""
    return est.df + 1 if est.df > 0 else 0


def defined(est: ClusterEstimate) -> bool:
    """The contrast has a finite point estimate."""
    return math.isfinite(est.value)


def contrast(
    scored: Scored, terms: Sequence[tuple[float, Any]], domain: str, confidence: float = 0.95
) -> ClusterEstimate:
    """``Σ w · GBV_domain(key)`` over ``terms`` = [(w, key)], with its jackknife-t interval.

    Undefined (NaN value) when a key is missing or the cells share no context of
    ``domain``; no interval (``df = 0``) with fewer than two shared contexts.
    """
    if not terms or any(key not in scored for _, key in terms):
        return ClusterEstimate(value=math.nan)
    keys = list(dict.fromkeys(key for _, key in terms))
    per_key = {key: scored[key].get(domain, {}) for key in keys}
    shared = sorted(set.intersection(*(set(c) for c in per_key.values())))
    if not shared:
        return ClusterEstimate(value=math.nan)
    cells = {key: {domain: {cid: per_key[key][cid] for cid in shared}} for key in keys}
    values = {key: paired.gbv_by_domain(c) for key, c in cells.items()}
    weights: dict[paired.Term, float] = {}
    for w, key in terms:
        weights[(key, domain)] = weights.get((key, domain), 0.0) + w
    return paired.linear_jackknife(
        values, paired.leave_one_out(cells), weights, confidence=confidence
    )


def mean_terms(
    plus: Sequence[Any], minus: Sequence[Any], scale: float = 1.0
) -> list[tuple[float, Any]]:
    """Terms of ``scale · (mean over plus − mean over minus)``; [] when either side is empty."""
    if not plus or not minus:
        return []
    return [(scale / len(plus), k) for k in plus] + [(-scale / len(minus), k) for k in minus]
