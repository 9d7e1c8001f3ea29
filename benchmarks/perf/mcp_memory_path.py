"""MCP memory tools at 10k memories: ``add_memory`` acknowledged and ``search_memories`` latency.

The same harness as the chat memory path (``memory_path.py``): its store fill
(``--memories`` clustered memories of one user in the proxy's real mem0 store on
disk, not timed), its proxy start (``dmt-proxy serve``) and its fakes: the instant
fake upstream (``dmt_proxy.testing.upstream_server``; MCP tools never call it) and
the fake auditor answering a valid clean verdict after ``--auditor-delay-s`` (2 s,
as in the chat harness's section 2). The policy's mode is ``dmt``: every
``add_memory`` is queued through the outbox and audited by that fake auditor off
the acknowledged path, as a chat write is.

The client is the official ``mcp`` SDK over streamable HTTP at ``/mcp`` (one
``Client``, calls in flight up to the concurrency). Latency is the client's
``call_tool`` round trip, in ms:

1. ``add_memory`` acknowledged: from the call to its result (the memory id and
   ``pending``), closed loop, ``--requests`` calls per concurrency. The outbox is
   drained after each block (not timed), so writes do not pile into the searches.
2. ``search_memories``: the user's top-k (``--top-k``) of the 10k, with the DMT-framed
   block, closed loop, ``--requests`` calls per concurrency.

Run:  python benchmarks/perf/mcp_memory_path.py [--memories 10000] [--requests 200]
Writes benchmarks/results/perf/mcp_memory_path/mcp_memory_path.{json,md}.
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
from dataclasses import asdict
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start
from _results import finite, write_result
from memory_path import (
    ADMIN_KEY,
    USER_ID,
    VERDICT,
    Sample,
    fill_store,
    policy_yaml,
    start_proxy,
    stop_proxy,
    summarize,
)

from dmt_proxy.net import free_port

RESULTS = Path(__file__).resolve().parents[1] / "results"
TARGETS = {"add_memory_ack_p50_ms": 10.0, "search_memories_p95_ms": 60.0}
QUERIES = ("travel plans", "favourite food", "work schedule", "music I like", "my family",
           "health and allergies", "weekend hobbies", "where I live")  # fmt: skip


async def drain(base: str, timeout_s: float) -> float:
    """Poll the admin outbox until it is empty; seconds waited."""
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=30) as client:
        while time.perf_counter() - t0 < timeout_s:
            r = await client.get(f"{base}/v1/admin/outbox",
                                 headers={"authorization": f"Bearer {ADMIN_KEY}"})  # fmt: skip
            r.raise_for_status()
            if int(r.json()["depth"]) == 0:
                break
            await asyncio.sleep(0.25)
    return time.perf_counter() - t0


async def closed_loop(client: Any, tool: str, n: int, concurrency: int,
                      arguments: Any) -> list[Sample]:  # fmt: skip
    """``n`` calls of ``tool`` from ``concurrency`` workers; each call's round trip."""
    left = iter(range(n))
    out: list[Sample] = []

    async def worker() -> None:
        for i in left:
            t0 = time.perf_counter()
            try:
                result = await client.call_tool(tool, arguments(i))
                ok = not result.is_error
            except Exception:  # a failed call is counted, not fatal to the run
                ok = False
            out.append(Sample((time.perf_counter() - t0) * 1000, ok))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def add_args(i: int) -> dict[str, Any]:
    return {
        "user_id": USER_ID,
        "text": f"I booked a table for {i % 7 + 2} at a new place (note {i}).",
    }


def search_args(i: int) -> dict[str, Any]:
    return {"user_id": USER_ID, "query": QUERIES[i % len(QUERIES)]}


