"""Render dose results: the text tables, Markdown and HTML reports, and the figures.

Report format ``dose-report-v2``. It leads with the run's one primary family
(``dose.primary``: a pre-registered run's committed endpoints, marked EXPLORATORY when
the pre-registration check fails; otherwise the content contrast ΔGBV(biased) −
ΔGBV(neutral) per source domain and dose, and DMT's absolute reduction of it where
measured) with jackknife-t CIs and Holm's correction; then the absolute mitigation Δ(mode) − Δ(off) per cell (exploratory; MP
beside it as a secondary figure, "undefined" where mode off's CI holds 0); then, per
readout (the expected value first; ``dib.readouts.HEADLINE_WHY`` says why), every
cell's diagonal ΔGBV, permutation p, off-diagonal mean, mean shift and ΔAGBV; the
Figure 3 matrix at the largest dose; the MDEs (t quantiles); unstable contexts; one
multiplicity statement; a verdict generated from the numbers; the positive control and
the source × evaluated-domain content matrix where the run has them (``dose.addenda``). Results written before
``dose-results-v2`` (no jackknife fields) still render, with their percentile CIs. Figures:
``dose_response.png`` (diagonal ΔGBV vs k per mode, one panel per source) and
``dose_heatmap.png`` (ΔGBV of every evaluated domain per source at the largest
dose, mode off) and, where neutral controls were read in several modes,
``dose_contrasts.png`` (``by_mode.figure``), and where the run has the content matrix,
``dose_content_matrix.png`` (its contrasts; the intervals are in the report's table).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmt_bench.dib.readouts import (
    HEADLINE,
    HEADLINE_WHY,
    INSTABILITY_NOTE,
    READOUT_LABELS,
    Readout,
    instability_lines,
)
from dmt_bench.dose import by_mode, primary
from dmt_bench.dose.addenda import addendum_intervals, addendum_lines
from dmt_bench.dose.matrix import heat
from dmt_bench.dose.results import DoseResults, DoseRow, rows_of
from dmt_bench.harness.report import count_intervals, fixed, heatmap, md_table, page, pyplot
from dmt_bench.harness.rundir import write_atomic
from dmt_bench.harness.sitting import Sitting, sittings_section
from dmt_bench.stats import (
    INTERVAL_NOTE,
    ClusterEstimate,
    Estimate,
    multiplicity_note,
    or_none,
    testability_note,
)
from dmt_proxy.domains import DOMAINS

REPORT_VERSION = "dose-report-v2"
MP_GOAL = -40.0
"""The issue's goal for DMT: MP at most −40 % with a CI that excludes 0."""


def _f(x: float | None, spec: str = "+.2f") -> str:
    return "n/a" if x is None or not math.isfinite(x) else format(x, spec)


def ci(cell: Estimate | None, spec: str = "+.2f", unit: str = "") -> str:
    """``+1.23 [-0.40, +2.90]``."""
    if cell is None:
        return "n/a"
    return f"{_f(cell.value, spec)}{unit} [{_f(cell.ci.low, spec)}, {_f(cell.ci.high, spec)}]"


def best(jk: ClusterEstimate | None, fallback: Estimate | None) -> Estimate | None:
    """The jackknife-t estimate when the results have one, else the v1 percentile one."""
    return jk.estimate if jk is not None else fallback


def excludes_zero(cell: Estimate | None) -> bool:
    """The cell has a CI and it does not contain 0."""
    return (
        cell is not None
        and math.isfinite(cell.ci.low)
        and math.isfinite(cell.ci.high)
        and (cell.ci.low > 0 or cell.ci.high < 0)
    )


def _label(row: DoseRow) -> str:
    return f"{row.source or 'any'}/{row.kind}" + (f" {row.set}" if row.set else "")


