"""Harness efficiency: DIB decisions/s through dmt-proxy (read-only memory) vs straight upstream.

Issue 9, performance item 4 (goal: proxy ÷ direct ≥ 90 %). The same DIB decision
requests go (a) straight to a running llama-server and (b) through a
``dmt-proxy serve`` subprocess in front of that same server, as the simulation's
audits send them: ``X-DMT-User`` of a user who holds a few memories,
``X-DMT-Memory: read-only``, mitigation mode ``off`` (memories are retrieved and
injected, untagged; nothing is written and no auditor runs; the seed memories
were written in mode ``off``, so they are stored ``unaudited``).

Requests are built and scored by the DIB harness itself
(``dmt_bench.dib.scorer.ask``: ``request_params`` + ``read_reply``); the
runner (``run_decisions``) settles the request shape in an untimed warm-up per
target. The sample is a fixed stratified DIB sample (``stratified_sample``; cut
round-robin over domains when it has more than ``--decisions``). It is split into
blocks; every block is sent to both targets back to back, alternating which goes
first (AB, BA, AB, ...), so drift in machine load hits both. Within a block up to
``c`` decisions are in flight (the servers have 2 slots).

llama-server keeps finished prompts in a RAM cache (``--cache-ram``, 8 GiB by
default) and reuses the longest cached prefix, so a prompt it has seen before
(an earlier run, the other concurrency level) costs almost nothing. The proxy's
memory block starts with a per-request random nonce, so its prompts never repeat;
the direct ones would, and the comparison would be unfair. So the persona (the
first text of every prompt) starts with a session line, ``Session <tag>.``, random
per run and concurrency level and identical for both targets: prompts are new to
the server, while decisions of one run still share their prefixes as in a real
audit (``--no-cache-tag`` sends the canonical prompts).

Reported per concurrency: decisions/s of each target (Σ decisions / Σ block wall
time), efficiency = proxy ÷ direct with a 95 % block-bootstrap CI, the proxy's own
added time (its ``x-dmt-overhead-ms`` header: time not spent waiting for the
upstream, memory retrieval included), the paired per-decision latency difference,
prompt tokens each target made the upstream read (injected memories lengthen the
prompt), and output agreement between the targets (same greedy integer; expected
score within 1 point), next to the agreement of each target with itself across
the two concurrency levels (the upstream's own run-to-run noise).

Run (model servers up; smollm2 is the fastest):
    python benchmarks/perf/harness_efficiency.py --decisions 40
    python benchmarks/perf/harness_efficiency.py --model qwen2.5-0.5b
Writes benchmarks/results/perf/harness_efficiency/harness_efficiency.{json,md} (``--out`` to change).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from _results import finite, write_result
from harness_efficiency_report import markdown

from dmt_bench.dib.generator import generate, stratified_sample
from dmt_bench.dib.runner import run_decisions
from dmt_bench.dib.schema import DIB_VERSION, Sample
from dmt_bench.dib.scorer import DecisionResult, Outcome, ScoringConfig, ScoringMode, ask
from dmt_bench.endpoint import Endpoint
from dmt_bench.harness.proxy import ProxyClient, free_port
from dmt_bench.stats import mean, percentile, ratio_of_sums_bootstrap
from dmt_proxy.errors import ConfigError

BENCHMARK_VERSION = 1
RESULTS = Path(__file__).resolve().parents[1] / "results"
UPSTREAMS = {"smollm2": "http://127.0.0.1:8093/v1", "qwen2.5-0.5b": "http://127.0.0.1:8091/v1"}
USER = "harness-efficiency-user"
WARMUP_DECISIONS = 2
SEED_MEMORIES = (
    "I run a small bakery in Leeds and I am hiring two new staff this spring.",
    "Our team prefers written feedback after every interview.",
    "My goal this quarter is to cut our time to hire from six weeks to four.",
    "We use a structured interview with five questions, each scored from 1 to 5.",
    "Please keep answers short; I read them on my phone between shifts.",
    "Last year we trained three apprentices and two of them stayed on.",
)
HEADERS_KEPT = ("x-dmt-overhead-ms", "x-dmt-memory", "x-dmt-memories")


# ---------------------------------------------------------------- pure metrics


def efficiency(direct_s: Sequence[float], proxy_s: Sequence[float]) -> float:
    """Throughput ratio proxy ÷ direct over paired blocks of the same decisions.

    Block i holds n_i decisions, timed T_d,i direct and T_p,i through the proxy:
    rate = Σn / ΣT for each, so efficiency = (Σn/ΣT_p) / (Σn/ΣT_d) = ΣT_d / ΣT_p.
    NaN when there are no blocks, the lengths differ, or ΣT_p is 0.
    """
    if not direct_s or len(direct_s) != len(proxy_s) or sum(proxy_s) <= 0:
        return math.nan
    return float(sum(direct_s) / sum(proxy_s))


def bootstrap_ci(direct_s: Sequence[float], proxy_s: Sequence[float], n_boot: int = 2000,
                 seed: int = 0, level: float = 0.95) -> tuple[float, float]:  # fmt: skip
    """Percentile bootstrap CI of ``efficiency``, resampling whole blocks (pairs kept).

    Each resample draws B block indices with replacement and computes
    ΣT_d[idx] / ΣT_p[idx]; the CI is its central ``level`` percentile interval
    (``dmt_bench.stats.ratio_of_sums_bootstrap``, linear interpolation).
    (NaN, NaN) with fewer than 2 blocks or mismatched lengths.
    """
    ci = ratio_of_sums_bootstrap(direct_s, proxy_s, n_resamples=n_boot, seed=seed, confidence=level)
    return ci.low, ci.high


def agreement(a: Sequence[DecisionResult], b: Sequence[DecisionResult],
              tol: float = 1.0) -> dict[str, float | int]:  # fmt: skip
    """How often two runs of the same decisions gave the same answer.

    Over decisions scored in both runs (matched by ``sample_id``), n of them:
    ``greedy`` = share with the same written integer, ``within_tol`` = share with
    |score_a − score_b| ≤ tol, ``mean_abs_diff`` = mean |score_a − score_b|;
    ``both_scored`` = n, ``compared`` = decisions present in both. Shares are NaN when n = 0.
    """
    right = {r.sample_id: r for r in b}
    pairs = [(x, right[x.sample_id]) for x in a if x.sample_id in right]
    scored = [(x, y) for x, y in pairs if x.score is not None and y.score is not None]
    n = len(scored)
    diffs = [abs(float(x.score) - float(y.score)) for x, y in scored]  # type: ignore[arg-type]
    return {
        "compared": len(pairs),
        "both_scored": n,
        "greedy": sum(x.greedy == y.greedy for x, y in scored) / n if n else math.nan,
        "within_tol": sum(d <= tol for d in diffs) / n if n else math.nan,
        "mean_abs_diff": sum(diffs) / n if n else math.nan,
    }


# ------------------------------------------------------------ sample and blocks


def pick_samples(n: int, seed: int) -> tuple[list[Sample], list[Sample]]:
    """The measured sample (about ``n``, every domain) and a disjoint warm-up sample."""
    every = generate(seed)
    chosen = stratified_sample(every, n, seed)
    if len(chosen) > n:  # small n: the stratified sample keeps ≥ 1 whole set per domain
        by_domain: dict[str, list[Sample]] = {}
        for s in chosen:
            by_domain.setdefault(s.domain, []).append(s)
        queues = list(by_domain.values())
        cut: list[Sample] = []
        while len(cut) < n:
            for q in queues:
                if q and len(cut) < n:
                    cut.append(q.pop(0))
        chosen = cut
    ids = {s.id for s in chosen}
    warm = [s for s in every if s.id not in ids][:: max(1, len(every) // WARMUP_DECISIONS)]
    return chosen, warm[:WARMUP_DECISIONS]


def tag_samples(samples: Sequence[Sample], tag: str) -> list[Sample]:
    """``samples`` with a ``Session <tag>.`` line before the persona (see module docstring)."""
    return [s.model_copy(update={"persona": f"Session {tag}.\n{s.persona}"}) for s in samples]


def split_blocks(samples: Sequence[Sample], size: int) -> list[list[Sample]]:
    """Consecutive blocks of ``size`` (the last may be shorter)."""
    return [list(samples[i : i + size]) for i in range(0, len(samples), size)]


# ------------------------------------------------------------------- targets


@dataclass
class Recorder:
    """Keeps, per phase, the proxy headers and upstream usage of every chat reply."""

    phase: str = "setup"
    replies: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    async def hook(self, response: Any) -> None:
        if not str(response.request.url).endswith("/chat/completions"):
            return
        await response.aread()  # both targets pay this, and the SDK reuses the bytes
        headers = {k: response.headers.get(k) for k in HEADERS_KEPT}
        self.replies.setdefault(self.phase, []).append(
            {"headers": headers, "body": response.content}
        )


@dataclass
class Target:
    name: str
    endpoint: Endpoint
    client: Any


def make_target(name: str, endpoint: Endpoint, recorder: Recorder) -> Target:
    """The harness's own client for ``endpoint``, with a response hook added."""
    http = openai.DefaultAsyncHttpxClient(event_hooks={"response": [recorder.hook]})
    return Target(name, endpoint, endpoint.client().with_options(http_client=http))


