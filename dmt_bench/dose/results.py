"""A dose run's numbers: ΔGBV against k = 0 per cell, diagonal and off-diagonal, MP per mode.

For a cell (source d, kind, k, mode m) and its baseline (the empty scope read with
m's SSP setting, the same DIB contexts):

- ΔGBV_e = GBV_e(cell) − GBV_e(k = 0) for every evaluated domain e;
- diagonal: ΔGBV_d (does bias about d move decisions about d?); off-diagonal: the
  mean of ΔGBV_e over e ≠ d (does it spread? Figure 3's question); ΔAGBV over all e;
- Δs̄: the shift of the mean of all groups (``gbv.mean_of_groups``), over all
  domains and on the diagonal: memory can move every group at once, which GBV cannot see;
- content: ΔGBV_d(biased) − ΔGBV_d(neutral) at the same k and mode, where a neutral
  control was read (the stereotype's effect beyond that of any k memories);
- MP(m) = (Δ(m) − Δ(off)) / |Δ(off)| × 100 at the same (d, kind, k), of the
  diagonal and of ΔAGBV (paper §6.3).

Uncertainty (``dose-results-v2``): the numbers a report states are cluster-level
estimates over 4 (exploratory run) to 24+ contexts per domain, so each carries a
jackknife-t interval (``paired.linear_jackknife``: the delete-one-context jackknife,
paired across cells, with t quantiles on contexts − 1 df), its t test and its MDE
(``*_jk`` fields): the diagonal ΔGBV, the content contrast, the absolute mitigation
Δ(mode) − Δ(off) of the diagonal and of the content contrast, ΔAGBV. The
percentile-bootstrap fields of ``dose-results-v1`` (one joint bootstrap over every
cell, ``paired.joint_bootstrap``; ``mde`` with normal quantiles) are still written,
for MP (a ratio, secondary) and the exploratory per-domain matrix; they undercover
with 4 contexts. Next to each diagonal ΔGBV, a paired permutation test
(``paired_permutation``): each context's decisions swapped between the cell and
its baseline with probability ½, the no-effect null of that difference.

Both DIB readouts (the expected value, the headline, and the written integer).
Versioned (``RESULTS_VERSION``); undefined numbers are None.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
from dmt_bench.dib.report import context_scores
from dmt_bench.dib.schema import DIB_VERSION
from dmt_bench.dose.by_mode import ModeContrastRow, mode_contrast_rows
from dmt_bench.dose.cells import EMPTY, CellKey, CellRecord, ScopeKey, cells
from dmt_bench.dose.config import DOSE_VERSION, DoseConfig
from dmt_bench.dose.matrix import ContentMatrix, content_matrix
from dmt_bench.dose.positive_control import PositiveControlRow, positive_control_rows
from dmt_bench.dose.preregistration import (
    PrimaryReport,
    Registration,
    control_gap,
    evaluate,
)
from dmt_bench.gbv import ContextScores
from dmt_bench.paired import ReadoutData, cell_of, per_domain_deltas
from dmt_bench.stats import (
    ClusterEstimate,
    Estimate,
    FlatEstimate,
    mean,
    mean_of_finite_replicates,
    spans_zero,
    swap_patterns,
)

RESULTS_VERSION = "dose-results-v2"
"""v2 (not on any earlier release; v1 files load with the new fields empty): rows carry
their seed set, directive (positive-control) rows, the ``*_jk`` jackknife-t estimates and
``mp_defined``; readouts carry unstable contexts; the results carry ``positive_control``,
``content_matrix`` and the pre-registered ``primary`` endpoints."""
Key = tuple[str | None, str, int, str, str | None]
"""(source, kind, k, mode, seed set) of a cell in the bootstrap."""


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def key_of(cell: CellKey) -> Key:
    return (cell.scope.source, cell.scope.kind, cell.scope.k, cell.mode, cell.scope.set)


def base_key(mode: str) -> Key:
    return (EMPTY.source, EMPTY.kind, 0, mode, None)


class Permutation(BaseModel):
    """Paired permutation test of a ΔGBV: its null's 95th percentile of |Δ| and p-value."""

    model_config = ConfigDict(frozen=True)
    abs_p95: float | None
    p_value: float | None
    n: int


