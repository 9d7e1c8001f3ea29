"""``POST /v1/responses`` on the chat pipeline, checked with the openai SDK's own types.

The upstream is a shipped scripted model (ScriptedChatModel for text,
ToolLoopChatModel for tool calls) or, for stream failures, a chat model defined
here that yields given chunks and then fails: these tests are about the wire
format and the flow, not a model's answers. Every Response and every stream
event is validated strictly against ``openai.types.responses``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.responses import Response as SDKResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from dmt_proxy.api import create_app
from dmt_proxy.errors import UpstreamError
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, Usage
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.testing.tool_upstream import ToolLoopChatModel
from dmt_proxy.upstream.base import ChatModel, UpstreamCall
from tests.timing import budget

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
ADMIN = {"authorization": "Bearer sekrit"}
TOOL = {"type": "function", "name": "get_weather", "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": False},
        "strict": True}  # fmt: skip

TEXT_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               "response.content_part.added", *["response.output_text.delta"] * 3,
               "response.output_text.done", "response.content_part.done",
               "response.output_item.done", "response.completed"]  # fmt: skip
TOOL_EVENTS = ["response.created", "response.in_progress", "response.output_item.added",
               *["response.function_call_arguments.delta"] * 2,
               "response.function_call_arguments.done", "response.output_item.done",
               "response.completed"]  # fmt: skip


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
    sdk: AsyncOpenAI
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

    async def make(chat: ChatModel) -> Env:
        settings = Settings.from_env({}, state_dir=state_dir, admin_key="sekrit")
        policy = parse_policy({"version": 1, "mode": "dmt",
                               "memory": {"backend": "memory", "top_k": 3}})  # fmt: skip
        app = create_app(settings, policy=policy, upstream=chat, memory_backend=InMemoryBackend(),
                         auditor=ScriptedAuditor())  # fmt: skip
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy")
        stack.append((lifespan, http))
        sdk = AsyncOpenAI(base_url="http://proxy/v1", api_key="unused", http_client=http)
        return Env(http, sdk, app)

    yield make
    for lifespan, http in reversed(stack):
        await http.aclose()
        await lifespan.__aexit__(None, None, None)


def parse_sse(text: str) -> list[dict[str, Any]]:
    """The events of a Responses stream, each checked against the SDK's event union."""
    events = []
    for block in text.strip().split("\n\n"):
        # A line starting with ':' is an SSE comment (the proxy's write report): skipped,
        # as the SDK skips it.
        lines = dict(line.split(": ", 1) for line in block.splitlines() if line[:1] != ":")
        if not lines:
            continue
        data = json.loads(lines["data"])
        assert lines["event"] == data["type"]
        EVENTS.validate_python(data, strict=True)
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    return events


