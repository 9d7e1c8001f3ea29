"""``POST /v1/messages`` on the chat pipeline, checked with the anthropic SDK's own types.

The upstream is a shipped scripted model (ScriptedChatModel for text,
ToolLoopChatModel for tool calls) or, for stream failures and token limits, a chat
model defined here that yields given chunks and then fails: these tests are about
the wire format and the flow, not a model's answers. Every Message, stream event
and error body is validated against ``anthropic.types``, and the SDK's own stream
helpers (``messages.stream``, ``get_final_message``) parse the streams.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from anthropic import AsyncAnthropic
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from pydantic import TypeAdapter

from dmt_proxy.api import create_app
from dmt_proxy.api.auth import hash_key
from dmt_proxy.errors import UpstreamError, UpstreamTimeout
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, Usage
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.testing.tool_upstream import ToolLoopChatModel
from dmt_proxy.upstream.base import ChatModel, UpstreamCall
from tests.timing import budget

EVENTS: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
ADMIN = {"authorization": "Bearer sekrit"}
MODEL = "qwen2.5-0.5b"
TOOL = {"name": "get_weather", "description": "Weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}  # fmt: skip

TEXT_EVENTS = ["message_start", "ping", "content_block_start", *["content_block_delta"] * 3,
               "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
TOOL_EVENTS = ["message_start", "ping", "content_block_start", *["content_block_delta"] * 2,
               "content_block_stop", "message_delta", "message_stop"]  # fmt: skip


class ChunksThenFail:
    """A chat model that streams the given chunks, then raises ``error`` (if any)."""

    def __init__(self, chunks: Sequence[ChatCompletionChunk], error: Exception | None) -> None:
        self._chunks, self._error = chunks, error

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        raise AssertionError("streams only")

    async def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        for chunk in self._chunks:
            yield chunk
        if self._error is not None:
            raise self._error


@dataclass
class Env:
    http: httpx.AsyncClient
    sdk: AsyncAnthropic
    app: Any

    async def memories(self, user: str) -> list[str]:
        # A hang guard: the first audit loads the first stage's embedding model (seconds
        # from a cold disk cache).
        assert await self.app.state.memory.drain(timeout_s=budget(60))
        resp = await self.http.get("/v1/memories", params={"user": user}, headers=ADMIN)
        return [r["text"] for r in resp.json()["data"]]


@pytest.fixture
async def make_env(state_dir: Path) -> AsyncIterator[Any]:
    stack: list[Any] = []

    async def make(chat: ChatModel, **overrides: Any) -> Env:
        settings = Settings.from_env({}, state_dir=state_dir, admin_key="sekrit", **overrides)
        policy = parse_policy({"version": 1, "mode": "dmt",
                               "memory": {"backend": "memory", "top_k": 3}})  # fmt: skip
        app = create_app(settings, policy=policy, upstream=chat, memory_backend=InMemoryBackend(),
                         auditor=ScriptedAuditor())  # fmt: skip
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")
        # The anthropic SDK runs on httpx2 (a fork of httpx): its own ASGI transport.
        sdk_http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                      base_url="http://proxy")  # fmt: skip
        stack.append((lifespan, http))
        stack.append((None, sdk_http))
        sdk = AsyncAnthropic(base_url="http://proxy", api_key="unused", http_client=sdk_http,
                             max_retries=0)  # fmt: skip
        return Env(http, sdk, app)

    yield make
    for lifespan, http in reversed(stack):
        await http.aclose()
        if lifespan is not None:
            await lifespan.__aexit__(None, None, None)


def parse_sse(text: str) -> list[dict[str, Any]]:
    """The events of a Messages stream, each checked against the SDK's event union."""
    events = []
    for block in text.strip().split("\n\n"):
        # A line starting with ':' is an SSE comment (the proxy's write report), which SSE
        # clients skip, as the SDK does.
        fields = [line for line in block.splitlines() if not line.startswith(":")]
        if not fields:
            continue
        lines = dict(line.split(": ", 1) for line in fields)
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        if data["type"] == "error":
            ErrorResponse.model_validate(data)
        elif data["type"] != "ping":
            EVENTS.validate_python(data)
        events.append(data)
    return events