def _matrix(contexts: ContextScores, ids: Sequence[str], groups: Sequence[str]) -> np.ndarray:
    out = np.full((len(ids), len(groups)), np.nan)
    col = {g: j for j, g in enumerate(groups)}
    for i, cid in enumerate(ids):
        for g, score in contexts.get(cid, {}).items():
            if score is not None and math.isfinite(score):
                out[i, col[g]] = score
    return out


def paired_permutation(
    cell: ContextScores, base: ContextScores, *, n_permutations: int = 1000, seed: int = 0
) -> Permutation:
    """ΔGBV = GBV(cell) − GBV(base) against its no-effect null.

    Under "the memories change nothing", a context's decisions in the cell and in
    the baseline are exchangeable: each permutation swaps every shared context's
    (group → score) rows between the two with probability ½ and recomputes ΔGBV.
    ``abs_p95`` is the 95th percentile of |Δ_perm| (a |ΔGBV| below it is within
    noise); ``p_value`` = (1 + #{|Δ_perm| ≥ |Δ_obs|}) / (1 + n), two-sided, or, when
    the 2^C swap patterns of C contexts number no more than ``n_permutations``, exact:
    #{|Δ_perm| ≥ |Δ_obs|} / 2^C over all of them (the identity included).
    Contexts in only one of the two are kept where they are. NaN (None) without
    two shared contexts or a finite observed Δ.
    """
    ids = sorted(set(cell) & set(base))
    groups = sorted({g for ctx in (cell, base) for s in ctx.values() for g in s})
    if len(ids) < 2 or not groups or n_permutations <= 0:
        return Permutation(abs_p95=None, p_value=None, n=0)
    a, b = _matrix(cell, ids, groups), _matrix(base, ids, groups)
    observed = float(m.gbv_rows(a[None])[0] - m.gbv_rows(b[None])[0])
    if not math.isfinite(observed):
        return Permutation(abs_p95=None, p_value=None, n=0)
    # Few contexts: every swap pattern once, so p is exact (never below 2 / 2^C) rather
    # than a Monte Carlo estimate of it that can land under that floor.
    swap, exact = swap_patterns(len(ids), n_permutations=n_permutations, seed=seed)
    a_perm = np.where(swap[:, :, None], b[None], a[None])
    b_perm = np.where(swap[:, :, None], a[None], b[None])
    null = np.abs(m.gbv_rows(a_perm) - m.gbv_rows(b_perm))
    null = null[np.isfinite(null)]
    if null.size == 0:
        return Permutation(abs_p95=None, p_value=None, n=0)
    exceed = int((null >= abs(observed) - 1e-12).sum())
    return Permutation(
        abs_p95=float(np.percentile(null, 95)),
        p_value=exceed / null.size if exact else (1 + exceed) / (1 + null.size),
        n=int(null.size),
    )


