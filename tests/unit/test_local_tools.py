"""Structured tool calls for local endpoints (upstream.local_tools), against a scripted model."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dmt_proxy.errors import InvalidRequest
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall, as_message
from dmt_proxy.upstream.local_tools import LocalToolsChatModel, parse_reply, plain_history, prepare

LOCAL = ModelEndpoint(name="local/qwen2.5-1.5b", model="openai/qwen2.5-1.5b",
                      api_base="http://127.0.0.1:1/v1", kind="local")  # fmt: skip
HOSTED = ModelEndpoint(model="openai/gpt-4o-mini", kind="provider")
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}  # fmt: skip
USER = [{"role": "user", "content": "Weather in Paris?"}]


def _call(params: dict[str, Any], endpoint: ModelEndpoint = LOCAL) -> UpstreamCall:
    return UpstreamCall(endpoint, list(USER), params)


async def test_a_valid_call_becomes_tool_calls_and_the_request_is_constrained() -> None:
    inner = ScriptedChatModel(['{"name": "get_weather", "arguments": {"city": "Paris"}}'])
    reply = await LocalToolsChatModel(inner).complete(_call({"tools": [WEATHER]}))
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]  # type: ignore[index]
    assert call.type == "function" and call.id and call.function is not None
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments or "") == {"city": "Paris"}
    sent = inner.calls[0]
    assert "tools" not in sent.params and "tool_choice" not in sent.params
    schema = sent.params["response_format"]["json_schema"]["schema"]
    assert [o["properties"]["name"]["const"] for o in schema["anyOf"]] == ["get_weather", "none"]
    assert (
        sent.wire_messages()[0]["role"] == "system"
        and "get_weather" in sent.wire_messages()[0]["content"]
    )


async def test_no_tool_answers_in_text_and_invalid_output_is_never_a_tool_call() -> None:
    inner = ScriptedChatModel([
        '{"name": "none", "content": "Hello!"}',
        '{"name": "get_weather", "arguments": {"town": "Paris"}}',  # fails the schema
        '{"name": "get_weather", "argu',  # truncated
        '{"name": "launch", "arguments": {}}',  # not a tool of the request
    ])  # fmt: skip
    model = LocalToolsChatModel(inner)
    first = await model.complete(_call({"tools": [WEATHER]}))
    assert first.choices[0].message.content == "Hello!" and not first.choices[0].message.tool_calls
    for _ in range(3):
        reply = await model.complete(_call({"tools": [WEATHER]}))
        assert not reply.choices[0].message.tool_calls
        assert reply.choices[0].finish_reason != "tool_calls"


async def test_streams_carry_one_tool_call_delta_then_the_finish_reason() -> None:
    inner = ScriptedChatModel(['{"name": "get_weather", "arguments": {"city": "Oslo"}}'])
    params = {"tools": [WEATHER], "stream_options": {"include_usage": True}}
    chunks = [c async for c in LocalToolsChatModel(inner).stream(_call(params))]
    delta = chunks[0].choices[0].delta
    assert delta.role == "assistant" and delta.tool_calls and delta.tool_calls[0].index == 0
    assert delta.tool_calls[0].function and delta.tool_calls[0].function.name == "get_weather"
    assert chunks[1].choices[0].finish_reason == "tool_calls"
    assert chunks[2].choices == [] and chunks[2].usage is not None
    assert "stream_options" not in inner.calls[0].params  # answered from one completion


async def test_calls_without_tools_or_to_hosted_models_pass_through_unchanged() -> None:
    inner = ScriptedChatModel(["plain answer"])
    model = LocalToolsChatModel(inner)
    plain = await model.complete(_call({"response_format": {"type": "json_object"}}))
    assert plain.text() == "plain answer"
    assert inner.calls[-1].params == {"response_format": {"type": "json_object"}}
    hosted = _call({"tools": [WEATHER]}, HOSTED)
    await model.complete(hosted)
    assert inner.calls[-1] is hosted
    text = "".join([c.text() async for c in model.stream(_call({"grammar": "root ::= [0-9]"}))])
    assert text == "plain answer" and inner.calls[-1].params == {"grammar": "root ::= [0-9]"}


def test_tool_choice_narrows_the_schema() -> None:
    required = prepare(_call({"tools": [WEATHER], "tool_choice": "required"}))
    assert required is not None
    assert required.call.params["response_format"]["json_schema"]["schema"]["properties"][
        "name"] == {"const": "get_weather"}  # fmt: skip
    named = {"type": "function", "function": {"name": "get_weather"}}
    assert prepare(_call({"tools": [WEATHER], "tool_choice": named})) is not None
    none = prepare(_call({"tools": [WEATHER], "tool_choice": "none"}))
    assert none is not None and "response_format" not in none.call.params and not none.specs
    with pytest.raises(InvalidRequest, match="'other'"):
        prepare(_call({"tools": [WEATHER], "tool_choice": {"function": {"name": "other"}}}))


@pytest.mark.parametrize(
    ("parameters", "fragment"),
    [
        ({"type": "object", "patternProperties": {"^x": {}}}, "'patternProperties'"),
        ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}}, "'not'"),
        ({"type": "object", "properties": {"e": {"type": "string", "format": "email"}}},
         "format 'email'"),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}}}, "'$ref'"),
    ],
)  # fmt: skip
def test_a_schema_the_grammar_cannot_express_is_a_400_naming_the_tool(
    parameters: dict[str, Any], fragment: str
) -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": parameters}}
    with pytest.raises(InvalidRequest, match="tool 'lookup'") as info:
        prepare(_call({"tools": [tool]}))
    assert fragment in info.value.message


def test_tools_cannot_be_combined_with_another_output_constraint() -> None:
    for clash in ({"response_format": {"type": "json_object"}}, {"grammar": "root ::= x"}):
        with pytest.raises(InvalidRequest, match="cannot be combined with tools"):
            prepare(_call({"tools": [WEATHER], **clash}))


def test_history_tool_turns_become_plain_turns_in_the_reply_format() -> None:
    history = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"},
    ]  # fmt: skip
    typed = plain_history([as_message(m) for m in history])
    plain = [m.model_dump(exclude_unset=True) for m in typed]  # as the client sends them
    assert json.loads(plain[1]["content"]) == {"name": "get_weather",
                                               "arguments": {"city": "Paris"}}  # fmt: skip
    assert plain[2] == {"role": "user", "content": "Result of get_weather: 18 C, sunny"}


def test_parse_reply_accepts_only_known_tools_with_valid_arguments() -> None:
    prepared = prepare(_call({"tools": [WEATHER]}))
    assert prepared is not None
    ok = parse_reply('{"name": "get_weather", "arguments": {"city": "Rome"}}', prepared.specs)
    assert ok.name == "get_weather" and ok.arguments == {"city": "Rome"}
    assert parse_reply("[1, 2]", prepared.specs).name is None