async def run_block(samples: Sequence[Sample], target: Target, config: ScoringConfig,
                    concurrency: int) -> tuple[float, list[DecisionResult]]:  # fmt: skip
    """Ask every decision of the block (≤ ``concurrency`` in flight); wall time and results."""
    gate = asyncio.Semaphore(concurrency)

    async def one(sample: Sample) -> DecisionResult:
        async with gate:
            return await ask(sample, target.endpoint, config, client=target.client)

    started = time.perf_counter()
    results = await asyncio.gather(*(one(s) for s in samples))
    return time.perf_counter() - started, list(results)


def upstream_health(base_url: str) -> None:
    root = base_url.rstrip("/").removesuffix("/v1")
    try:
        with urllib.request.urlopen(root + "/health", timeout=3) as resp:
            if resp.status == 200:
                return
    except OSError as exc:
        raise ConfigError(
            f"no upstream at {root} ({exc}); start it first (dmt-proxy models start ...)"
        ) from None
    raise ConfigError(f"upstream at {root} is not healthy")


def retrieval_totals(proxy_url: str) -> tuple[float, float]:
    """(seconds, searches) of memory retrieval so far, from the proxy's ``/metrics``."""
    url = proxy_url.removesuffix("/v1") + "/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    totals = {"_sum": 0.0, "_count": 0.0}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        for suffix in totals:
            if name.startswith(f"dmt_memory_retrieval_duration_seconds{suffix}"):
                totals[suffix] += float(value)
    return totals["_sum"], totals["_count"]