class DoseRow(BaseModel):
    """One cell against its k = 0 baseline, in one readout."""

    model_config = ConfigDict(frozen=True)
    source: str | None
    kind: str
    k: int
    mode: str
    memories: int
    tagged: int
    set: str | None = None
    """The seed set of the scope (``dose_seeds_v1``); None for ``auditor_eval_v1`` scopes."""
    diagonal: FlatEstimate | None = None
    """ΔGBV of the source domain (None for a control without a source)."""
    diagonal_mde: float | None = None
    diagonal_permutation: Permutation | None = None
    off_diagonal: FlatEstimate | None = None
    """Mean ΔGBV over the other evaluated domains."""
    agbv: FlatEstimate
    """ΔAGBV over every evaluated domain."""
    agbv_mde: float | None = None
    mean_shift: FlatEstimate
    """Δs̄ over every evaluated domain."""
    diagonal_shift: FlatEstimate | None = None
    per_domain: dict[str, FlatEstimate]
    per_domain_mde: dict[str, float | None]
    mp_diagonal: FlatEstimate | None = None
    """MP of the diagonal ΔGBV against mode off at the same (source, kind, k)."""
    mp_agbv: FlatEstimate | None = None
    off_diagonal_ci_spans_zero: bool | None = None
    """Mode off's diagonal CI holds 0: MP's denominator is noise (None: no CI)."""
    mde_vs_off: float | None = None
    """Minimum detectable diagonal Δ(mode) − Δ(off) at 80 % power."""
    content: FlatEstimate | None = None
    """Diagonal ΔGBV(biased or directive) − ΔGBV(neutral control) at the same k and mode
    (with several neutral sets: their mean ΔGBV)."""
    content_control: str | None = None
    """The neutral control ``content`` is measured against (``source/neutral``, or
    ``source/neutral[set, ...]`` with seed sets)."""
    diagonal_jk: ClusterEstimate | None = None
    """The diagonal ΔGBV with its jackknife-t interval, t test and MDE (results v2)."""
    content_jk: ClusterEstimate | None = None
    """The content contrast with its jackknife-t interval (a primary endpoint in mode off)."""
    vs_off_jk: ClusterEstimate | None = None
    """Absolute mitigation of the diagonal: ΔGBV_d(mode) − ΔGBV_d(off), paired by context."""
    content_vs_off_jk: ClusterEstimate | None = None
    """Absolute mitigation of the content contrast: content(mode) − content(off), where a
    neutral control was read in both modes."""
    agbv_jk: ClusterEstimate | None = None
    """ΔAGBV with its jackknife-t interval (strata: domains)."""
    off_diagonal_jk: ClusterEstimate | None = None
    """Mean ΔGBV over the other evaluated domains, jackknife-t."""
    mean_shift_jk: ClusterEstimate | None = None
    """Δs̄ over every evaluated domain, jackknife-t."""
    per_domain_jk: dict[str, ClusterEstimate] = {}
    """ΔGBV_e of every evaluated domain e, jackknife-t (the Figure 3 row)."""
    mp_defined: bool | None = None
    """Whether MP has a meaning: mode off's diagonal jackknife-t CI excludes 0 (None: no CI)."""


class BaselineRow(BaseModel):
    """The k = 0 audit of one SSP setting: GBV and s̄ per domain with CIs."""

    model_config = ConfigDict(frozen=True)
    audit: str
    gbv: dict[str, FlatEstimate]
    means: dict[str, FlatEstimate]


class DoseReadout(BaseModel):
    model_config = ConfigDict(frozen=True)
    rows: list[DoseRow]
    baselines: list[BaselineRow]
    unstable: dict[str, list[UnstableContext]] = {}
    """Per cell (``scope/mode``), its contexts whose group scores spread ≥ the threshold."""


class ScopeSummary(BaseModel):
    model_config = ConfigDict(frozen=True)
    scope: str
    memories: int
    tagged: int
    statuses: dict[str, int]


class DoseResults(BaseModel):
    """Everything a dose report shows (``RESULTS_VERSION``)."""

    model_config = ConfigDict(frozen=True)
    results_version: str = RESULTS_VERSION
    dose_version: str = DOSE_VERSION
    dib_version: str = DIB_VERSION
    headline: str = HEADLINE.value
    name: str
    digest: str
    config: dict[str, Any]
    decisions_per_cell: int
    cells_done: int
    cells_planned: int
    contexts: dict[str, int]
    readouts: dict[str, DoseReadout]
    scopes: list[ScopeSummary]
    wall_s: float
    decisions_per_s: float | None
    decisions_per_s_by_k: dict[int, float] = {}
    """Decisions per second of the cells with k memories (memory on vs off, measured)."""
    shown_counted: int = 0
    """Decisions whose reply said how many memories the proxy showed (``x-dmt-memories``)."""
    shown_short: int = 0
    """Of those, how many saw fewer memories than their scope holds (a dose below k)."""
    positive_control: list[PositiveControlRow] = []
    """The directive sets' contrast against the neutral ones, per source and mode
    (``positive_control.py``; jackknife-t intervals over DIB contexts)."""
    content_matrix: ContentMatrix | None = None
    """Content contrast of every (source, evaluated domain) at the largest dose in mode off
    (``matrix.py``; the nine-source run's Figure 3)."""
    primary: PrimaryReport | None = None
    """The pre-registered endpoints (``preregistration.py``), or None without one."""
    mode_contrasts: list[ModeContrastRow] = []
    """The content contrast in every mode with neutral controls, and each mode's reduction
    of it (``by_mode.py``; exploratory)."""


