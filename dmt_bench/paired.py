"""GBV of cells paired by shared DIB contexts: ΔGBV, ΔAGBV and MP with a joint bootstrap.

The simulation (conditions × checkpoints) and the dose study (dose cells) both ask
every cell the same DIB contexts; ``ReadoutData`` holds one readout of every cell
(point estimates and paired replicates) and gives each number with its CI
(``stats.Estimate``, written flat: ``stats.FlatEstimate``).
The functions are pure; ``ReadoutData`` computes once and answers lookups.

Notation (paper §4.3, §5.3, §6.3), for a condition c at checkpoint t:

- GBV_d(c, t): GBV of domain d's decisions (``dmt_bench.gbv``);
- ΔGBV_d(c, t) = GBV_d(c, t) − GBV_d(c, 0);
- ΔAGBV(c, t) = (1/|D'|) Σ_{d∈D'} ΔGBV_d(c, t), D' = domains where both GBVs are finite
  (the same set on both sides, so a domain that drops out cannot move the mean);
- MP(c, t) = (ΔAGBV(c, t) − ΔAGBV(base, t)) / |ΔAGBV(base, t)| × 100 (NaN when the base is 0);
- Δs̄(c, t) = (1/|D''|) Σ_{d∈D''} (s̄_d(c, t) − s̄_d(c, 0)): the mean shift of all groups
  (``gbv.mean_of_groups``), which moves when memory moves every group at once and GBV
  cannot see it; D'' = domains where both means are finite.

Uncertainty: every condition and checkpoint of one memory architecture is asked
the same DIB contexts, so one bootstrap replicate draws, per domain, one
multiset of context ids (with replacement) and applies it to every (condition,
t). Differences between checkpoints and between conditions are then paired, as
they are in the design. CIs are percentile intervals of the replicates; NaN
replicates (a domain without two scored groups) are dropped, and a statistic over
domains averages the domains finite in each replicate (``stats.mean_of_finite_replicates``).

Domains are resampled independently of each other, so a domain with a single
context (nothing to resample) has no replicates and no CI while every other
domain keeps its own. A statistic over every domain (AGBV, ΔAGBV, Δs̄, MP) has a
CI only when every domain in its point estimate has replicates (``covering``): a
CI over the other domains would not be the CI of that estimate.

Power: ``mde`` is the minimum detectable effect at 80 % power (α = 0.05) from the
bootstrap standard error of a paired difference (``stats.minimum_detectable_effect``).

Few clusters (report versions from ``dose-report-v2`` / ``sim-report-v4`` on): the
percentile bootstrap above undercovers with 2–4 contexts per domain, so every
cluster-level estimate a report states is also computed with the jackknife-t
interval (``stats.jackknife_t``): ``ReadoutData`` keeps, per cell and domain, the
statistic recomputed without each context in turn (``leave_one_out``, over the union
of the cells' context ids, so dropping a context drops it from every cell at once
and differences stay paired), and ``linear_jackknife`` gives any linear combination
Σ w·GBV_{cell, d} (a ΔGBV, a content contrast, a mitigation Δ(mode) − Δ(off), ΔAGBV)
its interval, t test and MDE on Σ_d (contexts_d − 1) degrees of freedom.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from dmt_bench import gbv as g
from dmt_bench.gbv import ContextScores
from dmt_bench.stats import (
    ClusterEstimate,
    Estimate,
    FlatEstimate,
    Interval,
    jackknife_t,
    mean,
    mean_of_finite_replicates,
    minimum_detectable_effect,
    paired_cluster_draws,
    percentile_interval,
    standard_deviation,
)

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


def mean_by_domain(contexts: DomainContexts) -> dict[str, float]:
    """s̄_d (the mean of the group means) of each domain."""
    return {d: g.mean_of_contexts(c) for d, c in contexts.items()}


Statistic = Literal["gbv", "mean"]
"""What a bootstrap replicate computes per domain: GBV_d or s̄_d."""


def _tensor(contexts: ContextScores, ids: Sequence[str], groups: Sequence[str]) -> np.ndarray:
    out = np.full((len(ids), len(groups)), np.nan)
    col = {grp: j for j, grp in enumerate(groups)}
    for i, cid in enumerate(ids):
        for grp, score in contexts.get(cid, {}).items():
            if score is not None and math.isfinite(score):
                out[i, col[grp]] = score
    return out


def _group_stats(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group means, which groups have one, and s̄ per replicate of ``samples[rep, ctx, grp]``."""
    present = ~np.isnan(samples)
    counts = present.sum(axis=1)
    sums = np.where(present, samples, 0.0).sum(axis=1)
    has = counts > 0
    means = np.divide(sums, counts, out=np.zeros_like(sums), where=has)
    k = has.sum(axis=1)
    centre = np.divide((means * has).sum(axis=1), k, out=np.zeros(len(k)), where=k > 0)
    return means, has, np.where(k > 0, centre, np.nan)


