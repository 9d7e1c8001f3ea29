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