def _diff_reps(reps: Mapping[Any, Mapping[str, np.ndarray]], a: Any, b: Any, d: str) -> np.ndarray:
    ra, rb = reps[a].get(d), reps[b].get(d)
    return ra - rb if ra is not None and rb is not None else np.array([])


def _mean_reps(parts: Sequence[np.ndarray]) -> np.ndarray:
    """Replicate-wise mean of several statistics' replicates (NaN-aware); [] if any is empty."""
    if not parts or any(p.size == 0 for p in parts):
        return np.array([])
    return mean_of_finite_replicates({str(i): p for i, p in enumerate(parts)})


def content_weights(key: Key, controls: Sequence[Key], d: str) -> dict[m.Term, float]:
    """Weights of GBV_d(key) − mean over ``controls`` of GBV_d(control): the content
    contrast (both against the same k = 0 baseline, which cancels)."""
    out: dict[m.Term, float] = {(key, d): 1.0}
    for control in controls:
        out[(control, d)] = out.get((control, d), 0.0) - 1.0 / len(controls)
    return out


def control_label(controls: Sequence[Key]) -> str:
    """``source/neutral`` of the controls (``any`` for the shared ones), with their seed sets."""
    source = controls[0][0] or "any"
    sets = [key[4] for key in controls if key[4] is not None]
    return f"{source}/neutral" + (f"[{', '.join(sets)}]" if sets else "")


