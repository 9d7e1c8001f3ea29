"""Memory path: mem0's added latency at 10k memories, the auditor off the critical path, proxy RSS.

One run, side by side, against one dmt-proxy process (``dmt-proxy serve``) in
front of the instant fake upstream (``dmt_proxy.testing.upstream_server``):

1. **Added latency of memory.** The proxy's mem0 store (real, on disk, in a temp
   state dir) holds ``--memories`` memories of the benchmark user. Closed-loop
   load at each ``--concurrency``; requests alternate in blocks between memory
   off (``X-DMT-Memory: off``) and memory on without mitigation (mode ``off``:
   retrieval of top-k + write-back of the exchange through the outbox). Added
   latency = on percentile − off percentile. The outbox is drained after every
   "on" block, so its background writes (which do contend with retrieval for
   mem0's lock and the CPU) are charged to "on", not to the next "off" block.
2. **Auditor off the critical path.** The auditor model is a second fake server
   answering a valid verdict after ``--auditor-delay-s`` (2 s). Open-loop load at
   ``--rate`` req/s for ``--duration`` s against (0) memory off, (a) memory on, no
   auditing (mode off) and (b) mode ``dmt`` (every write audited; first stage off
   so every one reaches the auditor). (a) − (0) is memory's added latency at a
   steady rate, where a write-back rarely overlaps the next request. Latency counts from each request's scheduled send time,
   so a proxy falling behind shows up (no coordinated omission). Then the admin
   outbox endpoint is polled until it is empty: drain time after the last reply.
3. **RSS.** The proxy's VmRSS (``/proc/<pid>/status``) every 0.5 s, tagged with the
   phase; and a second proxy with memory disabled (``backend: none``) as baseline.

The store is filled before the proxy starts, in this process, the way
``memory_latency.py`` does it (clustered vectors, not timed); Qdrant's local mode
allows one client per path, so the fill closes the store before the proxy opens it.

Run:  python benchmarks/perf/memory_path.py [--memories 10000] [--duration 40]
Profile the proxy: DMT_BENCH_PROFILE_DIR=/tmp/prof python benchmarks/perf/memory_path.py ...
Writes benchmarks/results/perf/memory_path/memory_path.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from _results import finite, write_result
from memory_path_report import TARGETS, markdown

from dmt_bench.stats import percentile
from dmt_proxy.net import free_port

RESULTS = Path(__file__).resolve().parents[1] / "results"
USER_ID = "bench-user"  # the user memory_latency.fill_set writes for
ADMIN_KEY = "memory-path-bench-admin"
VERDICT = {"rationale": "No statement generalizes about a social group.", "bias_detected": False,
           "bias_type": None, "target_group": "", "tendency": "", "score": 0.05}  # fmt: skip


# -- pure helpers ------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One request as the client saw it."""

    latency_ms: float
    ok: bool
    memories: int | None = None
    """``x-dmt-memories``: how many memories the proxy injected (None: no retrieval)."""
    queued: bool = False
    """``x-dmt-memory-write: queued``: the proxy acknowledged a memory write."""


@dataclass(frozen=True)
class CellStats:
    n: int
    errors: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_memories: float
    """Mean memories injected per successful request (NaN when none retrieved)."""
    acked_writes: int


def summarize(samples: list[Sample]) -> CellStats:
    """Nearest-rank percentiles of successful requests; errors counted apart; NaN when empty."""
    ok = [s for s in samples if s.ok]
    lat = [s.latency_ms for s in ok]
    mems = [s.memories for s in ok if s.memories is not None]
    return CellStats(
        n=len(samples), errors=len(samples) - len(ok),
        p50_ms=percentile(lat, 50, method="nearest_rank"),
        p95_ms=percentile(lat, 95, method="nearest_rank"),
        p99_ms=percentile(lat, 99, method="nearest_rank"),
        mean_memories=sum(mems) / len(mems) if mems else math.nan,
        acked_writes=sum(s.queued for s in ok),
    )  # fmt: skip


def ratio(base: float, other: float) -> float:
    """``other / base``; NaN when either is NaN or ``base`` <= 0."""
    if math.isnan(base) or math.isnan(other) or base <= 0:
        return math.nan
    return other / base


