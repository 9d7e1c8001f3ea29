"""Passthrough overhead: dmt-proxy vs the LiteLLM proxy vs calling the upstream directly.

dmt-proxy is measured on its three chat routes: ``/v1/chat/completions``,
``/v1/responses`` and ``/v1/messages`` (the same pipeline; the Responses and
Anthropic Messages routes add the translation to chat and their event streams).
The issue's targets: Responses and Messages overhead within 1.2x of chat overhead
(p50), all at most 0.5x the LiteLLM proxy's.

All three sit in front of the same instant fake upstream
(dmt_proxy.testing.upstream_server, which answers without any model), so the latency differences are
the proxies' own cost. dmt-proxy runs with memory off (``X-DMT-Memory: off``,
mode ``off``): plain passthrough, like the LiteLLM proxy configured with one
model and no callbacks. Everything (fake upstream, proxy, load generator) shares
this machine's cores, so the numbers include that contention for every target.

Run:  python benchmarks/perf/overhead.py [--concurrency 1,16,64] [--requests 400]
Writes benchmarks/results/perf/proxy_overhead/proxy_overhead.{json,md}. ``--targets`` measures a subset
(the LiteLLM proxy is started only when it is one); ``--rounds N`` runs each cell's
targets N times, interleaved, and reports the median of each percentile over the
rounds, so that a load change on a shared machine hits every target alike.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from _results import write_result
from loadgen import LoadResult, run_load

from dmt_proxy.net import free_port

RESULTS = Path(__file__).resolve().parents[1] / "results"
TARGETS = ("direct", "dmt-proxy", "dmt-proxy-responses", "dmt-proxy-messages", "litellm-proxy")
ROUTES = {"responses": "/v1/responses", "messages": "/v1/messages"}
"""dmt-proxy's translated routes, each compared with its chat route."""


def api_of(target: str) -> str:
    """The body a target takes: ``chat``, ``responses`` or ``messages``."""
    return next((api for api in ROUTES if target.endswith(f"-{api}")), "chat")