def body(text: str = "hi", **fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": text}],
            **fields}  # fmt: skip


async def test_text_message_is_an_sdk_message(make_env: Any) -> None:
    chat = ScriptedChatModel(["Bonjour from the proxy"])
    env = await make_env(chat)
    raw = await env.http.post("/v1/messages", json=body(
        "Say hello", system="Be brief.", max_tokens=50, temperature=0.2, top_p=0.9, top_k=5,
        stop_sequences=["###"], metadata={"user_id": "ann"}))  # fmt: skip
    assert raw.status_code == 200, raw.text
    assert set(raw.json()) == {"id", "type", "role", "content", "model", "stop_reason",
                               "stop_sequence", "usage"}  # fmt: skip
    message = Message.model_validate(raw.json())
    assert message.content[0].type == "text" and message.content[0].text == "Bonjour from the proxy"
    assert (message.type, message.role, message.model, message.stop_reason) == (
        "message", "assistant", MODEL, "end_turn")  # fmt: skip
    assert message.id.startswith("msg_") and message.usage.output_tokens == 4
    call = chat.calls[-1]
    assert call.wire_messages()[-2:] == [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Say hello"}]  # fmt: skip
    assert {k: call.params[k] for k in ("max_tokens", "temperature", "top_p", "top_k", "stop")} == {
        "max_tokens": 50, "temperature": 0.2, "top_p": 0.9, "top_k": 5, "stop": ["###"]}  # fmt: skip
    assert raw.headers["x-dmt-mode"] == "dmt" and float(raw.headers["x-dmt-overhead-ms"]) >= 0
    assert raw.headers["request-id"] == raw.headers["x-request-id"]
    assert raw.headers["x-dmt-memory-write"] == "queued"
    assert await env.memories("ann") == ["User: Say hello\nAssistant: Bonjour from the proxy"]
    # The SDK's own client parses the same answer; system as text blocks is one system message.
    again = await env.sdk.messages.create(model=MODEL, max_tokens=20, messages=[
        {"role": "user", "content": [{"type": "text", "text": "Again", "cache_control": {
            "type": "ephemeral"}}]}], system=[{"type": "text", "text": "Be brief."}])  # fmt: skip
    assert again.content[0].type == "text" and again.content[0].text == "Bonjour from the proxy"
    assert again._request_id is not None and again._request_id.startswith("req_")


async def test_text_stream_event_sequence_parsed_by_the_sdk(make_env: Any) -> None:
    env = await make_env(ScriptedChatModel(["one two three"]))
    raw = await env.http.post("/v1/messages", json=body(
        "Count", stream=True, metadata={"user_id": "bo"}))  # fmt: skip
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(raw.text)
    assert [e["type"] for e in events] == TEXT_EVENTS
    start = events[0]["message"]
    assert (start["content"], start["stop_reason"], start["model"]) == ([], None, MODEL)
    assert events[2] == {"type": "content_block_start", "index": 0,
                         "content_block": {"type": "text", "text": ""}}  # fmt: skip
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert deltas == [{"type": "text_delta", "text": t} for t in ("one", " two", " three")]
    assert events[-3] == {"type": "content_block_stop", "index": 0}
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert await env.memories("bo") == ["User: Count\nAssistant: one two three"]
    # The SDK's stream helper accumulates the same events into the final Message.
    async with env.sdk.messages.stream(model=MODEL, max_tokens=20, messages=[
            {"role": "user", "content": "Count again"}], metadata={"user_id": "bo"}) as stream:  # fmt: skip
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert texts == ["one", " two", " three"]
    assert final.content[0].type == "text" and final.content[0].text == "one two three"
    assert final.stop_reason == "end_turn" and final.id.startswith("msg_")


async def test_tool_use_stream_and_round_trip_are_one_memory_per_turn(make_env: Any) -> None:
    chat = ToolLoopChatModel(tool_steps=1)
    env = await make_env(chat)
    raw = await env.http.post("/v1/messages", json=body("Weather in Paris", stream=True,
                                                        tools=[TOOL]))  # fmt: skip
    events = parse_sse(raw.text)
    assert [e["type"] for e in events] == TOOL_EVENTS
    block = events[2]["content_block"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "get_weather", {})
    partial = "".join(e["delta"]["partial_json"] for e in events[3:5])
    assert [e["delta"]["type"] for e in events[3:5]] == ["input_json_delta"] * 2
    assert json.loads(partial) == {"city": "Paris"}
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    # The round trip with the SDK's stream helper: tool_use, then the tool_result turn.
    messages: list[Any] = [{"role": "user", "content": "Weather in Oslo"}]
    async with env.sdk.messages.stream(model=MODEL, max_tokens=64, messages=messages,
                                       tools=[TOOL], metadata={"user_id": "cy"}) as stream:  # fmt: skip
        first = await stream.get_final_message()
    use = first.content[0]
    assert use.type == "tool_use" and use.input == {"city": "Oslo"}
    assert first.stop_reason == "tool_use"
    messages += [{"role": "assistant", "content": first.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "Oslo: -3C, snow"}]}]  # fmt: skip
    async with env.sdk.messages.stream(model=MODEL, max_tokens=64, messages=messages,
                                       tools=[TOOL], metadata={"user_id": "cy"}) as stream:  # fmt: skip
        second = await stream.get_final_message()
    assert second.content[0].type == "text"
    assert second.content[0].text == "Tool result: Oslo: -3C, snow"
    assert second.stop_reason == "end_turn"
    sent = chat.calls[-1].wire_messages()
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == sent[2]["tool_call_id"] == use.id
    assert json.loads(sent[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Oslo"}
    assert chat.calls[-1].params["tools"][0]["function"] == {
        "name": "get_weather", "description": "Weather of a city",
        "parameters": TOOL["input_schema"]}  # fmt: skip
    assert await env.memories("cy") == [
        "User: Weather in Oslo\nAssistant: Tool result: Oslo: -3C, snow"]  # fmt: skip


async def test_non_streamed_tool_round_trip_and_tool_choice(make_env: Any) -> None:
    chat = ToolLoopChatModel(tool_steps=1)
    env = await make_env(chat)
    user = {"X-DMT-User": "dee"}
    first = await env.sdk.messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Weather in Rome"}],
        tools=[TOOL], extra_headers=user,
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True})  # fmt: skip
    assert chat.calls[-1].params["tool_choice"] == {"type": "function",
                                                    "function": {"name": "get_weather"}}  # fmt: skip
    assert chat.calls[-1].params["parallel_tool_calls"] is False
    use = first.content[0]
    assert use.type == "tool_use" and use.input == {"city": "Rome"}
    assert first.stop_reason == "tool_use"
    second = await env.sdk.messages.create(
        model=MODEL, max_tokens=64, tools=[TOOL], tool_choice={"type": "any"},
        extra_headers=user, messages=[
            {"role": "user", "content": "Weather in Rome"},
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."}, use]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                          "is_error": True,
                                          "content": [{"type": "text", "text": "no station"}]}]}])  # fmt: skip
    assert chat.calls[-1].params["tool_choice"] == "required"
    sent = chat.calls[-1].wire_messages()
    assert sent[-2]["content"] == "Checking." and sent[-2]["tool_calls"][0]["id"] == use.id
    assert sent[-1] == {"role": "tool", "tool_call_id": use.id, "content": "Error: no station"}
    assert second.content[0].type == "text"
    assert second.content[0].text == "Tool result: Error: no station"
    assert await env.memories("dee") == [
        "User: Weather in Rome\nAssistant: Tool result: Error: no station"]  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "'thinking'"),
        ({"mcp_servers": [{"type": "url", "url": "http://x", "name": "x"}]}, "'mcp_servers'"),
        ({"container": "c1"}, "'container'"),
        ({"output_config": {"effort": "low"}}, "'output_config'"),
        ({"frobnicate": 1}, "'frobnicate'"),
        ({"metadata": {"user_id": "a", "session": "s"}}, "'metadata.session'"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
        ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "server tools"),
        ({"messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "AAAA"}}]}]}, "'image' at messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                            "data": "x"}}]}]}, "'document'"),
        ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"}]}]}, "'thinking'"),
        ({"messages": [{"role": "assistant", "content": [
            {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}]}]},
         "'server_tool_use'"),
        ({"messages": [{"role": "system", "content": "hi"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                                     "input": {}}]}]}, "cannot carry"),
        ({"messages": []}, "'messages'"),
        ({"max_tokens": 0}, "'max_tokens'"),
        ({"temperature": 1.5}, "'temperature'"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ],
)  # fmt: skip
async def test_unsupported_and_malformed_requests_are_anthropic_400s_naming_them(
    make_env: Any, fields: dict[str, Any], words: str
) -> None:
    env = await make_env(ScriptedChatModel(["unused"]))
    resp = await env.http.post("/v1/messages", json=body(**fields))
    assert resp.status_code == 400, resp.text
    error = ErrorResponse.model_validate(resp.json())
    assert error.type == "error" and error.error.type == "invalid_request_error"
    assert words in error.error.message, error
    assert error.request_id == resp.headers["request-id"]
    assert "param" not in resp.json()["error"]  # Anthropic's shape, not OpenAI's


