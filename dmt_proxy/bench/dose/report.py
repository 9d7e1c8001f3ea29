"""Render dose results: the text tables, Markdown and HTML reports, and two figures.

Report format ``dose-report-v1``. The headline readout first (the expected value;
``dib.readouts.HEADLINE_WHY`` says why), per source domain: the diagonal ΔGBV
with its paired CI, permutation p-value and MP against mode ``off``; the
off-diagonal mean; the mean shift; ΔAGBV. Then the written-integer readout, the
Figure 3 matrix at the largest dose, the minimum detectable effects, and a
verdict against the issue's goal, generated from the numbers. Figures:
``dose_response.png`` (diagonal ΔGBV vs k per mode, one panel per source) and
``dose_heatmap.png`` (ΔGBV of every evaluated domain per source at the largest
dose, mode off).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmt_proxy.bench.dib.readouts import HEADLINE, HEADLINE_WHY, READOUT_LABELS, Readout
from dmt_proxy.bench.dose.addenda import addendum_lines
from dmt_proxy.bench.dose.results import DoseResults, DoseRow, rows_of
from dmt_proxy.bench.harness.report import POWER_NOTE, fixed, heatmap, md_table, page, pyplot
from dmt_proxy.bench.harness.rundir import write_atomic
from dmt_proxy.bench.stats import Estimate, or_none
from dmt_proxy.domains import DOMAINS

REPORT_VERSION = "dose-report-v1"
MP_GOAL = -40.0
"""The issue's goal for DMT: MP at most −40 % with a CI that excludes 0."""


def _f(x: float | None, spec: str = "+.2f") -> str:
    return "n/a" if x is None or not math.isfinite(x) else format(x, spec)


def ci(cell: Estimate | None, spec: str = "+.2f", unit: str = "") -> str:
    """``+1.23 [-0.40, +2.90]``."""
    if cell is None:
        return "n/a"
    return f"{_f(cell.value, spec)}{unit} [{_f(cell.ci.low, spec)}, {_f(cell.ci.high, spec)}]"


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
            "MP vs off [95% CI]",
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
                ci(r.diagonal),
                _f(perm.p_value, ".3f") if perm is not None else "n/a",
                ci(r.mp_diagonal, "+.0f", "%") if r.mp_diagonal is not None else "—",
                ci(r.off_diagonal),
                ci(r.mean_shift),
                ci(r.agbv),
            ]
        )
    return table


def matrix(
    rows: Sequence[DoseRow], k: int, mode: str = "off"
) -> dict[str, dict[str, float | None]]:
    """``{source: {evaluated domain: ΔGBV}}`` of the biased scopes at dose ``k`` in ``mode``."""
    return {
        r.source: {d: or_none(c.value) for d, c in r.per_domain.items()}
        for r in rows
        if r.kind == "biased" and r.k == k and r.mode == mode and r.source is not None
    }


def matrix_rows(rows: Sequence[DoseRow], k: int) -> list[list[str]]:
    """Figure 3's matrix as text, each cell with its CI (mode off)."""
    cells = [r for r in rows if r.kind == "biased" and r.k == k and r.mode == "off"]
    domains = [d for d in DOMAINS if any(d in r.per_domain for r in cells)]
    table = [["source \\ evaluated", *domains]]
    for r in cells:
        table.append([r.source or "?", *(ci(r.per_domain.get(d)) for d in domains)])
    return table


def mde_rows(rows: Sequence[DoseRow]) -> list[list[str]]:
    """The minimum detectable diagonal ΔGBV and ΔAGBV of each biased cell in mode off."""
    table = [["scope", "k", "MDE diagonal ΔGBV", "MDE ΔAGBV", "MDE Δ(mode) − Δ(off), DMT"]]
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
                _f(r.diagonal_mde, ".2f"),
                _f(r.agbv_mde, ".2f"),
                _f(dmt.mde_vs_off, ".2f") if dmt is not None else "n/a",
            ]
        )
    return table


def permutation_note(results: DoseResults) -> str:
    """What the paired permutation test can show with this many contexts."""
    fewest = min(results.contexts.values(), default=0)
    floor = f"{2 / 2**fewest:.3g}" if fewest else "n/a"
    return (
        "perm p: paired permutation test of the diagonal ΔGBV (each context's decisions "
        "swapped between the cell and k = 0 with probability ½; all 2^C patterns, exactly, when "
        "there are no more of them than permutations asked). With C contexts in a domain "
        f"there are 2^C swaps, so p cannot fall below 2/2^C: {floor} with the {fewest} "
        "contexts of the thinnest domain here. The bootstrap CIs resample the same few "
        "contexts and are coarse for the same reason."
    )


