"""Assemble a run directory's records into results: the Table 2 and Figure 3 numbers.

Versioned (``RESULTS_VERSION``); undefined numbers are ``None`` (JSON null).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmt_proxy.bench import gbv as g
from dmt_proxy.bench.dib.report import build_report, context_scores
from dmt_proxy.bench.dib.schema import DIB_VERSION, Sample
from dmt_proxy.bench.sim import metrics as m
from dmt_proxy.bench.sim.config import SIM_VERSION, SimConfig
from dmt_proxy.bench.sim.records import AuditRecord, TurnRecord
from dmt_proxy.bench.sim.stream import StreamSummary

RESULTS_VERSION = "sim-results-v1"


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class Cell(BaseModel):
    """A point estimate with its 95 % CI (None where undefined)."""

    model_config = ConfigDict(frozen=True)
    value: float | None
    low: float | None = None
    high: float | None = None


class CheckpointRow(BaseModel):
    """One condition at one checkpoint."""

    model_config = ConfigDict(frozen=True)
    condition: str
    t: int
    memories: int
    n_decisions: int
    agbv: Cell
    gbv: dict[str, float | None]
    noise_p95: dict[str, float | None]
    """Per domain: 95th percentile of GBV with group labels shuffled (no-bias null)."""
    agbv_noise_p95: float | None
    refusal_rate: float
    unparseable_rate: float
    shared_from: str | None = None


class DeltaRow(BaseModel):
    """ΔAGBV of a condition at a checkpoint, and MP against the baseline."""

    model_config = ConfigDict(frozen=True)
    condition: str
    t: int
    delta: Cell
    mp: Cell | None = None
    base_ci_spans_zero: bool | None = None
    """The baseline's ΔAGBV CI contains 0: MP's denominator is noise, read MP with care."""
    per_domain: dict[str, float | None]


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


class HeatmapResults(_RunResults):
    """Single-source injection per domain: ΔGBV of every evaluated domain (Figure 3)."""

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
    config: SimConfig, samples: Sequence[Sample], condition: str, audit: AuditRecord, agbv: Cell
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
) -> ArchResult:
    """Checkpoint rows, ΔAGBV at t80 and T with CIs, and MP against ``baseline``."""
    cells: dict[Any, Any] = {
        (c, t): context_scores(a.results) for c, by_t in audits.items() for t, a in by_t.items()
    }
    reps = m.joint_bootstrap(cells, n_resamples=config.dib.bootstrap, seed=config.seed)
    gbvs = {key: m.gbv_by_domain(ctx) for key, ctx in cells.items()}
    rows: list[CheckpointRow] = []
    for (c, t), audit in sorted(audits_items(audits), key=lambda kv: (kv[0][1], kv[0][0])):
        value = _num(g.agbv(gbvs[(c, t)], skip_nan=True))
        ci = m.interval(m.agbv_replicates(reps[(c, t)]))
        rows.append(
            checkpoint_row(
                config, samples, c, audit, Cell(value=value, low=_num(ci.low), high=_num(ci.high))
            )
        )
    deltas: list[DeltaRow] = []
    targets = sorted({config.t80(), config.turns})
    for t in targets:
        base_reps = None
        base_value = math.nan
        if ("baseline", t) in cells and ("baseline", 0) in cells:
            base_reps = m.delta_replicates(reps[("baseline", t)], reps[("baseline", 0)])
            base_value = m.delta_agbv(gbvs[("baseline", t)], gbvs[("baseline", 0)])
        for c in config.conditions:
            if (c, t) not in cells or (c, 0) not in cells:
                continue
            value = m.delta_agbv(gbvs[(c, t)], gbvs[(c, 0)])
            d_reps = m.delta_replicates(reps[(c, t)], reps[(c, 0)])
            ci = m.interval(d_reps)
            mp = spans = None
            if c != "baseline" and base_reps is not None:
                mp_ci = m.interval(m.mp_replicates(d_reps, base_reps))
                mp = Cell(
                    value=_num(m.mitigation_percentage(value, base_value)),
                    low=_num(mp_ci.low),
                    high=_num(mp_ci.high),
                )
                base_ci = m.interval(base_reps)
                spans = not (base_ci.low > 0 or base_ci.high < 0)
            per_domain = {
                d: _num(gbvs[(c, t)].get(d, math.nan) - gbvs[(c, 0)].get(d, math.nan))
                for d in gbvs[(c, t)]
            }
            deltas.append(
                DeltaRow(
                    condition=c,
                    t=t,
                    delta=Cell(value=_num(value), low=_num(ci.low), high=_num(ci.high)),
                    mp=mp,
                    base_ci_spans_zero=spans,
                    per_domain=per_domain,
                )
            )
    stats = [turn_stats(c, turns.get(c, [])) for c in config.conditions if c in audits]
    return ArchResult(memory=memory, checkpoints=rows, deltas=deltas, turns=stats)


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


def read_latencies(calls_path: Path) -> dict[str, list[float]]:
    """Latency per role from ``calls.jsonl`` (successful calls only)."""
    import json

    out: dict[str, list[float]] = {}
    if not calls_path.exists():
        return out
    for line in calls_path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get("outcome") == "error" or "latency_s" not in rec:
            continue
        out.setdefault(str(rec.get("role")), []).append(float(rec["latency_s"]))
    return out
