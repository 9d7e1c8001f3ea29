"""The direct OpenAI-compatible upstream path against the shipped fake upstream server.

The fake server (dmt_proxy.upstream.fake_server) is not a model: it produces the
upstream failures these tests are about (5xx, 4xx, truncated streams) on demand.
"""

from __future__ import annotations

import httpx
import pytest

from dmt_proxy.errors import UpstreamError, UpstreamRejected
from dmt_proxy.upstream.base import UpstreamCall, chunk_text, completion_text
from dmt_proxy.upstream.fake_server import ANSWER, FakeUpstreamConfig, create_fake_upstream
from dmt_proxy.upstream.openai_compat import OpenAICompatChatModel, is_openai_compatible


def model_for(config: FakeUpstreamConfig) -> OpenAICompatChatModel:
    return OpenAICompatChatModel(transport=httpx.ASGITransport(app=create_fake_upstream(config)))


CALL = UpstreamCall(model="openai/fast", messages=[{"role": "user", "content": "x"}],
                    api_base="http://upstream/v1", api_key="k", label="fast at http://upstream/v1")  # fmt: skip


def test_routing_rule() -> None:
    assert is_openai_compatible(CALL)
    assert not is_openai_compatible(UpstreamCall(model="anthropic/claude", messages=[]))
    assert not is_openai_compatible(UpstreamCall(model="openai/gpt-4o", messages=[]))


async def test_complete_and_stream() -> None:
    model = model_for(FakeUpstreamConfig())
    assert completion_text(await model.complete(CALL)) == ANSWER
    text = "".join([chunk_text(c) async for c in model.stream(CALL)])
    assert text == ANSWER
    await model.aclose()


@pytest.mark.parametrize(("status", "expected", "code"), [
    (500, UpstreamError, 502), (503, UpstreamError, 502),
    (400, UpstreamRejected, 400), (429, UpstreamRejected, 429), (422, UpstreamRejected, 400),
])  # fmt: skip
async def test_status_mapping(status: int, expected: type[Exception], code: int) -> None:
    model = model_for(FakeUpstreamConfig(fail_status=status))
    with pytest.raises(expected) as info:
        await model.complete(CALL)
    assert isinstance(info.value, UpstreamError) and info.value.status_code == code
    assert "fast at http://upstream/v1" in info.value.message
    with pytest.raises(expected):
        async for _ in model.stream(CALL):
            pass


async def test_truncated_stream_is_an_error() -> None:
    model = model_for(FakeUpstreamConfig(truncate=True))
    got = []
    with pytest.raises(UpstreamError, match="truncated"):
        async for chunk in model.stream(CALL):
            got.append(chunk)
    assert len(got) == 1


async def test_unreachable() -> None:
    model = OpenAICompatChatModel()
    dead = UpstreamCall(
        model="openai/x", messages=[], api_base="http://127.0.0.1:9/v1", label="dead"
    )
    with pytest.raises(UpstreamError, match="unreachable"):
        await model.complete(dead)
    await model.aclose()


def test_streams_reuse_the_upstream_connection() -> None:
    """A stream read to [DONE] hands its connection back to the pool (real TCP server).

    Stopping at [DONE] used to close the connection, so every streamed request paid a
    new TCP connect to the upstream; the fake server counts distinct client sockets.
    """
    import asyncio
    import dataclasses
    import socket
    import threading
    import time

    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_fake_upstream(), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}/v1"
        call = dataclasses.replace(CALL, api_base=base)

        async def run() -> None:
            model = OpenAICompatChatModel()
            for _ in range(5):
                assert "".join([chunk_text(c) async for c in model.stream(call)]) == ANSWER
            await model.aclose()

        asyncio.run(run())
        health = httpx.get(f"http://127.0.0.1:{port}/health").json()
        assert health["requests"] == 5 and health["connections"] == 1
    finally:
        server.should_exit = True
        thread.join(timeout=10)
