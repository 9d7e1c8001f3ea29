"""Faults: failing, slow and truncating upstreams, and an auditor that times out or talks nonsense.

Each failure must give the client a clear OpenAI-shaped error (502, 504, or an in-band
SSE error once a stream has started), be retried a bounded number of times, be counted
in /metrics, and leave the proxy serving. The upstreams are the shipped fake server
(not a model): a real proxy process talks to real sockets, so timeouts and retries
are the production code paths. The in-process tests use the same fake app over
httpx's ASGI transport, or a closed port for an unreachable auditor.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.net import free_port
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.app import InProcessApp, app_client
from dmt_proxy.testing.upstream_server import FakeUpstreamConfig, create_fake_upstream
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel
from tests.proxy_process import (
    ADMIN,
    FakeUpstream,
    ProxyProcess,
    admin_memories,
    proxy_env,
    write_policy,
)
from tests.reliability.harness import metric, scrape
from tests.timing import budget

RETRIES = 2
# The proxy's upstream timeout applies to the instant fakes too, so it must exceed any
# stall of theirs, and the slow fakes must outlast it by far: both scale with the machine.
TIMEOUT_S = budget(0.5)
SLOW_S = budget(3.0)


def chat(proxy: ProxyProcess, model: str, *, stream: bool = False, user: str | None = None,
         text: str = "Hello there.") -> httpx.Response:  # fmt: skip
    body: dict[str, Any] = {"model": model, "stream": stream,
                            "messages": [{"role": "user", "content": text}]}  # fmt: skip
    if user:
        body["user"] = user
    return httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=30)


def assert_openai_error(resp: httpx.Response, status: int, error_type: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == error_type and error["message"]
    assert resp.headers.get("x-request-id")
    return dict(error)


def sse_events(text: str) -> list[str]:
    return [line[6:] for line in text.splitlines() if line.startswith("data: ")]


@pytest.mark.slow
def test_upstream_and_auditor_faults_in_a_real_process(
    proxy_factory: Callable[..., ProxyProcess],
    fakes: Callable[..., FakeUpstream],
    tmp_path: Path,
    report: Callable[[str], None],
) -> None:
    ok, broken, slow, trunc = (
        fakes(),
        fakes("--fail-status", "503"),
        fakes("--delay-s", str(SLOW_S)),
        fakes("--truncate"),
    )
    slow_auditor = fakes("--delay-s", str(SLOW_S))
    models = {"fast": ok, "broken": broken, "slow": slow, "trunc": trunc, "auditor": slow_auditor}
    policy = write_policy(tmp_path / "policy.yaml", models=models, default_model="fast",
                          audit={"auditor_model": "auditor", "timeout_s": TIMEOUT_S,
                                 "max_attempts": 2})  # fmt: skip
    env = proxy_env(DMT_UPSTREAM_TIMEOUT_S=str(TIMEOUT_S), DMT_UPSTREAM_MAX_RETRIES=str(RETRIES))
    proxy = proxy_factory("--policy", str(policy), env=env)

    # 5xx: retried RETRIES times, then a 502 in OpenAI's shape (stream or not: nothing sent yet).
    error = assert_openai_error(chat(proxy, "broken"), 502, "upstream_error")
    assert "503" in error["message"] and error["code"] == "upstream_error"
    assert_openai_error(chat(proxy, "broken", stream=True), 502, "upstream_error")
    assert broken.requests() == 2 * (1 + RETRIES)

    # Timeout: each attempt gives up after TIMEOUT_S; the client gets a 504 well before
    # SLOW_S x 3 (allowing each attempt a second, scaled, for its backoff and overhead).
    started = time.monotonic()
    assert_openai_error(chat(proxy, "slow"), 504, "upstream_timeout")
    took = time.monotonic() - started
    assert took < (1 + RETRIES) * (TIMEOUT_S + budget(1.0)), took
    assert slow.requests() == 1 + RETRIES

    # Truncated stream: 200 and the first chunk, then an in-band error event and no [DONE].
    resp = chat(proxy, "trunc", stream=True, user="trunc-user")
    assert resp.status_code == 200
    events = sse_events(resp.text)
    assert json.loads(events[0])["choices"][0]["delta"]["content"]
    last = json.loads(events[-1])
    assert last["error"]["code"] == "upstream_error" and "truncated" in last["error"]["message"]
    assert "[DONE]" not in events
    assert trunc.requests() == 1, "a stream that already sent output must not be retried"

    # Still up and serving; the good request's memory goes to the slow auditor.
    assert httpx.get(f"http://127.0.0.1:{proxy.port}/healthz", timeout=5).status_code == 200
    good = chat(proxy, "fast", user="audited-user", text="What is the capital of Peru?")
    assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"]

    # Auditor timeout: audit.max_attempts (2) tries, then the memory is 'failed', never clean.
    deadline = time.monotonic() + 30
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = admin_memories(proxy.base_url, "audited-user")
        if rows and rows[0]["audit_status"] != "pending":
            break
        time.sleep(0.25)
    assert [r["audit_status"] for r in rows] == ["failed"], rows
    assert slow_auditor.requests() == 2
    assert admin_memories(proxy.base_url, "trunc-user") == [], "a broken stream wrote a memory"

    text = scrape(proxy)
    counted = {
        "errors": metric(text, "dmt_upstream_errors_total", model_kind="alias", kind="error"),
        "timeouts": metric(text, "dmt_upstream_errors_total", model_kind="alias", kind="timeout"),
        "502": metric(text, "dmt_requests_total", route="/v1/chat/completions", mode="dmt", status="502"),
        "504": metric(text, "dmt_requests_total", route="/v1/chat/completions", mode="dmt", status="504"),
        "audits failed": metric(text, "dmt_audits_total", outcome="failed"),
    }  # fmt: skip
    assert counted == {"errors": 3.0, "timeouts": 1.0, "502": 2.0, "504": 1.0, "audits failed": 1.0}
    report(
        f"faults/process: 5xx -> 502 after {1 + RETRIES} attempts each; timeout -> 504 in "
        f"{took:.2f}s ({1 + RETRIES} x {TIMEOUT_S}s); truncated stream -> in-band error, not "
        f"retried, no memory; auditor timeout -> 'failed' after 2 attempts; metrics {counted}"
    )


# -- in process ------------------------------------------------------------------------


def start_app(
    state_dir: Path, upstream: OpenAICompatChatModel, **audit: Any
) -> AbstractAsyncContextManager[InProcessApp]:
    settings = Settings.from_env({}, state_dir=state_dir, admin_key=ADMIN["authorization"][7:])
    policy = parse_policy({
        "version": 1, "mode": "dmt", "default_model": "fast",
        "models": {"fast": {"model": "openai/fast", "api_base": "http://fake/v1"},
                   "auditor": {"model": "openai/auditor", "api_base": audit.pop("api_base",
                                                                                "http://fake/v1")}},
        "memory": {"backend": "memory", "top_k": 3},
        # first_stage off: every memory reaches the faulty auditor (the first stage, on by
        # default, would decide plain text clean without it).
        "audit": {"tau": 0.5, "auditor_model": "auditor", "timeout_s": 2, "first_stage": "off",
                  **audit},
    })  # fmt: skip
    return app_client(settings, policy=policy, upstream=upstream, memory_backend=InMemoryBackend())


@pytest.fixture
async def garbage_auditor_app(state_dir: Path) -> AsyncIterator[InProcessApp]:
    """The fake upstream's canned prose is the auditor's reply: never a valid verdict."""
    fake = create_fake_upstream(FakeUpstreamConfig())
    upstream = OpenAICompatChatModel(transport=httpx.ASGITransport(app=fake))
    async with start_app(state_dir, upstream) as proxy:
        yield proxy
    await upstream.aclose()


async def test_garbage_auditor_reply_is_repaired_once_then_failed(
    garbage_auditor_app: InProcessApp,
) -> None:
    client = garbage_auditor_app.client
    body = {"model": "fast", "user": "g", "messages": [{"role": "user", "content": "Hi!"}]}
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    assert await garbage_auditor_app.memory.drain(timeout_s=20)
    rows = (await client.get("/v1/memories", params={"user": "g"}, headers=ADMIN)).json()["data"]
    assert [r["audit_status"] for r in rows] == ["failed"]
    metrics = (await client.get("/metrics")).text
    assert metric(metrics, "dmt_audits_total", outcome="failed") == 1.0
    assert metric(metrics, "dmt_audits_total", outcome="clean") == 0.0


async def test_unreachable_auditor_is_retried_then_failed(state_dir: Path) -> None:
    """Connection refused (a closed port, no fake needed): bounded retries with backoff."""
    fake = create_fake_upstream(FakeUpstreamConfig())
    # The chat goes through the fake app; the auditor alias points at a real closed port.
    transport = httpx.ASGITransport(app=fake)

    class Router(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.network = httpx.AsyncHTTPTransport()
            self.auditor_calls = 0

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.host == "127.0.0.1":
                self.auditor_calls += 1
                return await self.network.handle_async_request(request)
            return await transport.handle_async_request(request)

        async def aclose(self) -> None:
            await self.network.aclose()

    router = Router()
    upstream = OpenAICompatChatModel(transport=router)
    auditor_base = f"http://127.0.0.1:{free_port()}/v1"
    async with start_app(state_dir, upstream, api_base=auditor_base, max_attempts=3) as proxy:
        client = proxy.client
        body = {"model": "fast", "user": "u", "messages": [{"role": "user", "content": "Hi!"}]}
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        # Backoff 0.5 s then 1 s between the three attempts.
        assert await proxy.memory.drain(timeout_s=20)
        rows = (await client.get("/v1/memories", params={"user": "u"}, headers=ADMIN)).json()
        assert [r["audit_status"] for r in rows["data"]] == ["failed"]
        assert router.auditor_calls == 3
        metrics = (await client.get("/metrics")).text
        assert metric(metrics, "dmt_audits_total", outcome="failed") == 1.0
    await upstream.aclose()
    await asyncio.sleep(0)