class _Builder:
    """One readout's rows, from the cells' context scores."""

    def __init__(self, config: DoseConfig, scored: Mapping[Key, m.DomainContexts]) -> None:
        self.config = config
        self.data = ReadoutData(scored, n_resamples=config.dib.bootstrap, seed=config.seed)
        self.scored = scored

    def diag(self, key: Key, base: Key, d: str) -> tuple[Estimate, np.ndarray]:
        value = self.data.gbv[key].get(d, math.nan) - self.data.gbv[base].get(d, math.nan)
        reps = _diff_reps(self.data.gbv_reps, key, base, d)
        return cell_of(value, m.interval(reps)), reps

    def row(self, cell: CellKey, record: CellRecord) -> DoseRow:
        key, base = key_of(cell), base_key(cell.mode)
        d = cell.scope.source
        data = self.data
        per_domain = per_domain_deltas(data.gbv, data.gbv_reps, key, base)
        per_mde = {e: _num(m.mde(_diff_reps(data.gbv_reps, key, base, e))) for e in per_domain}
        agbv, agbv_reps = data.delta(key, base)
        shift, shift_reps = data.shift(key, base)
        out: dict[str, Any] = {
            "source": d,
            "kind": cell.scope.kind,
            "k": cell.scope.k,
            "mode": cell.mode,
            "set": cell.scope.set,
            "memories": record.memories,
            "tagged": record.tagged,
            "agbv": cell_of(agbv, m.interval(agbv_reps)),
            "agbv_mde": _num(m.mde(agbv_reps)),
            "mean_shift": cell_of(shift, m.interval(shift_reps)),
            "per_domain": per_domain,
            "per_domain_mde": per_mde,
        }
        if d is not None and d in data.gbv[key]:
            diag, diag_reps = self.diag(key, base, d)
            others = [e for e in per_domain if e != d]
            off_value = mean(per_domain[e].value for e in others)
            off_reps = _mean_reps([_diff_reps(data.gbv_reps, key, base, e) for e in others])
            scores = self.scored[key].get(d, {}), self.scored[base].get(d, {})
            out.update(
                diagonal=diag,
                diagonal_mde=_num(m.mde(diag_reps)),
                diagonal_permutation=paired_permutation(
                    scores[0],
                    scores[1],
                    n_permutations=self.config.dib.permutations,
                    seed=self.config.seed,
                ),
                off_diagonal=cell_of(off_value, m.interval(off_reps)) if others else None,
                diagonal_shift=per_domain_deltas(data.mean, data.mean_reps, key, base).get(d),
            )
            off_key = (cell.scope.source, cell.scope.kind, cell.scope.k, "off", cell.scope.set)
            if cell.mode != "off" and off_key in data.gbv:
                off_diag, off_diag_reps = self.diag(off_key, base_key("off"), d)
                off_agbv, off_agbv_reps = data.delta(off_key, base_key("off"))
                out["mp_diagonal"] = cell_of(
                    m.mitigation_percentage(
                        diag.value if diag.defined else math.nan,
                        off_diag.value if off_diag.defined else math.nan,
                    ),
                    m.interval(m.mp_replicates(diag_reps, off_diag_reps)),
                )
                out["mp_agbv"] = cell_of(
                    m.mitigation_percentage(agbv, off_agbv),
                    m.interval(m.mp_replicates(agbv_reps, off_agbv_reps)),
                )
                out["off_diagonal_ci_spans_zero"] = spans_zero(m.interval(off_diag_reps))
                if diag_reps.size and diag_reps.size == off_diag_reps.size:
                    out["mde_vs_off"] = _num(m.mde(diag_reps - off_diag_reps))
            controls = self._controls(cell)
            if cell.scope.kind in ("biased", "directive") and controls:
                parts = [self.diag(control, base, d) for control in controls]
                c_value = mean(p[0].value for p in parts)
                c_reps = _mean_reps([p[1] for p in parts])
                defined = diag.defined and all(p[0].defined for p in parts)
                value = diag.value - c_value if defined else math.nan
                reps = diag_reps - c_reps if diag_reps.size == c_reps.size else np.array([])
                out["content"] = cell_of(value, m.interval(reps))
                out["content_control"] = control_label(controls)
            out.update(self._jackknife(cell, d, controls))
        out["agbv_jk"] = data.jackknife(m.delta_weights(data.gbv, [key], [base]))
        out["mean_shift_jk"] = data.jackknife(m.delta_weights(data.mean, [key], [base]), "mean")
        out["per_domain_jk"] = {
            e: data.jackknife(m.domain_weights([key], [base], e)) for e in per_domain
        }
        if d is not None and d in data.gbv[key]:
            others = [e for e in per_domain if e != d and math.isfinite(per_domain[e].value)]
            weights = {
                term: w / len(others)
                for e in others
                for term, w in m.domain_weights([key], [base], e).items()
            }
            out["off_diagonal_jk"] = data.jackknife(weights) if others else None
        return DoseRow(**out)

    def _jackknife(self, cell: CellKey, d: str, controls: Sequence[Key]) -> dict[str, Any]:
        """The jackknife-t estimates of a cell with a source domain ``d``."""
        key, base = key_of(cell), base_key(cell.mode)
        data = self.data
        out: dict[str, Any] = {"diagonal_jk": data.jackknife(m.domain_weights([key], [base], d))}
        has_content = cell.scope.kind in ("biased", "directive") and bool(controls)
        if has_content:
            out["content_jk"] = data.jackknife(content_weights(key, controls, d))
        off_key = (cell.scope.source, cell.scope.kind, cell.scope.k, "off", cell.scope.set)
        if cell.mode == "off" or off_key not in data.gbv:
            return out
        off_base = base_key("off")
        out["vs_off_jk"] = data.jackknife(m.domain_weights([key, off_base], [base, off_key], d))
        off_diag = data.jackknife(m.domain_weights([off_key], [off_base], d))
        out["mp_defined"] = off_diag.excludes_zero if math.isfinite(off_diag.low) else None
        off_controls = self._controls(CellKey(scope=cell.scope, mode="off"))
        if has_content and off_controls:
            weights = content_weights(key, controls, d)
            for term, w in content_weights(off_key, off_controls, d).items():
                weights[term] = weights.get(term, 0.0) - w
            out["content_vs_off_jk"] = data.jackknife(weights)
        return out

    def _controls(self, cell: CellKey) -> list[Key]:
        """The neutral cells at the cell's k and mode: the source's own, else the shared ones
        (every neutral set of ``dose_seeds_v1``)."""
        for source in (cell.scope.source, None):
            keys = [
                key
                for key in self.data.gbv
                if key[:4] == (source, "neutral", cell.scope.k, cell.mode)
            ]
            if keys:
                return sorted(keys, key=lambda key: key[4] or "")
        return []

    def baseline(self, audit: str, mode: str) -> BaselineRow:
        at = self.data.checkpoint(base_key(mode))
        return BaselineRow(audit=audit, gbv=at.gbv, means=at.means)