async def test_text_response_is_an_sdk_response(make_env: Any) -> None:
    chat = ScriptedChatModel(["Bonjour from the proxy"])
    env = await make_env(chat)
    raw = await env.http.post("/v1/responses", json={
        "model": "qwen2.5-0.5b", "input": "Say hello", "instructions": "Be brief.",
        "max_output_tokens": 50, "temperature": 0.2, "top_p": 0.9, "user": "ann",
        "metadata": {"topic": "greeting"}})  # fmt: skip
    assert raw.status_code == 200, raw.text
    response = SDKResponse.model_validate(raw.json(), strict=True)
    assert response.output_text == "Bonjour from the proxy" and response.status == "completed"
    assert (response.model, response.metadata, response.max_output_tokens) == (
        "qwen2.5-0.5b", {"topic": "greeting"}, 50)  # fmt: skip
    assert response.usage is not None and response.usage.output_tokens == 4
    call = chat.calls[-1]
    assert call.wire_messages()[-2:] == [{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Say hello"}]  # fmt: skip
    assert (call.params["max_tokens"], call.params["temperature"], call.params["top_p"]) == (
        50, 0.2, 0.9)  # fmt: skip
    assert raw.headers["x-dmt-mode"] == "dmt" and float(raw.headers["x-dmt-overhead-ms"]) >= 0
    assert await env.memories("ann") == ["User: Say hello\nAssistant: Bonjour from the proxy"]


async def test_text_stream_event_sequence(make_env: Any) -> None:
    env = await make_env(ScriptedChatModel(["one two three"]))
    raw = await env.http.post("/v1/responses", json={"model": "qwen2.5-0.5b", "input": "Count",
                                                     "stream": True, "user": "bo"})  # fmt: skip
    assert raw.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(raw.text)
    assert [e["type"] for e in events] == TEXT_EVENTS
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    done = events[-1]["response"]
    assert deltas == "one two three" == done["output"][0]["content"][0]["text"]
    assert done["status"] == "completed" and events[0]["response"]["status"] == "in_progress"
    item_ids = {e["item_id"] for e in events if "item_id" in e}
    assert item_ids == {done["output"][0]["id"]}
    assert await env.memories("bo") == ["User: Count\nAssistant: one two three"]


async def test_tool_call_stream_event_sequence_and_sdk_stream_helper(make_env: Any) -> None:
    env = await make_env(ToolLoopChatModel(tool_steps=1))
    body = {"model": "qwen2.5-0.5b", "input": "Weather in Paris", "tools": [TOOL],
            "tool_choice": "auto", "stream": True}  # fmt: skip
    events = parse_sse((await env.http.post("/v1/responses", json=body)).text)
    assert [e["type"] for e in events] == TOOL_EVENTS
    call = events[-1]["response"]["output"][0]
    assert (call["type"], call["name"], json.loads(call["arguments"])) == (
        "function_call", "get_weather", {"city": "Paris"})  # fmt: skip
    args = "".join(e["delta"] for e in events if e["type"].endswith("arguments.delta"))
    assert args == call["arguments"] == events[-3]["arguments"]
    # The SDK's own stream helper accumulates the same events into a final Response.
    async with env.sdk.responses.stream(model="qwen2.5-0.5b", input="Weather in Rome",
                                        tools=[TOOL]) as stream:  # type: ignore[list-item]  # fmt: skip
        final = await stream.get_final_response()
    assert final.output[0].type == "function_call" and '"Rome"' in final.output[0].arguments


async def test_tool_round_trip_is_one_memory_per_turn(make_env: Any) -> None:
    chat = ToolLoopChatModel(tool_steps=1)
    env = await make_env(chat)
    first = await env.sdk.responses.create(model="qwen2.5-0.5b", input="Weather in Oslo",
                                           tools=[TOOL], metadata={"user": "cy"})  # type: ignore[list-item]  # fmt: skip
    call = first.output[0]
    assert call.type == "function_call"
    items: list[Any] = [{"role": "user", "content": "Weather in Oslo"}, call.model_dump(),
                        {"type": "function_call_output", "call_id": call.call_id,
                         "output": "Oslo: -3C, snow"}]  # fmt: skip
    second = await env.sdk.responses.create(model="qwen2.5-0.5b", input=items, tools=[TOOL],
                                            metadata={"user": "cy"}, stream=True)  # type: ignore[list-item]  # fmt: skip
    kinds, final = [], None
    async for event in second:
        kinds.append(event.type)
        if event.type == "response.completed":
            final = event.response
    assert final is not None and final.output_text == "Tool result: Oslo: -3C, snow"
    assert kinds == TEXT_EVENTS[:4] + ["response.output_text.delta"] * 5 + TEXT_EVENTS[-4:]
    sent = chat.calls[-1].wire_messages()
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["tool_calls"][0]["id"] == sent[2]["tool_call_id"] == call.call_id
    assert chat.calls[-1].params["tools"][0]["function"]["name"] == "get_weather"
    assert await env.memories("cy") == [
        "User: Weather in Oslo\nAssistant: Tool result: Oslo: -3C, snow"]  # fmt: skip


async def test_json_schema_format_and_named_tool_choice_reach_the_upstream(make_env: Any) -> None:
    chat = ScriptedChatModel(['{"city": "Paris"}'])
    env = await make_env(chat)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    response = await env.sdk.responses.create(
        model="qwen2.5-0.5b", input=[{"role": "developer", "content": "JSON only"},
                                     {"role": "user", "content": [{"type": "input_text",
                                                                   "text": "Capital of France?"}]}],
        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}},
        tools=[TOOL], tool_choice={"type": "function", "name": "get_weather"})  # type: ignore[list-item]  # fmt: skip
    assert json.loads(response.output_text) == {"city": "Paris"}
    params, messages = chat.calls[-1].params, chat.calls[-1].wire_messages()
    assert params["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "city", "schema": schema, "strict": True}}  # fmt: skip
    assert params["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert messages[-2:] == [{"role": "system", "content": "JSON only"},
                             {"role": "user", "content": "Capital of France?"}]  # fmt: skip
    assert response.text.format.type == "json_schema"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "no response state"),
        ({"store": True}, "store", "not stored"),
        ({"conversation": "conv_1"}, "conversation", "no response state"),
        ({"reasoning": {"effort": "low"}}, "reasoning", "not supported"),
        ({"include": ["message.output_text.logprobs"]}, "include", "no additional"),
        ({"frobnicate": 1}, "frobnicate", "Unsupported parameter"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "function tools only"),
        ({"input": [{"role": "user", "content": "hi"}, {"type": "function_call", "name": "f"}]},
         "input[1].call_id", "input[1]"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input[0].type", "input[0]"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         "input[0].content[0].type", "input_image"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", "input[0].role"),
        ({"input": []}, "input", "at least one"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice", "tool_choice"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format", "name"),
        ({"max_output_tokens": 0}, "max_output_tokens", "greater than"),
    ],
)  # fmt: skip
async def test_unsupported_and_malformed_requests_are_400s_naming_the_field(
    make_env: Any, body: dict[str, Any], param: str, words: str
) -> None:
    env = await make_env(ScriptedChatModel(["unused"]))
    resp = await env.http.post("/v1/responses", json={"model": "qwen2.5-0.5b", "input": "hi",
                                                      **body})  # fmt: skip
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and words in error["message"], error


