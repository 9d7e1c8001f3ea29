"""Assemble a run directory's records into results: the Table 2 and Figure 3 numbers.

Every number comes in both DIB readouts (``dib.readouts``: the expected value, the
headline, and the written integer); the top-level fields of a row are the
headline's, ``readouts`` holds both. Next to GBV each row gives the mean shift of
all groups (Δs̄) and the minimum detectable effect at 80 % power (``paired.mde``).

Few clusters (``sim-results-v3``): an audit samples 2 DIB contexts per domain, so
every ΔAGBV, mean shift, ΔGBV_d and the absolute mitigation ΔAGBV(c) − ΔAGBV(no
mitigation) also carries a jackknife-t interval (``*_jk``, ``paired.linear_jackknife``,
t quantiles on Σ_d (contexts_d − 1) df); MP is marked undefined (``mp_defined``)
where the baseline's own ΔAGBV jackknife CI holds 0. Each checkpoint records the
smallest p its label-shuffle noise floor can reach per domain (``floor_min_p``, 1/K!
with two contexts of K groups) and its unstable contexts (``dib.readouts``).

Versioned (``RESULTS_VERSION``); undefined numbers are ``None`` (JSON null).
``sim-results-v1`` and ``-v2`` files still load (the newer fields default to empty).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from dmt_bench import paired as m
from dmt_bench.dib.readouts import (
    HEADLINE,
    READOUTS,
    Readout,
    UnstableContext,
    unstable_contexts,
)
from dmt_bench.dib.report import build_report, context_scores
from dmt_bench.dib.schema import DIB_VERSION, Sample
from dmt_bench.paired import CheckpointReadout, ReadoutData, cell_of, per_domain_deltas
from dmt_bench.sim.config import SIM_VERSION, SimConfig
from dmt_bench.sim.records import AuditRecord, TurnRecord
from dmt_bench.sim.stream import StreamSummary
from dmt_bench.sim.utility import UtilityRow
from dmt_bench.stats import (
    ClusterEstimate,
    Estimate,
    FlatEstimate,
    or_none,
    spans_zero,
    within_cluster_min_p,
)

RESULTS_VERSION = "sim-results-v3"


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class CheckpointRow(BaseModel):
    """One condition at one checkpoint (top-level numbers: the headline readout)."""

    model_config = ConfigDict(frozen=True)
    condition: str
    t: int
    memories: int
    n_decisions: int
    agbv: FlatEstimate
    gbv: dict[str, float | None]
    noise_p95: dict[str, float | None]
    """Per domain: 95th percentile of GBV with group labels shuffled (no-bias null)."""
    agbv_noise_p95: float | None
    refusal_rate: float
    unparseable_rate: float
    shared_from: str | None = None
    contexts: dict[str, int] = {}
    """Scored DIB contexts per domain (a domain with fewer than 2 has no CI)."""
    readouts: dict[str, CheckpointReadout] = {}
    floor_min_p: dict[str, float | None] = {}
    """Per domain: the smallest p its label-shuffle noise floor can reach (1/K! with two
    contexts of K groups; ``stats.within_cluster_min_p``)."""
    unstable: list[UnstableContext] = []
    """Contexts whose group scores spread ≥ the threshold (headline readout)."""


class DeltaReadout(BaseModel):
    """One readout of a condition at checkpoint t against t = 0, each number with its CI."""

    model_config = ConfigDict(frozen=True)
    delta: FlatEstimate
    """ΔAGBV."""
    mp: FlatEstimate | None = None
    base_ci_spans_zero: bool | None = None
    mean_shift: FlatEstimate
    """Δs̄: the shift of all groups together, averaged over domains."""
    mde: float | None
    """Minimum detectable ΔAGBV at 80 % power (paired t vs 0 bootstrap SE)."""
    mde_vs_base: float | None = None
    """Minimum detectable ΔAGBV(condition) − ΔAGBV(baseline) at 80 % power."""
    per_domain: dict[str, FlatEstimate]
    """ΔGBV_d, each domain's CI computed on its own."""
    per_domain_shift: dict[str, FlatEstimate]
    """Δs̄_d."""
    delta_jk: ClusterEstimate | None = None
    """ΔAGBV with its jackknife-t interval, t test and MDE."""
    mean_shift_jk: ClusterEstimate | None = None
    vs_base_jk: ClusterEstimate | None = None
    """Absolute mitigation: ΔAGBV(condition) − ΔAGBV(no mitigation), paired by context."""
    mp_defined: bool | None = None
    """The baseline's ΔAGBV jackknife CI excludes 0, so MP has a meaning (None: no CI)."""
    per_domain_jk: dict[str, ClusterEstimate] = {}


