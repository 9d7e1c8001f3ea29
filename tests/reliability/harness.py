"""Pieces of the reliability suite: a proxy with a clean fake auditor, metrics, RSS, load.

The processes, the policy and the admin calls are shared with the other suites
(``tests/proxy_process.py``). The upstream here is the shipped fake server
(``python -m dmt_proxy.testing.upstream_server``), an instant OpenAI-compatible server
that is not a model. These tests are about how the proxy handles failures, and the fake
produces them on demand (5xx, delays, truncated streams, a canned reply that is or is
not a valid auditor verdict).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.proxy_process import CLEAN_VERDICT, FakeUpstream, ProxyProcess, proxy_env, write_policy


def proxy_with_clean_auditor(
    proxy_factory: Callable[..., ProxyProcess],
    fakes: Callable[..., FakeUpstream],
    policy_path: Path,
) -> ProxyProcess:
    """A proxy on an instant fake upstream ("fast") whose fake auditor calls everything clean."""
    upstream, auditor = fakes(), fakes("--answer", CLEAN_VERDICT)
    policy = write_policy(policy_path, models={"fast": upstream, "auditor": auditor},
                          default_model="fast", audit={"auditor_model": "auditor"})  # fmt: skip
    return proxy_factory("--policy", str(policy), env=proxy_env())


def metric(text: str, name: str, **labels: str) -> float:
    """Value of sample ``name`` with exactly ``labels`` in Prometheus text (0.0 if absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def scrape(proxy: ProxyProcess) -> str:
    return httpx.get(f"http://127.0.0.1:{proxy.port}/metrics", timeout=10).text


def rss_mib(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) of process ``pid`` in MiB, from /proc/<pid>/status."""
    fields: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024.0
    return fields["VmRSS"], fields["VmHWM"]


@dataclass
class Outcome:
    """What the client saw for one request of a load run."""

    index: int
    text: str
    user: str
    stream: bool
    status: int | None = None
    acknowledged: bool = False
    """A 200 with the whole answer (for a stream: ``[DONE]`` received)."""
    error: str | None = None


@dataclass
class LoadRun:
    """A bounded closed-loop load: ``concurrency`` workers share ``total`` requests."""

    base_url: str
    total: int
    concurrency: int
    users: int = 8
    stream_every: int = 4
    """Every n-th request streams (the write then happens after the last chunk)."""
    model: str = "fast"
    outcomes: list[Outcome] = field(default_factory=list)

    def request(self, i: int) -> Outcome:
        text = f"Load request {i:04d}: please remember the token tok-{i:04d}-{i * 7919 % 10007}."
        return Outcome(index=i, text=text, user=f"load-user-{i % self.users}",
                       stream=self.stream_every > 0 and i % self.stream_every == 0)  # fmt: skip

    async def _send(self, client: httpx.AsyncClient, out: Outcome) -> None:
        body = {"model": self.model, "user": out.user, "stream": out.stream,
                "messages": [{"role": "user", "content": out.text}]}  # fmt: skip
        try:
            if not out.stream:
                resp = await client.post("/chat/completions", json=body)
                out.status = resp.status_code
                out.acknowledged = resp.status_code == 200 and bool(resp.json().get("choices"))
                return
            async with client.stream("POST", "/chat/completions", json=body) as resp:
                out.status = resp.status_code
                text = (await resp.aread()).decode()
                out.acknowledged = resp.status_code == 200 and "data: [DONE]" in text
        except (httpx.HTTPError, json.JSONDecodeError) as exc:
            out.error = type(exc).__name__

    async def run(self, on_progress: Callable[[LoadRun], Awaitable[None]] | None = None) -> None:
        """Send every request; ``on_progress`` runs after each one (e.g. to kill the proxy)."""
        queue: asyncio.Queue[Outcome] = asyncio.Queue()
        for i in range(self.total):
            queue.put_nowait(self.request(i))
        limits = httpx.Limits(max_connections=self.concurrency)
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30, limits=limits) as client:

            async def worker() -> None:
                while not queue.empty():
                    out = queue.get_nowait()
                    await self._send(client, out)
                    self.outcomes.append(out)
                    if on_progress is not None:
                        await on_progress(self)

            await asyncio.gather(*(worker() for _ in range(self.concurrency)))

    @property
    def acknowledged(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.acknowledged]
