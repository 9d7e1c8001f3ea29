"""A small closed-loop HTTP load generator for chat, Responses and Anthropic Messages endpoints."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from dmt_bench.stats import percentile


@dataclass(frozen=True)
class LoadResult:
    target: str
    concurrency: int
    stream: bool
    requests: int
    errors: int
    seconds: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    ttfb_p50_ms: float | None
    ttfb_p99_ms: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


async def run_load(
    *,
    target: str,
    url: str,
    model: str,
    concurrency: int,
    requests: int,
    stream: bool,
    headers: dict[str, str] | None = None,
    warmup: int = 20,
    api: str = "chat",
) -> LoadResult:
    """Send ``requests`` requests with ``concurrency`` in flight; latency per request.

    ``api``: ``chat`` sends a chat-completions body, ``responses`` a Responses body
    and ``messages`` an Anthropic Messages body, with the same one user message."""
    body: dict[str, Any] = {"model": model, "stream": stream}
    if api == "responses":
        body["input"] = "ping"
    elif api == "messages":
        body["max_tokens"] = 64  # required by the Messages API; the fake upstream ignores it
        body["messages"] = [{"role": "user", "content": "ping"}]
    else:
        body["messages"] = [{"role": "user", "content": "ping"}]
    latencies: list[float] = []
    ttfbs: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60.0, headers=headers or {}) as client:

        async def one(record: bool) -> None:
            nonlocal errors
            t0 = time.perf_counter()
            try:
                if stream:
                    async with client.stream("POST", url, json=body) as resp:
                        first: float | None = None
                        async for _ in resp.aiter_raw():
                            if first is None:
                                first = time.perf_counter() - t0
                        ok = resp.status_code == 200
                else:
                    resp = await client.post(url, json=body)
                    first = None
                    ok = resp.status_code == 200
            except httpx.HTTPError:
                ok = False
                first = None
            elapsed = time.perf_counter() - t0
            if not record:
                return
            if not ok:
                errors += 1
                return
            latencies.append(elapsed * 1000)
            if first is not None:
                ttfbs.append(first * 1000)

        await asyncio.gather(*(one(False) for _ in range(min(warmup, requests))))
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(requests):
            queue.put_nowait(i)

        async def worker() -> None:
            while True:
                try:
                    queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                await one(True)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return LoadResult(
        target=target,
        concurrency=concurrency,
        stream=stream,
        requests=requests,
        errors=errors,
        seconds=seconds,
        p50_ms=percentile(latencies, 50, method="nearest_rank"),
        p95_ms=percentile(latencies, 95, method="nearest_rank"),
        p99_ms=percentile(latencies, 99, method="nearest_rank"),
        ttfb_p50_ms=percentile(ttfbs, 50, method="nearest_rank") if ttfbs else None,
        ttfb_p99_ms=percentile(ttfbs, 99, method="nearest_rank") if ttfbs else None,
    )