async def measure(base: str, args: argparse.Namespace) -> dict[str, Any]:
    """Warm-up, then per concurrency: add_memory (drained after), search_memories."""
    from mcp import Client

    rows: list[dict[str, Any]] = []
    async with Client(f"{base}/mcp") as client:
        await closed_loop(client, "search_memories", args.warmup, 1, search_args)
        await closed_loop(client, "add_memory", args.warmup, 1, add_args)
        await drain(base, args.drain_timeout)
        for c in args.concurrency:
            adds = await closed_loop(client, "add_memory", args.requests, c, add_args)
            drained_s = await drain(base, args.drain_timeout)
            searches = await closed_loop(client, "search_memories", args.requests, c, search_args)
            add, search = summarize(adds), summarize(searches)
            rows.append({"concurrency": c, "add_memory": asdict(add),
                         "search_memories": asdict(search), "drain_after_adds_s": round(drained_s, 2)})  # fmt: skip
            print(f"  c={c}: add_memory p50 {add.p50_ms:.1f} ms, search_memories p95 "
                  f"{search.p95_ms:.1f} ms", file=sys.stderr, flush=True)  # fmt: skip
    return {"rows": rows}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="dmt-mcp-path-"))
    up_port, aud_port, port = free_port(), free_port(), free_port()
    policy = tmp / "policy.yaml"
    policy.write_text(policy_yaml(up_port, aud_port, "mem0", args.top_k).replace(
        "mode: 'off'", "mode: dmt"))  # fmt: skip
    procs = []
    result: dict[str, Any] = {}
    try:
        procs.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port", str(up_port)],
                           f"http://127.0.0.1:{up_port}/health", tmp / "upstream.log"))  # fmt: skip
        procs.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port", str(aud_port),
                            "--delay-s", str(args.auditor_delay_s), "--answer", json.dumps(VERDICT)],
                           f"http://127.0.0.1:{aud_port}/health", tmp / "auditor.log"))  # fmt: skip
        print(f"filling mem0 with {args.memories} memories ...", file=sys.stderr, flush=True)
        result["fill_s"] = round(await fill_store(tmp / "state-proxy", args.memories), 1)
        proxy = start_proxy(tmp, "proxy", policy, port)
        procs.append(proxy)
        result.update(await measure(f"http://127.0.0.1:{port}", args))
    finally:
        for proc in reversed(procs):
            stop_proxy(proc)
    return result


def markdown(data: dict[str, Any]) -> str:
    """The results table, with the command, the machine's state and the targets."""
    env, cfg = data["environment"], data["config"]
    lines = [
        f"# MCP memory tools at {cfg['memories']:,} memories per user",
        "",
        f"Command: `{data['command']}`  ",
        f"Measured {env['date']} on {env['machine']}; 1-min load average {env['load_start']} at "
        f"start, {env['load_end']} at the end. {env['note']}",
        "",
        "Client: the `mcp` SDK over streamable HTTP at `/mcp` of one `dmt-proxy serve` "
        "(mem0 on disk, policy mode `dmt`). Fakes as in the chat memory path "
        "(`memory_path.py`): an instant fake upstream (unused by the tools) and a fake "
        f"auditor answering a clean verdict after {cfg['auditor_delay_s']:g} s, off the "
        "acknowledged path. Latency = the client's `call_tool` round trip; nearest-rank "
        f"percentiles of {cfg['requests']} calls per cell; k = {cfg['top_k']}.",
        "",
        "| concurrency | tool | n | errors | p50 ms | p95 ms | p99 ms |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in data["results"]["rows"]:
        for tool in ("add_memory", "search_memories"):
            s = row[tool]
            lines.append(f"| {row['concurrency']} | `{tool}` | {s['n']} | {s['errors']} | "
                         f"{s['p50_ms']:.1f} | {s['p95_ms']:.1f} | {s['p99_ms']:.1f} |")  # fmt: skip
    lines += ["", "Targets (at concurrency 1): " + ", ".join(
        f"{k} ≤ {v:g}" for k, v in data["targets"].items())]  # fmt: skip
    first = data["results"]["rows"][0]
    add_p50, search_p95 = first["add_memory"]["p50_ms"], first["search_memories"]["p95_ms"]
    lines.append(
        f"- `add_memory` acknowledged p50 {add_p50:.1f} ms: "
        f"{'met' if add_p50 <= TARGETS['add_memory_ack_p50_ms'] else 'not met'}"
    )
    lines.append(
        f"- `search_memories` p95 {search_p95:.1f} ms: "
        f"{'met' if search_p95 <= TARGETS['search_memories_p95_ms'] else 'not met'}"
    )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--memories", type=int, default=10_000)
    p.add_argument("--top-k", type=int, default=5)
    p.add_argument("--concurrency", type=lambda s: [int(c) for c in s.split(",")], default=[1, 4])
    p.add_argument("--requests", type=int, default=200, help="calls per tool and concurrency")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--auditor-delay-s", type=float, default=2.0)
    p.add_argument("--drain-timeout", type=float, default=600.0)
    p.add_argument("--note", default="", help="the machine's state, added under the command")
    p.add_argument(
        "--out", type=Path, default=RESULTS / "perf" / "mcp_memory_path" / "mcp_memory_path"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()[0]
    results = asyncio.run(run(args))
    shown = argv if argv is not None else sys.argv[1:]
    data = {
        "benchmark": "mcp_memory_path", "version": 1,
        "command": " ".join(["python benchmarks/perf/mcp_memory_path.py", *shown]),
        "environment": {
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "load_start": f"{load_start:.1f}", "load_end": f"{os.getloadavg()[0]:.1f}",
            "note": args.note,
            "versions": {p: version(p) for p in ("mem0ai", "qdrant-client", "mcp")},
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
