"""Chat latency while the outbox worker audits very large memories (issue 42).

One dmt-proxy process (mode dmt, in-memory backend, ``first_stage: off``) in front of
the shipped fake upstream, with a second fake as the auditor (it answers a clean verdict
at once, so the time measured is the proxy's own). A writer sends a stream of legal
chat turns of 100 KB to 3.5 MB with a user, so the worker normalises, bounds and audits
each of them; meanwhile probers send small chat requests (a different user, memory
retrieval on) at concurrency 1 and 16 (closed loop: each prober waits for its answer),
and ``/healthz`` on a fixed 50 ms schedule (open loop, timed from when each was due, so
a stall counts once per probe it delays). Reported: chat
p50/p99 and ``/healthz`` p99 with the writer running and on the same proxy idle, the
proxy's own event-loop lag (``dmt_event_loop_lag_seconds``, where the build has it),
and how many large memories were audited meanwhile.

Everything (fakes, proxy, writer, probers) shares this machine's cores, so the numbers
include that contention. The fakes answer instantly: no model time is in any figure.

Run:  python benchmarks/perf/loop_stall.py --label after [--seconds 30]
      (``--label before`` on the code before the change; ``--pythonpath DIR`` runs the
      proxy from another checkout, e.g. ``git worktree add /tmp/base a813230``)
Writes benchmarks/results/perf/loop_stall/<label>.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from _results import write_result

from dmt_bench.stats import percentile
from dmt_proxy.net import free_port

RESULTS = Path(__file__).resolve().parents[1] / "results" / "perf" / "loop_stall"
ADMIN_KEY = "loop-stall-admin"
CLEAN = json.dumps({"rationale": "neutral", "bias_detected": False, "bias_type": None,
                    "target_group": "", "tendency": "", "score": 0.0})  # fmt: skip
SIZES = (100_000, 500_000, 1_000_000, 2_000_000, 3_500_000)
"""Bytes of the writer's messages, in turn (the default body limit is 4 MiB)."""


