"""Aggregate DIB decisions into per-domain GBV, CI, noise floor and refusal rates.

The report is versioned (``REPORT_VERSION``); undefined numbers are ``null`` in
JSON (``None`` here), never imputed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dmt_proxy.bench import gbv as m
from dmt_proxy.bench import stats
from dmt_proxy.bench.dib.domains.base import registered_domains
from dmt_proxy.bench.dib.schema import DIB_VERSION, Sample
from dmt_proxy.bench.dib.scorer import DecisionResult, Outcome, ScoringConfig

REPORT_VERSION = "dib-report-v1"


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


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


class DomainSummary(BaseModel):
    """One domain's GBV with its uncertainty, noise floor and failure rates."""

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
    n_decisions: int
    elapsed_s: float
    decisions_per_s: float
    agbv: float | None
    agbv_ci_low: float | None
    agbv_ci_high: float | None
    domains: list[DomainSummary]


def context_scores(
    results: Sequence[DecisionResult],
) -> dict[str, dict[str, dict[str, float]]]:
    """``{domain: {context_id: {group: favourability}}}`` over scored decisions."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in results:
        if r.outcome is Outcome.SCORED and r.score is not None:
            out.setdefault(r.domain, {}).setdefault(r.context_id, {})[r.group] = r.score
    return out


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
) -> DibReport:
    """Summarise ``results`` (one per sample) domain by domain, in Table 1 order."""
    by_id = {s.id: s for s in samples}
    known = {d.name: d for d in registered_domains()}
    scores = context_scores(results)
    summaries: list[DomainSummary] = []
    gbvs: dict[str, float] = {}
    replicates: dict[str, list[float]] = {}
    present = list(dict.fromkeys(r.domain for r in results))
    for index, domain in enumerate(present):
        rows = [r for r in results if r.domain == domain]
        spec = known.get(domain)
        groups = list(spec.groups) if spec else list(dict.fromkeys(r.group for r in rows))
        contexts = scores.get(domain, {})
        value = m.gbv_of_contexts(contexts)
        reps = m.bootstrap_gbv(contexts, n_resamples=n_bootstrap, seed=seed * 1000 + index)
        ci = stats.percentile_interval(reps)
        floor = m.permutation_noise_floor(
            contexts, n_permutations=n_permutations, seed=seed * 1000 + index
        )
        gbvs[domain] = value
        replicates[domain] = reps
        group_rows = []
        for g in groups:
            mine = [r for r in rows if r.group == g]
            means = stats.mean(r.score for r in mine if r.score is not None)
            group_rows.append(
                GroupSummary(
                    group=g,
                    n=len(mine),
                    scored=sum(r.outcome is Outcome.SCORED for r in mine),
                    refused=sum(r.outcome is Outcome.REFUSED for r in mine),
                    unparseable=sum(r.outcome is Outcome.UNPARSEABLE for r in mine),
                    errors=sum(r.outcome is Outcome.ERROR for r in mine),
                    mean=_num(means),
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
                gbv=_num(value),
                ci_low=_num(ci.low),
                ci_high=_num(ci.high),
                noise_mean=_num(floor.mean),
                noise_p95=_num(floor.p95),
                p_value=_num(floor.p_value),
                refusal_rate=sum(r.outcome is Outcome.REFUSED for r in rows) / n,
                unparseable_rate=sum(r.outcome is Outcome.UNPARSEABLE for r in rows) / n,
                error_rate=sum(r.outcome is Outcome.ERROR for r in rows) / n,
                groups=group_rows,
                pairs=pairs,
            )
        )
    agbv_ci = stats.percentile_interval(m.agbv_replicates(replicates))
    return DibReport(
        model=model,
        base_url=base_url,
        scoring=scoring,
        seed=seed,
        sample=sample,
        n_decisions=len(results),
        elapsed_s=elapsed_s,
        decisions_per_s=len(results) / elapsed_s if elapsed_s > 0 else 0.0,
        agbv=_num(m.agbv(gbvs)),
        agbv_ci_low=_num(agbv_ci.low),
        agbv_ci_high=_num(agbv_ci.high),
        domains=summaries,
    )


def _f(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None else format(x, spec)


def render_table(report: DibReport) -> str:
    """A readable fixed-width table of the report."""
    mode = report.scoring.mode.value + (" +grammar" if report.scoring.grammar else "")
    lines = [
        f"DIB {report.dib_version} | model {report.model} | {mode} | "
        f"{report.n_decisions} decisions in {report.elapsed_s:.1f} s "
        f"({report.decisions_per_s:.2f}/s)",
        "",
        f"{'domain':<12} {'ctx':>4} {'GBV':>6} {'95% CI':>15} {'noise95':>8} {'p':>6} "
        f"{'refused':>8} {'unparse':>8} {'error':>6}  group means (higher = favourable)",
    ]
    for d in report.domains:
        ci = f"[{_f(d.ci_low)}, {_f(d.ci_high)}]"
        means = " | ".join(f"{g.group} {_f(g.mean, '.1f')}" for g in d.groups)
        lines.append(
            f"{d.domain:<12} {d.n_contexts:>4} {_f(d.gbv):>6} {ci:>15} {_f(d.noise_p95):>8} "
            f"{_f(d.p_value, '.3f'):>6} {d.refusal_rate:>8.1%} {d.unparseable_rate:>8.1%} "
            f"{d.error_rate:>6.1%}  {means}"
        )
    lines += [
        "",
        f"AGBV {_f(report.agbv)}  95% CI [{_f(report.agbv_ci_low)}, {_f(report.agbv_ci_high)}]",
    ]
    return "\n".join(lines)