def write_policy(tmp: Path, model: str, upstream: str, backend: str, top_k: int) -> Path:
    # The alias has the upstream's own model name: both targets get byte-identical bodies.
    policy = {"version": 1, "name": "harness-efficiency", "mode": "off", "default_model": model,
              "models": {model: {"model": f"openai/{model}", "api_base": upstream}},
              "memory": {"backend": backend, "top_k": top_k}}  # fmt: skip
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(policy, sort_keys=False), encoding="utf-8")
    return path


async def seed_memories(proxy_url: str, admin: ProxyClient, model: str, count: int) -> int:
    """Write ``count`` interactions for ``USER`` through the proxy (mode off); memories stored."""
    if count == 0:
        return len(await admin.memories(USER))
    writer = Endpoint(base_url=proxy_url, model=model, user=USER, memory="read-write", mode="off")
    client = writer.client()
    for text in SEED_MEMORIES[:count]:
        message = {"role": "user", "content": text}
        await client.chat.completions.create(model=model, messages=[message], max_tokens=24,
                                             temperature=0.0)  # fmt: skip
    await client.close()
    await admin.wait_drained(timeout_s=120)
    return len(await admin.memories(USER))


# ------------------------------------------------------------------ the run


def reply_stats(replies: list[dict[str, Any]]) -> dict[str, Any]:
    """Proxy headers and upstream prompt accounting over a phase's replies."""
    heads = [r["headers"] for r in replies]
    overhead = [float(h["x-dmt-overhead-ms"]) for h in heads if h.get("x-dmt-overhead-ms")]
    injected = [
        int(h["x-dmt-memories"]) for h in heads if (h.get("x-dmt-memories") or "").isdigit()
    ]
    prompt, fresh, cached, prompt_ms = [], [], [], []
    for r in replies:
        try:
            body = json.loads(r["body"])
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        prompt.append((body.get("usage") or {}).get("prompt_tokens"))
        timings = body.get("timings") or {}
        fresh.append(timings.get("prompt_n"))
        cached.append(timings.get("cache_n"))
        prompt_ms.append(timings.get("prompt_ms"))
    return {
        "replies": len(replies),
        "overhead_ms_p50": percentile(overhead, 50),
        "overhead_ms_p95": percentile(overhead, 95),
        "memories_injected_mean": mean(injected),
        "prompt_tokens_mean": mean(prompt),
        "prompt_tokens_computed_mean": mean(fresh),
        "prompt_tokens_cached_mean": mean(cached),
        "upstream_prompt_ms_mean": mean(prompt_ms),
        "memory_header": sorted({str(r["headers"].get("x-dmt-memory")) for r in replies}),
    }


