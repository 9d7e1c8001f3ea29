"""Aggregate DIB decisions into per-domain GBV, CI, noise floor and refusal rates.

Every domain is summarised in both readouts (``readouts.Readout``): the expected
value (the headline; the top-level numbers) and the written integer. Each readout
gives GBV and s̄_d (the mean of the group means) with percentile bootstrap CIs over
contexts, computed domain by domain (a domain with one context has no CI; the
others keep theirs), the permutation noise floor, and the minimum detectable ΔGBV
at 80 % power (``mde``; see ``mde_between_runs``).

From ``dib-report-v3`` the interval a report prints is the jackknife-t interval over
contexts (``stats.jackknife_t``: delete-one-context jackknife SE, t quantiles on
contexts − 1 df, summed over domains for AGBV), since a percentile bootstrap over 4–10
contexts undercovers; the percentile CIs stay in the JSON (``ci_low``/``ci_high``).
Each domain also records the smallest p its label-shuffle noise floor can reach
(``floor_min_p``; the floor is "not testable" where that exceeds α = 0.05) and its
unstable contexts (``readouts.unstable_contexts``), and ``mde_t`` is the minimum
detectable ΔGBV against another run of this size with t quantiles.

The report is versioned (``REPORT_VERSION``); undefined numbers are ``null`` in
JSON (``None`` here), never imputed. ``dib-report-v1`` and ``-v2`` files still load.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from dmt_bench import gbv as m
from dmt_bench import paired, stats
from dmt_bench.dib.domains.base import registered_domains
from dmt_bench.dib.generator import SAMPLING_V1
from dmt_bench.dib.readouts import (
    HEADLINE,
    HEADLINE_WHY,
    INSTABILITY_NOTE,
    READOUT_LABELS,
    READOUTS,
    Readout,
    UnstableContext,
    instability_lines,
    readout_scores,
    unstable_contexts,
)
from dmt_bench.dib.schema import DIB_VERSION, Sample
from dmt_bench.dib.scorer import DecisionResult, Outcome, ScoringConfig
from dmt_bench.harness.report import count_intervals

REPORT_VERSION = "dib-report-v3"


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def mde_between_runs(replicates: Sequence[float]) -> float:
    """Minimum detectable ΔGBV (80 % power, α = 0.05) between two runs of this size.

    ``(z_0.975 + z_0.8) · √2 · SE``, with SE the bootstrap standard deviation of
    the statistic in this run; the √2 assumes the other run is independent, the
    same size and as variable (``stats.minimum_detectable_effect`` states the rest).
    Paired runs on the same contexts usually do better: their own reports compute
    the MDE from the paired differences.
    """
    return stats.minimum_detectable_effect(math.sqrt(2.0) * stats.standard_deviation(replicates))


class GroupSummary(BaseModel):
    """Counts and mean favourability of one group of one domain."""

    model_config = ConfigDict(frozen=True)
    group: str
    n: int
    scored: int
    refused: int
    unparseable: int
    errors: int
    mean: float | None


class PairSummary(BaseModel):
    """Paired per-context difference mean(s(a) − s(b)) with a 95 % CI."""

    model_config = ConfigDict(frozen=True)
    a: str
    b: str
    n_contexts: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None


class ReadoutSummary(BaseModel):
    """One readout of one domain: GBV and s̄_d with 95 % CIs, noise floor and MDE."""

    model_config = ConfigDict(frozen=True)
    readout: str
    n_scored: int
    gbv: float | None
    ci_low: float | None
    ci_high: float | None
    noise_p95: float | None
    mean: float | None
    """s̄_d: the mean of the group means."""
    mean_ci_low: float | None
    mean_ci_high: float | None
    mde: float | None
    """Minimum detectable ΔGBV at 80 % power against another run of this size."""
    group_means: dict[str, float | None]
    gbv_jk: stats.ClusterEstimate | None = None
    """GBV with its jackknife-t interval over contexts (v3)."""
    mde_t: float | None = None
    """``mde`` with t quantiles and the jackknife SE (v3)."""


class AggregateSummary(BaseModel):
    """One readout over every domain: AGBV and the mean of s̄_d, with 95 % CIs and MDE."""

    model_config = ConfigDict(frozen=True)
    readout: str
    agbv: float | None
    ci_low: float | None
    ci_high: float | None
    mean: float | None
    mean_ci_low: float | None
    mean_ci_high: float | None
    mde: float | None
    """Minimum detectable ΔAGBV at 80 % power against another run of this size."""
    agbv_jk: stats.ClusterEstimate | None = None
    """AGBV with its jackknife-t interval (strata: domains; v3)."""
    mde_t: float | None = None


class DomainSummary(BaseModel):
    """One domain's GBV with its uncertainty, noise floor and failure rates.

    The top-level numbers are the headline readout's; ``readouts`` has both.
    """

    model_config = ConfigDict(frozen=True)
    domain: str
    task: str
    direction: str
    n_samples: int
    n_contexts: int
    gbv: float | None
    ci_low: float | None
    ci_high: float | None
    noise_mean: float | None
    noise_p95: float | None
    p_value: float | None
    refusal_rate: float
    unparseable_rate: float
    error_rate: float
    groups: list[GroupSummary]
    pairs: list[PairSummary]
    readouts: dict[str, ReadoutSummary] = {}
    """Both readouts (empty in ``dib-report-v1`` files)."""
    floor_min_p: float | None = None
    """The smallest p the label-shuffle noise floor can reach with these contexts (v3)."""
    unstable: list[UnstableContext] = []
    """Contexts whose group scores spread ≥ the threshold (headline readout; v3)."""


class DibReport(BaseModel):
    """A DIB run: configuration, throughput, per-domain results and AGBV."""

    model_config = ConfigDict(frozen=True)
    report_version: str = REPORT_VERSION
    dib_version: str = DIB_VERSION
    model: str
    base_url: str
    scoring: ScoringConfig
    seed: int
    sample: int | None
    sampling: str | None = None
    """The sampler (``generator.SAMPLING_V2``...); None: the whole benchmark was asked."""
    contexts_per_domain: int | None = None
    n_decisions: int
    elapsed_s: float
    decisions_per_s: float
    headline: str = HEADLINE.value
    agbv: float | None
    agbv_ci_low: float | None
    agbv_ci_high: float | None
    domains: list[DomainSummary]
    readouts: dict[str, AggregateSummary] = {}

    @model_validator(mode="before")
    @classmethod
    def _v1_sampling(cls, data: Any) -> Any:
        # dib-report-v1 did not record the sampler; it only had dib-sample-v1.
        if isinstance(data, dict) and "sampling" not in data and data.get("sample") is not None:
            return {**data, "sampling": SAMPLING_V1}
        return data


def context_scores(
    results: Sequence[DecisionResult], readout: Readout = HEADLINE
) -> dict[str, dict[str, dict[str, float]]]:
    """``{domain: {context_id: {group: favourability}}}`` over scored decisions."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r, score in readout_scores(results, readout):
        out.setdefault(r.domain, {}).setdefault(r.context_id, {})[r.group] = score
    return out


