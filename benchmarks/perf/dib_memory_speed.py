"""DIB decisions/s with memory on vs off, before and after the stable memory block.

Issue 18, item 4. A DIB audit through the proxy in read-only mode puts the user's
retrieved memories in front of every decision prompt. Before this change they were
rendered most similar first, so the block's order, and therefore its text, changed
with every decision's query and llama-server evaluated the whole block again each
time (the pilot: 0.05 decisions/s with 6 memories against 0.21 without). Rendered
oldest first, the same memories make the same block, which the server's prefix
cache evaluates once per slot.

The DIB runner also changed: it used to send decisions in sample order,
``concurrency`` at a time, so two decisions of one context ran side by side on two
server slots and each evaluated their shared prefix; it now gives each worker whole
contexts (``dib.runner.by_context``), so one slot's cache serves a context.

Four targets answer the same DIB decisions, all through a real ``dmt-proxy
serve`` in mode ``off`` in front of one running llama-server:

* ``off``: this checkout's proxy, ``X-DMT-Memory: off`` (no memory block),
  decisions dispatched by context;
* ``before``: the proxy of ``--before`` (a git revision, default: the last
  commit of ``main`` before the stable block), read-only, the user holding
  ``--memories`` memories, decisions dispatched in sample order (the old runner);
* ``block``: this checkout's proxy (stable block), read-only, old dispatch;
* ``after``: this checkout's proxy, read-only, dispatched by context.

Both proxies use the mem0 backend with ``top_k`` at least the number of memories
(every memory is retrieved, as in ``dmt-bench dose``), so the targets differ only
in the order of the block. The memories are biased narratives of the labelled set
``auditor_eval_v1`` (one domain), written once through ``POST /v1/memories`` in
mode ``off`` (stored verbatim, unaudited) into the ``after`` proxy's store, which
is then copied for the ``before`` proxy (the old code has no such endpoint).

Blocks are one domain's contexts (a small audit); each block is sent to the four
targets in a rotating order, so load drift hits all of them. A real audit asks
about 30 decisions per domain and 116 in all per memory state, so the one-off cost
of a block (the memory block evaluated once per slot) weighs more here than there. The machine is shared: ``/proc/loadavg`` is recorded around every block.
Every prompt's persona starts with a ``Session <tag>.`` line random per run, and
each memory target has its own proxy process (its own store copy and nonce), so
nothing is served from a cache left by an earlier run or by another target.

Run (llama-server of the model up; ``dmt-proxy models start qwen2.5-1.5b``):
    python benchmarks/perf/dib_memory_speed.py --model qwen2.5-1.5b --contexts 2
Writes benchmarks/results/perf/dib_memory_speed/dib_memory_speed.{json,md} (``--out`` to change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from _results import finite, write_result

from dmt_bench.auditor_eval.dataset import load_items
from dmt_bench.dib.generator import generate, sample_contexts
from dmt_bench.dib.runner import by_context
from dmt_bench.dib.schema import Sample
from dmt_bench.dib.scorer import DecisionResult, Outcome, ScoringConfig, ask
from dmt_bench.endpoint import Endpoint
from dmt_bench.harness.proxy import ProxyClient, free_port
from dmt_bench.stats import mean, ratio_of_sums_bootstrap
from dmt_proxy.errors import ConfigError

BENCHMARK_VERSION = 1
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
# The last commit of main that renders memories most similar first (the parent of the
# stable block). A fixed revision: "where this branch left main" stops meaning anything
# once the branch is merged.
BEFORE = "864f25e4225841adcea2d0cf029645cee4e6ef85"
UPSTREAMS = {
    "qwen2.5-0.5b": "http://127.0.0.1:8091/v1",
    "qwen2.5-1.5b": "http://127.0.0.1:8092/v1",
    "smollm2": "http://127.0.0.1:8093/v1",
}
USER = "dib-memory-speed"
TARGETS = ("off", "before", "block", "after")
BY_CONTEXT = {"off": True, "before": False, "block": False, "after": True}


def note(message: str) -> None:
    print(f"speed: {message}", file=sys.stderr, flush=True)


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages (``/proc/loadavg``)."""
    return [round(x, 2) for x in os.getloadavg()]


def git_rev(rev: str = "HEAD") -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", rev], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return out.stdout.strip()


