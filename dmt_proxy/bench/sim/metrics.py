"""Longitudinal metrics: ΔGBV, ΔAGBV and MP with a joint paired bootstrap. Pure functions.

Notation (paper §4.3, §5.3, §6.3), for a condition c at checkpoint t:

- GBV_d(c, t): GBV of domain d's decisions (``dmt_proxy.bench.gbv``);
- ΔGBV_d(c, t) = GBV_d(c, t) − GBV_d(c, 0);
- ΔAGBV(c, t) = (1/|D'|) Σ_{d∈D'} ΔGBV_d(c, t), D' = domains where both GBVs are finite
  (the same set on both sides, so a domain that drops out cannot move the mean);
- MP(c, t) = (ΔAGBV(c, t) − ΔAGBV(base, t)) / |ΔAGBV(base, t)| × 100 (NaN when the base is 0).

Uncertainty: every condition and checkpoint of one memory architecture is asked
the same DIB contexts, so one bootstrap replicate draws, per domain, one
multiset of context ids (with replacement) and applies it to every (condition,
t). Differences between checkpoints and between conditions are then paired, as
they are in the design. CIs are percentile intervals of the replicates; NaN
replicates (a domain without two scored groups) are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence

import numpy as np

from dmt_proxy.bench import gbv as g
from dmt_proxy.bench.gbv import ContextScores
from dmt_proxy.bench.stats import Interval, mean, percentile_interval

Key = Hashable
DomainContexts = Mapping[str, ContextScores]
"""``{domain: {context_id: {group: score}}}`` of one (condition, t)."""


def delta_agbv(gbv_t: Mapping[str, float], gbv_0: Mapping[str, float]) -> float:
    """ΔAGBV = mean over domains finite at both checkpoints of GBV_t − GBV_0; NaN if none."""
    diffs = [
        gbv_t[d] - gbv_0[d]
        for d in gbv_t
        if d in gbv_0 and math.isfinite(gbv_t[d]) and math.isfinite(gbv_0[d])
    ]
    return mean(diffs)


def gbv_by_domain(contexts: DomainContexts) -> dict[str, float]:
    """GBV_d of each domain's pooled group means."""
    return {d: g.gbv_of_contexts(c) for d, c in contexts.items()}


def _tensor(contexts: ContextScores, ids: Sequence[str], groups: Sequence[str]) -> np.ndarray:
    out = np.full((len(ids), len(groups)), np.nan)
    col = {grp: j for j, grp in enumerate(groups)}
    for i, cid in enumerate(ids):
        for grp, score in contexts.get(cid, {}).items():
            if score is not None and math.isfinite(score):
                out[i, col[grp]] = score
    return out


def _gbv_rows(samples: np.ndarray) -> np.ndarray:
    """GBV per replicate of ``samples[rep, context, group]`` (NaN = missing); NaN if K < 2."""
    present = ~np.isnan(samples)
    counts = present.sum(axis=1)
    sums = np.where(present, samples, 0.0).sum(axis=1)
    has = counts > 0
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=has)
    k = has.sum(axis=1)
    centre = np.divide((means * has).sum(axis=1), k, out=np.zeros(len(k)), where=k > 0)
    sq = np.where(has, (means - centre[:, None]) ** 2, 0.0).sum(axis=1)
    var = np.divide(sq, k, out=np.zeros(len(k)), where=k > 0)
    return np.where(k >= 2, np.sqrt(var), np.nan)


def joint_bootstrap(
    cells: Mapping[Key, DomainContexts], *, n_resamples: int = 1000, seed: int = 0
) -> dict[Key, dict[str, np.ndarray]]:
    """GBV replicates per key and domain, resampling context ids jointly across keys.

    Per domain, replicate r draws ``n`` ids from the union of the keys' context ids
    (``n`` = its size) with one generator seeded by ``seed`` and the domain name,
    and every key pools its scores over those ids. No replicates (empty mappings) for
    no resamples, or when a domain has fewer than two contexts.
    """
    if n_resamples <= 0:
        return {k: {} for k in cells}
    domains = sorted({d for c in cells.values() for d in c})
    if any(len({cid for c in cells.values() for cid in c.get(d, {})}) < 2 for d in domains):
        # One context cannot be resampled: no variability to measure, so no CI at all
        # (a CI over the other domains only would not be the CI of the estimate).
        return {k: {} for k in cells}
    out: dict[Key, dict[str, np.ndarray]] = {k: {} for k in cells}
    for d in domains:
        ids = sorted({cid for c in cells.values() for cid in c.get(d, {})})
        groups = sorted({grp for c in cells.values() for s in c.get(d, {}).values() for grp in s})
        if not ids or not groups:
            continue
        rng = np.random.default_rng([seed % 2**32, *d.encode()])
        draws = rng.integers(0, len(ids), size=(n_resamples, len(ids)))
        for key, contexts in cells.items():
            if d in contexts:
                out[key][d] = _gbv_rows(_tensor(contexts[d], ids, groups)[draws])
    return out


def delta_replicates(
    reps_t: Mapping[str, np.ndarray], reps_0: Mapping[str, np.ndarray]
) -> np.ndarray:
    """ΔAGBV per replicate (domains finite at both, per replicate); NaN where none is."""
    domains = [d for d in reps_t if d in reps_0]
    if not domains:
        return np.array([])
    diff = np.stack([reps_t[d] - reps_0[d] for d in domains])
    ok = ~np.isnan(diff)
    n = ok.sum(axis=0)
    total = np.where(ok, diff, 0.0).sum(axis=0)
    return np.where(n > 0, total / np.maximum(n, 1), np.nan)


def agbv_replicates(reps: Mapping[str, np.ndarray]) -> np.ndarray:
    """AGBV per replicate over the domains finite in that replicate."""
    if not reps:
        return np.array([])
    stack = np.stack(list(reps.values()))
    ok = ~np.isnan(stack)
    n = ok.sum(axis=0)
    return np.where(n > 0, np.where(ok, stack, 0.0).sum(axis=0) / np.maximum(n, 1), np.nan)


def mp_replicates(mitigated: np.ndarray, base: np.ndarray) -> np.ndarray:
    """MP per replicate, NaN where the base replicate is 0 or NaN."""
    if mitigated.size == 0 or base.size == 0:
        return np.array([])
    scale = np.abs(base)
    ok = (scale > 0) & ~np.isnan(base) & ~np.isnan(mitigated)
    return np.where(ok, (mitigated - base) / np.where(ok, scale, 1.0) * 100.0, np.nan)


def interval(replicates: np.ndarray, confidence: float = 0.95) -> Interval:
    """Percentile interval of the finite replicates (NaN ends when there are none)."""
    return percentile_interval([float(x) for x in replicates], confidence)


def mitigation_percentage(delta_mitigated: float, delta_original: float) -> float:
    """MP (paper §6.3); see ``dmt_proxy.bench.gbv.mitigation_percentage``."""
    return g.mitigation_percentage(delta_mitigated, delta_original)


def positive_off_diagonal(matrix: Mapping[str, Mapping[str, float]]) -> tuple[int, int]:
    """(cells with ΔGBV > 0, finite cells) off the diagonal of ``{source: {evaluated: Δ}}``."""
    positive = total = 0
    for source, row in matrix.items():
        for evaluated, value in row.items():
            if evaluated == source or not math.isfinite(value):
                continue
            total += 1
            positive += value > 0
    return positive, total