class DeltaRow(BaseModel):
    """ΔAGBV of a condition at a checkpoint, and MP against the baseline (headline readout)."""

    model_config = ConfigDict(frozen=True)
    condition: str
    t: int
    delta: FlatEstimate
    mp: FlatEstimate | None = None
    base_ci_spans_zero: bool | None = None
    """The baseline's ΔAGBV CI contains 0: MP's denominator is noise, read MP with care.
    None when that CI does not exist."""
    per_domain: dict[str, float | None]
    readouts: dict[str, DeltaReadout] = {}


class TurnStats(BaseModel):
    """What the turns of a condition stored, and how the auditor labelled them."""

    model_config = ConfigDict(frozen=True)
    condition: str
    turns: int
    injected: int
    tagged: int
    tagged_injected: int
    """Injected turns whose memory the auditor tagged (auditor recall = this / injected)."""
    tagged_neutral: int
    """Non-injected turns tagged (false alarms)."""
    recovered: int
    mean_latency_s: float | None


class ArchResult(BaseModel):
    """All conditions of one memory architecture."""

    model_config = ConfigDict(frozen=True)
    memory: str
    checkpoints: list[CheckpointRow]
    deltas: list[DeltaRow]
    turns: list[TurnStats]
    contexts: dict[str, int] = {}
    """DIB contexts per domain over every audit (a domain with fewer than 2 has no CI)."""
    utility: list[UtilityRow] = []
    """MMLU-Pro accuracy of each condition's turns (``sim.utility``; empty in older files)."""


class LatencyStats(BaseModel):
    model_config = ConfigDict(frozen=True)
    n: int
    mean_s: float
    median_s: float


class _RunResults(BaseModel):
    """What every simulation result file starts with: versions, run name, config."""

    model_config = ConfigDict(frozen=True)
    results_version: str = RESULTS_VERSION
    sim_version: str = SIM_VERSION
    dib_version: str = DIB_VERSION
    headline: str = HEADLINE.value
    """The DIB readout of the top-level numbers (``dib.readouts.HEADLINE_WHY``)."""
    name: str
    digest: str
    config: dict[str, Any]


class CompareResults(_RunResults):
    """A compare run: per memory architecture and condition, GBV over time and ΔAGBV/MP."""

    turns: int
    t80: int
    checkpoints: list[int]
    dib_decisions: int
    stream: StreamSummary
    archs: list[ArchResult]
    latency: dict[str, LatencyStats]
    wall_s: float


class HeatmapReadout(BaseModel):
    """One readout of a heatmap: every cell with its CI and MDE, and each source's mean shift."""

    model_config = ConfigDict(frozen=True)
    matrix: dict[str, dict[str, FlatEstimate]]
    """``{source: {evaluated domain: ΔGBV with its 95 % CI}}``."""
    mde: dict[str, dict[str, float | None]]
    """Minimum detectable ΔGBV of each cell at 80 % power."""
    mean_shift: dict[str, FlatEstimate]
    """Per source: Δs̄ averaged over the evaluated domains."""
    matrix_jk: dict[str, dict[str, ClusterEstimate]] = {}
    """Every cell with its jackknife-t interval and MDE (results v3; exploratory cells)."""
    mean_shift_jk: dict[str, ClusterEstimate] = {}
    unstable: dict[str, list[UnstableContext]] = {}
    """Per source: the unstable contexts of its audit at t."""


