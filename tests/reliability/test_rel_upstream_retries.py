"""Bounded retries on the direct OpenAI-compatible path (``DMT_UPSTREAM_MAX_RETRIES``).

The upstream is the shipped fake server app (not a model) behind httpx's ASGI transport;
``FlakyTransport`` makes its first N requests fail with a chosen status, which the fake
cannot do on its own (it fails always or never).
"""

from __future__ import annotations

import httpx
import pytest

from dmt_proxy.errors import UpstreamError, UpstreamRejected
from dmt_proxy.testing.upstream_server import ANSWER, create_fake_upstream
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel, retry_delay_s


class FlakyTransport(httpx.AsyncBaseTransport):
    """Answers ``status`` to the first ``failures`` requests, then forwards to the fake."""

    def __init__(self, failures: int, status: int) -> None:
        self.inner = httpx.ASGITransport(app=create_fake_upstream())
        self.failures = failures
        self.status = status
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        if self.requests <= self.failures:
            body = {
                "error": {"message": "flaky", "type": "server_error", "param": None, "code": None}
            }
            return httpx.Response(self.status, json=body)
        return await self.inner.handle_async_request(request)


def call(retries: int) -> UpstreamCall:
    endpoint = ModelEndpoint(
        model="openai/fast", api_base="http://upstream/v1", max_retries=retries
    )
    return UpstreamCall(endpoint, messages=[{"role": "user", "content": "x"}], label="fast")


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_transient_failures_are_retried_until_success(status: int) -> None:
    transport = FlakyTransport(failures=2, status=status)
    model = OpenAICompatChatModel(transport=transport)
    assert (await model.complete(call(retries=2))).text() == ANSWER
    assert transport.requests == 3
    await model.aclose()


async def test_retries_are_bounded() -> None:
    transport = FlakyTransport(failures=10, status=503)
    model = OpenAICompatChatModel(transport=transport)
    with pytest.raises(UpstreamError, match="503"):
        await model.complete(call(retries=2))
    assert transport.requests == 3
    with pytest.raises(UpstreamError):
        await model.complete(call(retries=0))
    assert transport.requests == 4
    await model.aclose()


@pytest.mark.parametrize("status", [400, 404, 413, 422])
async def test_client_errors_are_not_retried(status: int) -> None:
    transport = FlakyTransport(failures=10, status=status)
    model = OpenAICompatChatModel(transport=transport)
    with pytest.raises(UpstreamRejected):
        await model.complete(call(retries=3))
    assert transport.requests == 1
    await model.aclose()


async def test_stream_is_retried_only_before_it_starts() -> None:
    transport = FlakyTransport(failures=1, status=503)
    model = OpenAICompatChatModel(transport=transport)
    text = "".join([c.text() async for c in model.stream(call(retries=1))])
    assert text == ANSWER and transport.requests == 2
    failing = FlakyTransport(failures=10, status=503)
    model = OpenAICompatChatModel(transport=failing)
    with pytest.raises(UpstreamError):
        async for _ in model.stream(call(retries=1)):
            pass
    assert failing.requests == 2
    await model.aclose()


def test_retry_delay_doubles_and_is_capped() -> None:
    assert [retry_delay_s(a) for a in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert retry_delay_s(10_000) == 2.0
