"""Markdown page for memory_path.py's results (split out to keep the benchmark small)."""

from __future__ import annotations

import math
from typing import Any

TARGETS = {"added_p50_ms": 30.0, "added_p95_ms": 60.0, "auditor_ratio": 1.05, "rss_mb": 300.0}
"""Issue 9's goals: added latency with memory, auditor ratio, proxy RSS."""


def _f(x: float, digits: int = 1) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def markdown(data: dict[str, Any]) -> str:
    env, cfg, res = data["environment"], data["config"], data["results"]
    lines = [
        f"# Memory path: added latency, auditor off the critical path, RSS (benchmark `memory_path` v{data['version']})",
        "",
        f"Measured {env['date']} on {env['machine']}; 1-min load average {env['load_start']} at the"
        f" start, {env['load_end']} at the end (the machine is shared: fake upstream, fake auditor,"
        " proxy and load generator run on the same cores). Proxy: `dmt-proxy serve`, mem0 backend"
        f" (Qdrant local mode, on disk), top-k {cfg['top_k']}, all-MiniLM-L6-v2 embedding in the proxy"
        f" process. Store: {cfg['memories']:,} memories of the benchmark user (filled before start,"
        f" {res['fill_s']} s, not timed). Versions: {', '.join(f'{k} {v}' for k, v in env['versions'].items())}.",
        "",
        f"Rerun: `{data['command']}`",
        "",
        "## 1. Added latency of memory (mem0, retrieval + write-back)",
        "",
        f"Closed loop, {cfg['requests']} requests per arm and concurrency, in {cfg['rounds']}"
        ' alternating off/on blocks (outbox drained after each "on" block, and charged to it).'
        " Off: `X-DMT-Memory: off`; on: read-write, mode off (no mitigation, no audit). ms.",
        "",
        "| conc. | off p50 / p95 / p99 | on p50 / p95 / p99 | added p50 | added p95 | added p99 "
        "| memories injected | errors off/on | proxy CPU ms/request off / on |",
        "|---:|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in res["added"]:
        o, n, cpu = r["off"], r["on"], r["proxy_cpu_ms_per_request"]
        lines.append(
            f"| {r['concurrency']} | {_f(o['p50_ms'])} / {_f(o['p95_ms'])} / {_f(o['p99_ms'])} "
            f"| {_f(n['p50_ms'])} / {_f(n['p95_ms'])} / {_f(n['p99_ms'])} | {_f(r['added_p50_ms'])} "
            f"| {_f(r['added_p95_ms'])} | {_f(r['added_p99_ms'])} | {_f(n['mean_memories'])} "
            f"| {o['errors']} / {n['errors']} | {_f(cpu['off'])} / {_f(cpu['on'])} |"
        )
    c1 = next((r for r in res["added"] if r["concurrency"] == 1), res["added"][0])
    lines += [
        "",
        f"Target (issue 9 item 2): added p50 <= {TARGETS['added_p50_ms']:.0f} ms, p95 <= "
        f"{TARGETS['added_p95_ms']:.0f} ms. At concurrency {c1['concurrency']}: p50"
        f" {_mark(c1['added_p50_ms'] <= TARGETS['added_p50_ms'])}, p95"
        f" {_mark(c1['added_p95_ms'] <= TARGETS['added_p95_ms'])}.",
        "",
        "## 2. Auditor off the critical path",
        "",
        f"Open loop at {cfg['rate']} req/s for {cfg['duration']} s per arm (at most"
        f" {cfg['max_inflight']} in flight; latency from each request's scheduled send time)."
        f" Auditor: fake server answering a valid verdict after {cfg['auditor_delay_s']} s; first"
        " stage off, so every write in (b) is audited. Drain = time from the last reply until the"
        " admin outbox endpoint reports depth 0.",
        "",
        "| arm | requests | errors | p50 ms | p95 ms | p99 ms | writes acked | stored | audited "
        "| auditor calls | outbox at load end | drain s | pending after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    aud = res["auditor"]
    for arm in ("off", "on", "dmt"):
        a = aud[arm]
        lines.append(
            f"| {a['label']} | {a['n']} | {a['errors']} | {_f(a['p50_ms'])} | {_f(a['p95_ms'])} "
            f"| {_f(a['p99_ms'])} | {a['acked_writes']} | {a['stored']} | {a['audited']} "
            f"| {a['auditor_requests']} | {a['depth_at_load_end']} | {a['drain_s']} | {a['pending']} |"
        )
    lines += [
        "",
        f"Memory's added latency at this steady rate, (a) − (0): p50 {_f(aud['added_p50_ms'])} ms,"
        f" p95 {_f(aud['added_p95_ms'])} ms (section 1's closed loop at concurrency 1 is the worst"
        " case: each request's write-back overlaps the next request's retrieval).",
        "",
        f"Ratio (b) ÷ (a): p50 {_f(aud['ratio_p50'], 3)}, p95 {_f(aud['ratio_p95'], 3)}. Target:"
        f" within 5 % (<= {TARGETS['auditor_ratio']}): p50 {_mark(aud['ratio_p50'] <= TARGETS['auditor_ratio'])},"
        f" p95 {_mark(aud['ratio_p95'] <= TARGETS['auditor_ratio'])}. Outbox drained:"
        f" {'yes' if aud['dmt']['drained'] and aud['on']['drained'] else 'NO'}; audit outcomes in (b):"
        f" {aud['dmt']['audit_outcomes']}.",
        "",
        "## 3. Proxy RSS",
        "",
        "VmRSS of the proxy process sampled every 0.5 s; RssAnon = its anonymous (heap) part. MB = 2^20 bytes.",
        "",
        "| proxy | phase | samples | peak VmRSS MB | last VmRSS MB | peak RssAnon MB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, block in (
        ("memory disabled", res["baseline_no_memory"]),
        (f"mem0, {cfg['memories']:,} memories", res["rss"]),
    ):
        for p in block["phases"]:
            lines.append(f"| {name} | {p['phase']} | {p['samples']} | {_f(p['peak_mb'])} "
                         f"| {_f(p['last_mb'])} | {_f(p['peak_anon_mb'])} |")  # fmt: skip
    peak = max((p["peak_mb"] for p in res["rss"]["phases"]), default=math.nan)
    excl = peak - res["model_weights_mb"]
    lines += [
        "",
        f"Peak VmRSS with memory: {_f(peak)} MB (VmHWM {_f(res['rss']['vm_hwm_mb'])} MB); minus the"
        f" embedding model's weights ({_f(res['model_weights_mb'])} MB safetensors): {_f(excl)} MB."
        f" Goal (issue 9 item 5): <= {TARGETS['rss_mb']:.0f} MB excluding the model:"
        f" {_mark(excl <= TARGETS['rss_mb'])}. The embedder's runtime (numpy, tokenizers) is counted, not excluded.",
        "",
    ]
    return "\n".join(lines)