class HeatmapResults(_RunResults):
    """Single-source injection per domain: ΔGBV of every evaluated domain (Figure 3).

    ``matrix`` is the headline readout's point estimates; ``readouts`` has both
    readouts with CIs (empty in ``sim-results-v1`` files).
    """

    memory: str
    t: int
    """The audit compared with t=0 (the t=80-equivalent checkpoint)."""
    sources: list[str]
    domains: list[str]
    matrix: dict[str, dict[str, float | None]]
    """``{injected source: {evaluated domain: ΔGBV}}``."""
    positive_off_diagonal: int
    finite_off_diagonal: int
    fraction_positive: float | None
    streams: dict[str, StreamSummary]
    latency: dict[str, LatencyStats]
    wall_s: float
    readouts: dict[str, HeatmapReadout] = {}
    contexts: dict[str, int] = {}


def latency_stats(latencies: Mapping[str, Sequence[float]]) -> dict[str, LatencyStats]:
    """Mean and median call latency per role."""
    return {
        role: LatencyStats(
            n=len(xs),
            mean_s=round(statistics.fmean(xs), 3),
            median_s=round(statistics.median(xs), 3),
        )
        for role, xs in sorted(latencies.items())
        if xs
    }


def checkpoint_row(
    config: SimConfig,
    samples: Sequence[Sample],
    condition: str,
    audit: AuditRecord,
    agbv: Estimate,
    readouts: Mapping[str, CheckpointReadout] | None = None,
) -> CheckpointRow:
    """Per-domain GBV, noise floor and failure rates of one audit."""
    report = build_report(
        samples,
        audit.results,
        model=config.models.agent.model,
        base_url="",
        scoring=audit.scoring,
        seed=config.dib.seed,
        sample=config.dib.sample,
        elapsed_s=audit.elapsed_s,
        n_bootstrap=0,
        n_permutations=config.dib.permutations,
    )
    n = max(1, len(audit.results))
    noise = [d.noise_p95 for d in report.domains if d.noise_p95 is not None]
    scored = context_scores(audit.results)
    min_p = {
        d.domain: _num(within_cluster_min_p([len(g) for g in scored.get(d.domain, {}).values()]))
        for d in report.domains
    }
    return CheckpointRow(
        condition=condition,
        t=audit.t,
        memories=audit.memories,
        n_decisions=len(audit.results),
        agbv=agbv,
        gbv={d.domain: d.gbv for d in report.domains},
        noise_p95={d.domain: d.noise_p95 for d in report.domains},
        agbv_noise_p95=_num(statistics.fmean(noise)) if noise else None,
        refusal_rate=sum(r.outcome.value == "refused" for r in audit.results) / n,
        unparseable_rate=sum(r.outcome.value == "unparseable" for r in audit.results) / n,
        shared_from=audit.shared_from,
        contexts={d.domain: len(scored.get(d.domain, {})) for d in report.domains},
        readouts=dict(readouts or {}),
        floor_min_p=min_p,
        unstable=unstable_contexts(scored),
    )


def _delta_readout(data: ReadoutData, c: str, t: int, has_base: bool) -> DeltaReadout:
    value, d_reps = data.delta((c, t), (c, 0))
    shift, s_reps = data.shift((c, t), (c, 0))
    mp = spans = mde_vs_base = vs_base = mp_defined = None
    if c != "baseline" and has_base:
        vs_base = data.jackknife(
            m.delta_weights(data.gbv, [(c, t), ("baseline", 0)], [(c, 0), ("baseline", t)])
        )
        base_jk = data.jackknife(m.delta_weights(data.gbv, [("baseline", t)], [("baseline", 0)]))
        mp_defined = base_jk.excludes_zero if math.isfinite(base_jk.low) else None
        base_value, base_reps = data.delta(("baseline", t), ("baseline", 0))
        mp = cell_of(
            m.mitigation_percentage(value, base_value),
            m.interval(m.mp_replicates(d_reps, base_reps)),
        )
        spans = spans_zero(m.interval(base_reps))
        if d_reps.size and d_reps.size == base_reps.size:
            mde_vs_base = _num(m.mde(d_reps - base_reps))
    return DeltaReadout(
        delta=cell_of(value, m.interval(d_reps)),
        mp=mp,
        base_ci_spans_zero=spans,
        mean_shift=cell_of(shift, m.interval(s_reps)),
        mde=_num(m.mde(d_reps)),
        mde_vs_base=mde_vs_base,
        per_domain=per_domain_deltas(data.gbv, data.gbv_reps, (c, t), (c, 0)),
        per_domain_shift=per_domain_deltas(data.mean, data.mean_reps, (c, t), (c, 0)),
        delta_jk=data.jackknife(m.delta_weights(data.gbv, [(c, t)], [(c, 0)])),
        mean_shift_jk=data.jackknife(m.delta_weights(data.mean, [(c, t)], [(c, 0)]), "mean"),
        vs_base_jk=vs_base,
        mp_defined=mp_defined,
        per_domain_jk={
            d: data.jackknife(m.domain_weights([(c, t)], [(c, 0)], d)) for d in data.gbv[(c, t)]
        },
    )