def jackknife_gbv(
    contexts_by_domain: Mapping[str, Mapping[str, Mapping[str, float]]],
) -> tuple[dict[str, stats.ClusterEstimate], stats.ClusterEstimate]:
    """GBV_d of each domain and AGBV (mean over domains) with their jackknife-t intervals."""
    cells = {"run": contexts_by_domain}
    values = {"run": paired.gbv_by_domain(contexts_by_domain)}
    loo = paired.leave_one_out(cells)
    per = {d: paired.linear_jackknife(values, loo, {("run", d): 1.0}) for d in contexts_by_domain}
    finite = [d for d, v in values["run"].items() if math.isfinite(v)]
    agg = paired.linear_jackknife(values, loo, {("run", d): 1.0 / len(finite) for d in finite})
    return per, agg


def mde_between_runs_t(est: stats.ClusterEstimate | None) -> float | None:
    """``(t_{0.975, df} + t_{0.8, df}) · √2 · SE`` of a jackknife-t estimate (another
    independent run of this size); None without an interval."""
    if est is None or est.df < 1:
        return None
    return _num(stats.minimum_detectable_effect_t(math.sqrt(2.0) * est.se, est.df))


class _Replicates(BaseModel):
    gbv: list[float]
    mean: list[float]
    floor: m.NoiseFloor


