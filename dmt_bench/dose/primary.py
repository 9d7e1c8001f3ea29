"""A dose run's primary family, its Holm correction, and the tables that lead its report.

There is one primary family per run, rendered once (``content_rows``):

- a run whose config names a pre-registration (``preregistration.py``): its committed
  endpoints (``results.primary``, evaluated and Holm-corrected when the results were
  built), reported as primary only when the pre-registration check passed, else as
  EXPLORATORY with the reason (``header_lines``);
- any other run: the family declared here, before any number is looked at:

1. the **content contrast** of each source domain d and dose k, in mode off:
   ΔGBV_d(biased) − ΔGBV_d(neutral control), paired by context (what the stereotype
   does beyond having k memories in the prompt at all);
2. **DMT's absolute reduction of it**: content(dmt) − content(off), where the run read a
   neutral control in mode dmt as well (otherwise it is not measured, and the report
   says so rather than substituting another number).

Each is a jackknife-t estimate (``stats.jackknife_t`` through ``paired.linear_jackknife``)
with its t test; Holm's step-down correction (``stats.holm``) runs over the members the
run measured, at family-wise α = 0.05. Every other interval of the report is
exploratory. MP is secondary and shown as "undefined" where mode off's diagonal ΔGBV
has a CI holding 0 (a ratio over noise).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dmt_bench.dose.results import DoseResults, DoseRow, rows_of
from dmt_bench.stats import ALPHA, ClusterEstimate, holm

PRIMARY_MODE = "off"
MITIGATION_MODE = "dmt"


def fmt(x: float | None, spec: str = "+.2f") -> str:
    """A number, or ``n/a`` when it is undefined."""
    return "n/a" if x is None or not math.isfinite(x) else format(x, spec)


def jk(est: ClusterEstimate | None, spec: str = "+.2f") -> str:
    """``+1.09 [+0.29, +1.89]`` (the jackknife-t CI), ``n/a`` without one."""
    if est is None:
        return "n/a"
    return f"{fmt(est.value, spec)} [{fmt(est.low, spec)}, {fmt(est.high, spec)}]"


class PrimaryComparison(BaseModel):
    """One member of the primary family with its test before and after Holm."""

    model_config = ConfigDict(frozen=True)
    name: str
    estimate: ClusterEstimate
    holm_p: float
    reject: bool
    """Holm-adjusted p ≤ α: a confirmed effect of this run."""


def _label(row: DoseRow) -> str:
    return f"{row.source} k={row.k}" + (f" set {row.set}" if row.set is not None else "")


def registered(results: DoseResults) -> bool:
    """The run's family is its pre-registration's endpoints (primary or not)."""
    return results.primary is not None


def primary_family(results: DoseResults) -> list[PrimaryComparison]:
    """The run's primary comparisons, Holm-corrected: the pre-registered endpoints when the
    run has them, else the family declared here (headline readout, per seed set)."""
    if results.primary is not None:
        return [
            PrimaryComparison(
                name=r.endpoint.id,
                estimate=r.estimate,
                holm_p=math.nan if r.holm_adjusted_p is None else r.holm_adjusted_p,
                reject=r.reject,
            )
            for r in results.primary.endpoints
        ]
    rows = rows_of(results)
    members: dict[str, ClusterEstimate] = {}
    for r in sorted(rows, key=lambda r: (r.source or "", r.k)):
        if r.kind == "biased" and r.mode == PRIMARY_MODE and r.content_jk is not None:
            members[f"content {_label(r)}"] = r.content_jk
    for r in sorted(rows, key=lambda r: (r.source or "", r.k)):
        if r.kind == "biased" and r.mode == MITIGATION_MODE and r.content_vs_off_jk is not None:
            members[f"DMT − off, content {_label(r)}"] = r.content_vs_off_jk
    adjusted = holm({name: est.p_value for name, est in members.items()}, alpha=ALPHA)
    return [
        PrimaryComparison(
            name=name, estimate=est, holm_p=adjusted[name].adjusted, reject=adjusted[name].reject
        )
        for name, est in members.items()
    ]


def confirmatory(results: DoseResults) -> bool:
    """The family may be read as primary: declared here, or pre-registered and unchanged."""
    return results.primary is None or results.primary.status == "primary"


def header_lines(results: DoseResults) -> list[str]:
    """What the family is, where it was declared and whether it is read as primary."""
    p = results.primary
    if p is None:
        return [
            "PRIMARY (headline readout): the content contrast ΔGBV_d(biased) − ΔGBV_d(neutral) "
            "in mode off, and DMT's absolute reduction of it, Holm-corrected over this family",
        ]
    title = (
        "Pre-registered primary endpoints"
        if p.status == "primary"
        else "Pre-registered endpoints, reported as EXPLORATORY"
    )
    defs = "; ".join(
        f"{r.endpoint.id} = "
        + (
            f"content {r.endpoint.source} k={r.endpoint.k} in {r.endpoint.mode}"
            if r.endpoint.contrast == "content"
            else f"content(off) − content({r.endpoint.mode}), {r.endpoint.source} k={r.endpoint.k}"
        )
        for r in p.endpoints
    )
    return [
        f"{title} (headline readout): {p.message}.",
        "Content: mean ΔGBV_d(stereotyped sets) − mean ΔGBV_d(neutral sets) on the source's "
        f"own domain; reduction: positive when the mode narrows it. {defs}.",
        f"Interval: {p.method}, 95 %. Holm over the family {{{', '.join(p.family)}}} at "
        f"α = {p.alpha:g}. MDE: 80 % power, t quantiles; a null rules out effects at least "
        "that large, and is read only where the positive control was seen.",
    ]


def neutral_modes(results: DoseResults) -> list[str]:
    """The modes in which the run read a neutral control."""
    return sorted({r.mode for r in rows_of(results) if r.kind == "neutral"})


def content_rows(results: DoseResults) -> list[list[str]]:
    """The headline table: the primary family with raw and Holm-adjusted p."""
    family = primary_family(results)
    table = [["primary comparison", "estimate [95% CI]", "df", "p", "Holm p", "MDE", "after Holm"]]
    for c in family:
        table.append(
            [
                c.name,
                jk(c.estimate),
                str(c.estimate.df),
                fmt(c.estimate.p_value, ".3f"),
                fmt(c.holm_p, ".3f"),
                fmt(c.estimate.mde, ".2f"),
                "CI excludes 0, confirmed" if c.reject else "not confirmed",
            ]
        )
    return table


def coverage_lines(results: DoseResults) -> list[str]:
    """Which neutral controls the run has, and what is therefore not measured."""
    modes = neutral_modes(results)
    biased_modes = sorted({r.mode for r in rows_of(results) if r.kind == "biased"})
    missing = [m for m in biased_modes if m not in modes]
    lines = [
        "Neutral controls were read in mode(s): " + (", ".join(modes) if modes else "none") + "."
    ]
    if missing:
        lines.append(
            "No neutral control in mode(s) "
            + ", ".join(missing)
            + ": the content contrast there, and DMT's absolute reduction of it (the second "
            "primary endpoint), are not measured by this run; the mitigation table below "
            "gives Δ(mode) − Δ(off) of the diagonal ΔGBV instead, as an exploratory number."
        )
    return lines


def mp_text(row: DoseRow) -> str:
    """MP of the diagonal with its CI, or why it is undefined."""
    if row.mp_diagonal is None:
        return "—"
    if row.mp_defined is False:
        return "undefined (off's CI holds 0)"
    e = row.mp_diagonal
    return f"{fmt(e.value, '+.0f')}% [{fmt(e.ci.low, '+.0f')}, {fmt(e.ci.high, '+.0f')}]"


def mitigation_rows(rows: Sequence[DoseRow]) -> list[list[str]]:
    """Absolute mitigation per biased cell in a mode other than off (exploratory)."""
    table = [
        [
            "scope",
            "k",
            "mode",
            "Δ(mode) − Δ(off), diagonal [95% CI]",
            "p",
            "MDE",
            "content(mode) − content(off)",
            "MP (secondary)",
        ]
    ]
    for r in sorted(rows, key=lambda r: (r.source or "", r.k, r.mode)):
        if r.kind != "biased" or r.mode == PRIMARY_MODE:
            continue
        est = r.vs_off_jk
        table.append(
            [
                f"{r.source}/{r.kind}" + (f" {r.set}" if r.set else ""),
                str(r.k),
                r.mode,
                jk(est),
                fmt(est.p_value, ".3f") if est is not None else "n/a",
                fmt(est.mde, ".2f") if est is not None else "n/a",
                jk(r.content_vs_off_jk) if r.content_vs_off_jk is not None else "not measured",
                mp_text(r),
            ]
        )
    return table