def turn_stats(condition: str, turns: Sequence[TurnRecord]) -> TurnStats:
    """Counts over a condition's turns."""
    tagged = [t for t in turns if t.memory_status == "tagged"]
    sent = [t.latency_s for t in turns if not t.recovered]
    return TurnStats(
        condition=condition,
        turns=len(turns),
        injected=sum(t.injected for t in turns),
        tagged=len(tagged),
        tagged_injected=sum(t.injected for t in tagged),
        tagged_neutral=sum(not t.injected for t in tagged),
        recovered=sum(t.recovered for t in turns),
        mean_latency_s=round(statistics.fmean(sent), 3) if sent else None,
    )


def arch_result(
    config: SimConfig,
    samples: Sequence[Sample],
    memory: str,
    audits: Mapping[str, Mapping[int, AuditRecord]],
    turns: Mapping[str, Sequence[TurnRecord]],
    utility: Sequence[UtilityRow] = (),
) -> ArchResult:
    """Checkpoint rows, ΔAGBV at t80 and T with CIs, and MP against ``baseline``.

    Both readouts; the top-level numbers of every row are the headline's.
    ``utility``: the conditions' MMLU-Pro accuracy (``utility.stream_utility``).
    """
    data: dict[Readout, ReadoutData] = {}
    for readout in READOUTS:
        cells = {
            (c, t): context_scores(a.results, readout)
            for c, by_t in audits.items()
            for t, a in by_t.items()
        }
        data[readout] = ReadoutData(cells, n_resamples=config.dib.bootstrap, seed=config.seed)
    head = data[HEADLINE]
    rows: list[CheckpointRow] = []
    for (c, t), audit in sorted(audits_items(audits), key=lambda kv: (kv[0][1], kv[0][0])):
        at = {r.value: data[r].checkpoint((c, t)) for r in READOUTS}
        rows.append(checkpoint_row(config, samples, c, audit, at[HEADLINE.value].agbv, at))
    deltas: list[DeltaRow] = []
    for t in sorted({config.t80(), config.turns}):
        has_base = ("baseline", t) in head.gbv and ("baseline", 0) in head.gbv
        for c in config.conditions:
            if (c, t) not in head.gbv or (c, 0) not in head.gbv:
                continue
            readouts = {r: _delta_readout(data[r], c, t, has_base) for r in READOUTS}
            top = readouts[HEADLINE]
            deltas.append(
                DeltaRow(
                    condition=c,
                    t=t,
                    delta=top.delta,
                    mp=top.mp,
                    base_ci_spans_zero=top.base_ci_spans_zero,
                    per_domain={d: or_none(cell.value) for d, cell in top.per_domain.items()},
                    readouts={r.value: v for r, v in readouts.items()},
                )
            )
    stats = [turn_stats(c, turns.get(c, [])) for c in config.conditions if c in audits]
    return ArchResult(
        memory=memory,
        checkpoints=rows,
        deltas=deltas,
        turns=stats,
        contexts=audit_contexts(audits),
        utility=list(utility),
    )


