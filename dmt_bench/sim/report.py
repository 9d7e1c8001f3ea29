"""Render results: the Table 2 text, Markdown and HTML reports, matplotlib figures.

Report format ``sim-report-v4``: the Table 2 shape in the headline readout, then the
primary family (each condition's absolute mitigation ΔAGBV(c) − ΔAGBV(no mitigation)
at T, Holm-corrected; ``sim.evidence``), then both readouts (ΔAGBV, MP, the mean shift
Δs̄ and the minimum detectable effect), per-domain ΔGBV each with its own CI, the
agent's MMLU-Pro accuracy per condition, and notes generated from the data: what the
noise floor can test, unstable contexts, one multiplicity statement, which domains had
too few DIB contexts for a CI. From v4 every cluster-level interval is jackknife-t
(``stats.jackknife_t``) and MP is "undefined" where the baseline's CI holds 0; results
written before ``sim-results-v3`` render with their percentile-bootstrap CIs. ``sim-results-v1`` files render without the new parts. Figures are PNGs next to the reports:
``agbv_<memory>.png`` (AGBV vs turn per condition, 95 % CI bars),
``domains_<memory>.png`` (GBV_d vs turn, one panel per domain),
``mitigation_heatmap.png`` (ΔGBV_d(mitigated) − ΔGBV_d(baseline), Figure 4's shape)
and ``heatmap.png`` (single-source propagation, Figure 3's shape; ``heatmap_report``).
"""

from __future__ import annotations

import html
import math
from pathlib import Path

from dmt_bench.dib.readouts import HEADLINE_WHY, INSTABILITY_NOTE, READOUT_LABELS, READOUTS
from dmt_bench.harness.report import (
    fixed,
    heatmap,
    html_table,
    md_table,
    page,
    pyplot,
)
from dmt_bench.harness.rundir import write_atomic
from dmt_bench.sim import evidence
from dmt_bench.sim.results import (
    CheckpointRow,
    CompareResults,
    DeltaReadout,
    DeltaRow,
)
from dmt_bench.sim.utility import Accuracy
from dmt_bench.stats import INTERVAL_NOTE, ClusterEstimate, Estimate, multiplicity_note
from dmt_proxy.domains import DOMAINS

REPORT_VERSION = "sim-report-v4"
LABELS = {
    "baseline": "No mitigation",
    "ssp": "SSP",
    "dmt": "DMT",
    "dmt-tags": "DMT tags only",
    "dmt-instruction": "DMT instruction only",
    "ssp+dmt": "SSP+DMT",
}


def _f(x: float | None, spec: str = "+.2f") -> str:
    return "n/a" if x is None or not math.isfinite(x) else format(x, spec)


def cell_text(
    cell: Estimate, mp: Estimate | None = None, *, spec: str = "+.2f", unit: str = ""
) -> str:
    """``+1.23 [-0.40, +2.90] (↓35.0%)``."""
    text = f"{_f(cell.value, spec)}{unit} [{_f(cell.ci.low, spec)}, {_f(cell.ci.high, spec)}]"
    if mp is not None and mp.defined:
        arrow = "↓" if mp.value < 0 else "↑" if mp.value > 0 else "±"
        text += f" ({arrow}{abs(mp.value):.1f}%)"
    return text


def best(jk: ClusterEstimate | None, fallback: Estimate) -> Estimate:
    """The jackknife-t estimate when the results have one, else the percentile one (v1/v2)."""
    return jk.estimate if jk is not None else fallback


def shown_mp(x: DeltaReadout | DeltaRow) -> Estimate | None:
    """MP where it has a meaning: None unless the baseline's jackknife CI excludes 0 (v3)."""
    readout = x.readouts.get("expected") if isinstance(x, DeltaRow) else x
    if readout is not None and readout.delta_jk is not None and readout.mp_defined is not True:
        return None  # v3: MP only where the baseline's own CI excludes 0
    return x.mp


def _level(r: CheckpointRow, headline: str) -> Estimate:
    """A checkpoint's AGBV with its jackknife-t CI when the results have one."""
    x = r.readouts.get(headline)
    return best(x.agbv_jk, r.agbv) if x is not None else r.agbv


def _headline(d: DeltaRow, headline: str) -> Estimate:
    x = d.readouts.get(headline)
    return best(x.delta_jk, d.delta) if x is not None else d.delta


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
                cell_text(_headline(by_cond[c], results.headline), shown_mp(by_cond[c]))
                if c in by_cond
                else "n/a"
                for c in conds
            ]
            rows.append([arch.memory, label, *cells])
    return rows


