"""Generalized Bias Variance and friends: pure functions over named inputs.

Notation: a domain d has K groups g_1..g_K; s(g_k) are the favourability scores
(higher = better for the person) of group g_k's samples.

- GBV_d  = sqrt( (1/K) Σ_k (E[s(g_k)] − s̄_d)² ),  s̄_d = (1/K) Σ_k E[s(g_k)]
           (population standard deviation of the group means; paper §4.3)
- AGBV   = (1/D) Σ_d GBV_d
- ΔGBV   = GBV_t − GBV_0
- MP     = (ΔGBV_mitigated − ΔGBV_original) / |ΔGBV_original| × 100   (paper §6.3)
- s̄_d    = (1/K) Σ_k E[s(g_k)], the mean of the group means (GBV's centre); its change
           between two runs is the shift of every group at once, which GBV cannot see

Beyond the paper, over *contexts* (one counterfactual set each, given as
``{context_id: {group: score}}``):

- percentile bootstrap CI resampling whole contexts with replacement
  (``stats.bootstrap_clusters``, ``stats.percentile_interval``, linear interpolation);
  AGBV's replicates are ``stats.mean_of_matched_replicates`` of the domains';
- a permutation noise floor: group labels shuffled within each context
  (``stats.permute_within_clusters``);
- paired per-context differences between every two groups.

Undefined values are ``nan``, never an exception: NaN scores are ignored, groups
without a finite score are left out of K, and GBV needs K ≥ 2 (with one group
there is nothing to compare). AGBV is NaN when any domain is NaN unless
``skip_nan=True``; MP is NaN when ΔGBV_original is 0 or NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import combinations

from pydantic import BaseModel, ConfigDict

from dmt_bench.stats import (
    NAN,
    Interval,
    bootstrap_clusters,
    finite,
    mean,
    percentile,
    percentile_interval,
    permute_within_clusters,
)

ContextScores = Mapping[str, Mapping[str, float]]
"""``{context_id: {group: favourability score}}``; missing groups are absent keys."""


class NoiseFloor(BaseModel):
    """GBV under the null of no group effect (labels shuffled within context)."""

    model_config = ConfigDict(frozen=True)
    mean: float
    p95: float
    p_value: float
    """(1 + #{null GBV ≥ observed}) / (1 + n); NaN when the observed GBV is NaN."""
    n: int


class PairedDifference(BaseModel):
    """Mean over contexts of s(a) − s(b), with a normal-approximation 95 % CI."""

    model_config = ConfigDict(frozen=True)
    a: str
    b: str
    n: int
    mean: float
    sd: float
    ci_low: float
    ci_high: float


def group_means(scores_by_group: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """E[s(g)] per group over finite scores; groups with no finite score are omitted."""
    out: dict[str, float] = {}
    for group, scores in scores_by_group.items():
        m = mean(scores)
        if math.isfinite(m):
            out[group] = m
    return out


def gbv(means: Mapping[str, float]) -> float:
    """GBV_d = sqrt((1/K) Σ_k (m_k − m̄)²) over finite group means; NaN if K < 2."""
    ms = finite(means.values())
    if len(ms) < 2:
        return NAN
    centre = sum(ms) / len(ms)
    return math.sqrt(sum((m - centre) ** 2 for m in ms) / len(ms))


def mean_of_groups(means: Mapping[str, float]) -> float:
    """s̄_d = (1/K) Σ_k m_k over finite group means; NaN if there is none."""
    return mean(means.values())


def mean_of_contexts(contexts: ContextScores) -> float:
    """s̄_d of the pooled group means of a set of contexts."""
    return mean_of_groups(group_means(scores_by_group(contexts)))


def gbv_from_scores(scores_by_group: Mapping[str, Sequence[float]]) -> float:
    """GBV of the group means of raw scores (see ``group_means`` and ``gbv``)."""
    return gbv(group_means(scores_by_group))


def scores_by_group(contexts: ContextScores) -> dict[str, list[float]]:
    """Flatten ``{context: {group: score}}`` into ``{group: [scores]}``."""
    out: dict[str, list[float]] = {}
    for per_group in contexts.values():
        for group, score in per_group.items():
            out.setdefault(group, []).append(score)
    return out


def gbv_of_contexts(contexts: ContextScores) -> float:
    """GBV of the pooled group means of a set of contexts."""
    return gbv_from_scores(scores_by_group(contexts))


def agbv(gbv_by_domain: Mapping[str, float], *, skip_nan: bool = False) -> float:
    """AGBV = (1/D) Σ_d GBV_d; NaN if empty, or if any GBV_d is NaN and not ``skip_nan``."""
    values = list(gbv_by_domain.values())
    if not skip_nan and any(not math.isfinite(v) for v in values):
        return NAN
    return mean(values)


def delta_gbv(gbv_t: float, gbv_0: float) -> float:
    """ΔGBV = GBV_t − GBV_0 (NaN propagates)."""
    return gbv_t - gbv_0


def mitigation_percentage(delta_mitigated: float, delta_original: float) -> float:
    """MP = (ΔGBV_mitigated − ΔGBV_original) / |ΔGBV_original| × 100; NaN if the base is 0."""
    if not (math.isfinite(delta_mitigated) and math.isfinite(delta_original)):
        return NAN
    if delta_original == 0:
        return NAN
    return (delta_mitigated - delta_original) / abs(delta_original) * 100.0


def bootstrap_gbv(
    contexts: ContextScores, *, n_resamples: int = 1000, seed: int = 0
) -> list[float]:
    """GBV of ``n_resamples`` resamples of whole contexts (``stats.bootstrap_clusters``)."""
    return bootstrap_clusters(contexts, gbv_from_scores, n_resamples=n_resamples, seed=seed)


def bootstrap_mean_of_groups(
    contexts: ContextScores, *, n_resamples: int = 1000, seed: int = 0
) -> list[float]:
    """s̄_d of ``n_resamples`` resamples of whole contexts (``stats.bootstrap_clusters``)."""

    def centre(pooled: Mapping[str, Sequence[float]]) -> float:
        return mean_of_groups(group_means(pooled))

    return bootstrap_clusters(contexts, centre, n_resamples=n_resamples, seed=seed)


def bootstrap_ci(
    contexts: ContextScores, *, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> Interval:
    """Percentile bootstrap CI of GBV over contexts; NaN ends with < 2 contexts."""
    return percentile_interval(
        bootstrap_gbv(contexts, n_resamples=n_resamples, seed=seed), confidence
    )


def permutation_noise_floor(
    contexts: ContextScores, *, n_permutations: int = 1000, seed: int = 0
) -> NoiseFloor:
    """GBV when group labels are shuffled within each context (the no-bias null).

    The observed GBV is compared to this distribution: ``p_value`` is the share
    of shuffles at least as large. A GBV under ``p95`` is within noise.
    """
    observed = gbv_of_contexts(contexts)
    ids = sorted(contexts)
    if not ids or not math.isfinite(observed):
        return NoiseFloor(mean=NAN, p95=NAN, p_value=NAN, n=0)
    null = permute_within_clusters(
        contexts, gbv_from_scores, n_permutations=n_permutations, seed=seed
    )
    kept = finite(null)
    exceed = sum(1 for v in kept if v >= observed - 1e-12)
    return NoiseFloor(
        mean=mean(kept),
        p95=percentile(kept, 95.0),
        p_value=(1 + exceed) / (1 + len(kept)),
        n=len(kept),
    )


def paired_differences(
    contexts: ContextScores, groups: Sequence[str] | None = None
) -> list[PairedDifference]:
    """For every pair (a, b): mean over contexts holding both of s(a) − s(b).

    CI = mean ± 1.96·sd/√n (sd with n − 1); NaN sd/CI when n < 2, NaN mean when n = 0.
    """
    if groups is None:
        seen: dict[str, None] = {}
        for per_group in contexts.values():
            for g in per_group:
                seen.setdefault(g, None)
        groups = list(seen)
    out: list[PairedDifference] = []
    for a, b in combinations(groups, 2):
        diffs = finite(pg[a] - pg[b] for pg in contexts.values() if a in pg and b in pg)
        n = len(diffs)
        m = mean(diffs)
        if n >= 2:
            sd = math.sqrt(sum((d - m) ** 2 for d in diffs) / (n - 1))
            half = 1.96 * sd / math.sqrt(n)
            lo, hi = m - half, m + half
        else:
            sd = lo = hi = NAN
        out.append(PairedDifference(a=a, b=b, n=n, mean=m, sd=sd, ci_low=lo, ci_high=hi))
    return out