def audit_contexts(audits: Mapping[str, Mapping[int, AuditRecord]]) -> dict[str, int]:
    """Scored DIB contexts per domain over every audit (fewer than 2: no CI for it)."""
    contexts: dict[str, set[str]] = {}
    for by_t in audits.values():
        for a in by_t.values():
            for d, ctx in context_scores(a.results).items():
                contexts.setdefault(d, set()).update(ctx)
    return {d: len(ids) for d, ids in contexts.items()}


def audits_items(
    audits: Mapping[str, Mapping[int, AuditRecord]],
) -> list[tuple[tuple[str, int], AuditRecord]]:
    """``((condition, t), audit)`` pairs."""
    return [((c, t), a) for c, by_t in audits.items() for t, a in by_t.items()]


def heatmap_matrix(
    t: int, audits: Mapping[str, Mapping[int, AuditRecord]]
) -> dict[str, dict[str, float | None]]:
    """``{source: {domain: GBV_d(t) − GBV_d(0)}}`` from single-source runs."""
    out: dict[str, dict[str, float | None]] = {}
    for source, by_t in audits.items():
        if t not in by_t or 0 not in by_t:
            continue
        g_t = m.gbv_by_domain(context_scores(by_t[t].results))
        g_0 = m.gbv_by_domain(context_scores(by_t[0].results))
        out[source] = {d: _num(g_t[d] - g_0.get(d, math.nan)) for d in g_t}
    return out


def heatmap_readouts(
    config: SimConfig, t: int, audits: Mapping[str, Mapping[int, AuditRecord]]
) -> dict[str, HeatmapReadout]:
    """Both readouts of the single-source ΔGBV matrix, each cell with a paired CI and MDE.

    Every source's audits at ``t`` and 0 are resampled on the same DIB contexts
    (``paired.joint_bootstrap``), so each cell's CI is that of a paired difference.
    """
    out: dict[str, HeatmapReadout] = {}
    sources = [s for s, by_t in audits.items() if t in by_t and 0 in by_t]
    for readout in READOUTS:
        cells = {
            (s, when): context_scores(audits[s][when].results, readout)
            for s in sources
            for when in (0, t)
        }
        data = ReadoutData(cells, n_resamples=config.dib.bootstrap, seed=config.seed)
        matrix: dict[str, dict[str, Estimate]] = {}
        mde: dict[str, dict[str, float | None]] = {}
        shift: dict[str, Estimate] = {}
        for s in sources:
            matrix[s] = per_domain_deltas(data.gbv, data.gbv_reps, (s, t), (s, 0))
            mde[s] = {}
            for d in matrix[s]:
                r_t, r_0 = data.gbv_reps[(s, t)].get(d), data.gbv_reps[(s, 0)].get(d)
                diff = r_t - r_0 if r_t is not None and r_0 is not None else np.array([])
                mde[s][d] = _num(m.mde(diff))
            value, reps = data.shift((s, t), (s, 0))
            shift[s] = cell_of(value, m.interval(reps))
        matrix_jk = {
            s: {d: data.jackknife(m.domain_weights([(s, t)], [(s, 0)], d)) for d in matrix[s]}
            for s in sources
        }
        shift_jk = {
            s: data.jackknife(m.delta_weights(data.mean, [(s, t)], [(s, 0)]), "mean")
            for s in sources
        }
        unstable = {s: flagged for s in sources if (flagged := unstable_contexts(cells[(s, t)]))}
        out[readout.value] = HeatmapReadout(
            matrix=matrix,
            mde=mde,
            mean_shift=shift,
            matrix_jk=matrix_jk,
            mean_shift_jk=shift_jk,
            unstable=unstable,
        )
    return out


def read_latencies(calls_path: Path) -> dict[str, list[float]]:
    """Latency per role from ``calls.jsonl`` (or its ``.gz``; successful calls only)."""
    import gzip
    import json

    out: dict[str, list[float]] = {}
    packed = calls_path.with_name(calls_path.name + ".gz")
    if calls_path.exists():
        text = calls_path.read_text(encoding="utf-8")
    elif packed.exists():
        text = gzip.decompress(packed.read_bytes()).decode("utf-8")
    else:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("outcome") == "error" or "latency_s" not in rec:
            continue
        out.setdefault(str(rec.get("role")), []).append(float(rec["latency_s"]))
    return out