def chunk(text: str | None, finish: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.of_text(text, id="c", model="m", created=1, finish=finish)


async def test_a_stream_failing_midway_ends_with_error_and_response_failed(make_env: Any) -> None:
    failing = UpstreamError("upstream x failed mid-stream: boom", upstream="x")
    env = await make_env(ChunksThenFail([chunk("partial"), chunk(" answer")], failing))
    raw = await env.http.post("/v1/responses", json={"input": "hi", "stream": True, "user": "di"})
    events = parse_sse(raw.text)
    assert [e["type"] for e in events][-2:] == ["error", "response.failed"]
    assert events[-2]["code"] == "upstream_error" and events[-2]["message"].endswith("boom")
    assert events[-1]["response"]["error"]["message"].endswith("boom")
    assert await env.memories("di") == []  # an interrupted answer is not written


async def test_a_stream_failing_before_its_first_chunk_is_an_http_error(make_env: Any) -> None:
    env = await make_env(ChunksThenFail([], UpstreamError("down", upstream="x")))
    raw = await env.http.post("/v1/responses", json={"input": "hi", "stream": True})
    assert raw.status_code == 502 and raw.json()["error"]["message"] == "down"


async def test_token_limit_makes_an_incomplete_response(make_env: Any) -> None:
    usage = ChatCompletionChunk(choices=[], usage=Usage(prompt_tokens=3, completion_tokens=2,
                                                        total_tokens=5))  # fmt: skip
    env = await make_env(ChunksThenFail([chunk("cut"), chunk(None, "length"), usage], None))
    events = parse_sse((await env.http.post("/v1/responses", json={
        "input": "hi", "stream": True, "max_output_tokens": 2})).text)  # fmt: skip
    last = events[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"]["usage"]["total_tokens"] == 5
