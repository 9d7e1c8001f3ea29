"""The content contrast in every mode, seed sets averaged (exploratory), and its figure.

The pre-registered endpoints read the content contrast in mode off and DMT's absolute
reduction of it. A run that read its neutral controls in every mode can say the same of
each mode m, at the largest dose, on the source's own domain:

- content(m) = mean GBV_d(stereotyped sets, m) − mean GBV_d(neutral sets, m);
- reduction(m) = content(off) − content(m) (positive: m narrows the stereotypes' effect),

computed exactly as the endpoints are (``preregistration.endpoint_contrast``: one
jackknife-t interval over the DIB contexts, sets treated as fixed). Every number here is
exploratory and counted in the report's multiplicity statement; DMT's row repeats the
primary endpoint for comparison, it is not a second test of it. The figure
(``dose_contrasts.png``) puts each mode's content contrast next to its positive control
(directive − neutral), so the mitigation of a stereotype and of an explicit rule read on
one scale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from dmt_bench.dose.contrasts import Scored, contexts_of, defined
from dmt_bench.dose.positive_control import PositiveControlRow, ci_text
from dmt_bench.dose.preregistration import Endpoint, endpoint_contrast
from dmt_bench.stats import ClusterEstimate

if TYPE_CHECKING:
    from dmt_bench.dose.config import DoseConfig

FIGURE = "dose_contrasts.png"


class ModeContrastRow(BaseModel):
    """Content contrast of one source domain in one mode, and the mode's reduction of it."""

    model_config = ConfigDict(frozen=True)
    source: str
    k: int
    mode: str
    content: ClusterEstimate
    reduction: ClusterEstimate | None = None
    """content(off) − content(mode); None in mode off."""


def mode_contrast_rows(config: DoseConfig, scored: Scored) -> list[ModeContrastRow]:
    """Every (source, mode) with stereotyped and neutral cells at the largest dose; [] when
    only mode off has both (its content contrast is the primary family's already)."""
    if not {"biased", "neutral"} <= set(config.kinds) or not config.doses:
        return []
    k = max(config.doses)
    rows = []
    for source in config.sources:
        for mode in config.modes:
            content = endpoint_contrast(
                scored, Endpoint(id="content", contrast="content", source=source, k=k, mode=mode)
            )
            if not defined(content):
                continue
            reduction = None
            if mode != "off":
                reduction = endpoint_contrast(
                    scored,
                    Endpoint(id="reduction", contrast="reduction", source=source, k=k, mode=mode),
                )
            rows.append(
                ModeContrastRow(source=source, k=k, mode=mode, content=content, reduction=reduction)
            )
    return rows if any(r.mode != "off" for r in rows) else []


def _num(x: float | None, spec: str) -> str:
    return "—" if x is None or not math.isfinite(x) else format(x, spec)


def mode_lines(rows: Sequence[ModeContrastRow]) -> list[str]:
    """The report section; [] without rows."""
    if not rows:
        return []
    lines = [
        "## Content contrast in every mode (seed sets averaged; exploratory)",
        "",
        "Stereotyped sets − neutral sets on the source's own domain, each mode read against "
        "its own neutral control; reduction = content(off) − content(mode), positive when "
        "the mode narrows it. Jackknife-t 95 % intervals over DIB contexts (G − 1 df), "
        "computed as the pre-registered endpoints are; DMT's row repeats its primary "
        "endpoint, every other row is exploratory.",
        "",
        "| source | k | mode | content [95% CI] | reduction vs off [95% CI] | p (reduction) | "
        "MDE (reduction) | contexts |",
        "|---|---:|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        red = r.reduction
        lines.append(
            f"| {r.source} | {r.k} | {r.mode} | {ci_text(r.content)} | "
            f"{'—' if red is None else ci_text(red)} | "
            f"{_num(red.p_value if red else None, '.3f')} | "
            f"{_num(red.mde if red else None, '.2f')} | {contexts_of(r.content)} |"
        )
    return lines


def interval_count(rows: Sequence[ModeContrastRow]) -> int:
    """Intervals the section prints (for the report's multiplicity statement)."""
    ests = [r.content for r in rows] + [r.reduction for r in rows if r.reduction is not None]
    return sum(1 for e in ests if math.isfinite(e.low) and math.isfinite(e.high))


def figure(
    plt: Any, rows: Sequence[ModeContrastRow], controls: Sequence[PositiveControlRow], out: Path
) -> str | None:
    """``dose_contrasts.png``: per source, each mode's content contrast and positive control
    with their intervals; None without rows."""
    if not rows:
        return None
    sources = list(dict.fromkeys(r.source for r in rows))
    fig, axes = plt.subplots(1, len(sources), figsize=(4.8 * len(sources), 3.8), squeeze=False)
    series: list[tuple[str, str, Sequence[tuple[str, str, ClusterEstimate]]]] = [
        ("stereotyped − neutral", "o", [(r.source, r.mode, r.content) for r in rows]),
        ("directive − neutral (positive control)", "s",
         [(c.source, c.mode, c.contrast) for c in controls]),
    ]  # fmt: skip
    for ax, source in zip(axes[0], sources, strict=True):
        modes = [r.mode for r in rows if r.source == source]
        for i, (label, marker, points) in enumerate(series):
            xs, ys, lo, hi = [], [], [], []
            for src, mode, est in points:
                if src != source or mode not in modes or not math.isfinite(est.value):
                    continue
                xs.append(modes.index(mode) + (i - 0.5) * 0.2)
                ys.append(est.value)
                lo.append(est.value - est.low if math.isfinite(est.low) else 0.0)
                hi.append(est.high - est.value if math.isfinite(est.high) else 0.0)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], fmt=marker, capsize=3, label=label)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xticks(range(len(modes)), modes, rotation=30, fontsize=8)
        ax.set_xlim(-0.5, len(modes) - 0.5)
        ax.set_title(f"source {source}, k={rows[0].k}")
        ax.set_ylabel(f"GBV of {source} − GBV with neutral sets")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / FIGURE, dpi=110)
    plt.close(fig)
    return FIGURE
