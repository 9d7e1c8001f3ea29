"""The tool-or-text decision read from log-probs (upstream.tool_decision), against a scripted model."""

from __future__ import annotations

import json
import math
from typing import Any

from dmt_proxy.openai_types import ChatCompletion
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.local_tools import LocalToolsChatModel, tool_specs, with_local_tools
from dmt_proxy.upstream.tool_decision import (
    EXAMPLE_TOOLS,
    THRESHOLD,
    conversation_text,
    decision_call,
    p_tool,
)

LOCAL = ModelEndpoint(name="local/qwen2.5-1.5b", model="openai/qwen2.5-1.5b",
                      api_base="http://127.0.0.1:1/v1", kind="local")  # fmt: skip
HOSTED = ModelEndpoint(model="openai/gpt-4o-mini", kind="provider")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}  # fmt: skip
USER = [{"role": "user", "content": "What is the capital of France?"}]


def _logprobs(top: dict[str, float]) -> ChatCompletion:
    """A one-token completion whose first token has ``top`` (token -> probability)."""
    entries = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in top.items()]
    first = max(top, key=lambda t: top[t])
    return ChatCompletion.model_validate({
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "length",
                     "message": {"role": "assistant", "content": first},
                     "logprobs": {"content": [{"token": first, "logprob": math.log(top[first]),
                                               "top_logprobs": entries}]}}],
    })  # fmt: skip


def _is_decision(call: UpstreamCall) -> bool:
    return call.params.get("max_tokens") == 1 and bool(call.params.get("logprobs"))


def _model(top: dict[str, float], reply: str) -> ScriptedChatModel:
    return ScriptedChatModel(lambda call: _logprobs(top) if _is_decision(call) else reply)


def _schema_names(call: UpstreamCall) -> list[str]:
    schema = call.params["response_format"]["json_schema"]["schema"]
    return [o["properties"]["name"]["const"] for o in schema.get("anyOf", [schema])]


def test_p_tool_sums_the_spellings_of_yes_and_no() -> None:
    got = p_tool(_logprobs({"yes": 0.3, " Yes": 0.1, "no": 0.4, "No": 0.1, "maybe": 0.1}))
    assert got is not None and math.isclose(got, 0.4 / 0.9)
    assert p_tool(_logprobs({"maybe": 0.9, "perhaps": 0.1})) is None  # neither answer
    assert p_tool(ChatCompletion.of_text("yes", id="c", model="m", created=0)) is None


async def test_a_no_answer_constrains_the_reply_to_text() -> None:
    inner = _model({"no": 0.8, "yes": 0.2}, '{"name": "none", "content": "Paris."}')
    model = LocalToolsChatModel(inner, decide=True)
    reply = await model.complete(UpstreamCall(LOCAL, list(USER), {"tools": [WEATHER]}))
    assert reply.choices[0].message.content == "Paris." and not reply.choices[0].message.tool_calls
    asked, sent = inner.calls
    assert _is_decision(asked) and "tools" not in asked.params
    assert _schema_names(sent) == ["none"]


async def test_a_yes_answer_constrains_the_reply_to_a_call_streamed_too() -> None:
    inner = _model(
        {"yes": 0.9, "no": 0.1}, '{"name": "get_weather", "arguments": {"city": "Oslo"}}'
    )
    model = LocalToolsChatModel(inner, decide=True)
    call = UpstreamCall(LOCAL, [{"role": "user", "content": "Weather in Oslo?"}],
                        {"tools": [WEATHER], "stream": True})  # fmt: skip
    chunks = [c async for c in model.stream(call)]
    delta = chunks[0].choices[0].delta
    assert delta.tool_calls and delta.tool_calls[0].function is not None
    assert json.loads(delta.tool_calls[0].function.arguments or "") == {"city": "Oslo"}
    assert _schema_names(inner.calls[1]) == ["get_weather"]


async def test_the_threshold_is_the_even_split() -> None:
    assert THRESHOLD == 0.5
    inner = _model({"yes": 0.5, "no": 0.5}, '{"name": "none", "content": "Paris."}')
    await LocalToolsChatModel(inner, decide=True).complete(
        UpstreamCall(LOCAL, list(USER), {"tools": [WEATHER]})
    )
    assert _schema_names(inner.calls[1]) == ["none"]  # P(tool) = 0.5 is not > 0.5


async def test_no_decision_without_log_probs_when_a_call_is_forced_or_for_hosted_models() -> None:
    # Log-probs missing: undecided, the reply may be either (as without the decision).
    inner = ScriptedChatModel(["no", '{"name": "none", "content": "Paris."}'])
    await LocalToolsChatModel(inner, decide=True).complete(
        UpstreamCall(LOCAL, list(USER), {"tools": [WEATHER]})
    )
    assert _schema_names(inner.calls[1]) == ["get_weather", "none"]
    # tool_choice required / named: nothing to decide.
    inner = _model({"no": 1.0}, '{"name": "get_weather", "arguments": {"city": "Paris"}}')
    forced = {"tools": [WEATHER], "tool_choice": "required"}
    await LocalToolsChatModel(inner, decide=True).complete(UpstreamCall(LOCAL, list(USER), forced))
    assert len(inner.calls) == 1 and not _is_decision(inner.calls[0])
    # Hosted models get the request as the client sent it, with no decision.
    inner = _model({"no": 1.0}, "Paris.")
    params: dict[str, Any] = {"tools": [WEATHER]}
    await LocalToolsChatModel(inner, decide=True).complete(UpstreamCall(HOSTED, list(USER), params))
    assert len(inner.calls) == 1 and inner.calls[0].params == params


def test_the_proxy_decides_and_the_plain_wrapper_does_not() -> None:
    inner = ScriptedChatModel()
    assert with_local_tools(inner).decide and not LocalToolsChatModel(inner).decide


def test_the_question_shows_the_tools_and_the_conversation_after_a_fixed_prefix() -> None:
    history = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Rome, then remind me."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"forecast": "rain"}'},
    ]  # fmt: skip
    call = UpstreamCall(LOCAL, history, {"tools": [WEATHER]})
    one = decision_call(call, tool_specs([WEATHER])).wire_messages()
    other = decision_call(UpstreamCall(LOCAL, list(USER)), tool_specs([WEATHER])).wire_messages()
    assert one[:-1] == other[:-1] and EXAMPLE_TOOLS in one[1]["content"]
    last = one[-1]["content"]
    assert "- get_weather: Weather for a city" in last
    assert "The assistant's instructions: Be brief.\nConversation:" in last
    assert conversation_text(call.messages) == (
        "User: Weather in Rome, then remind me.\n"
        'Assistant called get_weather({"city": "Rome"})\n'
        'Result: {"forecast": "rain"}'
    )