def gbv_rows(samples: np.ndarray) -> np.ndarray:
    """GBV per replicate of ``samples[rep, context, group]`` (NaN = missing); NaN if K < 2."""
    means, has, centre = _group_stats(samples)
    k = has.sum(axis=1)
    sq = np.where(has, (means - np.nan_to_num(centre)[:, None]) ** 2, 0.0).sum(axis=1)
    var = np.divide(sq, k, out=np.zeros(len(k)), where=k > 0)
    return np.where(k >= 2, np.sqrt(var), np.nan)


def _mean_rows(samples: np.ndarray) -> np.ndarray:
    """s̄ per replicate of ``samples[rep, context, group]``; NaN without a scored group."""
    return _group_stats(samples)[2]


def joint_bootstrap(
    cells: Mapping[Key, DomainContexts],
    *,
    n_resamples: int = 1000,
    seed: int = 0,
    statistic: Statistic = "gbv",
) -> dict[Key, dict[str, np.ndarray]]:
    """Replicates of ``statistic`` per key and domain, resampling contexts jointly across keys.

    Per domain, replicate r draws ``n`` ids from the union of the keys' context ids
    (``n`` = its size; ``stats.paired_cluster_draws`` with ``seed`` and the domain name),
    and every key pools its scores over those ids; the draws do not depend on
    ``statistic``, so GBV and s̄ replicates of one seed are paired too. A domain with
    fewer than two contexts gets no replicates (the others are unaffected); no
    resamples give none at all.
    """
    out: dict[Key, dict[str, np.ndarray]] = {k: {} for k in cells}
    if n_resamples <= 0:
        return out
    rows = gbv_rows if statistic == "gbv" else _mean_rows
    for d in sorted({d for c in cells.values() for d in c}):
        ids = sorted({cid for c in cells.values() for cid in c.get(d, {})})
        groups = sorted({grp for c in cells.values() for s in c.get(d, {}).values() for grp in s})
        if len(ids) < 2 or not groups:
            continue  # one context cannot be resampled: no variability to measure
        draws = paired_cluster_draws(len(ids), n_resamples=n_resamples, seed=seed, stratum=d)
        for key, contexts in cells.items():
            if d in contexts:
                out[key][d] = rows(_tensor(contexts[d], ids, groups)[draws])
    return out


def leave_one_out(
    cells: Mapping[Any, DomainContexts], *, statistic: Statistic = "gbv"
) -> dict[Any, dict[str, np.ndarray]]:
    """Per key and domain, ``statistic`` without each context in turn (delete-one jackknife).

    Per domain, the contexts are the union of the keys' context ids (sorted); value i
    drops context i from every key at once, so a difference of two keys is paired. A
    domain with fewer than two contexts gets none (no jackknife there).
    """
    out: dict[Key, dict[str, np.ndarray]] = {k: {} for k in cells}
    rows = gbv_rows if statistic == "gbv" else _mean_rows
    for d in sorted({d for c in cells.values() for d in c}):
        ids = sorted({cid for c in cells.values() for cid in c.get(d, {})})
        groups = sorted({grp for c in cells.values() for s in c.get(d, {}).values() for grp in s})
        if len(ids) < 2 or not groups:
            continue
        keep = np.array([[j for j in range(len(ids)) if j != i] for i in range(len(ids))])
        for key, contexts in cells.items():
            if d in contexts:
                out[key][d] = rows(_tensor(contexts[d], ids, groups)[keep])
    return out


Term = tuple[Any, str]
"""(cell key, domain) of one GBV_{cell, d} (or s̄) in a linear combination."""