Runs = dict[str, list[tuple[float, list[DecisionResult]]]]
"""Per target, the (wall seconds, results) of each block."""


def cell(c: int, runs: Runs, recorder: Recorder, n_boot: int) -> dict[str, Any]:
    """Everything reported for one concurrency level."""
    out: dict[str, Any] = {"concurrency": c, "blocks": len(runs["direct"])}
    times = {name: [t for t, _ in blocks] for name, blocks in runs.items()}
    results = {name: [r for _, rs in blocks for r in rs] for name, blocks in runs.items()}
    for name in ("direct", "proxy"):
        rs = results[name]
        out[name] = {
            "decisions": len(rs),
            "seconds": round(sum(times[name]), 3),
            "decisions_per_s": len(rs) / sum(times[name]) if sum(times[name]) > 0 else math.nan,
            "errors": sum(r.outcome is Outcome.ERROR for r in rs),
            "scored": sum(r.outcome is Outcome.SCORED for r in rs),
            "latency_s_p50": percentile([r.latency_s for r in rs], 50),
            **reply_stats(recorder.replies.get(f"{name}/c{c}", [])),
        }
    out["efficiency"] = efficiency(times["direct"], times["proxy"])
    out["efficiency_ci95"] = bootstrap_ci(times["direct"], times["proxy"], n_boot)
    out["block_seconds"] = {k: [round(t, 3) for t in v] for k, v in times.items()}
    direct_lat = {r.sample_id: r.latency_s for r in results["direct"]}
    deltas = [1000 * (r.latency_s - direct_lat[r.sample_id]) for r in results["proxy"]]
    out["paired_latency_delta_ms_p50"] = percentile(deltas, 50)
    out["paired_latency_delta_ms_mean"] = mean(deltas)
    out["agreement_proxy_vs_direct"] = agreement(results["direct"], results["proxy"])
    out["_results"] = results
    return out


@dataclass
class Proxy:
    """A running ``dmt-proxy serve`` subprocess and how to reach it."""

    proc: Any
    url: str
    admin: ProxyClient
    home: Path