async def test_the_sdk_raises_its_own_errors_for_each_status(make_env: Any) -> None:
    chat = ScriptedChatModel([UpstreamError("upstream x failed: boom", upstream="x"),
                              UpstreamTimeout("upstream x timed out", upstream="x")])  # fmt: skip
    env = await make_env(chat, max_body_bytes=2000)
    create = env.sdk.messages.create
    with pytest.raises(anthropic.NotFoundError) as missing:
        await create(
            model="no-such-model", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "no-such-model" in str(missing.value)
    with pytest.raises(anthropic.BadRequestError):
        await create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}],
                     thinking={"type": "enabled", "budget_tokens": 1024})  # fmt: skip
    with pytest.raises(anthropic.APIStatusError) as large:
        await create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x" * 3000}])
    assert large.value.status_code == 413
    assert large.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    with pytest.raises(anthropic.InternalServerError) as failed:
        await create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert failed.value.status_code == 502
    assert failed.value.body["error"] == {"type": "api_error",  # type: ignore[index]
                                          "message": "upstream x failed: boom"}  # fmt: skip
    with pytest.raises(anthropic.APIStatusError) as slow:
        await create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert slow.value.status_code == 504
    assert slow.value.body["error"]["type"] == "timeout_error"  # type: ignore[index]
    # Other routes keep OpenAI's shape.
    other = await env.http.post("/v1/chat/completions", json={"model": "no-such-model",
                                                               "messages": [{"role": "user", "content": "x"}]})  # fmt: skip
    assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"