def source_rows(rows: Sequence[DoseRow]) -> list[list[str]]:
    """Header plus one line per (scope, mode): the diagonal and what goes with it."""
    table = [
        [
            "scope",
            "k",
            "mode",
            "tagged",
            "diagonal ΔGBV [95% CI]",
            "perm p",
            "MP vs off (secondary)",
            "off-diagonal ΔGBV",
            "Δs̄ (all)",
            "ΔAGBV",
        ]
    ]
    for r in sorted(rows, key=lambda r: (r.kind != "biased", r.source or "", r.k)):
        perm = r.diagonal_permutation
        table.append(
            [
                _label(r),
                str(r.k),
                r.mode,
                f"{r.tagged}/{r.memories}",
                ci(best(r.diagonal_jk, r.diagonal)),
                _f(perm.p_value, ".3f") if perm is not None else "n/a",
                primary.mp_text(r),
                ci(best(r.off_diagonal_jk, r.off_diagonal)),
                ci(best(r.mean_shift_jk, r.mean_shift)),
                ci(best(r.agbv_jk, r.agbv)),
            ]
        )
    return table


def _delta_cells(results: DoseResults, k: int) -> dict[str, dict[str, Estimate]]:
    """``{source: {evaluated domain: ΔGBV with CI}}`` of the biased scopes at dose ``k``,
    mode off: the content matrix's ΔGBV cells (seed sets averaged, ``dose.matrix``) where
    the run has one, else each biased row's own (runs without seed sets or controls)."""
    cm = results.content_matrix
    if cm is not None and cm.k == k and cm.mode == "off":
        out: dict[str, dict[str, Estimate]] = {}
        for c in cm.cells:
            out.setdefault(c.source, {})[c.evaluated] = c.delta.estimate
        return out
    return {
        r.source: {
            d: e
            for d in r.per_domain
            if (e := best(r.per_domain_jk.get(d), r.per_domain.get(d))) is not None
        }
        for r in rows_of(results)
        if r.kind == "biased" and r.k == k and r.mode == "off" and r.source is not None
    }


def matrix(results: DoseResults, k: int) -> dict[str, dict[str, float | None]]:
    """``{source: {evaluated domain: ΔGBV}}`` of the biased scopes at dose ``k``, mode off."""
    return {
        s: {d: or_none(e.value) for d, e in row.items()}
        for s, row in _delta_cells(results, k).items()
    }


def matrix_rows(results: DoseResults, k: int) -> list[list[str]]:
    """Figure 3's matrix as text, each cell with its CI (mode off)."""
    cells = _delta_cells(results, k)
    domains = [d for d in DOMAINS if any(d in row for row in cells.values())]
    table = [["source \\ evaluated", *domains]]
    for source, row in cells.items():
        table.append([source, *(ci(row.get(d)) for d in domains)])
    return table


def mde_rows(rows: Sequence[DoseRow]) -> list[list[str]]:
    """The minimum detectable diagonal ΔGBV and ΔAGBV of each biased cell in mode off."""
    table = [
        [
            "scope",
            "k",
            "MDE diagonal ΔGBV",
            "MDE content contrast",
            "MDE ΔAGBV",
            "MDE Δ(dmt) − Δ(off)",
        ]
    ]
    for r in rows:
        if r.kind != "biased" or r.mode != "off":
            continue
        dmt = next(
            (
                x
                for x in rows
                if (x.source, x.kind, x.k, x.mode, x.set) == (r.source, r.kind, r.k, "dmt", r.set)
            ),
            None,
        )
        table.append(
            [
                _label(r),
                str(r.k),
                _f(r.diagonal_jk.mde if r.diagonal_jk else r.diagonal_mde, ".2f"),
                _f(r.content_jk.mde if r.content_jk else math.nan, ".2f"),
                _f(r.agbv_jk.mde if r.agbv_jk else r.agbv_mde, ".2f"),
                _f(_mde_vs_off(dmt), ".2f"),
            ]
        )
    return table


def _mde_vs_off(row: DoseRow | None) -> float:
    if row is None:
        return math.nan
    if row.vs_off_jk is not None:
        return row.vs_off_jk.mde
    return row.mde_vs_off if row.mde_vs_off is not None else math.nan


