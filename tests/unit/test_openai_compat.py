"""The direct OpenAI-compatible upstream path against the shipped fake upstream server.

The fake server (dmt_proxy.testing.upstream_server) is not a model: it produces the
upstream failures these tests are about (5xx, 4xx, truncated streams) on demand.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from dmt_proxy.errors import UpstreamError, UpstreamRejected
from dmt_proxy.settings import Settings
from dmt_proxy.testing.fixtures import OpenApp
from dmt_proxy.testing.upstream_server import ANSWER, FakeUpstreamConfig, create_fake_upstream
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel


def model_for(config: FakeUpstreamConfig) -> OpenAICompatChatModel:
    return OpenAICompatChatModel(transport=httpx.ASGITransport(app=create_fake_upstream(config)))


FAST = ModelEndpoint(name="fast", model="openai/fast", api_base="http://upstream/v1", api_key="k")
CALL = UpstreamCall(FAST, messages=[{"role": "user", "content": "x"}])


def test_routing_rule() -> None:
    assert CALL.where == "fast at http://upstream/v1"
    assert FAST.openai_compatible
    assert not ModelEndpoint(model="anthropic/claude").openai_compatible
    assert not ModelEndpoint(model="openai/gpt-4o").openai_compatible


async def test_complete_and_stream() -> None:
    model = model_for(FakeUpstreamConfig())
    assert (await model.complete(CALL)).text() == ANSWER
    text = "".join([c.text() async for c in model.stream(CALL)])
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
        ModelEndpoint(model="openai/x", api_base="http://127.0.0.1:9/v1"), messages=[], label="dead"
    )
    with pytest.raises(UpstreamError, match="unreachable"):
        await model.complete(dead)
    await model.aclose()


# What a provider might send beyond the OpenAI fields: all of it must reach the client.
PROVIDER_COMPLETION = {
    "choices": [{
        "finish_reason": "tool_calls", "index": 0, "logprobs": None,
        "message": {"role": "assistant", "content": None, "reasoning_content": "think",
                    "tool_calls": [{"id": "call_1", "type": "function", "vendor": {"x": 1},
                                    "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
    }],
    "created": 1731000000, "id": "chatcmpl-up", "model": "fast-upstream-name",
    "object": "chat.completion", "system_fingerprint": "b4000-é",
    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
              "prompt_tokens_details": {"cached_tokens": 0}},
    "timings": {"prompt_n": 3, "predicted_ms": 1.5},
}  # fmt: skip
PROVIDER_CHUNKS = [
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hé"},
                  "finish_reason": None, "logprobs": None}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
     "choices": [{"index": 0, "delta": {"tool_calls": [
         {"index": 0, "id": "t", "function": {"arguments": "{"}}]}, "finish_reason": None}]},
    {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "up",
     "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
     "timings": {"predicted_n": 2}},
]  # fmt: skip


def provider(request: httpx.Request) -> httpx.Response:
    if json.loads(request.content).get("stream"):
        events = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in PROVIDER_CHUNKS)
        return httpx.Response(200, content=events + b"data: [DONE]\n\n",
                              headers={"content-type": "text/event-stream"})  # fmt: skip
    return httpx.Response(200, json=PROVIDER_COMPLETION)


async def test_provider_fields_pass_through_to_the_client(
    state_dir: Path, open_app: OpenApp
) -> None:
    """The client gets what the upstream sent, field for field; only ``model`` is renamed."""
    upstream = OpenAICompatChatModel(transport=httpx.MockTransport(provider))
    policy = {"version": 1, "memory": {"backend": "none"}, "models": {
        "fast": {"model": "openai/fast", "api_base": "http://upstream/v1"}}}  # fmt: skip
    proxy = await open_app(Settings.from_env({}, state_dir=state_dir), policy=policy,
                           upstream=upstream)  # fmt: skip
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
    client = proxy.client
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200
    assert resp.json() == {**PROVIDER_COMPLETION, "model": "fast"}
    resp = await client.post("/v1/chat/completions", json={**body, "stream": True})
    events = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    assert [json.loads(e) for e in events[:-1]] == [{**c, "model": "fast"} for c in PROVIDER_CHUNKS]
    await upstream.aclose()


async def test_a_reply_that_is_not_a_completion_is_an_upstream_error() -> None:
    def wrong(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content).get("stream"):
            return httpx.Response(200, content=b'data: {"choices": "none"}\n\ndata: [DONE]\n\n')
        return httpx.Response(200, json={"choices": [{"message": {"content": 42}}]})

    model = OpenAICompatChatModel(transport=httpx.MockTransport(wrong))
    with pytest.raises(UpstreamError, match=r"not a chat completion: choices\.0\.message\.content"):
        await model.complete(CALL)
    with pytest.raises(UpstreamError, match="malformed stream chunk: choices"):
        async for _ in model.stream(CALL):
            pass
    await model.aclose()