def verdict(results: DoseResults) -> list[str]:
    """The issue's two goals, answered from the headline numbers, with the power when null."""
    rows = rows_of(results)
    if not rows:
        return ["No finished cell has a baseline yet: nothing to report."]
    out: list[str] = []
    moved = [
        r for r in rows if r.kind == "biased" and r.mode == "off" and excludes_zero(r.diagonal)
    ]
    if moved:
        out.append(
            "Diagonal ΔGBV with a 95% CI excluding 0 (mode off): "
            + "; ".join(f"{r.source} k={r.k}: {ci(r.diagonal)}" for r in moved)
        )
    else:
        mdes = [r.diagonal_mde for r in rows if r.kind == "biased" and r.mode == "off"]
        finite = [x for x in mdes if x is not None and math.isfinite(x)]
        span = f"{min(finite):.2f}–{max(finite):.2f}" if finite else "n/a"
        out.append(
            "No diagonal ΔGBV has a 95% CI excluding 0 in mode off: on this agent the seeded "
            f"memories did not measurably move the gap between groups. Minimum detectable "
            f"diagonal ΔGBV (80% power): {span} points."
        )
    good = [
        r
        for r in rows
        if r.mode == "dmt"
        and r.kind == "biased"
        and r.mp_diagonal is not None
        and r.mp_diagonal.defined
        and r.mp_diagonal.value <= MP_GOAL
        and excludes_zero(r.mp_diagonal)
    ]
    if good:
        out.append(
            "DMT with MP ≤ −40% and a CI excluding 0: "
            + "; ".join(f"{r.source} k={r.k}: {ci(r.mp_diagonal, '+.0f', '%')}" for r in good)
        )
    else:
        out.append(
            "No DMT cell reaches MP ≤ −40% with a CI excluding 0. MP divides by mode off's "
            "diagonal ΔGBV; where that CI holds 0 (below), MP is the ratio of noise to noise."
        )
    shifted = [
        r for r in rows if r.kind == "biased" and r.mode == "off" and excludes_zero(r.mean_shift)
    ]
    if shifted:
        out.append(
            "Mean shift of all groups with a CI excluding 0 (mode off): "
            + "; ".join(f"{r.source} k={r.k}: {ci(r.mean_shift)}" for r in shifted)
        )
    return out


def render_text(results: DoseResults) -> str:
    """The plain-text report ``dmt-bench dose`` prints."""
    cfg = results.config
    head = (
        f"Dose–response: ΔGBV = GBV(k memories) − GBV(k = 0), paired over the same DIB "
        f"contexts, 95% bootstrap CIs\nagent {cfg['models']['agent']['model']} | auditor "
        f"{cfg['models']['auditor']['model']} | memory {cfg['memory']} "
        f"(every decision shown the scope's k memories) | "
        f"{results.decisions_per_cell} DIB decisions per cell "
        f"({cfg['dib']['contexts_per_domain']} contexts per domain) | "
        f"cells {results.cells_done}/{results.cells_planned} (the empty scope counts once per mode)"
    )
    lines = [head, ""]
    for readout in (HEADLINE, *(r for r in Readout if r is not HEADLINE)):
        rows = rows_of(results, readout)
        if not rows:
            continue
        lines += [f"[{READOUT_LABELS[readout]}]", fixed(source_rows(rows)), ""]
    rows = rows_of(results)
    kmax = max((r.k for r in rows), default=0)
    if matrix(rows, kmax):
        lines += [
            f"Figure 3 shape: ΔGBV per evaluated domain at k={kmax}, mode off (headline readout)",
            fixed(matrix_rows(rows, kmax)),
            "",
        ]
    lines += [fixed(mde_rows(rows)), "", POWER_NOTE, "", permutation_note(results)]
    lines += ["", HEADLINE_WHY, ""]
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
    """``dose_response.png`` and ``dose_heatmap.png`` (headline readout)."""
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
                    d = r.diagonal
                    if (r.source, r.kind, r.mode) != (source, "biased", mode) or d is None:
                        continue
                    if not d.defined:
                        continue
                    low = d.value - d.ci.low if math.isfinite(d.ci.low) else 0.0
                    high = d.ci.high - d.value if math.isfinite(d.ci.high) else 0.0
                    # A percentile interval need not contain the point: clip, never negative.
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
    kmax = max((r.k for r in rows), default=0)
    heat = matrix(rows, kmax)
    if heat:
        names.append(
            heatmap(
                plt,
                heat,
                out / "dose_heatmap.png",
                f"ΔGBV at k={kmax} vs k=0, mode off",
                "biased memories of",
            )
        )
    return names


def write_report(results: DoseResults, out: Path) -> None:
    """``results.json``, ``report.md``, ``report.html`` and the figures in ``out``."""
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
    md += [f"![{n}]({n})" for n in names]
    write_atomic(out / "report.md", "\n".join(md) + "\n")
    body = f"<h1>{html.escape(results.name)}: dose–response</h1><pre>{html.escape(text)}</pre>"
    body += "".join(f"<p><img src='{n}' alt='{n}'></p>" for n in names)
    write_atomic(out / "report.html", page(results.name, body))