async def test_tenant_keys_are_read_from_x_api_key(make_env: Any, tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(f"version: 1\ntenants:\n  - name: acme\n    key_sha256: {hash_key('k1')}\n")
    chat = ScriptedChatModel(["noted"])
    env = await make_env(chat, tenants_file=tenants)
    with pytest.raises(anthropic.AuthenticationError) as denied:
        await env.sdk.messages.create(model=MODEL, max_tokens=5,
                                      messages=[{"role": "user", "content": "x"}])  # fmt: skip
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    client = env.sdk.with_options(api_key="k1")  # sent as x-api-key
    reply = await client.messages.create(model=MODEL, max_tokens=5, metadata={"user_id": "u"},
                                         messages=[{"role": "user", "content": "x"}])  # fmt: skip
    assert reply.content[0].type == "text" and reply.content[0].text == "noted"
    assert await env.memories("acme/u") == ["User: x\nAssistant: noted"]
    bearer = await env.http.post(
        "/v1/messages", json=body(), headers={"authorization": "Bearer k1"}
    )
    assert bearer.status_code == 200
    counted = await env.http.post("/v1/messages/count_tokens", json=body())
    assert counted.status_code == 401 and counted.json()["error"]["type"] == "authentication_error"


async def test_one_user_cannot_see_another_users_memories(make_env: Any) -> None:
    chat = ScriptedChatModel(["Noted: your cat is Mimi", "I do not know"])
    env = await make_env(chat)
    await env.sdk.messages.create(model=MODEL, max_tokens=20, metadata={"user_id": "eve"},
                                  messages=[{"role": "user", "content": "My cat is Mimi"}])  # fmt: skip
    assert await env.memories("eve") == ["User: My cat is Mimi\nAssistant: Noted: your cat is Mimi"]

    def prompt() -> str:
        return json.dumps(chat.calls[-1].wire_messages())

    await env.sdk.messages.create(model=MODEL, max_tokens=20, metadata={"user_id": "mallory"},
                                  messages=[{"role": "user", "content": "What is my cat?"}])  # fmt: skip
    assert "Mimi" not in prompt()
    await env.sdk.messages.create(model=MODEL, max_tokens=20, extra_headers={"X-DMT-User": "frank"},
                                  metadata={"user_id": "eve"},
                                  messages=[{"role": "user", "content": "What is my cat?"}])  # fmt: skip
    assert "Mimi" not in prompt()  # X-DMT-User wins over metadata.user_id
    await env.sdk.messages.create(model=MODEL, max_tokens=20, metadata={"user_id": "eve"},
                                  messages=[{"role": "user", "content": "What is my cat?"}])  # fmt: skip
    assert "Mimi" in prompt()
    assert await env.memories("mallory") == ["User: What is my cat?\nAssistant: I do not know"]


def chunk(text: str | None, finish: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.of_text(text, id="c", model="m", created=1, finish=finish)


async def test_a_stream_failing_midway_ends_with_an_error_event(make_env: Any) -> None:
    failing = UpstreamError("upstream x failed mid-stream: boom", upstream="x")
    env = await make_env(ChunksThenFail([chunk("partial"), chunk(" answer")], failing))
    raw = await env.http.post("/v1/messages", json=body(stream=True, metadata={"user_id": "di"}))
    events = parse_sse(raw.text)
    assert [e["type"] for e in events] == [*TEXT_EVENTS[:3], "content_block_delta",
                                           "content_block_delta", "error"]  # fmt: skip
    assert events[-1]["error"] == {"type": "api_error",
                                   "message": "upstream x failed mid-stream: boom"}  # fmt: skip
    assert await env.memories("di") == []  # an interrupted answer is not written
    with pytest.raises(anthropic.APIStatusError, match="boom"):
        async with env.sdk.messages.stream(model=MODEL, max_tokens=5,
                                           messages=[{"role": "user", "content": "x"}]) as stream:  # fmt: skip
            await stream.get_final_message()


async def test_a_stream_failing_before_its_first_chunk_is_an_http_error(make_env: Any) -> None:
    env = await make_env(ChunksThenFail([], UpstreamTimeout("too slow", upstream="x")))
    raw = await env.http.post("/v1/messages", json=body(stream=True))
    assert raw.status_code == 504
    assert raw.json()["error"] == {"type": "timeout_error", "message": "too slow"}


async def test_token_limit_and_usage_reach_message_delta(make_env: Any) -> None:
    usage = ChatCompletionChunk(choices=[], usage=Usage(prompt_tokens=3, completion_tokens=2,
                                                        total_tokens=5))  # fmt: skip
    env = await make_env(ChunksThenFail([chunk("cut"), chunk(None, "length"), usage], None))
    async with env.sdk.messages.stream(model=MODEL, max_tokens=2,
                                       messages=[{"role": "user", "content": "x"}]) as stream:  # fmt: skip
        final = await stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (3, 2)


async def test_a_stop_sequence_the_upstream_names_is_reported(make_env: Any) -> None:
    reply = ChatCompletion.model_validate({"id": "c", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "1, 2"},
         "finish_reason": "stop", "stop_reason": "3"}]})  # fmt: skip
    env = await make_env(ScriptedChatModel([reply]))
    message = await env.sdk.messages.create(model=MODEL, max_tokens=9, stop_sequences=["3"],
                                            messages=[{"role": "user", "content": "Count"}])  # fmt: skip
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "3")
    assert message.usage.input_tokens == 0  # the upstream counted nothing