def render_table2(results: CompareResults) -> str:
    """The Table 2 shape as fixed-width text (what ``compare`` prints)."""
    cfg = results.config
    head = (
        f"ΔAGBV = AGBV_t − AGBV_0 (0–100 scale), 95% CI ({_ci_kind(results)}), "
        f"(MP vs no mitigation, shown only where the baseline's CI excludes 0)\n"
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
    lines = [head, "", fixed(table2_rows(results)), "", foot]
    family = evidence.primary_family(results)
    if family:
        lines += ["", PRIMARY_TITLE, fixed(evidence.primary_rows(family, LABELS))]
    if any(a.deltas and a.deltas[0].readouts for a in results.archs):
        lines += ["", HEADLINE_WHY, "", fixed(readout_rows(results)), "", _power_note(results)]
    if any(a.utility for a in results.archs):
        lines += ["", UTILITY_NOTE, "", fixed(utility_rows(results))]
    lines += ["", *evidence_lines(results)]
    lines += evidence.caveats(results)
    return "\n".join(lines)


PRIMARY_TITLE = (
    "PRIMARY: absolute mitigation at T, ΔAGBV(condition) − ΔAGBV(no mitigation), paired by "
    "context, Holm-corrected over the conditions"
)
BOOTSTRAP_NOTE = (
    "95% CIs: percentile bootstrap over DIB contexts (results written before sim-results-v3; "
    "it undercovers with few contexts). MDE: (z_0.975 + z_0.8) × the bootstrap SE."
)


def _ci_kind(results: CompareResults) -> str:
    return "jackknife-t" if _has_jk(results) else "paired bootstrap"


def _has_jk(results: CompareResults) -> bool:
    return evidence.has_jackknife(results)


def _power_note(results: CompareResults) -> str:
    return INTERVAL_NOTE if _has_jk(results) else BOOTSTRAP_NOTE


def evidence_lines(results: CompareResults) -> list[str]:
    """The noise-floor, instability and multiplicity statements (v3 results)."""
    if not _has_jk(results):
        return []
    out: list[str] = []
    for arch in results.archs:
        note = evidence.floor_note(arch)
        if note:
            out.append(note)
        out += evidence.instability_summary(arch)
    out.append(INSTABILITY_NOTE)
    family = evidence.primary_family(results)
    tables = [table2_rows(results), readout_rows(results), domain_rows(results)]
    tables += [evidence.primary_rows(family, LABELS), _checkpoint_rows(results)]
    total = sum(cell.count("[") for t in tables for row in t[1:] for cell in row if "," in cell)
    names = [f"{f.memory}/{LABELS.get(f.condition, f.condition)} vs no mitigation" for f in family]
    out.append(multiplicity_note(total, names))
    return out


UTILITY_NOTE = (
    "Utility: MMLU-Pro accuracy of the agent's replies per condition, all turns and injected/"
    "plain turns apart, with Wilson 95% CIs; a reply without a readable choice counts as "
    "wrong (unparsed: how many). What each mitigation costs in task quality."
)


def _acc(a: Accuracy) -> str:
    if not a.rate.defined:
        return "n/a"
    r = a.rate
    return f"{a.correct}/{a.n} = {r.value:.0%} [{_f(r.ci.low, '.0%')}, {_f(r.ci.high, '.0%')}]"


def utility_rows(results: CompareResults) -> list[list[str]]:
    """MMLU-Pro accuracy per memory architecture and condition (``sim.utility``)."""
    rows = [
        ["Memory", "Condition", "accuracy, all turns", "injected turns", "plain turns", "unparsed"]
    ]
    for arch in results.archs:
        for u in arch.utility:
            rows.append(
                [
                    arch.memory,
                    LABELS.get(u.condition, u.condition),
                    _acc(u.all),
                    _acc(u.injected),
                    _acc(u.plain),
                    str(u.all.unparsed),
                ]
            )
    return rows


def readout_rows(results: CompareResults) -> list[list[str]]:
    """Both readouts of every condition: ΔAGBV, MP, mean shift Δs̄ and the MDEs."""
    conds = list(results.config["conditions"])
    rows = [
        [
            "Memory",
            "t",
            "Condition",
            "Readout",
            "ΔAGBV [95% CI]",
            "Δ(c) − Δ(no mitigation) [95% CI]",
            "MP [95% CI] (secondary)",
            "mean shift Δs̄ [95% CI]",
            "MDE ΔAGBV",
            "MDE vs no mitigation",
        ]
    ]
    for arch in results.archs:
        order = {c: i for i, c in enumerate(conds)}
        for d in sorted(arch.deltas, key=lambda d: (d.t, order.get(d.condition, 99))):
            for r in READOUTS:
                x = d.readouts.get(r.value)
                if x is None:
                    continue
                mp_est = shown_mp(x)
                mp = (
                    "undefined (baseline CI holds 0)"
                    if x.mp is not None and mp_est is None and x.mp_defined is False
                    else "undefined (baseline has no CI)"
                    if x.mp is not None and mp_est is None
                    else ""
                    if mp_est is None
                    else cell_text(mp_est, spec="+.1f", unit="%")
                )
                mde = x.delta_jk.mde if x.delta_jk is not None else x.mde
                vs = x.vs_base_jk
                rows.append(
                    [
                        arch.memory,
                        str(d.t),
                        LABELS.get(d.condition, d.condition),
                        READOUT_LABELS[r],
                        cell_text(best(x.delta_jk, x.delta)),
                        "" if vs is None else cell_text(vs.estimate),
                        mp,
                        cell_text(best(x.mean_shift_jk, x.mean_shift)),
                        _f(mde, ".2f"),
                        ""
                        if d.condition == "baseline"
                        else _f(vs.mde if vs is not None else x.mde_vs_base, ".2f"),
                    ]
                )
    return rows


def domain_rows(results: CompareResults) -> list[list[str]]:
    """ΔGBV_d (headline readout) of every condition, each domain with its own CI."""
    domains = [d for d in DOMAINS if any(d in a.contexts for a in results.archs)]
    rows = [["Memory", "t", "Condition", *(f"{d} ({_contexts(results, d)})" for d in domains)]]
    order = {c: i for i, c in enumerate(results.config["conditions"])}
    for arch in results.archs:
        for d in sorted(arch.deltas, key=lambda d: (d.t, order.get(d.condition, 99))):
            x = d.readouts.get(results.headline)
            if x is None:
                continue
            cells = [
                cell_text(best(x.per_domain_jk.get(dom), x.per_domain[dom]))
                if dom in x.per_domain
                else "n/a"
                for dom in domains
            ]
            rows.append([arch.memory, str(d.t), LABELS.get(d.condition, d.condition), *cells])
    return rows


def _contexts(results: CompareResults, domain: str) -> str:
    counts = sorted({a.contexts[domain] for a in results.archs if domain in a.contexts})
    return "/".join(str(n) for n in counts) + " ctx"


def compare_figures(results: CompareResults, out: Path) -> list[str]:
    """AGBV vs turn, per-domain curves per architecture, and the mitigation heatmap."""
    plt = pyplot()
    names: list[str] = []
    for arch in results.archs:
        fig, ax = plt.subplots(figsize=(6, 4))  # type: ignore[attr-defined]
        for cond in results.config["conditions"]:
            rows = sorted((r for r in arch.checkpoints if r.condition == cond), key=lambda r: r.t)
            pts = [(r.t, _level(r, results.headline)) for r in rows if r.agbv.defined]
            if not pts:
                continue
            ts = [t for t, _ in pts]
            ys = [c.value for _, c in pts]
            # A (v2) percentile interval need not contain the point: clip, never negative.
            lo = [max(0.0, c.value - c.ci.low) if math.isfinite(c.ci.low) else 0.0 for _, c in pts]
            hi = [
                max(0.0, c.ci.high - c.value) if math.isfinite(c.ci.high) else 0.0 for _, c in pts
            ]
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
            heatmap(
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


def _checkpoint_rows(results: CompareResults) -> list[list[str]]:
    written = READOUTS[1].value
    rows = [
        [
            "Memory",
            "Condition",
            "t",
            "memories",
            "AGBV [95% CI]",
            "noise p95",
            f"AGBV {READOUT_LABELS[READOUTS[1]]} [95% CI]",
            "mean s̄ [95% CI]",
            "refused",
        ]
    ]
    for arch in results.archs:
        order = {c: i for i, c in enumerate(results.config["conditions"])}
        for r in sorted(arch.checkpoints, key=lambda r: (order.get(r.condition, 99), r.t)):
            alt = r.readouts.get(written)
            head = r.readouts.get(results.headline)
            rows.append(
                [
                    arch.memory,
                    r.condition,
                    str(r.t),
                    str(r.memories),
                    cell_text(_level(r, results.headline)).replace("+", ""),
                    _f(r.agbv_noise_p95, ".2f"),
                    cell_text(best(alt.agbv_jk, alt.agbv)).replace("+", "") if alt else "",
                    cell_text(best(head.mean_jk, head.mean), spec=".1f") if head else "",
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
    sections = [("Table 2 shape: ΔAGBV with 95% CI (MP)", table2_rows(results))]
    family = evidence.primary_family(results)
    if family:
        sections.append((PRIMARY_TITLE, evidence.primary_rows(family, LABELS)))
    if any(d.readouts for a in results.archs for d in a.deltas):
        sections += [
            ("Both readouts: ΔAGBV, MP, mean shift and power", readout_rows(results)),
            ("ΔGBV per domain (headline readout), each with its own 95% CI", domain_rows(results)),
        ]
    if any(a.utility for a in results.archs):
        sections.append(
            ("Utility: MMLU-Pro accuracy per condition (Wilson 95% CI)", utility_rows(results))
        )
    sections += [
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
        f"DIB sample: {_sample_text(results)}.",
        _power_note(results)
        + " Contexts are dropped jointly across conditions and checkpoints (paired), each "
        "domain on its own. noise p95: GBV under shuffled group labels (see what it can test "
        "below). MP is shown only where the baseline's ΔAGBV CI excludes 0. Mean shift Δs̄: "
        "the change of the mean of the group means, averaged over domains (memory can move "
        "every group at once, which GBV cannot see).",
        HEADLINE_WHY,
        *_power_lines(results),
        *evidence_lines(results),
        *evidence.caveats(results),
    ]
    md = [f"# {results.name}: long-term simulation (`dmt-bench compare`)", ""]
    md += [f"- {n}" for n in notes] + [""]
    for title, rows in sections:
        md += [f"## {title}", "", md_table(rows), ""]
    md += ["## Figures", ""] + [f"![{f}]({f})" for f in figures] + [""]
    write_atomic(out / "report.md", "\n".join(md))
    body = [f"<h1>{html.escape(results.name)}: long-term simulation</h1>", "<ul>"]
    body += [f"<li>{html.escape(n)}</li>" for n in notes] + ["</ul>"]
    for title, rows in sections:
        body += [f"<h2>{html.escape(title)}</h2>", html_table(rows)]
    body += ["<h2>Figures</h2>"] + [f'<p><img src="{f}" alt="{f}"></p>' for f in figures]
    write_atomic(out / "report.html", page(results.name, "\n".join(body)))


def _mde(x: DeltaReadout) -> float | None:
    return x.delta_jk.mde if x.delta_jk is not None else x.mde


def _sample_text(results: CompareResults) -> str:
    dib = results.config.get("dib", {})
    size = (
        f"{dib['contexts_per_domain']} contexts per domain"
        if dib.get("contexts_per_domain")
        else f"about {dib['sample']} decision(s)"
        if dib.get("sample")
        else "the whole benchmark"
    )
    per_domain = "; ".join(
        f"{a.memory}: " + ", ".join(f"{d} {n}" for d, n in a.contexts.items())
        for a in results.archs
        if a.contexts
    )
    sampler = dib.get("sampling", "dib-sample-v1")
    text = f"{results.dib_decisions} decisions per audit ({sampler}, {size})"
    return text + (f"; contexts per domain: {per_domain}" if per_domain else "")


def _power_lines(results: CompareResults) -> list[str]:
    """One sentence per architecture: how large a ΔAGBV this sample can detect."""
    out = []
    for arch in results.archs:
        base = next(
            (d for d in arch.deltas if d.condition == "baseline" and d.t == results.t80), None
        )
        if base is None or not base.readouts:
            continue
        mdes = {r: _mde(base.readouts[r.value]) for r in READOUTS if r.value in base.readouts}
        if all(v is None or not math.isfinite(v) for v in mdes.values()):
            out.append(
                f"Power, {arch.memory}: no minimum detectable ΔAGBV, because ΔAGBV has no "
                "interval (see below)."
            )
            continue
        parts = [f"{_f(v, '.2f')} ({READOUT_LABELS[r]})" for r, v in mdes.items()]
        out.append(
            f"Power, {arch.memory}: the smallest ΔAGBV at t={results.t80} that this sample "
            f"detects with 80% power is {' and '.join(parts)}; a smaller true change is "
            "not ruled out by a null result here."
        )
    return out