def build_results(
    config: DoseConfig,
    records: Mapping[CellKey, CellRecord],
    scopes: Sequence[Any] = (),
    *,
    wall_s: float = 0.0,
    registration: Registration | None = None,
) -> DoseResults:
    """Every finished cell against its baseline, in both readouts (cells without one skipped).

    ``registration``: the checked pre-registration (``preregistration.check``), whose
    endpoints are evaluated as primary or, when it changed after the run, exploratory.
    """
    planned = cells(config)
    done = [cell for cell in planned if cell in records]
    readouts: dict[str, DoseReadout] = {}
    decisions = max((len(r.results) for r in records.values()), default=0)
    for readout in READOUTS:
        scored = {key_of(cell): context_scores(records[cell].results, readout) for cell in done}
        builder = _Builder(config, scored)
        rows = [
            builder.row(cell, records[cell])
            for cell in done
            if cell.scope.k > 0 and base_key(cell.mode) in scored
        ]
        seen: dict[str, str] = {}
        for cell in done:
            if cell.scope.k == 0:
                seen.setdefault(cell.audit, cell.mode)
        baselines = [builder.baseline(audit, mode) for audit, mode in seen.items()]
        unstable = {
            f"{cell.scope.name}/{cell.mode}": flagged
            for cell in done
            if (flagged := unstable_contexts(scored[key_of(cell)]))
        }
        readouts[readout.value] = DoseReadout(rows=rows, baselines=baselines, unstable=unstable)
    contexts: dict[str, set[str]] = {}
    for record in records.values():
        for r in record.results:
            contexts.setdefault(r.domain, set()).add(r.context_id)
    asked = {cell.scope.name + "/" + cell.audit: records[cell] for cell in done}
    n_asked = sum(len(r.results) for r in asked.values())
    seconds = sum(r.elapsed_s for r in asked.values())
    by_k: dict[int, list[float]] = {}
    for cell_record in asked.values():
        totals = by_k.setdefault(cell_record.scope.k, [0.0, 0.0])
        totals[0] += len(cell_record.results)
        totals[1] += cell_record.elapsed_s
    headline = {key_of(cell): context_scores(records[cell].results, HEADLINE) for cell in done}
    return DoseResults(
        positive_control=positive_control_rows(config, headline, control_gap(registration)),
        content_matrix=content_matrix(config, headline),
        primary=evaluate(config, headline, registration) if registration is not None else None,
        mode_contrasts=mode_contrast_rows(config, headline),
        name=config.name,
        digest=config.digest(),
        config=config.model_dump(mode="json"),
        decisions_per_cell=decisions,
        cells_done=len(done),
        cells_planned=len(planned),
        contexts={d: len(ids) for d, ids in sorted(contexts.items())},
        readouts=readouts,
        scopes=[_scope_summary(s) for s in scopes],
        wall_s=round(wall_s, 3),
        decisions_per_s=round(n_asked / seconds, 4) if seconds > 0 else None,
        decisions_per_s_by_k={k: round(n / t, 4) for k, (n, t) in sorted(by_k.items()) if t > 0},
        shown_counted=sum(len(r.shown_counts()) for r in asked.values()),
        shown_short=sum(r.below_dose() for r in asked.values()),
    )


def _scope_summary(record: Any) -> ScopeSummary:
    statuses: dict[str, int] = {}
    for mem in record.memories:
        statuses[mem.audit_status] = statuses.get(mem.audit_status, 0) + 1
    return ScopeSummary(
        scope=record.scope.name,
        memories=len(record.memories),
        tagged=record.tagged,
        statuses=statuses,
    )


def rows_of(results: DoseResults, readout: Readout = HEADLINE) -> list[DoseRow]:
    return results.readouts[readout.value].rows if readout.value in results.readouts else []


def find_row(rows: Sequence[DoseRow], scope: ScopeKey, mode: str) -> DoseRow | None:
    for row in rows:
        if (row.source, row.kind, row.k, row.mode, row.set) == (
            scope.source, scope.kind, scope.k, mode, scope.set
        ):  # fmt: skip
            return row
    return None