def export_code(rev: str, into: Path) -> Path:
    """The package, policies and prompts of ``rev`` in ``into`` (a source checkout's layout)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", rev, "pyproject.toml", "dmt_proxy", "policies", "auditor_prompts"],
        capture_output=True,
        cwd=ROOT,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


@dataclass
class Proxy:
    proc: Any
    url: str
    admin: ProxyClient
    home: Path


def start_proxy(
    code: Path, home: Path, model: str, upstream: str, top_k: int, timeout_s: float
) -> Proxy:
    """``dmt-proxy serve`` from the package in ``code``, state in ``home/state``."""
    policy = {
        "version": 1,
        "name": "dib-memory-speed",
        "mode": "off",
        "default_model": model,
        "models": {model: {"model": f"openai/{model}", "api_base": upstream}},
        "memory": {"backend": "mem0", "top_k": top_k},
    }
    home.mkdir(parents=True, exist_ok=True)
    (home / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False), encoding="utf-8")
    port, key = free_port(), secrets.token_hex(16)
    env = {
        "DMT_STATE_DIR": str(home / "state"),
        "DMT_ADMIN_KEY": key,
        "DMT_LOG_LEVEL": "warning",
        # On a shared machine a long prompt can wait minutes for a slot: the proxy waits as
        # long as the client does (--timeout), not its 300 s default.
        "DMT_UPSTREAM_TIMEOUT_S": str(timeout_s),
        "PYTHONPATH": str(code),
    }
    cmd = [
        python(),
        "-m",
        "dmt_proxy.cli.proxy_cli",
        "serve",
        "--port",
        str(port),
        "--policy",
        str(home / "policy.yaml"),
    ]
    proc = start(
        cmd, f"http://127.0.0.1:{port}/healthz", home / "proxy.log", env=env, timeout_s=300
    )
    url = f"http://127.0.0.1:{port}/v1"
    return Proxy(proc=proc, url=url, admin=ProxyClient(url, key), home=home)


def seed_texts(domain: str, count: int) -> list[str]:
    """The first ``count`` biased narratives of ``domain`` in the labelled set."""
    items = [i for i in load_items() if i.biased and i.domain == domain]
    if len(items) < count:
        raise ConfigError(f"only {len(items)} biased items of {domain}")
    return [i.text for i in items[:count]]


@dataclass
class Recorder:
    """Upstream prompt accounting (llama-server's ``timings``) of every reply, per target."""

    target: str = "setup"
    timings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    async def hook(self, response: Any) -> None:
        if not str(response.request.url).endswith("/chat/completions"):
            return
        await response.aread()
        try:
            body = json.loads(response.content)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        t = body.get("timings") or {}
        usage = body.get("usage") or {}
        self.timings.setdefault(self.target, []).append(
            {
                "prompt_tokens": usage.get("prompt_tokens"),
                "computed": t.get("prompt_n"),
                "cached": t.get("cache_n"),
                "prompt_ms": t.get("prompt_ms"),
            }
        )


async def run_block(
    samples: list[Sample],
    endpoint: Endpoint,
    client: Any,
    config: ScoringConfig,
    concurrency: int,
    contexts: bool,
) -> tuple[float, list[DecisionResult]]:
    """Ask every decision; ``contexts``: workers take whole contexts (else sample order)."""
    queue = by_context(samples) if contexts else [[i] for i in range(len(samples))]
    results: dict[int, DecisionResult] = {}

    async def worker() -> None:
        while queue:
            for i in queue.pop(0):
                results[i] = await ask(samples[i], endpoint, config, client=client)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, [results[i] for i in range(len(samples))]


def ratio_ci(num: list[float], den: list[float], n_boot: int, seed: int = 0) -> list[float]:
    """Percentile 95 % CI of Σnum/Σden over resampled blocks (pairs kept)."""
    ci = ratio_of_sums_bootstrap(num, den, n_resamples=n_boot, seed=seed)
    return [ci.low, ci.high]


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    upstream = args.upstream or UPSTREAMS[args.model]
    domains = args.domains.split(",")
    samples = sample_contexts(generate(args.seed, domains), args.contexts, args.seed)
    blocks: list[list[Sample]] = []
    for s in samples:
        if not blocks or blocks[-1][0].domain != s.domain:
            blocks.append([])
        blocks[-1].append(s)
    tag = secrets.token_hex(4)
    blocks = [
        [s.model_copy(update={"persona": f"Session {tag}.\n{s.persona}"}) for s in b]
        for b in blocks
    ]
    texts = seed_texts(args.memory_domain, args.memories)
    work = Path(tempfile.mkdtemp(prefix="dib-memory-speed-"))
    before_code = export_code(args.before, work / "before-code")
    top_k = max(args.memories, 1)
    note(f"{len(samples)} decisions in {len(blocks)} blocks; work dir {work}")
    seeder = start_proxy(ROOT, work / "after", args.model, upstream, top_k, args.timeout)
    try:
        for text in texts:
            await seeder.admin.add_memory(USER, text, mode="off")
        await seeder.admin.wait_drained(timeout_s=600)
        stored = len(await seeder.admin.memories(USER))
    finally:
        stop(seeder.proc)
    shutil.copytree(work / "after" / "state", work / "before" / "state")
    shutil.copytree(work / "after" / "state", work / "block" / "state")
    # One proxy per memory target: each renders its own nonce, so no target is served
    # from a cache another one filled.
    proxies = {
        "after": start_proxy(ROOT, work / "after", args.model, upstream, top_k, args.timeout),
        "block": start_proxy(ROOT, work / "block", args.model, upstream, top_k, args.timeout),
        "before": start_proxy(
            before_code, work / "before", args.model, upstream, top_k, args.timeout
        ),
    }
    recorder = Recorder()
    http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [recorder.hook]})
    endpoints = {
        "off": Endpoint(
            proxies["after"].url,
            args.model,
            user=USER,
            memory="off",
            mode="off",
            timeout_s=args.timeout,
        ),
        "before": Endpoint(
            proxies["before"].url,
            args.model,
            user=USER,
            memory="read-only",
            mode="off",
            timeout_s=args.timeout,
        ),
        "after": Endpoint(
            proxies["after"].url,
            args.model,
            user=USER,
            memory="read-only",
            mode="off",
            timeout_s=args.timeout,
        ),
        "block": Endpoint(
            proxies["block"].url,
            args.model,
            user=USER,
            memory="read-only",
            mode="off",
            timeout_s=args.timeout,
        ),
    }
    clients = {k: e.client().with_options(http_client=http) for k, e in endpoints.items()}
    config = ScoringConfig()
    times: dict[str, list[float]] = {t: [] for t in TARGETS}
    results: dict[str, list[DecisionResult]] = {t: [] for t in TARGETS}
    loads: list[dict[str, Any]] = []
    try:
        for i, block in enumerate(blocks):
            order = TARGETS[i % len(TARGETS) :] + TARGETS[: i % len(TARGETS)]
            for name in order:
                recorder.target = name
                load0 = loadavg()
                wall, rs = await run_block(
                    block,
                    endpoints[name],
                    clients[name],
                    config,
                    args.concurrency,
                    BY_CONTEXT[name],
                )
                times[name].append(wall)
                results[name].extend(rs)
                loads.append(
                    {
                        "block": i,
                        "target": name,
                        "start": load0,
                        "end": loadavg(),
                        "seconds": round(wall, 2),
                        "decisions": len(block),
                    }
                )
                note(
                    f"block {i + 1}/{len(blocks)} {name}: {len(block)} in {wall:.1f}s, "
                    f"load {load0[0]}"
                )
    finally:
        for c in clients.values():
            await c.close()
        for p in proxies.values():
            stop(p.proc)
    shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, Any] = {}
    for name in TARGETS:
        n = len(results[name])
        tim = recorder.timings.get(name, [])
        summary[name] = {
            "decisions": n,
            "seconds": round(sum(times[name]), 2),
            "decisions_per_s": n / sum(times[name]) if sum(times[name]) else math.nan,
            "errors": sum(r.outcome is Outcome.ERROR for r in results[name]),
            "prompt_tokens_mean": mean(t["prompt_tokens"] for t in tim),
            "computed_tokens_mean": mean(t["computed"] for t in tim),
            "cached_tokens_mean": mean(t["cached"] for t in tim),
            "upstream_prompt_ms_mean": mean(t["prompt_ms"] for t in tim),
        }
    # Rate ratio X ÷ off = Σ off time ÷ Σ X time over the same blocks.
    ratios = {
        f"{name}_vs_off": {
            "ratio": sum(times["off"]) / sum(times[name]) if sum(times[name]) else math.nan,
            "ci95": ratio_ci(times["off"], times[name], args.bootstrap),
        }
        for name in ("before", "block", "after")
    }
    ratios["after_vs_before"] = {
        "ratio": sum(times["before"]) / sum(times["after"]) if sum(times["after"]) else math.nan,
        "ci95": ratio_ci(times["before"], times["after"], args.bootstrap),
    }
    same = [
        (a.greedy, b.greedy)
        for a, b in zip(results["before"], results["after"], strict=True)
        if a.greedy is not None and b.greedy is not None
    ]
    return {
        "benchmark": "dib_memory_speed",
        "version": BENCHMARK_VERSION,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python benchmarks/perf/dib_memory_speed.py " + " ".join(sys.argv[1:]),
        "git_rev_after": git_rev(),
        "git_rev_before": git_rev(args.before),
        "cpus": os.cpu_count(),
        "setup": {
            "model": args.model,
            "upstream": upstream,
            "domains": domains,
            "contexts_per_domain": args.contexts,
            "decisions": len(samples),
            "concurrency": args.concurrency,
            "memories": stored,
            "memory_domain": args.memory_domain,
            "top_k": top_k,
            "backend": "mem0",
            "scoring": config.model_dump(mode="json"),
        },
        "targets": summary,
        "ratios": ratios,
        "same_written_integer_before_after": (sum(a == b for a, b in same) / len(same))
        if same
        else math.nan,
        "load": loads,
        "block_seconds": {k: [round(t, 2) for t in v] for k, v in times.items()},
    }