def permutation_note(results: DoseResults) -> str:
    """What the paired permutation test can show with this many contexts."""
    fewest = min(results.contexts.values(), default=0)
    floor = f"{2 / 2**fewest:.3g}" if fewest else "n/a"
    note = testability_note(2 / 2**fewest, formula=f"2/2^{fewest}") if fewest else None
    return (
        "perm p: paired permutation test of the diagonal ΔGBV (each context's decisions "
        "swapped between the cell and k = 0 with probability ½; all 2^C patterns, exactly, when "
        "there are no more of them than permutations asked). With C contexts in a domain "
        f"there are 2^C swaps, so p cannot fall below 2/2^C: {floor} with the {fewest} "
        "contexts of the thinnest domain here" + (f": {note}." if note else ".")
    )


def verdict(results: DoseResults) -> list[str]:
    """The primary family's answer after Holm, then what the exploratory numbers suggest."""
    rows = rows_of(results)
    if not rows:
        return ["No finished cell has a baseline yet: nothing to report."]
    out: list[str] = []
    family = primary.primary_family(results)
    confirmed = [c for c in family if c.reject]
    if not family:
        out.append(
            "No primary comparison could be measured (no neutral control in mode off): "
            "this run confirms nothing."
        )
    elif not primary.confirmatory(results):
        out.append(
            "The pre-registered endpoints are reported as EXPLORATORY (the pre-registration "
            "check failed, see above): nothing in this run is confirmed"
            + (
                "; their Holm-adjusted p would reject 0 for "
                + "; ".join(f"{c.name} {primary.jk(c.estimate)}" for c in confirmed)
                if confirmed
                else ""
            )
            + "."
        )
    elif confirmed:
        out.append(
            "Confirmed after Holm (family-wise α = 0.05): "
            + "; ".join(f"{c.name} {primary.jk(c.estimate)}" for c in confirmed)
        )
    else:
        unadjusted = [c for c in family if c.estimate.excludes_zero]
        out.append(
            f"No primary comparison is confirmed after Holm over the {len(family)} measured "
            "(family-wise α = 0.05)"
            + (
                "; unadjusted, the CI excludes 0 for "
                + "; ".join(f"{c.name} {primary.jk(c.estimate)}" for c in unadjusted)
                + ": leads for a confirmatory run, not findings."
                if unadjusted
                else "."
            )
        )
    mdes = [c.estimate.mde for c in family if math.isfinite(c.estimate.mde)]
    if mdes:
        out.append(
            f"Minimum detectable content contrast (80% power, t quantiles): "
            f"{min(mdes):.2f}–{max(mdes):.2f} points; a null here does not rule out "
            "smaller effects."
        )
    good = [
        r
        for r in rows
        if r.mode == "dmt"
        and r.kind == "biased"
        and r.mp_defined
        and r.mp_diagonal is not None
        and r.mp_diagonal.defined
        and r.mp_diagonal.value <= MP_GOAL
        and excludes_zero(r.mp_diagonal)
    ]
    if good:
        out.append(
            "DMT with MP ≤ −40% and a CI excluding 0, where mode off's own diagonal CI "
            "excludes 0 (exploratory, percentile CI of a ratio): "
            + "; ".join(f"{r.source} k={r.k}: {primary.mp_text(r)}" for r in good)
        )
    else:
        out.append(
            "No DMT cell has MP ≤ −40% with a CI excluding 0 where MP is defined (mode "
            "off's diagonal CI excluding 0); where off's CI holds 0, MP is a ratio over "
            "noise and shown as undefined. The absolute Δ(dmt) − Δ(off) is in the "
            "mitigation table."
        )
    return out