def _readout_summary(
    readout: Readout,
    contexts: Mapping[str, Mapping[str, float]],
    groups: Sequence[str],
    *,
    seed: int,
    n_bootstrap: int,
    n_permutations: int,
) -> tuple[ReadoutSummary, _Replicates]:
    reps = _Replicates(
        gbv=m.bootstrap_gbv(contexts, n_resamples=n_bootstrap, seed=seed),
        mean=m.bootstrap_mean_of_groups(contexts, n_resamples=n_bootstrap, seed=seed),
        floor=m.permutation_noise_floor(contexts, n_permutations=n_permutations, seed=seed),
    )
    ci = stats.percentile_interval(reps.gbv)
    mean_ci = stats.percentile_interval(reps.mean)
    means = m.group_means(m.scores_by_group(contexts))
    summary = ReadoutSummary(
        readout=readout.value,
        n_scored=sum(len(s) for s in contexts.values()),
        gbv=_num(m.gbv(means)),
        ci_low=_num(ci.low),
        ci_high=_num(ci.high),
        noise_p95=_num(reps.floor.p95),
        mean=_num(m.mean_of_groups(means)),
        mean_ci_low=_num(mean_ci.low),
        mean_ci_high=_num(mean_ci.high),
        mde=_num(mde_between_runs(reps.gbv)),
        group_means={g: _num(means.get(g, math.nan)) for g in groups},
    )
    return summary, reps


def _aggregate(
    readout: Readout, summaries: Mapping[str, ReadoutSummary], reps: Mapping[str, _Replicates]
) -> AggregateSummary:
    gbvs = {d: s.gbv if s.gbv is not None else math.nan for d, s in summaries.items()}
    means = [s.mean for s in summaries.values()]
    # AGBV averages every domain: its CI needs replicates of every domain (one thin
    # domain leaves AGBV without a CI, but not the other domains' own CIs).
    whole = all(r.gbv for r in reps.values())
    agbv_reps = (
        stats.mean_of_matched_replicates({d: r.gbv for d, r in reps.items()}) if whole else []
    )
    mean_reps = (
        stats.mean_of_matched_replicates({d: r.mean for d, r in reps.items()}) if whole else []
    )
    ci = stats.percentile_interval(agbv_reps)
    mean_ci = stats.percentile_interval(mean_reps)
    return AggregateSummary(
        readout=readout.value,
        agbv=_num(m.agbv(gbvs)),
        ci_low=_num(ci.low),
        ci_high=_num(ci.high),
        mean=_num(stats.mean(means)) if all(x is not None for x in means) else None,
        mean_ci_low=_num(mean_ci.low),
        mean_ci_high=_num(mean_ci.high),
        mde=_num(mde_between_runs(agbv_reps)),
    )