async def test_count_tokens_is_refused_clearly(make_env: Any) -> None:
    env = await make_env(ScriptedChatModel(["unused"]))
    with pytest.raises(anthropic.NotFoundError) as refused:
        await env.sdk.messages.count_tokens(model=MODEL,
                                            messages=[{"role": "user", "content": "x"}])  # fmt: skip
    error = ErrorResponse.model_validate(refused.value.body)
    assert error.error.type == "not_found_error" and "not served" in error.error.message


async def test_openapi_documents_the_route_with_anthropic_errors(make_env: Any) -> None:
    env = await make_env(ScriptedChatModel(["unused"]))
    doc = (await env.http.get("/openapi.json")).json()
    post = doc["paths"]["/v1/messages"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "MessagesRequest")  # fmt: skip
    error = post["responses"]["400"]["content"]["application/json"]["schema"]["$ref"]
    assert doc["components"]["schemas"][error.rsplit("/", 1)[1]]["required"] == ["error"]
    assert "/v1/messages/count_tokens" in doc["paths"]


def tool_chunk(index: int, *, id: str | None = None, name: str | None = None,
               arguments: str = "") -> ChatCompletionChunk:  # fmt: skip
    call = {"index": index, "function": {"arguments": arguments}}
    if id is not None:
        call.update(id=id, type="function")
        call["function"]["name"] = name  # type: ignore[index]
    return ChatCompletionChunk.model_validate({"id": "c", "model": "m", "choices": [
        {"index": 0, "delta": {"tool_calls": [call]}}]})  # fmt: skip