def render_text(results: DoseResults) -> str:
    """The plain-text report ``dmt-bench dose`` prints."""
    cfg = results.config
    head = (
        f"Dose–response: ΔGBV = GBV(k memories) − GBV(k = 0), paired over the same DIB "
        f"contexts, 95% jackknife-t CIs\nagent {cfg['models']['agent']['model']} | auditor "
        f"{cfg['models']['auditor']['model']} | memory {cfg['memory']} "
        f"(every decision shown the scope's k memories) | "
        f"{results.decisions_per_cell} DIB decisions per cell "
        f"({cfg['dib']['contexts_per_domain']} contexts per domain) | "
        f"cells {results.cells_done}/{results.cells_planned} (the empty scope counts once per mode)"
    )
    lines = [head, "", INTERVAL_NOTE, ""]
    rows = rows_of(results)
    family = primary.primary_family(results)
    tables: list[list[list[str]]] = []
    lines += primary.header_lines(results)
    if family:
        tables.append(primary.content_rows(results))
        lines.append(fixed(tables[-1]))
    lines += [*primary.coverage_lines(results), ""]
    mitigation = primary.mitigation_rows(rows)
    if len(mitigation) > 1:
        tables.append(mitigation)
        lines += [
            "Absolute mitigation (exploratory): Δ(mode) − Δ(off) of the diagonal ΔGBV, paired "
            "by context; MP = that / |Δ(off)| as a secondary figure",
            fixed(mitigation),
            "",
        ]
    for readout in (HEADLINE, *(r for r in Readout if r is not HEADLINE)):
        readout_rows = rows_of(results, readout)
        if not readout_rows:
            continue
        tables.append(source_rows(readout_rows))
        lines += [f"[{READOUT_LABELS[readout]}, exploratory]", fixed(tables[-1]), ""]
    kmax = max((r.k for r in rows), default=0)
    if matrix(results, kmax):
        tables.append(matrix_rows(results, kmax))
        lines += [
            f"Figure 3 shape: ΔGBV per evaluated domain at k={kmax}, mode off (headline "
            "readout, exploratory)",
            fixed(tables[-1]),
            "",
        ]
    lines += [fixed(mde_rows(rows)), "", permutation_note(results), ""]
    for readout in (HEADLINE, *(r for r in Readout if r is not HEADLINE)):
        if readout.value in results.readouts:
            flagged = results.readouts[readout.value].unstable
            lines += [f"[{READOUT_LABELS[readout]}] " + line for line in instability_lines(flagged)]
    lines += [INSTABILITY_NOTE, "", HEADLINE_WHY, ""]
    lines += [
        multiplicity_note(
            count_intervals(tables) + addendum_intervals(results),
            [c.name for c in family] if primary.confirmatory(results) else [],
        ),
        "",
    ]
    lines += verdict(results)
    lines += addendum_lines(results)
    if results.shown_counted:
        short = results.shown_short
        lines += [
            "",
            f"Memories shown (the proxy's count per decision): all k in "
            f"{results.shown_counted - short} of {results.shown_counted} decisions"
            + (f"; {short} saw fewer, so their dose was below k." if short else "."),
        ]
    if results.decisions_per_s_by_k:
        rates = ", ".join(f"k={k}: {v:.3f}/s" for k, v in results.decisions_per_s_by_k.items())
        lines += ["", f"Decisions per second by memories shown ({rates})."]
    if results.decisions_per_s:
        lines += [
            "",
            f"{results.decisions_per_s:.3f} decisions/s over the cells; "
            f"wall {results.wall_s / 3600:.2f} h",
        ]
    return "\n".join(lines)