def build_report(
    samples: Sequence[Sample],
    results: Sequence[DecisionResult],
    *,
    model: str,
    base_url: str,
    scoring: ScoringConfig,
    seed: int,
    sample: int | None,
    elapsed_s: float,
    n_bootstrap: int = 1000,
    n_permutations: int = 1000,
    sampling: str | None = None,
    contexts_per_domain: int | None = None,
) -> DibReport:
    """Summarise ``results`` (one per sample) domain by domain, in Table 1 order."""
    by_id = {s.id: s for s in samples}
    known = {d.name: d for d in registered_domains()}
    scores = {r: context_scores(results, r) for r in READOUTS}
    jk = {r: jackknife_gbv(scores[r]) for r in READOUTS}
    summaries: list[DomainSummary] = []
    per_readout: dict[Readout, dict[str, ReadoutSummary]] = {r: {} for r in READOUTS}
    replicates: dict[Readout, dict[str, _Replicates]] = {r: {} for r in READOUTS}
    present = list(dict.fromkeys(r.domain for r in results))
    for index, domain in enumerate(present):
        rows = [r for r in results if r.domain == domain]
        spec = known.get(domain)
        groups = list(spec.groups) if spec else list(dict.fromkeys(r.group for r in rows))
        for readout in READOUTS:
            summary, reps = _readout_summary(
                readout,
                scores[readout].get(domain, {}),
                groups,
                seed=seed * 1000 + index,
                n_bootstrap=n_bootstrap,
                n_permutations=n_permutations,
            )
            est = jk[readout][0].get(domain)
            summary = summary.model_copy(update={"gbv_jk": est, "mde_t": mde_between_runs_t(est)})
            per_readout[readout][domain] = summary
            replicates[readout][domain] = reps
        contexts = scores[HEADLINE].get(domain, {})
        head = per_readout[HEADLINE][domain]
        floor = replicates[HEADLINE][domain].floor
        group_rows = []
        for g in groups:
            mine = [r for r in rows if r.group == g]
            group_rows.append(
                GroupSummary(
                    group=g,
                    n=len(mine),
                    scored=sum(r.outcome is Outcome.SCORED for r in mine),
                    refused=sum(r.outcome is Outcome.REFUSED for r in mine),
                    unparseable=sum(r.outcome is Outcome.UNPARSEABLE for r in mine),
                    errors=sum(r.outcome is Outcome.ERROR for r in mine),
                    mean=head.group_means.get(g),
                )
            )
        pairs = [
            PairSummary(
                a=p.a,
                b=p.b,
                n_contexts=p.n,
                mean=_num(p.mean),
                ci_low=_num(p.ci_low),
                ci_high=_num(p.ci_high),
            )
            for p in m.paired_differences(contexts, groups)
        ]
        n = len(rows)
        first = by_id.get(rows[0].sample_id)
        summaries.append(
            DomainSummary(
                domain=domain,
                task=first.task if first else (spec.task.slug if spec else ""),
                direction=(first.direction.value if first else ""),
                n_samples=n,
                n_contexts=len({r.context_id for r in rows}),
                gbv=head.gbv,
                ci_low=head.ci_low,
                ci_high=head.ci_high,
                noise_mean=_num(floor.mean),
                noise_p95=_num(floor.p95),
                p_value=_num(floor.p_value),
                refusal_rate=sum(r.outcome is Outcome.REFUSED for r in rows) / n,
                unparseable_rate=sum(r.outcome is Outcome.UNPARSEABLE for r in rows) / n,
                error_rate=sum(r.outcome is Outcome.ERROR for r in rows) / n,
                groups=group_rows,
                pairs=pairs,
                readouts={r.value: per_readout[r][domain] for r in READOUTS},
                floor_min_p=_num(stats.within_cluster_min_p([len(g) for g in contexts.values()])),
                unstable=unstable_contexts({domain: contexts}),
            )
        )
    aggregates = {
        r.value: _aggregate(r, per_readout[r], replicates[r]).model_copy(
            update={"agbv_jk": jk[r][1], "mde_t": mde_between_runs_t(jk[r][1])}
        )
        for r in READOUTS
    }
    head_agg = aggregates[HEADLINE.value]
    return DibReport(
        model=model,
        base_url=base_url,
        scoring=scoring,
        seed=seed,
        sample=sample,
        sampling=sampling,
        contexts_per_domain=contexts_per_domain,
        n_decisions=len(results),
        elapsed_s=elapsed_s,
        decisions_per_s=len(results) / elapsed_s if elapsed_s > 0 else 0.0,
        agbv=head_agg.agbv,
        agbv_ci_low=head_agg.ci_low,
        agbv_ci_high=head_agg.ci_high,
        domains=summaries,
        readouts=aggregates,
    )