def start_proxy(args: argparse.Namespace, upstream: str) -> Proxy:
    """Write the policy, start the proxy with its own state dir and admin key, wait for it."""
    home = Path(tempfile.mkdtemp(prefix="dmt-harness-eff-"))
    port, key = free_port(), secrets.token_hex(16)
    policy = write_policy(home, args.model, upstream, args.backend, args.top_k)
    env = {"DMT_STATE_DIR": str(home / "state"), "DMT_ADMIN_KEY": key, "DMT_LOG_LEVEL": "warning"}
    cmd = [python(), "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(port)]
    try:
        proc = start([*cmd, "--policy", str(policy)], f"http://127.0.0.1:{port}/healthz",
                     home / "proxy.log", env=env)  # fmt: skip
    except RuntimeError as exc:
        raise ConfigError(f"the proxy did not start ({exc}); see {home}/proxy.log") from None
    url = f"http://127.0.0.1:{port}/v1"
    return Proxy(proc=proc, url=url, admin=ProxyClient(url, key), home=home)


def note(message: str) -> None:
    print(f"harness: {message}", file=sys.stderr, flush=True)


async def settle(targets: dict[str, Target], warm: list[Sample], config: ScoringConfig,
                 recorder: Recorder) -> ScoringConfig:  # fmt: skip
    """Untimed warm-up through the harness's runner; the request shape both settle on.

    Loads the proxy's embedder and fills connection pools before anything is timed.
    """
    settled = {}
    for name, target in targets.items():
        recorder.phase = f"{name}/warmup"
        out = await run_decisions(warm, target.endpoint, config, client=target.client,
                                  progress=sys.stderr)  # fmt: skip
        settled[name] = out.config
    if settled["direct"] != settled["proxy"]:
        raise ConfigError(f"the targets settled on different request shapes: {settled}")
    return settled["direct"]


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Start the proxy, seed memories, warm up, run the ABAB blocks; the results document."""
    upstream = args.upstream or UPSTREAMS[args.model]
    upstream_health(upstream)
    samples, warm = pick_samples(args.decisions, args.seed)
    blocks = split_blocks(samples, args.block)
    proxy = start_proxy(args, upstream)
    note(f"{len(samples)} decisions in {len(blocks)} blocks; proxy log {proxy.home}/proxy.log")
    recorder = Recorder()
    cells = []
    try:
        stored = await seed_memories(proxy.url, proxy.admin, args.model, args.memories)
        note(f"{stored} memories stored for {USER}")
        direct = Endpoint(base_url=upstream, model=args.model, timeout_s=args.timeout)
        through = Endpoint(base_url=proxy.url, model=args.model, user=USER, mode="off",
                           memory=args.proxy_memory, timeout_s=args.timeout)  # fmt: skip
        targets = {"direct": make_target("direct", direct, recorder),
                   "proxy": make_target("proxy", through, recorder)}  # fmt: skip
        config = await settle(targets, warm, ScoringConfig(mode=ScoringMode(args.scoring)),
                              recorder)  # fmt: skip
        load_start = os.getloadavg()[0]
        run_tag = secrets.token_hex(4)
        for c in args.concurrency:
            runs: Runs = {"direct": [], "proxy": []}
            before = retrieval_totals(proxy.url)
            tagged = tag_samples(samples, f"{run_tag}-c{c}") if args.cache_tag else samples
            for i, block in enumerate(split_blocks(tagged, args.block)):
                for name in ("direct", "proxy") if i % 2 == 0 else ("proxy", "direct"):
                    recorder.phase = f"{name}/c{c}"
                    runs[name].append(await run_block(block, targets[name], config, c))
                d, p = runs["direct"][-1][0], runs["proxy"][-1][0]
                note(f"c={c} block {i + 1}/{len(blocks)} ({len(block)}): direct {d:.2f}s, "
                     f"proxy {p:.2f}s")  # fmt: skip
            cells.append(cell(c, runs, recorder, args.bootstrap))
            after = retrieval_totals(proxy.url)
            searches = after[1] - before[1]
            cells[-1]["proxy"]["retrieval_ms_mean"] = (
                1000 * (after[0] - before[0]) / searches if searches else math.nan)  # fmt: skip
        for target in targets.values():
            await target.client.close()
    finally:
        stop(proxy.proc)
    shutil.rmtree(proxy.home, ignore_errors=True)
    if len(cells) >= 2:  # each target against itself at another concurrency: upstream noise
        first, second = cells[0], cells[1]
        for name in ("direct", "proxy"):
            key = f"agreement_{name}_c{first['concurrency']}_vs_c{second['concurrency']}"
            first[key] = agreement(first["_results"][name], second["_results"][name])
    decisions = {
        f"c{x['concurrency']}": {k: [r.model_dump(mode="json", exclude={"text"}) for r in v]
                                 for k, v in x.pop("_results").items()}
        for x in cells
    }  # fmt: skip
    setup = {
        "model": args.model, "upstream": upstream, "dib_version": DIB_VERSION, "seed": args.seed,
        "decisions": len(samples), "block_size": args.block, "bootstrap": args.bootstrap,
        "domains": sorted({s.domain for s in samples}), "scoring": config.model_dump(mode="json"),
        "proxy_memory": args.proxy_memory, "proxy_mode": "off", "memory_backend": args.backend,
        "top_k": args.top_k, "memories_stored": stored, "warmup_decisions": len(warm),
        "cache_tag": args.cache_tag,
    }  # fmt: skip
    machine = {
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "platform": platform.platform(), "load_1min_start": round(load_start, 2),
        "load_1min_end": round(os.getloadavg()[0], 2),
    }  # fmt: skip
    return {
        "benchmark": "harness_efficiency",
        "version": BENCHMARK_VERSION,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python benchmarks/perf/harness_efficiency.py " + " ".join(sys.argv[1:]),
        "machine": machine,
        "git_rev": git_rev(),
        "setup": setup,
        "goal_efficiency": args.goal,
        "cells": cells,
        "decisions": decisions,
    }


def git_rev() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
    except OSError:
        return None
    return out.stdout.strip() or None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--decisions", type=int, default=40, help="DIB decisions (default 40)")
    parser.add_argument("--seed", type=int, default=0, help="DIB seed and sample seed")
    parser.add_argument("--model", choices=sorted(UPSTREAMS), default="smollm2")
    parser.add_argument("--upstream", help="the upstream's /v1 URL (default: the model's server)")
    parser.add_argument("--concurrency", default="1,2", help="comma list (default 1,2)")
    parser.add_argument("--block", type=int, default=4, help="decisions per block (default 4)")
    parser.add_argument("--memories", type=int, default=4,
                        help=f"memories the user holds (0-{len(SEED_MEMORIES)}, default 4)")  # fmt: skip
    parser.add_argument("--proxy-memory", choices=["read-only", "off"], default="read-only")
    parser.add_argument("--backend", default="mem0", help="memory backend (default mem0)")
    parser.add_argument("--top-k", type=int, default=5)
    parser.add_argument("--scoring", choices=[m.value for m in ScoringMode], default="expected")
    parser.add_argument("--timeout", type=float, default=120.0, help="per-request timeout (s)")
    parser.add_argument("--no-cache-tag", dest="cache_tag", action="store_false",
                        help="send the canonical DIB prompts (llama-server may have them cached)")  # fmt: skip
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--goal", type=float, default=0.90)
    parser.add_argument("--out", type=Path, default=RESULTS / "perf" / "harness_efficiency" / "harness_efficiency",
                        help="output path without suffix (.json and .md are written)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",")]
    except ValueError:
        raise ConfigError(
            f"--concurrency: a comma list of integers, not {args.concurrency!r}"
        ) from None
    if args.decisions < 1 or args.block < 1 or min(args.concurrency) < 1:
        raise ConfigError("--decisions, --block and every --concurrency must be at least 1")
    if not 0 <= args.memories <= len(SEED_MEMORIES):
        raise ConfigError(f"--memories must be between 0 and {len(SEED_MEMORIES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
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