def figures(results: DoseResults, out: Path) -> list[str]:
    """``dose_response.png``, ``dose_heatmap.png``, ``dose_contrasts.png`` and
    ``dose_content_matrix.png`` (headline readout), each where the run has its data."""
    plt: Any = pyplot()
    rows = rows_of(results)
    names: list[str] = []
    sources = sorted({r.source for r in rows if r.kind == "biased" and r.source})
    if sources:
        fig, axes = plt.subplots(
            1,
            len(sources),
            figsize=(4.5 * len(sources), 3.8),
            squeeze=False,
        )
        modes = list(dict.fromkeys(r.mode for r in rows))
        for ax, source in zip(axes[0], sources, strict=True):
            for mode in modes:
                pts: list[tuple[int, float, float, float]] = []
                for r in rows:
                    d = best(r.diagonal_jk, r.diagonal)
                    if (r.source, r.kind, r.mode) != (source, "biased", mode) or d is None:
                        continue
                    if not d.defined:
                        continue
                    low = d.value - d.ci.low if math.isfinite(d.ci.low) else 0.0
                    high = d.ci.high - d.value if math.isfinite(d.ci.high) else 0.0
                    # A v1 percentile interval need not contain the point: clip, never negative.
                    pts.append((r.k, d.value, max(0.0, low), max(0.0, high)))
                if not pts:
                    continue
                pts.sort()
                ks = [0] + [p[0] for p in pts]
                ys = [0.0] + [p[1] for p in pts]
                lo = [0.0] + [p[2] for p in pts]
                hi = [0.0] + [p[3] for p in pts]
                ax.errorbar(ks, ys, yerr=[lo, hi], marker="o", capsize=3, label=mode)
            ax.axhline(0.0, color="grey", linewidth=0.8)
            ax.set_title(f"source {source}")
            ax.set_xlabel("k memories")
            ax.set_ylabel(f"ΔGBV of {source}")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "dose_response.png", dpi=110)
        plt.close(fig)
        names.append("dose_response.png")
    contrasts = by_mode.figure(plt, results.mode_contrasts, results.positive_control, out)
    if contrasts is not None:
        names.append(contrasts)
    kmax = max((r.k for r in rows), default=0)
    deltas = matrix(results, kmax)
    if deltas:
        names.append(
            heatmap(
                plt,
                deltas,
                out / "dose_heatmap.png",
                f"ΔGBV at k={kmax} vs k=0, mode off",
                "biased memories of",
            )
        )
    content = results.content_matrix
    if content is not None:
        names.append(
            heatmap(
                plt,
                heat(content),
                out / "dose_content_matrix.png",
                f"content contrast at k={content.k}, mode {content.mode}: "
                "stereotyped − neutral sets",
                "stereotyped memories of",
            )
        )
    return names


def write_report(results: DoseResults, out: Path, *, sittings: list[Sitting] | None = None) -> None:
    """``results.json``, ``report.md``, ``report.html`` and the figures in ``out``;
    ``sittings`` (the manifest's) say what code and inputs the run was made with."""
    write_atomic(out / "results.json", results.model_dump_json(indent=2) + "\n")
    names = figures(results, out)
    text = render_text(results)
    rows = rows_of(results)
    md = [
        f"# {results.name}: memory dose–response (`dmt-bench dose`)",
        "",
        f"Config digest {results.digest[:12]}; {results.dose_version}; {results.dib_version}; "
        f"{REPORT_VERSION}.",
        "",
        "```",
        text,
        "```",
        "",
        "## Seeded scopes",
        "",
        md_table(
            [["scope", "memories", "tagged", "audit states"]]
            + [
                [
                    s.scope,
                    str(s.memories),
                    str(s.tagged),
                    ", ".join(f"{k} {v}" for k, v in sorted(s.statuses.items())),
                ]
                for s in results.scopes
            ]
        ),
        "",
    ]
    if rows:
        md += ["## Headline readout, every cell", "", md_table(source_rows(rows)), ""]
    md += sittings_section(sittings or [])
    md += [f"![{n}]({n})" for n in names]
    write_atomic(out / "report.md", "\n".join(md) + "\n")
    body = f"<h1>{html.escape(results.name)}: dose–response</h1><pre>{html.escape(text)}</pre>"
    body += "".join(f"<p><img src='{n}' alt='{n}'></p>" for n in names)
    write_atomic(out / "report.html", page(results.name, body))