async def test_text_then_two_tool_calls_stream_as_three_blocks(make_env: Any) -> None:
    chunks = [chunk("Let me check."), tool_chunk(0, id="call_a", name="get_weather"),
              tool_chunk(0, arguments='{"city": "Oslo"}'),
              tool_chunk(1, id="call_b", name="get_weather", arguments='{"city": "Rome"}'),
              chunk(None, "tool_calls")]  # fmt: skip
    env = await make_env(ChunksThenFail(chunks, None))
    events = parse_sse((await env.http.post("/v1/messages", json=body(
        stream=True, tools=[TOOL]))).text)  # fmt: skip
    assert [(e["type"], e.get("index")) for e in events] == [
        ("message_start", None), ("ping", None),
        ("content_block_start", 0), ("content_block_delta", 0), ("content_block_stop", 0),
        ("content_block_start", 1), ("content_block_delta", 1), ("content_block_stop", 1),
        ("content_block_start", 2), ("content_block_delta", 2), ("content_block_stop", 2),
        ("message_delta", None), ("message_stop", None)]  # fmt: skip
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    assert [b.get("id") for b in starts] == [None, "call_a", "call_b"]
    async with env.sdk.messages.stream(model=MODEL, max_tokens=64, tools=[TOOL],
                                       messages=[{"role": "user", "content": "x"}]) as stream:  # fmt: skip
        final = await stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use", "tool_use"]
    assert [b.input for b in final.content if b.type == "tool_use"] == [{"city": "Oslo"},
                                                                        {"city": "Rome"}]  # fmt: skip
    assert final.stop_reason == "tool_use"


async def test_tool_arguments_that_are_not_an_object_are_a_502_naming_the_tool(
    make_env: Any,
) -> None:
    reply = ChatCompletion.model_validate({"id": "c", "model": "m", "choices": [
        {"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "Oslo please"}}]}}]})  # fmt: skip
    env = await make_env(ScriptedChatModel([reply]))
    resp = await env.http.post("/v1/messages", json=body(tools=[TOOL]))
    assert resp.status_code == 502
    error = ErrorResponse.model_validate(resp.json()).error
    assert error.type == "api_error" and "get_weather" in error.message