_PROM_LINE = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s+(\S+)")
_PROM_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def prom_sum(text: str, name: str, **labels: str) -> float:
    """Sum of the Prometheus samples named ``name`` whose labels include ``labels`` (0 if none)."""
    total = 0.0
    for line in text.splitlines():
        m = _PROM_LINE.match(line)
        if not m or m.group(1) != name:
            continue
        have = dict(_PROM_LABEL.findall(m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def prom_delta(before: str, after: str, name: str, **labels: str) -> int:
    """``prom_sum(after) - prom_sum(before)`` for a counter, as an int."""
    return round(prom_sum(after, name, **labels) - prom_sum(before, name, **labels))


def status_kb(status_text: str, key: str) -> int | None:
    """A ``kB`` field (``VmRSS``, ``RssAnon``, ...) of ``/proc/<pid>/status``; None if absent."""
    m = re.search(rf"^{key}:\s+(\d+)\s+kB", status_text, re.MULTILINE)
    return int(m.group(1)) if m else None


def cpu_seconds(stat_text: str, ticks_per_s: int) -> float:
    """utime + stime of ``/proc/<pid>/stat`` (fields 14, 15) in seconds."""
    fields = stat_text.rsplit(")", 1)[1].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / ticks_per_s


@dataclass(frozen=True)
class RssSample:
    t: float
    phase: str
    rss_kb: int
    anon_kb: int


@dataclass(frozen=True)
class PhaseRss:
    phase: str
    samples: int
    peak_mb: float
    last_mb: float
    peak_anon_mb: float


def phase_rss(samples: list[RssSample]) -> list[PhaseRss]:
    """Per phase, in order of first appearance: peak and last VmRSS, peak RssAnon (MB = 2^20 B)."""
    order: list[str] = []
    by: dict[str, list[RssSample]] = {}
    for s in samples:
        if s.phase not in by:
            order.append(s.phase)
            by[s.phase] = []
        by[s.phase].append(s)
    mb = 1 / 1024
    return [
        PhaseRss(phase=p, samples=len(by[p]), peak_mb=max(s.rss_kb for s in by[p]) * mb,
                 last_mb=by[p][-1].rss_kb * mb, peak_anon_mb=max(s.anon_kb for s in by[p]) * mb)
        for p in order
    ]  # fmt: skip


# -- processes and sampling --------------------------------------------------------


class RssSampler:
    """Samples a process's VmRSS every ``interval_s`` on a thread, tagged with ``phase``."""

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self.pid, self.interval_s, self.phase = pid, interval_s, "start"
        self.samples: list[RssSample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._t0 = time.monotonic()

    def read(self) -> str:
        return Path(f"/proc/{self.pid}/status").read_text()

    def cpu(self) -> float:
        return cpu_seconds(Path(f"/proc/{self.pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                text = self.read()
            except OSError:
                return
            self.samples.append(RssSample(round(time.monotonic() - self._t0, 2), self.phase,
                                          status_kb(text, "VmRSS") or 0, status_kb(text, "RssAnon") or 0))  # fmt: skip

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def policy_yaml(up_port: int, auditor_port: int, backend: str, top_k: int) -> str:
    return (
        "version: 1\nname: bench-memory-path\nmode: 'off'\ndefault_model: fast\nmodels:\n"
        f"  fast:\n    model: openai/fast\n    api_base: http://127.0.0.1:{up_port}/v1\n"
        f"  auditor:\n    model: openai/auditor\n    api_base: http://127.0.0.1:{auditor_port}/v1\n"
        f"memory:\n  backend: {backend}\n  top_k: {top_k}\n"
        "audit:\n  auditor_model: auditor\n  first_stage: 'off'\n  timeout_s: 30\n"
    )


def start_proxy(tmp: Path, name: str, policy: Path, port: int) -> Any:
    env = {"DMT_STATE_DIR": str(tmp / f"state-{name}"), "DMT_LOG_LEVEL": "warning",
           "DMT_ADMIN_KEY": ADMIN_KEY}  # fmt: skip
    # DMT_BENCH_PROFILE_DIR: run the proxy under pyinstrument, one text profile per proxy.
    profile_dir = os.environ.get("DMT_BENCH_PROFILE_DIR")
    wrap = ([str(Path(python()).parent / "pyinstrument"), "-o", str(Path(profile_dir) / f"{name}.txt")]
            if profile_dir else [python()])  # fmt: skip
    return start([*wrap, "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(port),
                  "--policy", str(policy)],
                 f"http://127.0.0.1:{port}/healthz", tmp / f"{name}.log", env=env, timeout_s=240)  # fmt: skip


def stop_proxy(proc: Any) -> None:
    """Stop a proxy; under pyinstrument, with SIGINT first so the profile gets written."""
    if os.environ.get("DMT_BENCH_PROFILE_DIR") and proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=60)
    stop(proc)


async def fill_store(state_dir: Path, n: int) -> float:
    """Fill the mem0 store under ``state_dir`` with ``n`` memories of ``USER_ID``; seconds."""
    import numpy as np
    from memory_latency import FILLERS, TOPICS, USER, FillEmbedder, fill, fill_chunks

    from dmt_proxy.embedder import LocalEmbedder
    from dmt_proxy.memory.registry import BackendConfig, create_backend

    assert USER.user == USER_ID
    inner = LocalEmbedder()
    topic_vectors = np.asarray(inner.embed([q.format(x=FILLERS[0]) + "\n" + a for q, a in TOPICS]))
    backend = await create_backend("mem0", BackendConfig(state_dir=state_dir))
    t0 = time.perf_counter()
    try:
        await fill("mem0", backend, n, fill_chunks(n, topic_vectors, seed=n), FillEmbedder(inner))
    finally:
        await backend.close()
    return time.perf_counter() - t0


# -- load ------------------------------------------------------------------------


def body(i: int) -> dict[str, Any]:
    """A chat request asking one of memory_latency's questions (unique per ``i``)."""
    from memory_latency import QUERIES

    text = f"{QUERIES[i % len(QUERIES)]} (request {i})"
    return {"model": "fast", "messages": [{"role": "user", "content": text}]}


HEADERS = {
    "off": {"x-dmt-user": USER_ID, "x-dmt-memory": "off", "x-dmt-mode": "off"},
    "on": {"x-dmt-user": USER_ID, "x-dmt-memory": "read-write", "x-dmt-mode": "off"},
    "dmt": {"x-dmt-user": USER_ID, "x-dmt-memory": "read-write", "x-dmt-mode": "dmt"},
}


@dataclass
class Proxy:
    base: str
    client: httpx.AsyncClient
    sampler: RssSampler
    counter: int = 0

    async def send(self, arm: str, t0: float | None = None) -> Sample:
        self.counter += 1
        start_t = time.perf_counter() if t0 is None else t0
        try:
            r = await self.client.post(f"{self.base}/v1/chat/completions", json=body(self.counter),
                                       headers=HEADERS[arm])  # fmt: skip
        except httpx.HTTPError:
            return Sample((time.perf_counter() - start_t) * 1000, False)
        mems = r.headers.get("x-dmt-memories", "")
        return Sample((time.perf_counter() - start_t) * 1000, r.status_code == 200,
                      int(mems) if mems.isdigit() else None,
                      r.headers.get("x-dmt-memory-write") == "queued")  # fmt: skip

    async def closed_loop(self, arm: str, n: int, concurrency: int) -> list[Sample]:
        left = iter(range(n))
        out: list[Sample] = []

        async def worker() -> None:
            for _ in left:
                out.append(await self.send(arm))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return out

    async def fixed_rate(
        self, arm: str, rate: float, duration_s: float, max_inflight: int
    ) -> list[Sample]:
        sem = asyncio.Semaphore(max_inflight)

        async def one(due: float) -> Sample:
            async with sem:
                return await self.send(arm, t0=due)

        tasks = []
        t_start = time.perf_counter()
        for i in range(max(1, int(rate * duration_s))):
            due = t_start + i / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            tasks.append(asyncio.create_task(one(due)))
        return list(await asyncio.gather(*tasks))

    async def depth(self) -> int:
        r = await self.client.get(f"{self.base}/v1/admin/outbox",
                                  headers={"authorization": f"Bearer {ADMIN_KEY}"})  # fmt: skip
        r.raise_for_status()
        return int(r.json()["depth"])

    async def drain(self, timeout_s: float) -> dict[str, Any]:
        """Poll the outbox until empty; seconds from now, depth at the start, max depth."""
        t0, first = time.perf_counter(), await self.depth()
        depth, peak = first, first
        while depth > 0 and time.perf_counter() - t0 < timeout_s:
            await asyncio.sleep(0.25)
            depth = await self.depth()
            peak = max(peak, depth)
        return {"drain_s": round(time.perf_counter() - t0, 2), "depth_at_load_end": first,
                "max_depth": peak, "pending": depth, "drained": depth == 0}  # fmt: skip

    async def metrics(self) -> str:
        return (await self.client.get(f"{self.base}/metrics")).text

    async def idle(self, phase: str, seconds: float) -> None:
        self.sampler.phase = phase
        await asyncio.sleep(seconds)


async def phase_added(px: Proxy, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Section 1: memory off vs on, in alternating blocks per concurrency."""
    rows = []
    for c in args.concurrency:
        samples: dict[str, list[Sample]] = {"off": [], "on": []}
        cpu = {"off": 0.0, "on": 0.0}
        per_block = max(1, args.requests // args.rounds)
        for r in range(args.rounds):
            for arm in ("off", "on"):
                px.sampler.phase = f"1: c={c} memory {arm}"
                cpu0 = px.sampler.cpu()
                samples[arm] += await px.closed_loop(arm, per_block, c)
                if arm == "on":
                    await px.drain(args.drain_timeout)  # its writes are charged to "on"
                cpu[arm] += px.sampler.cpu() - cpu0
            print(f"  c={c} round {r + 1}/{args.rounds}: off p50 "
                  f"{summarize(samples['off']).p50_ms:.1f} ms, on p50 {summarize(samples['on']).p50_ms:.1f} ms",
                  file=sys.stderr, flush=True)  # fmt: skip
        off, on = summarize(samples["off"]), summarize(samples["on"])
        rows.append({
            "concurrency": c, "off": asdict(off), "on": asdict(on),
            "added_p50_ms": on.p50_ms - off.p50_ms, "added_p95_ms": on.p95_ms - off.p95_ms,
            "added_p99_ms": on.p99_ms - off.p99_ms,
            "proxy_cpu_ms_per_request": {a: 1000 * cpu[a] / max(1, len(samples[a])) for a in cpu},
        })  # fmt: skip
    return rows


async def phase_auditor(px: Proxy, args: argparse.Namespace, auditor_base: str) -> dict[str, Any]:
    """Section 2: steady open-loop load, memory on without auditing vs DMT with a slow auditor."""
    out: dict[str, Any] = {}
    async with httpx.AsyncClient() as c:
        arms = (
            ("off", "0: memory off"),
            ("on", "a: memory on, no audit"),
            ("dmt", f"b: dmt, {args.auditor_delay_s:g} s auditor"),
        )
        for arm, label in arms:
            before = await px.metrics()
            aud0 = (await c.get(f"{auditor_base}/health")).json()["requests"]
            px.sampler.phase = f"2{label[0]}: load"
            t0 = time.perf_counter()
            samples = await px.fixed_rate(arm, args.rate, args.duration, args.max_inflight)
            load_s = time.perf_counter() - t0
            px.sampler.phase = f"2{label[0]}: drain"
            drain = await px.drain(args.drain_timeout)
            after = await px.metrics()
            aud1 = (await c.get(f"{auditor_base}/health")).json()["requests"]
            stats = summarize(samples)
            out[arm] = {
                "label": label, "load_s": round(load_s, 2), **asdict(stats), **drain,
                "stored": prom_delta(before, after, "dmt_memory_writes_total", outcome="stored"),
                "audited": prom_delta(before, after, "dmt_audits_total"),
                "audit_outcomes": {o: prom_delta(before, after, "dmt_audits_total", outcome=o)
                                   for o in ("clean", "tagged", "failed", "skipped")},
                "auditor_requests": aud1 - aud0,
            }  # fmt: skip
            print(f"  {label}: p50 {stats.p50_ms:.1f} p95 {stats.p95_ms:.1f} ms, "
                  f"drained in {drain['drain_s']} s", file=sys.stderr, flush=True)  # fmt: skip
    out["ratio_p50"] = ratio(out["on"]["p50_ms"], out["dmt"]["p50_ms"])
    out["ratio_p95"] = ratio(out["on"]["p95_ms"], out["dmt"]["p95_ms"])
    out["added_p50_ms"] = out["on"]["p50_ms"] - out["off"]["p50_ms"]
    out["added_p95_ms"] = out["on"]["p95_ms"] - out["off"]["p95_ms"]
    return out


async def baseline_rss(
    tmp: Path, up_port: int, aud_port: int, args: argparse.Namespace
) -> dict[str, Any]:
    """RSS of a proxy with memory disabled (no embedder, no store): what memory adds."""
    policy = tmp / "policy-none.yaml"
    policy.write_text(policy_yaml(up_port, aud_port, "none", args.top_k))
    port = free_port()
    proc = start_proxy(tmp, "proxy-none", policy, port)
    try:
        limits = httpx.Limits(max_connections=8)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            with RssSampler(proc.pid) as sampler:
                px = Proxy(f"http://127.0.0.1:{port}", client, sampler)
                await px.idle("idle after start", 2.0)
                px.sampler.phase = "200 requests, c=4"
                await px.closed_loop("off", 200, 4)
                await asyncio.sleep(1.0)
        return {"phases": [asdict(p) for p in phase_rss(sampler.samples)]}
    finally:
        stop_proxy(proc)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from dmt_proxy.audit.parsing import parse_verdict
    from dmt_proxy.embedder import local_model_dir

    parse_verdict(json.dumps(VERDICT))  # the fake auditor's answer must be a valid verdict
    tmp = Path(tempfile.mkdtemp(prefix="dmt-memory-path-"))
    up_port, aud_port, port = free_port(), free_port(), free_port()
    policy = tmp / "policy.yaml"
    policy.write_text(policy_yaml(up_port, aud_port, "mem0", args.top_k))
    procs = []
    result: dict[str, Any] = {}
    try:
        procs.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port", str(up_port)],
                           f"http://127.0.0.1:{up_port}/health", tmp / "upstream.log"))  # fmt: skip
        procs.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port", str(aud_port),
                            "--delay-s", str(args.auditor_delay_s), "--answer", json.dumps(VERDICT)],
                           f"http://127.0.0.1:{aud_port}/health", tmp / "auditor.log"))  # fmt: skip
        print("baseline proxy (memory disabled) ...", file=sys.stderr, flush=True)
        result["baseline_no_memory"] = await baseline_rss(tmp, up_port, aud_port, args)
        print(f"filling mem0 with {args.memories} memories ...", file=sys.stderr, flush=True)
        result["fill_s"] = round(await fill_store(tmp / "state-proxy", args.memories), 1)
        t0 = time.perf_counter()
        proxy = start_proxy(tmp, "proxy", policy, port)
        procs.append(proxy)
        result["proxy_start_s"] = round(time.perf_counter() - t0, 1)
        limits = httpx.Limits(max_connections=args.max_inflight + max(args.concurrency))
        async with httpx.AsyncClient(timeout=120, limits=limits) as client:
            with RssSampler(proxy.pid) as sampler:
                px = Proxy(f"http://127.0.0.1:{port}", client, sampler)
                await px.idle("idle after start", 3.0)
                px.sampler.phase = "warm-up"
                for arm in ("off", "on"):
                    await px.closed_loop(arm, args.warmup, 1)
                await px.drain(args.drain_timeout)
                await px.idle("idle after warm-up", 2.0)
                print("1: memory off vs on ...", file=sys.stderr, flush=True)
                result["added"] = await phase_added(px, args)
                print("2: auditor off the critical path ...", file=sys.stderr, flush=True)
                result["auditor"] = await phase_auditor(px, args, f"http://127.0.0.1:{aud_port}")
                await px.idle("idle at the end", 2.0)
                hwm = status_kb(sampler.read(), "VmHWM")
        result["rss"] = {"phases": [asdict(p) for p in phase_rss(sampler.samples)],
                         "vm_hwm_mb": (hwm or 0) / 1024}  # fmt: skip
    finally:
        for proc in reversed(procs):
            stop_proxy(proc)
    weights = sum(p.stat().st_size for p in Path(local_model_dir()).rglob("*.safetensors"))
    result["model_weights_mb"] = weights / 2**20
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags (defaults: the committed run, about 5 min on 2 cores)."""
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    # fmt: off
    p.add_argument("--memories", type=int, default=10_000, help="memories in the store")
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[1, 4],
                   help="section 1 concurrencies, comma-separated (default 1,4)")
    p.add_argument("--requests", type=int, default=200, help="section 1 requests per arm and concurrency")
    p.add_argument("--rounds", type=int, default=2, help="section 1 alternating off/on blocks")
    p.add_argument("--warmup", type=int, default=20, help="warm-up requests per arm")
    p.add_argument("--rate", type=float, default=2.0, help="section 2 requests per second")
    p.add_argument("--duration", type=float, default=40.0, help="section 2 seconds per arm")
    p.add_argument("--max-inflight", type=int, default=8, help="section 2 cap on requests in flight")
    p.add_argument("--auditor-delay-s", type=float, default=2.0, help="fake auditor's answer time")
    p.add_argument("--drain-timeout", type=float, default=300.0, help="max seconds to wait for the outbox")
    p.add_argument("--out", type=Path, default=RESULTS / "perf" / "memory_path" / "memory_path", help="output path without suffix")
    # fmt: on
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()[0]
    results = asyncio.run(run(args))
    shown = argv if argv is not None else sys.argv[1:]
    data = {
        "benchmark": "memory_path", "version": 1,
        "command": " ".join(["python benchmarks/perf/memory_path.py", *shown]).strip(),
        "environment": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "load_start": f"{load_start:.1f}", "load_end": f"{os.getloadavg()[0]:.1f}",
            "versions": {p: version(p) for p in ("mem0ai", "qdrant-client", "numpy", "tokenizers")},
        },
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "targets": TARGETS,
        "results": results,
    }  # fmt: skip
    write_result(args.out, finite(data), markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
