"""Shared pieces of the reliability suite: fake upstream processes, policies, metrics, RSS, load.

The upstream here is the shipped fake server (``python -m dmt_proxy.testing.upstream_server``),
an instant OpenAI-compatible server that is not a model. These tests are about how the
proxy handles failures, and the fake produces them on demand (5xx, delays, truncated
streams, a canned reply that is or is not a valid auditor verdict).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.proxy_process import ProxyProcess, free_port

ADMIN_KEY = "reliability-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}

CLEAN_VERDICT = json.dumps(
    {"rationale": "A neutral request; no social group is generalized about.",
     "bias_detected": False, "bias_type": None, "target_group": "", "tendency": "", "score": 0.0}
)  # fmt: skip
"""A schema-valid 'no bias' verdict: the fake upstream answers it when it stands in for
the auditor, so audits complete (status ``clean``) without a model."""


@dataclass
class FakeUpstream:
    """One fake upstream server process on a free port."""

    args: tuple[str, ...] = ()
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> FakeUpstream:
        self.port = self.port or free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dmt_proxy.testing.upstream_server", "--port", str(self.port),
             *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fake upstream {self.args} exited with {self.proc.returncode}")
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError(f"fake upstream {self.args} not healthy in {timeout_s}s")

    def requests(self) -> int:
        """Chat requests this server has received (its retry counter)."""
        return int(httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).json()["requests"])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def write_policy(
    path: Path,
    *,
    models: Mapping[str, FakeUpstream],
    default_model: str,
    mode: str = "dmt",
    backend: str = "memory",
    audit: Mapping[str, Any] | None = None,
) -> Path:
    """A policy whose aliases are ``openai/<alias>`` at the given fake upstreams."""
    policy = {
        "version": 1,
        "name": "reliability",
        "mode": mode,
        "default_model": default_model,
        "models": {
            alias: {"model": f"openai/{alias}", "api_base": fake.api_base}
            for alias, fake in models.items()
        },
        "memory": {"backend": backend, "top_k": 3},
        "audit": {"tau": 0.5, "auditor_model": default_model, "timeout_s": 10,
                  "max_attempts": 3, **(audit or {})},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(policy, sort_keys=False), encoding="utf-8")
    return path


def proxy_env(**extra: str) -> dict[str, str]:
    """Environment for a reliability proxy: admin key, no provider routes, quiet logs."""
    return {
        "DMT_ADMIN_KEY": ADMIN_KEY,
        # A fuzzed model name must never reach a hosted provider (no network but loopback),
        "DMT_ALLOW_PROVIDER_MODELS": "false",
        # nor an embedded llama-server: local/* aliases point at a closed port.
        "DMT_MODELS_PORT_BASE": str(free_port()),
        "DMT_LOG_LEVEL": "warning",
        **extra,
    }


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


def admin_memories(base_url: str, user: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{base_url}/memories", params={"user": user}, headers=ADMIN, timeout=30)
    resp.raise_for_status()
    return list(resp.json()["data"])


def wait_outbox_empty(base_url: str, timeout_s: float) -> float:
    """Poll the admin API until every acknowledged write is stored and audited; seconds taken."""
    started = time.monotonic()
    depth = -1
    while time.monotonic() - started < timeout_s:
        depth = httpx.get(f"{base_url}/admin/outbox", headers=ADMIN, timeout=10).json()["depth"]
        if depth == 0:
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"outbox still holds {depth} row(s) after {timeout_s}s")


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