def linear_jackknife(
    values: Mapping[Any, Mapping[str, float]],
    loo: Mapping[Any, Mapping[str, np.ndarray]],
    weights: Mapping[Term, float],
    *,
    confidence: float = 0.95,
) -> ClusterEstimate:
    """θ = Σ w·values[key][d] with its stratified jackknife-t interval (strata: domains).

    Dropping context i of domain d changes only the terms of d:
    ``θ_(d,i) = θ + Σ_{key} w_{key,d} · (loo[key][d][i] − values[key][d])``, and
    ``stats.jackknife_t`` turns those into the SE (summed over domains), the interval on
    ``Σ_d (G_d − 1)`` df, the t test and the MDE. Undefined when a term is not finite
    or a domain has no leave-one-out values (fewer than two contexts).
    """
    value = 0.0
    for (key, d), w in weights.items():
        value += w * values.get(key, {}).get(d, math.nan)
    if not math.isfinite(value):
        return ClusterEstimate(value=value)
    strata: dict[str, np.ndarray] = {}
    for (key, d), w in weights.items():
        if w == 0.0:
            continue
        arr = loo.get(key, {}).get(d)
        if arr is None:
            return ClusterEstimate(value=value)
        shift = w * (arr - values[key][d])
        strata[d] = strata[d] + shift if d in strata else value + shift
    return jackknife_t(
        value, {d: [float(x) for x in arr] for d, arr in strata.items()}, confidence=confidence
    )


def delta_weights(
    values: Mapping[Any, Mapping[str, float]], plus: Sequence[Any], minus: Sequence[Any]
) -> dict[Term, float]:
    """Weights of mean_d (Σ_{plus} v_{key,d} − Σ_{minus} v_{key,d}) over the domains finite in
    every key named (ΔAGBV and its differences; the same domains on both sides)."""
    keys = [*plus, *minus]
    domains = [
        d
        for d in (values[keys[0]] if keys else {})
        if all(math.isfinite(values[k].get(d, math.nan)) for k in keys)
    ]
    out: dict[Term, float] = {}
    for d in domains:
        for key, sign in [*((k, 1.0) for k in plus), *((k, -1.0) for k in minus)]:
            out[(key, d)] = out.get((key, d), 0.0) + sign / len(domains)
    return out


def domain_weights(plus: Sequence[Any], minus: Sequence[Any], d: str) -> dict[Term, float]:
    """Weights of Σ_{plus} v_{key,d} − Σ_{minus} v_{key,d} in one domain (a ΔGBV_d and its
    differences); a key on both sides cancels."""
    out: dict[Term, float] = {}
    for key, sign in [*((k, 1.0) for k in plus), *((k, -1.0) for k in minus)]:
        out[(key, d)] = out.get((key, d), 0.0) + sign
    return out


def finite_domains(values: Mapping[str, float]) -> list[str]:
    """The domains whose value is finite (the domains a point estimate averages)."""
    return [d for d, v in values.items() if math.isfinite(v)]


def covering(reps: Mapping[str, np.ndarray], domains: Iterable[str]) -> dict[str, np.ndarray]:
    """``reps`` of ``domains`` when every one of them has replicates, else ``{}`` (no CI)."""
    wanted = list(domains)
    if not wanted or any(d not in reps for d in wanted):
        return {}
    return {d: reps[d] for d in wanted}


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


def mde(replicates: np.ndarray) -> float:
    """Minimum detectable effect (80 % power, α = 0.05) of the statistic ``replicates`` bootstrap.

    ``(z_0.975 + z_0.8) · SE`` with SE the standard deviation of the finite replicates:
    for replicates of a paired difference (ΔAGBV, or ΔAGBV_c − ΔAGBV_base) it is the
    smallest true difference this design detects in 80 % of runs. NaN without replicates.
    """
    return minimum_detectable_effect(standard_deviation(float(x) for x in replicates))


def mitigation_percentage(delta_mitigated: float, delta_original: float) -> float:
    """MP (paper §6.3); see ``dmt_bench.gbv.mitigation_percentage``."""
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


def cell_of(value: float, ci: Interval) -> Estimate:
    """A point estimate and its interval (written ``{value, low, high}``, ``FlatEstimate``)."""
    return Estimate(value=float(value), ci=Interval(low=float(ci.low), high=float(ci.high)))


class CheckpointReadout(BaseModel):
    """One readout of one audit: AGBV and the mean s̄, and per domain GBV_d and s̄_d, with CIs."""

    model_config = ConfigDict(frozen=True)
    agbv: FlatEstimate
    mean: FlatEstimate
    """Mean over domains of s̄_d (the mean of the group means)."""
    gbv: dict[str, FlatEstimate]
    means: dict[str, FlatEstimate]
    agbv_jk: ClusterEstimate | None = None
    """AGBV with its jackknife-t interval (strata: domains); None in older results."""
    mean_jk: ClusterEstimate | None = None


