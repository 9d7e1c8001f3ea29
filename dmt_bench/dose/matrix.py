"""Figure 3 on a dose run: the source × evaluated-domain matrix of content contrasts.

For every source s with stereotyped sets and every evaluated domain e, at the largest
dose in mode off:

- content C_{s,e} = mean_b GBV_e(biased set b of s) − mean_n GBV_e(neutral set n)
  (``contrasts.contrast``, jackknife-t interval over e's DIB contexts);
- ΔGBV_{s,e} = mean_b GBV_e(biased set b of s) − GBV_e(empty scope), the paper's
  quantity (its Figure 3 cells are ΔGBV after a biased stream, no neutral control).

The share of off-diagonal cells above 0 is reported for both, next to the paper's
70.19 % ("70.19% of cross-domain interactions resulted in a net increase in bias
(ΔGBV > 0)", its Figure 3 analysis; a simulated biased stream, not a dose). Exploratory:
72 off-diagonal contrasts without a multiplicity correction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from dmt_bench.dose.contrasts import Scored, contrast, mean_terms
from dmt_bench.dose.positive_control import keys_of
from dmt_bench.stats import ClusterEstimate, or_none

if TYPE_CHECKING:
    from dmt_bench.dose.config import DoseConfig

PAPER_OFF_DIAGONAL_POSITIVE = 70.19
"""Share (%) of Figure 3's off-diagonal cells with ΔGBV > 0 in the paper."""


class MatrixCell(BaseModel):
    """One (source, evaluated domain) cell."""

    model_config = ConfigDict(frozen=True)
    source: str
    evaluated: str
    content: ClusterEstimate
    delta: ClusterEstimate


class Share(BaseModel):
    """Off-diagonal cells above 0: by point estimate, and with the interval above 0."""

    model_config = ConfigDict(frozen=True)
    above_zero: int
    ci_above_zero: int
    defined: int

    @property
    def percent(self) -> float | None:
        return 100.0 * self.above_zero / self.defined if self.defined else None


class ContentMatrix(BaseModel):
    """The matrix and its off-diagonal shares."""

    model_config = ConfigDict(frozen=True)
    k: int
    mode: str
    sources: list[str]
    evaluated: list[str]
    cells: list[MatrixCell]
    content_share: Share
    delta_share: Share
    paper_percent: float = PAPER_OFF_DIAGONAL_POSITIVE


def _share(cells: Sequence[MatrixCell], attr: str) -> Share:
    off = [getattr(c, attr) for c in cells if c.source != c.evaluated]
    defined = [x for x in off if math.isfinite(x.value)]
    return Share(
        above_zero=sum(1 for x in defined if x.value > 0),
        ci_above_zero=sum(1 for x in defined if math.isfinite(x.low) and x.low > 0),
        defined=len(defined),
    )


def content_matrix(config: DoseConfig, scored: Scored, mode: str = "off") -> ContentMatrix | None:
    """The matrix at the largest dose in ``mode``; None without two sources, neutral
    controls and an off-diagonal (``dib.targets: diagonal`` has none)."""
    if len(config.sources) < 2 or config.dib.targets != "all" or "neutral" not in config.kinds:
        return None
    k = max(config.doses)
    evaluated = sorted({d for key in scored for d in scored[key]})
    empty = [key for key in scored if key[2] == 0 and key[3] == mode]
    cells = []
    for source in config.sources:
        plus = keys_of(scored, "biased", source, k, mode)
        minus = keys_of(scored, "neutral", source, k, mode) or keys_of(
            scored, "neutral", None, k, mode
        )
        if not plus:
            continue
        for e in evaluated:
            cells.append(
                MatrixCell(
                    source=source,
                    evaluated=e,
                    content=contrast(scored, mean_terms(plus, minus), e),
                    delta=contrast(scored, mean_terms(plus, empty[:1]), e),
                )
            )
    if not cells:
        return None
    return ContentMatrix(
        k=k,
        mode=mode,
        sources=[s for s in config.sources if any(c.source == s for c in cells)],
        evaluated=evaluated,
        cells=cells,
        content_share=_share(cells, "content"),
        delta_share=_share(cells, "delta"),
    )


def heat(matrix: ContentMatrix | None) -> dict[str, dict[str, float | None]]:
    """``{source: {evaluated domain: content contrast}}`` for the heatmap (None: undefined)."""
    if matrix is None:
        return {}
    out: dict[str, dict[str, float | None]] = {s: {} for s in matrix.sources}
    for c in matrix.cells:
        out[c.source][c.evaluated] = or_none(c.content.value)
    return out


def _short(c: ClusterEstimate) -> str:
    if not math.isfinite(c.value):
        return "–"
    if not (math.isfinite(c.low) and math.isfinite(c.high)):
        return f"{c.value:+.1f}"
    return f"{c.value:+.1f} [{c.low:+.1f}, {c.high:+.1f}]"


def matrix_lines(matrix: ContentMatrix | None) -> list[str]:
    """Report lines: the content matrix (rows: sources) and the off-diagonal shares."""
    if matrix is None:
        return []
    by = {(c.source, c.evaluated): c for c in matrix.cells}
    lines = [
        f"## Content contrast by source × evaluated domain (k = {matrix.k}, mode {matrix.mode}; "
        "exploratory)",
        "",
        "ΔGBV_e(stereotyped sets of the source) − ΔGBV_e(neutral sets), jackknife-t 95 % "
        "intervals over the evaluated domain's DIB contexts; no multiplicity correction.",
        "",
        "| source \\ evaluated | " + " | ".join(matrix.evaluated) + " |",
        "|---|" + "---|" * len(matrix.evaluated),
    ]
    for s in matrix.sources:
        row = [_short(by[(s, e)].content) if (s, e) in by else "–" for e in matrix.evaluated]
        lines.append(f"| {s} | " + " | ".join(row) + " |")
    lines.append("")
    for label, share in (
        ("content contrast", matrix.content_share),
        ("ΔGBV against the empty scope", matrix.delta_share),
    ):
        pct = share.percent
        lines.append(
            f"- Off-diagonal {label} above 0: {share.above_zero} of {share.defined}"
            + (f" ({pct:.2f} %)" if pct is not None else "")
            + f", interval above 0 in {share.ci_above_zero}; "
            f"the paper's Figure 3: {matrix.paper_percent:.2f} %."
        )
    return lines