def big_turn(size: int, n: int) -> bytes:
    """A chat body whose one user message is ``size`` bytes of ordinary words."""
    words = f"note{n} about the garden and the weekly shopping list "
    text = (words * (size // len(words) + 1))[:size]
    body = {"model": "fast", "user": "writer", "messages": [{"role": "user", "content": text}]}
    return json.dumps(body).encode()


SMALL = json.dumps({"model": "fast", "user": "prober",
                    "messages": [{"role": "user", "content": "What should I cook tonight?"}]})  # fmt: skip


async def writer(url: str, stop_at: float, sent: list[int]) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        n = 0
        while time.monotonic() < stop_at:
            body = big_turn(SIZES[n % len(SIZES)], n)
            resp = await client.post(f"{url}/v1/chat/completions", content=body,
                                     headers={"content-type": "application/json"})  # fmt: skip
            resp.raise_for_status()
            sent.append(len(body))
            n += 1
            await asyncio.sleep(0.2)


async def chat_probe(url: str, concurrency: int, stop_at: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def one() -> None:
            nonlocal errors
            while time.monotonic() < stop_at:
                started = time.perf_counter()
                try:
                    resp = await client.post(f"{url}/v1/chat/completions", content=SMALL,
                                             headers={"content-type": "application/json"})  # fmt: skip
                    ok = resp.status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    latencies.append((time.perf_counter() - started) * 1000)
                else:
                    errors += 1

        await asyncio.gather(*(one() for _ in range(concurrency)))
    return latencies, errors


async def health_probe(url: str, stop_at: float) -> list[float]:
    """``/healthz`` sent every 50 ms on a fixed schedule, whether or not the last one has
    answered (open loop), each timed from when it was due: a stall of S seconds shows as
    about S / 0.05 slow samples, not one (no coordinated omission)."""
    latencies: list[float] = []
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=200)) as client:

        async def one(due: float) -> None:
            await client.get(f"{url}/healthz")
            latencies.append((time.perf_counter() - due) * 1000)

        tasks = []
        due = time.perf_counter()
        while time.monotonic() < stop_at:
            tasks.append(asyncio.create_task(one(due)))
            due += 0.05
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        await asyncio.gather(*tasks)
    return latencies


def summary(latencies: list[float]) -> dict[str, Any]:
    if not latencies:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    return {"n": len(latencies), "p50_ms": round(percentile(latencies, 50), 2),
            "p99_ms": round(percentile(latencies, 99), 2), "max_ms": round(max(latencies), 2)}  # fmt: skip


LAG_BOUNDS = ("0.05", "0.25", "1.0")


def lag_buckets(url: str) -> dict[str, float] | None:
    """The proxy's event-loop lag histogram: ticks counted, and ticks above each of
    ``LAG_BOUNDS`` seconds (``None`` where the build exports no such metric)."""
    text = httpx.get(f"{url}/metrics", timeout=120).text
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("dmt_event_loop_lag_seconds_count"):
            found["ticks"] = float(line.split()[-1])
        for bound in LAG_BOUNDS:
            if line.startswith(f'dmt_event_loop_lag_seconds_bucket{{le="{bound}"}}'):
                found[bound] = float(line.split()[-1])
    if "ticks" not in found:
        return None
    return {
        "ticks": found["ticks"],
        **{f"above_{b}s": found["ticks"] - found[b] for b in LAG_BOUNDS},
    }


def outbox_depth(url: str) -> int:
    resp = httpx.get(f"{url}/v1/admin/outbox", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                     timeout=120)  # fmt: skip
    return int(resp.json()["depth"])


async def cell(url: str, concurrency: int, seconds: float, *, load: bool) -> dict[str, Any]:
    before = await asyncio.to_thread(lag_buckets, url)
    stop_at = time.monotonic() + seconds
    sent: list[int] = []
    tasks = [chat_probe(url, concurrency, stop_at), health_probe(url, stop_at)]
    results = await asyncio.gather(*tasks, *([writer(url, stop_at, sent)] if load else []))
    (chat, errors), health = results[0], results[1]
    after = await asyncio.to_thread(lag_buckets, url)
    lag = {k: after[k] - before[k] for k in after} if before and after else None
    return {"concurrency": concurrency, "load": load, "seconds": seconds,
            "chat": summary(chat), "chat_errors": errors, "healthz": summary(health),
            "large_memories_sent": len(sent), "bytes_sent": sum(sent),
            "event_loop_lag": lag}  # fmt: skip


def lag_text(lag: dict[str, float] | None) -> str:
    if lag is None:
        return "not exported"
    above = " / ".join(f"{lag[f'above_{b}s']:.0f}" for b in LAG_BOUNDS)
    return f"{above} of {lag['ticks']:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--pythonpath", default="", help="run the proxy from this checkout")
    parser.add_argument(
        "--concurrency", default="1,16", help="prober concurrencies, comma-separated"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        up_port, aud_port, port = free_port(), free_port(), free_port()
        mod = "dmt_proxy.testing.upstream_server"
        up = start([python(), "-m", mod, "--port", str(up_port)],
                   f"http://127.0.0.1:{up_port}/health", tmp / "up.log")  # fmt: skip
        aud = start([python(), "-m", mod, "--port", str(aud_port), "--answer", CLEAN],
                    f"http://127.0.0.1:{aud_port}/health", tmp / "aud.log")  # fmt: skip
        policy = {"version": 1, "mode": "dmt", "default_model": "fast",
                  "models": {"fast": {"model": "openai/fast",
                                      "api_base": f"http://127.0.0.1:{up_port}/v1"},
                             "auditor": {"model": "openai/auditor",
                                         "api_base": f"http://127.0.0.1:{aud_port}/v1"}},
                  "memory": {"backend": "memory", "top_k": 3},
                  "audit": {"auditor_model": "auditor", "first_stage": "off",
                            "timeout_s": 30}}  # fmt: skip
        (tmp / "policy.yaml").write_text(yaml.safe_dump(policy), encoding="utf-8")
        env = {"DMT_ADMIN_KEY": ADMIN_KEY, "DMT_LOG_LEVEL": "warning",
               "DMT_ALLOW_PROVIDER_MODELS": "false", "DMT_STATE_DIR": str(tmp / "state"),
               "DMT_MODELS_PORT_BASE": str(free_port())}  # fmt: skip
        if args.pythonpath:
            env["PYTHONPATH"] = args.pythonpath
        proxy = start([python(), "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(port),
                       "--policy", str(tmp / "policy.yaml")],
                      f"http://127.0.0.1:{port}/healthz", tmp / "proxy.log", env=env,
                      cwd=args.pythonpath or None)  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            cells = []
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                cells.append(asyncio.run(cell(url, concurrency, args.seconds / 2, load=False)))
                cells.append(asyncio.run(cell(url, concurrency, args.seconds, load=True)))
                deadline = time.monotonic() + 600
                while outbox_depth(url) and time.monotonic() < deadline:
                    time.sleep(0.5)  # the next cell starts from an idle worker
        finally:
            for proc in (proxy, aud, up):
                stop(proc)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=args.pythonpath or None).stdout.strip()  # fmt: skip
    result = {"label": args.label, "commit": commit, "cells": cells,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "command": f"python benchmarks/perf/loop_stall.py --label {args.label} "
                         f"--seconds {args.seconds:g} --concurrency {args.concurrency}"}  # fmt: skip
    lines = [f"# Chat latency while large memories are audited ({args.label}, {commit})", "",
             f"`{result['command']}`; {os.cpu_count()} cores shared by the fakes, the proxy "
             "and the load; fakes answer instantly.", "",
             "| c | writer | chat n | chat p50 ms | chat p99 ms | chat max ms | errors | "
             "/healthz p99 ms | /healthz max ms | large memories sent (MB) | "
             "loop ticks > 50 ms / 250 ms / 1 s |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]  # fmt: skip
    for c in cells:
        ch, hz = c["chat"], c["healthz"]
        lines.append(f"| {c['concurrency']} | {'on' if c['load'] else 'idle'} | {ch['n']} | "
                     f"{ch['p50_ms']} | {ch['p99_ms']} | {ch['max_ms']} | {c['chat_errors']} | "
                     f"{hz['p99_ms']} | {hz['max_ms']} | {c['large_memories_sent']} "
                     f"({c['bytes_sent'] / 1e6:.1f}) | {lag_text(c['event_loop_lag'])} |")  # fmt: skip
    write_result(RESULTS / args.label, result, "\n".join(lines) + "\n", add_suffix=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
