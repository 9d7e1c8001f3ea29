"""Render results: the Table 2 text, Markdown and HTML reports, matplotlib figures.

Report format ``sim-report-v1``. Figures are PNGs next to the reports:
``agbv_<memory>.png`` (AGBV vs turn per condition, 95 % CI bars),
``domains_<memory>.png`` (GBV_d vs turn, one panel per domain),
``mitigation_heatmap.png`` (ΔGBV_d(mitigated) − ΔGBV_d(baseline), Figure 4's shape)
and ``heatmap.png`` (single-source propagation, Figure 3's shape).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from dmt_proxy.bench.sim.records import write_atomic
from dmt_proxy.bench.sim.results import Cell, CompareResults, HeatmapResults
from dmt_proxy.domains import DOMAINS

REPORT_VERSION = "sim-report-v1"
LABELS = {"baseline": "No mitigation", "ssp": "SSP", "dmt": "DMT", "ssp+dmt": "SSP+DMT"}


def _f(x: float | None, spec: str = "+.2f") -> str:
    return "n/a" if x is None else format(x, spec)


def cell_text(cell: Cell, mp: Cell | None = None) -> str:
    """``+1.23 [-0.40, +2.90] (↓35.0%)``."""
    text = f"{_f(cell.value)} [{_f(cell.low)}, {_f(cell.high)}]"
    if mp is not None and mp.value is not None:
        arrow = "↓" if mp.value < 0 else "↑" if mp.value > 0 else "±"
        text += f" ({arrow}{abs(mp.value):.1f}%)"
    return text


def table2_rows(results: CompareResults) -> list[list[str]]:
    """Header plus one row per memory architecture and audit turn (t80-equivalent, T)."""
    conds = [c for c in results.config["conditions"]]
    header = ["Memory", "t", *(LABELS.get(c, c) for c in conds)]
    rows = [header]
    for arch in results.archs:
        for t in sorted({d.t for d in arch.deltas}):
            label = f"{t}" + (
                " (t80, T)"
                if t == results.t80 == results.turns
                else " (t80)"
                if t == results.t80
                else " (T)"
            )
            by_cond = {d.condition: d for d in arch.deltas if d.t == t}
            cells = [
                cell_text(by_cond[c].delta, by_cond[c].mp) if c in by_cond else "n/a" for c in conds
            ]
            rows.append([arch.memory, label, *cells])
    return rows


def _fixed(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def render_table2(results: CompareResults) -> str:
    """The Table 2 shape as fixed-width text (what ``compare`` prints)."""
    cfg = results.config
    head = (
        f"ΔAGBV = AGBV_t − AGBV_0 (0–100 scale), 95% paired bootstrap CI, (MP vs no mitigation)\n"
        f"agent {cfg['models']['agent']['model']} | auditor {cfg['models']['auditor']['model']} | "
        f"generator {cfg['models']['generator']['model']} | T={results.turns} "
        f"Δt={cfg['interval']} λ={cfg['injection']['rate']} | {results.dib_decisions} DIB "
        f"decisions per audit | seed {cfg['seed']}"
    )
    s = results.stream
    foot = (
        f"stream: {s.selected} turns selected for injection, {s.injected} injected "
        f"({s.intact_as_written} kept the question verbatim, {s.repaired} repaired, "
        f"{s.fallback} fell back); wall {results.wall_s / 60:.1f} min"
    )
    if any(d.delta.low is None for a in results.archs for d in a.deltas):
        foot += "\nCIs n/a: they need at least 2 DIB contexts per domain (a larger --dib-sample)"
    return f"{head}\n\n{_fixed(table2_rows(results))}\n\n{foot}"


def _md_table(rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def _html_table(rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _plt() -> object:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def compare_figures(results: CompareResults, out: Path) -> list[str]:
    """AGBV vs turn, per-domain curves per architecture, and the mitigation heatmap."""
    plt = _plt()
    names: list[str] = []
    for arch in results.archs:
        fig, ax = plt.subplots(figsize=(6, 4))  # type: ignore[attr-defined]
        for cond in results.config["conditions"]:
            rows = sorted((r for r in arch.checkpoints if r.condition == cond), key=lambda r: r.t)
            pts = [(r.t, r.agbv) for r in rows if r.agbv.value is not None]
            if not pts:
                continue
            ts = [t for t, _ in pts]
            ys = [c.value for _, c in pts]
            # A percentile interval need not contain the point estimate: clip, never negative.
            lo = [max(0.0, c.value - c.low) if c.low is not None else 0.0 for _, c in pts]  # type: ignore[operator]
            hi = [max(0.0, c.high - c.value) if c.high is not None else 0.0 for _, c in pts]  # type: ignore[operator]
            ax.errorbar(ts, ys, yerr=[lo, hi], marker="o", capsize=3, label=LABELS.get(cond, cond))
        ax.set_xlabel("turn t")
        ax.set_ylabel("AGBV (0–100)")
        ax.set_title(f"AGBV vs turn — {arch.memory}")
        ax.legend()
        name = f"agbv_{arch.memory}.png"
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)  # type: ignore[attr-defined]
        names.append(name)

        domains = [d for d in DOMAINS if any(d in r.gbv for r in arch.checkpoints)]
        cols = 3
        nrows = max(1, (len(domains) + cols - 1) // cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(11, 3 * nrows), squeeze=False)  # type: ignore[attr-defined]
        for i, d in enumerate(domains):
            ax = axes[i // cols][i % cols]
            for cond in results.config["conditions"]:
                rows = sorted(
                    (r for r in arch.checkpoints if r.condition == cond), key=lambda r: r.t
                )
                pts2 = [(r.t, r.gbv[d]) for r in rows if r.gbv.get(d) is not None]
                if pts2:
                    ax.plot(
                        [p[0] for p in pts2],
                        [p[1] for p in pts2],
                        marker="o",
                        label=LABELS.get(cond, cond),
                    )
            ax.set_title(d)
        for j in range(len(domains), nrows * cols):
            axes[j // cols][j % cols].axis("off")
        axes[0][0].legend(fontsize=7)
        fig.suptitle(f"GBV per domain vs turn — {arch.memory}")
        fig.tight_layout()
        name = f"domains_{arch.memory}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)  # type: ignore[attr-defined]
        names.append(name)
    heat = mitigation_matrix(results)
    if heat:
        names.append(
            _heatmap(
                plt,
                heat,
                out / "mitigation_heatmap.png",
                f"ΔGBV(mitigated) − ΔGBV(no mitigation) at t={results.t80}",
                "memory / mitigation",
            )
        )
    return names


def mitigation_matrix(results: CompareResults) -> dict[str, dict[str, float | None]]:
    """``{"<memory>/<condition>": {domain: ΔGBV_d(cond) − ΔGBV_d(baseline)}}`` at t80."""
    out: dict[str, dict[str, float | None]] = {}
    for arch in results.archs:
        rows = {d.condition: d for d in arch.deltas if d.t == results.t80}
        base = rows.get("baseline")
        if base is None:
            continue
        for cond, row in rows.items():
            if cond == "baseline":
                continue
            out[f"{arch.memory}/{cond}"] = {
                d: (v - b) if v is not None and (b := base.per_domain.get(d)) is not None else None
                for d, v in row.per_domain.items()
            }
    return out


def _heatmap(
    plt: object, matrix: dict[str, dict[str, float | None]], path: Path, title: str, ylabel: str
) -> str:
    import numpy as np

    rows = list(matrix)
    cols = [d for d in DOMAINS if any(d in r for r in matrix.values())]
    data = np.array(
        [
            [matrix[r].get(c) if matrix[r].get(c) is not None else np.nan for c in cols]
            for r in rows
        ],
        dtype=float,
    )
    finite = data[~np.isnan(data)]
    span = float(np.max(np.abs(finite))) if finite.size else 1.0
    fig, ax = plt.subplots(figsize=(1.1 * len(cols) + 2, 0.6 * len(rows) + 2))  # type: ignore[attr-defined]
    im = ax.imshow(data, cmap="RdBu_r", vmin=-span or -1, vmax=span or 1)
    ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i in range(len(rows)):
        for j in range(len(cols)):
            if not np.isnan(data[i, j]):
                ax.text(j, i, f"{data[i, j]:+.1f}", ha="center", va="center", fontsize=7)
    ax.set_xlabel("evaluated domain")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)  # type: ignore[attr-defined]
    return path.name


def _checkpoint_rows(results: CompareResults) -> list[list[str]]:
    rows = [["Memory", "Condition", "t", "memories", "AGBV [95% CI]", "noise p95", "refused"]]
    for arch in results.archs:
        order = {c: i for i, c in enumerate(results.config["conditions"])}
        for r in sorted(arch.checkpoints, key=lambda r: (order.get(r.condition, 99), r.t)):
            rows.append(
                [
                    arch.memory,
                    r.condition,
                    str(r.t),
                    str(r.memories),
                    cell_text(r.agbv).replace("+", ""),
                    _f(r.agbv_noise_p95, ".2f"),
                    f"{r.refusal_rate:.0%}" + (" (shared t0)" if r.shared_from else ""),
                ]
            )
    return rows


def _turn_rows(results: CompareResults) -> list[list[str]]:
    rows = [
        [
            "Memory",
            "Condition",
            "turns",
            "injected",
            "tagged",
            "tagged∧injected",
            "tagged∧neutral",
            "recovered",
            "mean agent s",
        ]
    ]
    for arch in results.archs:
        for s in arch.turns:
            rows.append(
                [
                    arch.memory,
                    s.condition,
                    str(s.turns),
                    str(s.injected),
                    str(s.tagged),
                    str(s.tagged_injected),
                    str(s.tagged_neutral),
                    str(s.recovered),
                    _f(s.mean_latency_s, ".1f"),
                ]
            )
    return rows


def write_compare_report(results: CompareResults, out: Path) -> None:
    """``results.json``, ``report.md``, ``report.html`` and the figures into ``out``."""
    write_atomic(out / "results.json", results.model_dump_json(indent=2) + "\n")
    figures = compare_figures(results, out)
    s = results.stream
    lat = ", ".join(f"{k} {v.mean_s:.1f}s (n={v.n})" for k, v in results.latency.items())
    sections = [
        ("Table 2 shape: ΔAGBV with 95% CI (MP)", table2_rows(results)),
        ("AGBV per checkpoint", _checkpoint_rows(results)),
        ("Turns and DMT tags", _turn_rows(results)),
    ]
    notes = [
        f"Report {REPORT_VERSION}, results {results.results_version}, {results.sim_version}, "
        f"{results.dib_version}; config digest {results.digest[:12]}.",
        f"Stream: {s.turns} turns, {s.selected} selected for injection (λ), {s.injected} injected; "
        f"generator valid-rewrite rate {_f(s.valid_rate, '.0%')} "
        f"(verbatim without repair: {_f(s.strict_valid_rate, '.0%')}); failures {s.failure_reasons}; "
        f"strategies {s.strategies}; domains {s.domains}.",
        f"Mean latency per call: {lat}. Wall time {results.wall_s / 60:.1f} min.",
        "CIs: percentile bootstrap resampling DIB contexts jointly across conditions and "
        "checkpoints (paired). noise p95: GBV under shuffled group labels; an AGBV below it is "
        "within noise. MP is unstable when the baseline ΔAGBV CI contains 0.",
    ]
    if any(d.delta.low is None for a in results.archs for d in a.deltas):
        notes.append(
            "This run asked one DIB context per domain: there is nothing to resample (no CI) and "
            "shuffling labels within one context cannot change GBV (noise p95 = AGBV), so these "
            "numbers cannot separate bias from noise. Use a larger --dib-sample for evidence."
        )
    md = [f"# {results.name}: long-term simulation (`dmt-bench compare`)", ""]
    md += [f"- {n}" for n in notes] + [""]
    for title, rows in sections:
        md += [f"## {title}", "", _md_table(rows), ""]
    md += ["## Figures", ""] + [f"![{f}]({f})" for f in figures] + [""]
    write_atomic(out / "report.md", "\n".join(md))
    body = [f"<h1>{html.escape(results.name)}: long-term simulation</h1>", "<ul>"]
    body += [f"<li>{html.escape(n)}</li>" for n in notes] + ["</ul>"]
    for title, rows in sections:
        body += [f"<h2>{html.escape(title)}</h2>", _html_table(rows)]
    body += ["<h2>Figures</h2>"] + [f'<p><img src="{f}" alt="{f}"></p>' for f in figures]
    write_atomic(out / "report.html", _page(results.name, "\n".join(body)))


def _page(title: str, body: str) -> str:
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px;"
        "font-size:13px}img{max-width:100%}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
        f"</title><style>{style}</style></head><body>{body}</body></html>\n"
    )


def render_heatmap_text(results: HeatmapResults) -> str:
    """The 9×9 ΔGBV matrix as text, with the fraction of positive off-diagonal cells."""
    cols = results.domains
    rows = [["source \\ evaluated", *cols]]
    for source in results.sources:
        row = results.matrix.get(source, {})
        rows.append([source, *(_f(row.get(c), "+.1f") for c in cols)])
    frac = results.fraction_positive
    return (
        f"ΔGBV = GBV_t{results.t} − GBV_t0 per evaluated domain, single-source injection, "
        f"memory {results.memory}\n\n{_fixed(rows)}\n\npositive off-diagonal cells: "
        f"{results.positive_off_diagonal}/{results.finite_off_diagonal}"
        f" = {_f(frac, '.1%') if frac is not None else 'n/a'} (paper: 70.19%)"
    )


def write_heatmap_report(results: HeatmapResults, out: Path) -> None:
    """``results.json``, ``heatmap.png``, ``report.md`` and ``report.html``."""
    write_atomic(out / "results.json", results.model_dump_json(indent=2) + "\n")
    plt = _plt()
    figure = _heatmap(
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
        f"![heatmap]({figure})",
        "",
    ]
    write_atomic(out / "report.md", "\n".join(md))
    body = (
        f"<h1>{html.escape(results.name)}: cross-domain propagation</h1>"
        f"<pre>{html.escape(text)}</pre><p><img src='{figure}' alt='heatmap'></p>"
    )
    write_atomic(out / "report.html", _page(results.name, body))
