"""Markdown page for harness_efficiency.py's results (split out to keep the benchmark small)."""

from __future__ import annotations

import math
from typing import Any


def _pct(x: float) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.1f} %"


def _num(x: float, digits: int = 2) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def markdown(data: dict[str, Any]) -> str:
    """The results as a Markdown page."""
    s, m = data["setup"], data["machine"]
    lines = [
        f"# Harness efficiency: DIB through dmt-proxy vs direct (benchmark v{data['version']})",
        "",
        f"Measured {data['when']} (git {data['git_rev']}) on {m['cpus']} CPUs, Python {m['python']};"
        f" 1-min load {m['load_1min_start']} at start, {m['load_1min_end']} at the end (the"
        " machine is shared: the benchmark, the proxy and llama-server compete for its cores).",
        "",
        f"Upstream: `{s['model']}` at {s['upstream']}. {s['decisions']} {s['dib_version']}"
        f" decisions (stratified, seed {s['seed']}, domains: {len(s['domains'])}), scoring"
        f" `{s['scoring']['mode']}` (grammar {s['scoring']['grammar']}), in blocks of"
        f" {s['block_size']} sent to both targets back to back, order alternating (AB, BA, ...)."
        f" Proxy: `dmt-proxy serve`, `X-DMT-Memory: {s['proxy_memory']}`, mode `{s['proxy_mode']}`"
        f" (no auditing), {s['memory_backend']} backend, top_k {s['top_k']}, the user holds"
        f" {s['memories_stored']} memories (written through the proxy in mode off: unaudited)."
        + (
            " Every prompt starts with a `Session <tag>.` line, random per run and concurrency level,"
            " the same for both targets, so no prompt is in llama-server's prompt cache from before"
            " (see the script's docstring)."
            if s.get("cache_tag")
            else " Canonical prompts (`--no-cache-tag`): llama-server may hold some in its prompt cache."
        ),
        "",
        f"Rerun: `{data['command'].strip()}`",
        "",
        "| conc. | direct dec/s | proxy dec/s | efficiency (proxy ÷ direct) | 95 % CI (block bootstrap)"
        f" | goal ≥ {_pct(data['goal_efficiency'])} | errors d/p |",
        "|---:|---:|---:|---:|---|---|---:|",
    ]
    for c in data["cells"]:
        lo, hi = c["efficiency_ci95"]
        ok = "n/a" if not math.isfinite(c["efficiency"]) else (
            "met" if c["efficiency"] >= data["goal_efficiency"] else "NOT met")  # fmt: skip
        lines.append(
            f"| {c['concurrency']} | {_num(c['direct']['decisions_per_s'])}"
            f" | {_num(c['proxy']['decisions_per_s'])} | {_pct(c['efficiency'])}"
            f" | {_pct(lo)} – {_pct(hi)} ({c['blocks']} blocks) | {ok}"
            f" | {c['direct']['errors']}/{c['proxy']['errors']} |"
        )
    lines += [
        "",
        "Where the proxy's time goes (per decision):",
        "",
        "| conc. | proxy's own time p50 / p95 ms (`x-dmt-overhead-ms`) | of which memory retrieval,"
        " mean ms | paired latency Δ p50 / mean ms"
        " | memories injected | prompt tokens direct / proxy | computed (not cached) direct / proxy"
        " | upstream prompt ms direct / proxy |",
        "|---:|---|---:|---|---:|---|---|---|",
    ]
    for c in data["cells"]:
        d, p = c["direct"], c["proxy"]
        lines.append(
            f"| {c['concurrency']} | {_num(p['overhead_ms_p50'], 1)} / {_num(p['overhead_ms_p95'], 1)}"
            f" | {_num(p.get('retrieval_ms_mean', math.nan), 1)}"
            f" | {_num(c['paired_latency_delta_ms_p50'], 1)} / {_num(c['paired_latency_delta_ms_mean'], 1)}"
            f" | {_num(p['memories_injected_mean'], 1)}"
            f" | {_num(d['prompt_tokens_mean'], 0)} / {_num(p['prompt_tokens_mean'], 0)}"
            f" | {_num(d['prompt_tokens_computed_mean'], 0)} / {_num(p['prompt_tokens_computed_mean'], 0)}"
            f" | {_num(d['upstream_prompt_ms_mean'], 1)} / {_num(p['upstream_prompt_ms_mean'], 1)} |"
        )
    lines += [
        "",
        "Output agreement (decisions scored by both runs; same written integer / expected score"
        " within 1 point / mean |Δ score|). Read-only memory puts the user's memories in front of"
        " the prompt, so proxy and direct answers may differ. The self rows compare each target"
        " with itself at the two concurrency levels: the upstream's run-to-run noise (plus, with"
        " session lines, the effect of that one-line prompt change):",
        "",
        "| comparison | n | same integer | within 1 pt | mean abs Δ |",
        "|---|---:|---:|---:|---:|",
    ]
    rows = [(f"proxy vs direct, c={c['concurrency']}", c["agreement_proxy_vs_direct"])
            for c in data["cells"]]  # fmt: skip
    self_note = " (self; other session tag)" if data["setup"].get("cache_tag") else " (self)"
    rows += [(k.removeprefix("agreement_").replace("_", " ") + self_note, v)
             for c in data["cells"] for k, v in c.items()
             if k.startswith("agreement_") and k != "agreement_proxy_vs_direct"]  # fmt: skip
    for label, value in rows:
        lines.append(
            f"| {label} | {value['both_scored']} | {_pct(value['greedy'])}"
            f" | {_pct(value['within_tol'])} | {_num(value['mean_abs_diff'])} |"
        )
    lines += [
        "",
        "Decisions/s = Σ decisions ÷ Σ block wall time; efficiency = Σ direct block time ÷ Σ proxy"
        " block time; the CI resamples blocks (pairs kept). The proxy's own time is its"
        " `x-dmt-overhead-ms` header: request handling and memory retrieval, not the upstream call."
        " The paired Δ also includes the longer prompt the upstream reads and the extra hop."
        " Computed = prompt tokens the upstream evaluated, i.e. not reused from its prefix cache"
        " (llama-server's `timings.prompt_n`).",
        "",
    ]
    return "\n".join(lines)