def markdown(data: dict[str, Any]) -> str:
    """The committed summary."""
    s = data["setup"]
    loads = [x["start"][0] for x in data["load"]]
    lines = [
        "# DIB decisions/s with memory: off, before and after the stable memory block",
        "",
        f"Measured {data['when']} on {data['cpus']} CPUs (shared machine: 1-min load "
        f"{min(loads):.2f}–{max(loads):.2f} over the blocks, each block's load in the JSON). "
        f"Code before: `{data['git_rev_before']}`, after: `{data['git_rev_after']}` (+ working "
        "tree).",
        "",
        f"Upstream `{s['model']}` (llama-server, {s['upstream']}); {s['decisions']} DIB "
        f"decisions ({s['contexts_per_domain']} contexts of {', '.join(s['domains'])}), "
        f"{s['concurrency']} in flight, expected-value scoring; every proxy in mode `off` with "
        f"mem0, top_k {s['top_k']}; the user holds {s['memories']} biased {s['memory_domain']} "
        "narratives of `auditor_eval_v1`. Blocks are one domain's contexts, sent to the four targets in "
        "rotating order; the before proxy's decisions go out in sample order, the others' by "
        "context except `block`'s.",
        "",
        f"Rerun: `{data['command']}`",
        "",
        "| target | decisions/s | s | prompt tokens | computed (not cached) | cached | errors |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, label in (
        ("off", "memory off"),
        ("before", "memory on, before (relevance order, sample-order dispatch)"),
        ("block", "memory on, stable block only (oldest first)"),
        ("after", "memory on, after (stable block, dispatch by context)"),
    ):
        t = data["targets"][name]
        lines.append(
            f"| {label} | {t['decisions_per_s']:.3f} | {t['seconds']:.0f} | "
            f"{t['prompt_tokens_mean']:.0f} | {t['computed_tokens_mean']:.0f} | "
            f"{t['cached_tokens_mean']:.0f} | {t['errors']} |"
        )
    lines += ["", "| rate ratio | value | 95 % CI (block bootstrap) |", "|---|---:|---|"]
    for key, label in (
        ("before_vs_off", "memory on before ÷ off"),
        ("block_vs_off", "memory on, stable block only ÷ off"),
        ("after_vs_off", "memory on after ÷ off"),
        ("after_vs_before", "after ÷ before (speed-up)"),
    ):
        r = data["ratios"][key]
        lo, hi = r["ci95"]
        lines.append(f"| {label} | {r['ratio']:.2f} | {lo:.2f} – {hi:.2f} |")
    lines += [
        "",
        "Computed = prompt tokens llama-server evaluated (`timings.prompt_n`); cached = tokens "
        "reused from its prefix cache (`timings.cache_n`). Same written integer before vs after: "
        f"{data['same_written_integer_before_after']:.1%} of decisions (the block's order is "
        "the only difference between them).",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", choices=sorted(UPSTREAMS), default="qwen2.5-1.5b")
    p.add_argument("--upstream", help="the upstream's /v1 URL (default: the model's server)")
    p.add_argument("--domains", default="age,race,ses", help="DIB domains (comma-separated)")
    p.add_argument("--contexts", type=int, default=2, help="DIB contexts per domain (>= 2)")
    p.add_argument("--memories", type=int, default=6, help="memories the user holds")
    p.add_argument("--memory-domain", default="age", help="domain of the seeded narratives")
    p.add_argument(
        "--before",
        default=BEFORE,
        help=f"git revision of the 'before' proxy (default: {BEFORE[:10]}, the last without "
        "the stable memory block)",
    )
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600.0, help="per-request timeout (s)")
    p.add_argument("--bootstrap", type=int, default=2000)
    p.add_argument(
        "--out", type=Path, default=RESULTS / "perf" / "dib_memory_speed" / "dib_memory_speed"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        data = asyncio.run(measure(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    text = markdown(data)
    write_result(args.out, finite(data), text, allow_nan=False)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