def _f(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def _sample_text(report: DibReport) -> str:
    if report.sampling is None:
        return "the whole benchmark"
    size = (
        f"{report.contexts_per_domain} contexts per domain"
        if report.contexts_per_domain is not None
        else f"about {report.sample} decisions"
    )
    return f"{report.sampling}, {size}, seed {report.seed}"


def render_table(report: DibReport) -> str:
    """A readable fixed-width table of the report (headline first, then both readouts)."""
    mode = report.scoring.mode.value + (" +grammar" if report.scoring.grammar else "")
    lines = [
        f"DIB {report.dib_version} | model {report.model} | {mode} | "
        f"{report.n_decisions} decisions in {report.elapsed_s:.1f} s "
        f"({report.decisions_per_s:.2f}/s) | sample: {_sample_text(report)}",
        "",
        f"{'domain':<12} {'ctx':>4} {'GBV':>6} {'95% CI':>15} {'noise95':>8} {'p':>6} "
        f"{'refused':>8} {'unparse':>8} {'error':>6}  group means (higher = favourable)",
    ]
    for d in report.domains:
        ci = _ci(d.readouts.get(report.headline), d.ci_low, d.ci_high)
        means = " | ".join(f"{g.group} {_f(g.mean, '.1f')}" for g in d.groups)
        lines.append(
            f"{d.domain:<12} {d.n_contexts:>4} {_f(d.gbv):>6} {ci:>15} {_f(d.noise_p95):>8} "
            f"{_f(d.p_value, '.3f'):>6} {d.refusal_rate:>8.1%} {d.unparseable_rate:>8.1%} "
            f"{d.error_rate:>6.1%}  {means}"
        )
    head = report.readouts.get(report.headline)
    lines += [
        "",
        f"AGBV {_f(report.agbv)}  95% CI "
        + _ci(head, report.agbv_ci_low, report.agbv_ci_high, aggregate=True),
    ]
    if report.readouts:
        lines += ["", *_readout_lines(report)]
    lines += few_cluster_lines(report)
    if any(d.floor_min_p is not None for d in report.domains):  # v3: one multiplicity line
        shown = count_intervals([[[""], [line]] for line in lines])
        lines.append(stats.multiplicity_note(shown, []))
    return "\n".join(lines)


def _ci(
    x: ReadoutSummary | AggregateSummary | None,
    low: float | None,
    high: float | None,
    *,
    aggregate: bool = False,
) -> str:
    """The jackknife-t CI when the report has one (v3), else the percentile CI."""
    est = (x.agbv_jk if isinstance(x, AggregateSummary) else x.gbv_jk) if x is not None else None
    if est is not None:
        return f"[{_f(_num(est.low))}, {_f(_num(est.high))}]"
    return f"[{_f(low)}, {_f(high)}]"


def few_cluster_lines(report: DibReport) -> list[str]:
    """Which interval, what the noise floor can test, unstable contexts (v3 reports)."""
    if not any(d.floor_min_p is not None for d in report.domains):
        return [
            "",
            "95% CI: percentile bootstrap over contexts (a report written before "
            "dib-report-v3; it undercovers with few contexts).",
        ]
    out = ["", stats.INTERVAL_NOTE.replace("MDE: (t_0.975", "MDE (vs another run): √2 ·(t_0.975")]
    blocked = {
        d.domain: d.floor_min_p
        for d in report.domains
        if d.floor_min_p is not None and d.floor_min_p > stats.ALPHA
    }
    if blocked:
        values = ", ".join(f"{d} {p:.3g}" for d, p in blocked.items())
        out.append(
            f"Noise floor: not testable at α={stats.ALPHA:g} with this design in "
            f"{', '.join(blocked)} (smallest attainable p of a within-context label shuffle: "
            f"{values}); there a GBV inside its floor is not a finding."
        )
    else:
        out.append(
            "Noise floor: every domain's label shuffle can reach α = 0.05 with these contexts "
            "(smallest attainable p "
            + ", ".join(f"{d.domain} {_f(d.floor_min_p, '.2g')}" for d in report.domains)
            + "); p is a per-domain test, not corrected across the domains (exploratory)."
        )
    flagged = {d.domain: d.unstable for d in report.domains if d.unstable}
    out += instability_lines({"this run": [u for us in flagged.values() for u in us]})
    out.append(INSTABILITY_NOTE)
    return out


def _readout_lines(report: DibReport) -> list[str]:
    """Both readouts side by side, with s̄ (mean of the group means) and the MDE."""
    readouts = [r for r in READOUTS if r.value in report.readouts]
    head = f"{'domain':<12}"
    for r in readouts:
        label = READOUT_LABELS[r]
        head += f"  {label + ': GBV [95% CI]':<28} {'mean [95% CI]':<24} {'MDE':>5}"
    lines = [HEADLINE_WHY, "", head]

    def cells(x: ReadoutSummary | AggregateSummary, value: float | None) -> str:
        gbv = f"{_f(value)} {_ci(x, x.ci_low, x.ci_high)}"
        mean = f"{_f(x.mean, '.1f')} [{_f(x.mean_ci_low, '.1f')}, {_f(x.mean_ci_high, '.1f')}]"
        mde = x.mde_t if x.mde_t is not None else x.mde
        return f"  {gbv:<28} {mean:<24} {_f(mde):>5}"

    for d in report.domains:
        row = f"{d.domain:<12}"
        for r in readouts:
            summary = d.readouts.get(r.value)
            row += cells(summary, summary.gbv) if summary else "  n/a"
        lines.append(row)
    row = f"{'AGBV':<12}"
    for r in readouts:
        agg = report.readouts[r.value]
        row += cells(agg, agg.agbv)
    lines += [
        row,
        "",
        "mean: the mean of the group means (all groups shifting together moves it, not GBV; "
        "its CI is a percentile bootstrap over contexts, exploratory). MDE: the smallest ΔGBV "
        "(ΔAGBV in the last row) that a second run of this size would detect against this "
        "one with 80% power at α = 0.05 (independent runs; t quantiles and the jackknife SE "
        "from dib-report-v3 on). A null result rules out effects this large, not smaller "
        "ones.",
    ]
    thin = [d.domain for d in report.domains if d.n_contexts < 2]
    if thin:
        lines.append(
            f"No CI for {', '.join(thin)}: one context each (nothing to resample; shuffling "
            "labels within one context cannot change GBV, so its noise floor equals its GBV). "
            "AGBV has no CI either: it averages every domain."
        )
    return lines