Cells = Mapping[Any, DomainContexts]
Reps = Mapping[Any, Mapping[str, Any]]


class ReadoutData:
    """One readout of every cell (a (condition, t), a dose cell...): point estimates and
    paired bootstrap replicates (``joint_bootstrap`` over every cell at once)."""

    def __init__(self, cells: Cells, *, n_resamples: int, seed: int) -> None:
        n = n_resamples
        self.gbv = {key: gbv_by_domain(ctx) for key, ctx in cells.items()}
        self.mean = {key: mean_by_domain(ctx) for key, ctx in cells.items()}
        self.gbv_reps = joint_bootstrap(cells, n_resamples=n, seed=seed, statistic="gbv")
        self.mean_reps = joint_bootstrap(cells, n_resamples=n, seed=seed, statistic="mean")
        self.gbv_loo = leave_one_out(cells, statistic="gbv")
        self.mean_loo = leave_one_out(cells, statistic="mean")

    def jackknife(
        self, weights: Mapping[Term, float], statistic: Statistic = "gbv"
    ) -> ClusterEstimate:
        """``linear_jackknife`` of GBV (or s̄) terms of these cells (a ``ClusterEstimate``)."""
        if statistic == "gbv":
            return linear_jackknife(self.gbv, self.gbv_loo, weights)
        return linear_jackknife(self.mean, self.mean_loo, weights)

    def checkpoint(self, key: Any) -> CheckpointReadout:
        """AGBV, s̄ and their per-domain parts at one (condition, t)."""
        gbv, means = self.gbv[key], self.mean[key]
        agbv_reps = mean_of_finite_replicates(covering(self.gbv_reps[key], finite_domains(gbv)))
        mean_reps = mean_of_finite_replicates(covering(self.mean_reps[key], finite_domains(means)))
        empty = np.array([])
        return CheckpointReadout(
            agbv=cell_of(g.agbv(gbv, skip_nan=True), interval(agbv_reps)),
            mean=cell_of(g.agbv(means, skip_nan=True), interval(mean_reps)),
            gbv={d: cell_of(v, interval(self.gbv_reps[key].get(d, empty))) for d, v in gbv.items()},
            means={
                d: cell_of(v, interval(self.mean_reps[key].get(d, empty))) for d, v in means.items()
            },
            agbv_jk=self.jackknife(_level_weights(key, finite_domains(gbv))),
            mean_jk=self.jackknife(_level_weights(key, finite_domains(means)), "mean"),
        )

    def delta(self, key_t: Any, key_0: Any) -> tuple[float, Any]:
        """ΔAGBV of ``key_t`` against ``key_0`` and its replicates (empty: no CI)."""
        return _delta(self.gbv, self.gbv_reps, key_t, key_0)

    def shift(self, key_t: Any, key_0: Any) -> tuple[float, Any]:
        """Δs̄ (mean shift of all groups) of ``key_t`` against ``key_0`` and its replicates."""
        return _delta(self.mean, self.mean_reps, key_t, key_0)


def _level_weights(key: Any, domains: Sequence[str]) -> dict[Term, float]:
    """Weights of the mean over ``domains`` of one cell's statistic (AGBV, mean s̄)."""
    return {(key, d): 1.0 / len(domains) for d in domains}


def _delta(
    values: Mapping[Any, Mapping[str, float]], reps: Reps, key_t: Any, key_0: Any
) -> tuple[float, Any]:
    both = [d for d in finite_domains(values[key_t]) if d in finite_domains(values[key_0])]
    value = delta_agbv(values[key_t], values[key_0])
    d_reps = delta_replicates(covering(reps[key_t], both), covering(reps[key_0], both))
    return value, d_reps


def per_domain_deltas(
    values: Mapping[Any, Mapping[str, float]], reps: Reps, key_t: Any, key_0: Any
) -> dict[str, Estimate]:
    """Per domain, ``values[key_t] − values[key_0]`` with the paired replicates' CI."""
    out: dict[str, Estimate] = {}
    for d, v in values[key_t].items():
        r_t, r_0 = reps[key_t].get(d), reps[key_0].get(d)
        diff = r_t - r_0 if r_t is not None and r_0 is not None else np.array([])
        out[d] = cell_of(v - values[key_0].get(d, math.nan), interval(diff))
    return out
