"""Passthrough overhead: dmt-proxy vs the LiteLLM proxy vs calling the upstream directly.

dmt-proxy is measured on both of its chat routes: ``/v1/chat/completions`` and
``/v1/responses`` (the same pipeline; the Responses route adds the translation to
chat and the event stream). The issue's targets: Responses overhead within 1.2x of
chat overhead (p50), both at most 0.5x the LiteLLM proxy's.

All three sit in front of the same instant fake upstream
(dmt_proxy.testing.upstream_server, which answers without any model), so the latency differences are
the proxies' own cost. dmt-proxy runs with memory off (``X-DMT-Memory: off``,
mode ``off``): plain passthrough, like the LiteLLM proxy configured with one
model and no callbacks. Everything (fake upstream, proxy, load generator) shares
this machine's cores, so the numbers include that contention for every target.

Run:  python benchmarks/perf/overhead.py [--concurrency 1,16,64] [--requests 400]
Writes benchmarks/results/proxy_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from loadgen import LoadResult, run_load

from dmt_proxy.bench.harness.proxy import free_port

RESULTS = Path(__file__).resolve().parents[1] / "results"


def write_configs(tmp: Path, upstream_port: int, paced_port: int) -> tuple[Path, Path]:
    """Two model names on both proxies: ``fast`` (instant) and ``paced`` (chunks spaced out)."""
    policy = tmp / "policy.yaml"
    policy.write_text(
        "version: 1\nmode: 'off'\ndefault_model: fast\nmodels:\n"
        + "".join(f"  {name}:\n    model: openai/{name}\n    api_base: http://127.0.0.1:{port}/v1\n"
                  for name, port in (("fast", upstream_port), ("paced", paced_port)))
    )  # fmt: skip
    litellm_cfg = tmp / "litellm.yaml"
    litellm_cfg.write_text(
        "model_list:\n"
        + "".join(f"  - model_name: {name}\n    litellm_params:\n      model: openai/{name}\n"
                  f"      api_base: http://127.0.0.1:{port}/v1\n      api_key: fake\n"
                  for name, port in (("fast", upstream_port), ("paced", paced_port)))
        + "litellm_settings:\n  telemetry: false\n  success_callback: []\n  failure_callback: []\n"
    )  # fmt: skip
    return policy, litellm_cfg


def run(concurrency: list[int], requests: int, streams: list[bool], paced: list[int],
        interval_s: float) -> dict[str, object]:  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="dmt-overhead-"))
    up_port, dmt_port, lite_port, paced_port = free_port(), free_port(), free_port(), free_port()
    policy, litellm_cfg = write_configs(tmp, up_port, paced_port)
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        # Plain passthrough on both sides: neither proxy authenticates in this run.
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    procs = []
    try:
        procs.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port", str(up_port)],
                           f"http://127.0.0.1:{up_port}/health", tmp / "upstream.log"))  # fmt: skip
        procs.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port", str(paced_port),
                            "--chunk-interval-s", str(interval_s)],
                           f"http://127.0.0.1:{paced_port}/health", tmp / "paced.log"))  # fmt: skip
        procs.append(start(
            [python(), "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(dmt_port),
             "--policy", str(policy)],
            f"http://127.0.0.1:{dmt_port}/healthz", tmp / "dmt.log",
            env={**env, "DMT_STATE_DIR": str(tmp / "state"), "DMT_LOG_LEVEL": "warning"},
        ))  # fmt: skip
        litellm_bin = str(Path(sys.executable).parent / "litellm")
        procs.append(start(
            [litellm_bin, "--config", str(litellm_cfg), "--port", str(lite_port),
             "--host", "127.0.0.1", "--num_workers", "1"],
            f"http://127.0.0.1:{lite_port}/health/liveliness", tmp / "litellm.log", env=env,
            timeout_s=240,
        ))  # fmt: skip
        dmt_headers = {"x-dmt-memory": "off", "x-dmt-mode": "off"}
        targets = {
            "direct": (f"http://127.0.0.1:{up_port}/v1/chat/completions", {}),
            "dmt-proxy": (f"http://127.0.0.1:{dmt_port}/v1/chat/completions", dmt_headers),
            "dmt-proxy-responses": (f"http://127.0.0.1:{dmt_port}/v1/responses", dmt_headers),
            "litellm-proxy": (
                f"http://127.0.0.1:{lite_port}/v1/chat/completions",
                {"authorization": "Bearer sk-none"},
            ),
        }
        results: list[LoadResult] = []
        for stream in streams:
            for c in concurrency:
                for name, (url, headers) in targets.items():
                    api = "responses" if name.endswith("-responses") else "chat"
                    res = asyncio.run(run_load(target=name, url=url, model="fast", concurrency=c,
                                               requests=requests, stream=stream, headers=headers,
                                               api=api))  # fmt: skip
                    print(f"{name:14} c={c:<4} stream={stream!s:5} p50={res.p50_ms:7.2f} "
                          f"p95={res.p95_ms:7.2f} p99={res.p99_ms:7.2f} ms errors={res.errors}",
                          file=sys.stderr, flush=True)  # fmt: skip
                    results.append(res)
        # Many open streams at a model's pace (8 chunks, interval_s apart): the proxies hold
        # 200 streams without the closed loop saturating the cores, as with real models.
        paced_results: list[LoadResult] = []
        paced_targets = {k: v for k, v in targets.items() if not k.endswith("-responses")}
        paced_targets["direct"] = (f"http://127.0.0.1:{paced_port}/v1/chat/completions", {})
        for c in paced:
            for name, (url, headers) in paced_targets.items():
                res = asyncio.run(run_load(target=name, url=url, model="paced", concurrency=c,
                                           requests=3 * c, stream=True, headers=headers,
                                           warmup=min(c, 50)))  # fmt: skip
                print(f"paced {name:14} c={c:<4} p50={res.p50_ms:7.2f} p99={res.p99_ms:7.2f} "
                      f"ttfb p50={res.ttfb_p50_ms} p99={res.ttfb_p99_ms} errors={res.errors}",
                      file=sys.stderr, flush=True)  # fmt: skip
                paced_results.append(res)
    finally:
        for proc in reversed(procs):
            stop(proc)
    return {
        "benchmark": "proxy_overhead",
        "version": 1,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "requests_per_cell": requests,
        "results": [r.as_dict() for r in results],
        "paced_interval_s": interval_s,
        "paced": [r.as_dict() for r in paced_results],
    }


def markdown(data: dict[str, object]) -> str:
    rows = data["results"]
    assert isinstance(rows, list)
    by_key = {(r["stream"], r["concurrency"], r["target"]): r for r in rows}
    lines = [
        "# Proxy passthrough overhead (benchmark `proxy_overhead` v1)",
        "",
        f"Measured {data['when']} on {data['machine']}; {data['requests_per_cell']} requests per "
        "cell after 20 warm-up requests. Upstream: the instant fake OpenAI-compatible server "
        "(`dmt_proxy.testing.upstream_server`, no model). dmt-proxy with memory and mitigation off; "
        "LiteLLM proxy with one model, no callbacks, 1 worker. Overhead = target percentile − direct "
        "percentile at the same concurrency. Load generator, proxies and upstream share the machine.",
        "",
        f"1-min load average {data.get('load_start', float('nan')):.2f} at the start, "
        f"{data.get('load_end', float('nan')):.2f} at the end.{' ' + str(data['note']) if data.get('note') else ''}",
        "",
        f"Rerun: `{data.get('command', 'python benchmarks/perf/overhead.py')}`",
        "",
        "| stream | conc. | direct p50/p95/p99 ms | dmt-proxy p50/p95/p99 ms | LiteLLM p50/p95/p99 ms "
        "| dmt overhead p50/p99 | LiteLLM overhead p50/p99 | dmt p50 overhead ÷ LiteLLM's |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (stream, c, target), r in sorted(by_key.items()):
        if target != "direct":
            continue
        d, o, lt = r, by_key[(stream, c, "dmt-proxy")], by_key[(stream, c, "litellm-proxy")]
        od50, od99 = o["p50_ms"] - d["p50_ms"], o["p99_ms"] - d["p99_ms"]
        ol50, ol99 = lt["p50_ms"] - d["p50_ms"], lt["p99_ms"] - d["p99_ms"]
        ratio = od50 / ol50 if ol50 > 0 else float("nan")
        fmt = lambda x: f"{x['p50_ms']:.2f} / {x['p95_ms']:.2f} / {x['p99_ms']:.2f}"  # noqa: E731
        lines.append(
            f"| {stream} | {c} | {fmt(d)} | {fmt(o)} | {fmt(lt)} | {od50:.2f} / {od99:.2f} "
            f"| {ol50:.2f} / {ol99:.2f} | {ratio:.2f} |"
        )
    if any(r["target"] == "dmt-proxy-responses" for r in rows):
        lines += ["", "## /v1/responses vs /v1/chat/completions (same pipeline, same upstream)", "",
                  "Targets: Responses overhead ≤ 1.2× chat overhead (p50); both ≤ 0.5× LiteLLM's.",
                  "", "| stream | conc. | chat overhead p50 / p99 | responses overhead p50 / p99 "
                  "| responses ÷ chat (p50) | responses ÷ LiteLLM (p50) |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for (stream, c, target), d in sorted(by_key.items()):
            resp = by_key.get((stream, c, "dmt-proxy-responses"))
            if target != "direct" or resp is None:
                continue
            chat, lite = by_key[(stream, c, "dmt-proxy")], by_key[(stream, c, "litellm-proxy")]
            oc50, oc99 = chat["p50_ms"] - d["p50_ms"], chat["p99_ms"] - d["p99_ms"]
            or50, or99 = resp["p50_ms"] - d["p50_ms"], resp["p99_ms"] - d["p99_ms"]
            ol50 = lite["p50_ms"] - d["p50_ms"]
            vs_chat = or50 / oc50 if oc50 > 0 else float("nan")
            vs_lite = or50 / ol50 if ol50 > 0 else float("nan")
            lines.append(f"| {stream} | {c} | {oc50:.2f} / {oc99:.2f} | {or50:.2f} / {or99:.2f} "
                         f"| {vs_chat:.2f} | {vs_lite:.2f} |")  # fmt: skip
    errors = sum(int(r["errors"]) for r in rows)
    lines += ["", f"Errors across all cells: {errors}."]
    stream_rows = [r for r in rows if r["stream"] and r["ttfb_p50_ms"] is not None]
    if stream_rows:
        lines += ["", "Time to first byte (streams), p50 / p99 ms:", "",
                  "| conc. | target | TTFB p50 | TTFB p99 |", "|---|---|---|---|"]  # fmt: skip
        for r in sorted(stream_rows, key=lambda r: (r["concurrency"], r["target"])):
            lines.append(f"| {r['concurrency']} | {r['target']} | {r['ttfb_p50_ms']:.2f} | "
                         f"{r['ttfb_p99_ms']:.2f} |")  # fmt: skip
    paced = data.get("paced") or []
    assert isinstance(paced, list)
    if paced:
        interval = data["paced_interval_s"]
        lines += ["", f"## Paced streams: many open streams at a model's pace ({interval} s between "
                  "8 chunks)", "",
                  "Each stream lasts ~8 × interval, so the proxies hold this many streams open "
                  "without the closed loop saturating the 2 cores. Overhead = target − direct.", "",
                  "| conc. | target | TTFB p50 / p99 ms | total p50 / p99 ms | overhead TTFB p50 / p99 "
                  "| overhead total p50 / p99 | errors |", "|---|---|---|---|---|---|---|"]  # fmt: skip
        by = {(r["concurrency"], r["target"]): r for r in paced}
        for (c, target), r in sorted(by.items()):
            d = by[(c, "direct")]
            lines.append(
                f"| {c} | {target} | {r['ttfb_p50_ms']:.2f} / {r['ttfb_p99_ms']:.2f} | "
                f"{r['p50_ms']:.1f} / {r['p99_ms']:.1f} | "
                f"{r['ttfb_p50_ms'] - d['ttfb_p50_ms']:.2f} / {r['ttfb_p99_ms'] - d['ttfb_p99_ms']:.2f} | "
                f"{r['p50_ms'] - d['p50_ms']:.1f} / {r['p99_ms'] - d['p99_ms']:.1f} | {r['errors']} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--stream", default="false,true", help="false,true | false | true")
    parser.add_argument(
        "--paced", default="200", help="concurrency of the paced-stream cells ('' for none)"
    )
    parser.add_argument("--paced-interval-s", type=float, default=0.25)
    parser.add_argument("--out", type=Path, default=RESULTS / "proxy_overhead")
    parser.add_argument("--note", default="", help="a sentence added to the markdown")
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    data = run(
        [int(c) for c in args.concurrency.split(",")],
        args.requests,
        [s.strip() == "true" for s in args.stream.split(",")],
        [int(c) for c in args.paced.split(",") if c.strip()],
        args.paced_interval_s,
    )
    data.update(load_start=load_start, load_end=os.getloadavg()[0], note=args.note,
                command="python benchmarks/perf/overhead.py " + " ".join(sys.argv[1:]))  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