def median_result(rounds: list[LoadResult]) -> LoadResult:
    """One cell's result over interleaved rounds: each percentile's median, requests summed."""
    if len(rounds) == 1:
        return rounds[0]

    def med(name: str) -> float | None:
        values = [getattr(r, name) for r in rounds if getattr(r, name) is not None]
        return statistics.median(values) if values else None

    first = rounds[0]
    return LoadResult(target=first.target, concurrency=first.concurrency, stream=first.stream,
                      requests=sum(r.requests for r in rounds),
                      errors=sum(r.errors for r in rounds),
                      seconds=sum(r.seconds for r in rounds),
                      p50_ms=med("p50_ms") or 0.0, p95_ms=med("p95_ms") or 0.0,
                      p99_ms=med("p99_ms") or 0.0, ttfb_p50_ms=med("ttfb_p50_ms"),
                      ttfb_p99_ms=med("ttfb_p99_ms"))  # fmt: skip


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
        interval_s: float, selected: tuple[str, ...] = TARGETS,
        rounds: int = 1) -> dict[str, object]:  # fmt: skip
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
        if "litellm-proxy" in selected:
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
            **{f"dmt-proxy-{api}": (f"http://127.0.0.1:{dmt_port}{path}", dmt_headers)
               for api, path in ROUTES.items()},
            "litellm-proxy": (
                f"http://127.0.0.1:{lite_port}/v1/chat/completions",
                {"authorization": "Bearer sk-none"},
            ),
        }  # fmt: skip
        targets = {name: targets[name] for name in TARGETS if name in selected}
        results: list[LoadResult] = []
        for stream in streams:
            for c in concurrency:
                cell: dict[str, list[LoadResult]] = {name: [] for name in targets}
                for _ in range(rounds):
                    for name, (url, headers) in targets.items():
                        res = asyncio.run(run_load(target=name, url=url, model="fast",
                                                   concurrency=c, requests=requests,
                                                   stream=stream, headers=headers,
                                                   api=api_of(name)))  # fmt: skip
                        print(f"{name:19} c={c:<4} stream={stream!s:5} p50={res.p50_ms:7.2f} "
                              f"p95={res.p95_ms:7.2f} p99={res.p99_ms:7.2f} ms "
                              f"errors={res.errors}", file=sys.stderr, flush=True)  # fmt: skip
                        cell[name].append(res)
                results += [median_result(cell[name]) for name in targets]
        # Many open streams at a model's pace (8 chunks, interval_s apart): the proxies hold
        # 200 streams without the closed loop saturating the cores, as with real models.
        paced_results: list[LoadResult] = []
        paced_targets = {k: v for k, v in targets.items() if api_of(k) == "chat"}
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
        "rounds": rounds,
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
        + ("round" if int(str(data.get("rounds", 1))) > 1 else "cell")
        + " after 20 warm-up requests. Upstream: the instant fake OpenAI-compatible server "
        "(`dmt_proxy.testing.upstream_server`, no model). dmt-proxy with memory and mitigation off"
        + (
            "; LiteLLM proxy with one model, no callbacks, 1 worker. "
            if any(r["target"] == "litellm-proxy" for r in rows)
            else ". "
        )
        + "Overhead = target percentile − direct "
        "percentile at the same concurrency. Load generator, proxies and upstream share the machine.",
        "",
        f"1-min load average {data.get('load_start', float('nan')):.2f} at the start, "
        f"{data.get('load_end', float('nan')):.2f} at the end.{' ' + str(data['note']) if data.get('note') else ''}",
        "",
        f"Rerun: `{data.get('command', 'python benchmarks/perf/overhead.py')}`",
    ]
    if int(str(data.get("rounds", 1))) > 1:
        lines += ["", f"Each cell: {data['rounds']} rounds with the targets interleaved; every "
                  "percentile is the median over the rounds."]  # fmt: skip
    has_litellm = any(r["target"] == "litellm-proxy" for r in rows)
    if has_litellm:
        lines += [
            "",
            "| stream | conc. | direct p50/p95/p99 ms | dmt-proxy p50/p95/p99 ms | LiteLLM p50/p95/p99 ms "
            "| dmt overhead p50/p99 | LiteLLM overhead p50/p99 | dmt p50 overhead ÷ LiteLLM's |",
            "|---|---|---|---|---|---|---|---|",
        ]
    fmt = lambda x: f"{x['p50_ms']:.2f} / {x['p95_ms']:.2f} / {x['p99_ms']:.2f}"  # noqa: E731
    for (stream, c, target), r in sorted(by_key.items()):
        if target != "direct" or not has_litellm:
            continue
        d, o, lt = r, by_key[(stream, c, "dmt-proxy")], by_key[(stream, c, "litellm-proxy")]
        od50, od99 = o["p50_ms"] - d["p50_ms"], o["p99_ms"] - d["p99_ms"]
        ol50, ol99 = lt["p50_ms"] - d["p50_ms"], lt["p99_ms"] - d["p99_ms"]
        ratio = od50 / ol50 if ol50 > 0 else float("nan")
        lines.append(
            f"| {stream} | {c} | {fmt(d)} | {fmt(o)} | {fmt(lt)} | {od50:.2f} / {od99:.2f} "
            f"| {ol50:.2f} / {ol99:.2f} | {ratio:.2f} |"
        )
    for api, path in ROUTES.items():
        name = f"dmt-proxy-{api}"
        if not any(r["target"] == name for r in rows):
            continue
        lite_cols = (" | ÷ LiteLLM (p50)", "|---") if has_litellm else ("", "")
        lines += ["", f"## {path} vs /v1/chat/completions (same pipeline, same upstream)", "",
                  f"Targets: {path} overhead ≤ 1.2× chat overhead (p50) at c = 1 and 16; "
                  "≤ 0.5× LiteLLM's.", "",
                  "| stream | conc. | direct p50 / p99 ms | chat overhead p50 / p99 "
                  f"| {api} overhead p50 / p99 | {api} ÷ chat (p50){lite_cols[0]} |",
                  f"|---|---|---|---|---|---{lite_cols[1]}|"]  # fmt: skip
        for (stream, c, target), d in sorted(by_key.items()):
            route = by_key.get((stream, c, name))
            if target != "direct" or route is None:
                continue
            chat = by_key[(stream, c, "dmt-proxy")]
            oc50, oc99 = chat["p50_ms"] - d["p50_ms"], chat["p99_ms"] - d["p99_ms"]
            or50, or99 = route["p50_ms"] - d["p50_ms"], route["p99_ms"] - d["p99_ms"]
            vs_chat = or50 / oc50 if oc50 > 0 else float("nan")
            row = (f"| {stream} | {c} | {d['p50_ms']:.2f} / {d['p99_ms']:.2f} "
                   f"| {oc50:.2f} / {oc99:.2f} | {or50:.2f} / {or99:.2f} | {vs_chat:.2f}")  # fmt: skip
            if has_litellm:
                lite = by_key[(stream, c, "litellm-proxy")]
                ol50 = lite["p50_ms"] - d["p50_ms"]
                row += f" | {or50 / ol50 if ol50 > 0 else float('nan'):.2f}"
            lines.append(row + " |")
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
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "perf" / "proxy_overhead" / "proxy_overhead"
    )
    parser.add_argument("--note", default="", help="a sentence added to the markdown")
    parser.add_argument(
        "--targets",
        default=",".join(TARGETS),
        help=f"a subset of {','.join(TARGETS)} (direct and dmt-proxy always run)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="interleaved rounds per cell; percentiles are their medians",
    )
    args = parser.parse_args()
    selected = {t.strip() for t in args.targets.split(",") if t.strip()} | {"direct", "dmt-proxy"}
    unknown = selected - set(TARGETS)
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    load_start = os.getloadavg()[0]
    data = run(
        [int(c) for c in args.concurrency.split(",")],
        args.requests,
        [s.strip() == "true" for s in args.stream.split(",")],
        [int(c) for c in args.paced.split(",") if c.strip()],
        args.paced_interval_s,
        tuple(t for t in TARGETS if t in selected),
        args.rounds,
    )
    data.update(load_start=load_start, load_end=os.getloadavg()[0], note=args.note,
                command="python benchmarks/perf/overhead.py " + shlex.join(sys.argv[1:]))  # fmt: skip
    write_result(args.out, data, markdown(data))
    print(markdown(data))


if __name__ == "__main__":
    main()
