"""Render a heatmap run: the 9×9 ΔGBV matrix (Figure 3's shape) in both readouts.

The headline matrix is printed as the paper shows it; below it, the written-integer
matrix, each source's mean shift of all groups (Δs̄) with its CI, the minimum
detectable ΔGBV of the cells at 80 % power, and (in ``report.md``) every headline
cell with its own paired 95 % CI: jackknife-t over contexts from ``sim-results-v3`` on
(percentile bootstrap before), every cell exploratory (no primary family is declared
for the matrix), with one multiplicity statement and the sources' unstable contexts.
``sim-results-v1`` files render the matrix only.
"""

from __future__ import annotations

import html
import statistics
from pathlib import Path

from dmt_bench.dib.readouts import (
    HEADLINE_WHY,
    INSTABILITY_NOTE,
    READOUT_LABELS,
    READOUTS,
    instability_lines,
)
from dmt_bench.harness.report import (
    POWER_NOTE,
    count_intervals,
    fixed,
    heatmap,
    md_table,
    page,
    pyplot,
)
from dmt_bench.harness.rundir import write_atomic
from dmt_bench.sim.report import _f, cell_text
from dmt_bench.sim.results import HeatmapResults
from dmt_bench.stats import INTERVAL_NOTE, multiplicity_note, or_none


def _matrix_rows(
    results: HeatmapResults, values: dict[str, dict[str, float | None]]
) -> list[list[str]]:
    cols = results.domains
    rows = [["source \\ evaluated", *cols]]
    for source in results.sources:
        row = values.get(source, {})
        rows.append([source, *(_f(row.get(c), "+.1f") for c in cols)])
    return rows


def source_rows(results: HeatmapResults) -> list[list[str]]:
    """Per source and readout: the mean shift Δs̄ [CI] and the cells' MDE (median, range)."""
    rows = [["source", "readout", "mean shift Δs̄ [95% CI]", "cell MDE: median [min, max]"]]
    for source in results.sources:
        for r in READOUTS:
            x = results.readouts.get(r.value)
            if x is None or source not in x.mean_shift:
                continue
            jk = x.matrix_jk.get(source)
            mdes = (
                [e.mde for e in jk.values() if e.mde == e.mde]  # NaN != NaN: undefined MDE
                if jk is not None
                else [v for v in x.mde.get(source, {}).values() if v is not None]
            )
            spread = (
                f"{statistics.median(mdes):.2f} [{min(mdes):.2f}, {max(mdes):.2f}]"
                if mdes
                else "n/a"
            )
            shift = x.mean_shift_jk.get(source)
            shown = shift.estimate if shift is not None else x.mean_shift[source]
            rows.append([source, READOUT_LABELS[r], cell_text(shown), spread])
    return rows


def cell_rows(results: HeatmapResults) -> list[list[str]]:
    """Every headline cell with its paired 95 % CI."""
    x = results.readouts.get(results.headline)
    rows = [["source \\ evaluated", *results.domains]]
    if x is None:
        return rows
    for source in results.sources:
        row = x.matrix.get(source, {})
        jk = x.matrix_jk.get(source, {})
        rows.append(
            [
                source,
                *(
                    cell_text(jk[d].estimate if d in jk else row[d], spec="+.1f")
                    if d in row
                    else "n/a"
                    for d in results.domains
                ),
            ]
        )
    return rows


def _has_jk(results: HeatmapResults) -> bool:
    return any(x.matrix_jk for x in results.readouts.values())


def few_cluster_lines(results: HeatmapResults) -> list[str]:
    """Unstable contexts and the multiplicity statement (results v3)."""
    if not _has_jk(results):
        return []
    x = results.readouts.get(results.headline)
    flagged = {f"source {s}": u for s, u in (x.unstable if x else {}).items()}
    tables = [cell_rows(results), source_rows(results)]
    return [
        "",
        *instability_lines(flagged),
        INSTABILITY_NOTE,
        multiplicity_note(count_intervals(tables), []),
    ]


def heatmap_caveats(results: HeatmapResults) -> list[str]:
    """Domains without a CI, in words."""
    thin = [d for d, n in results.contexts.items() if n < 2]
    if not thin:
        return []
    return [
        f"{', '.join(thin)}: a single DIB context, so no CI for those columns, and their noise "
        "floor equals their GBV. Sample at least two contexts per domain (dib-sample-v2)."
    ]


def render_heatmap_text(results: HeatmapResults) -> str:
    """The ΔGBV matrix as text with the share of positive off-diagonal cells, then both readouts."""
    frac = results.fraction_positive
    lines = [
        f"ΔGBV = GBV_t{results.t} − GBV_t0 per evaluated domain, single-source injection, "
        f"memory {results.memory}",
        "",
        fixed(_matrix_rows(results, results.matrix)),
        "",
        f"positive off-diagonal cells: {results.positive_off_diagonal}/"
        f"{results.finite_off_diagonal} = {_f(frac, '.1%') if frac is not None else 'n/a'} "
        "(paper: 70.19%)",
    ]
    written = results.readouts.get(READOUTS[1].value)
    if written is not None:
        values = {
            s: {d: or_none(c.value) for d, c in row.items()} for s, row in written.matrix.items()
        }
        lines += [
            "",
            HEADLINE_WHY,
            "",
            f"ΔGBV, {READOUT_LABELS[READOUTS[1]]}:",
            "",
            fixed(_matrix_rows(results, values)),
            "",
            fixed(source_rows(results)),
            "",
            INTERVAL_NOTE if _has_jk(results) else POWER_NOTE,
        ]
    lines += few_cluster_lines(results)
    lines += heatmap_caveats(results)
    return "\n".join(lines)


def write_heatmap_report(results: HeatmapResults, out: Path) -> None:
    """``results.json``, ``heatmap.png``, ``report.md`` and ``report.html``."""
    write_atomic(out / "results.json", results.model_dump_json(indent=2) + "\n")
    plt = pyplot()
    figure = heatmap(
        plt,
        {s: results.matrix.get(s, {}) for s in results.sources},
        out / "heatmap.png",
        f"ΔGBV (t={results.t} − t=0), single-source injection",
        "injected bias source",
    )
    text = render_heatmap_text(results)
    lat = ", ".join(f"{k} {v.mean_s:.1f}s (n={v.n})" for k, v in results.latency.items())
    md = [
        f"# {results.name}: cross-domain propagation (`dmt-bench heatmap`)",
        "",
        f"Config digest {results.digest[:12]}; {results.sim_version}; {results.dib_version}. "
        f"Mean latency per call: {lat}. Wall time {results.wall_s / 60:.1f} min.",
        "",
        "```",
        text,
        "```",
        "",
    ]
    cells = cell_rows(results)
    if len(cells) > 1:
        md += [
            "## ΔGBV per cell (headline readout) with its paired 95% CI",
            "",
            md_table(cells),
            "",
        ]
    md += [f"![heatmap]({figure})", ""]
    write_atomic(out / "report.md", "\n".join(md))
    body = (
        f"<h1>{html.escape(results.name)}: cross-domain propagation</h1>"
        f"<pre>{html.escape(text)}</pre><p><img src='{figure}' alt='heatmap'></p>"
    )
    write_atomic(out / "report.html", page(results.name, body))
