"""Structured tool calls from the embedded models: the proxy constrains and parses them.

The embedded Qwen2.5-Coder GGUFs, served by llama-server with ``--jinja``, get the
tools through Qwen's chat template (Hermes-style ``<tool_call>`` syntax), but answer
with the call as JSON text in ``content`` (often in a Markdown fence), so
llama-server's parser finds no ``<tool_call>`` and returns no ``tool_calls``. Its
grammar-constrained path cannot be combined with ``tools`` either.

So for a local endpoint and a request with ``tools`` (``tool_choice`` not ``none``),
the proxy does the work: the tools are described in a system message, the history's
tool calls and results are rewritten as plain turns in the same format, and the
output is constrained with a JSON schema (llama-server turns ``response_format``
``json_schema`` into a grammar) to one object, either
``{"name": <a tool>, "arguments": <that tool's parameters>}`` or
``{"name": "none", "content": <text for the user>}``. The reply is parsed, the
arguments validated against the tool's schema once more, and returned as an OpenAI
``tool_calls`` message (finish reason ``tool_calls``) or as text. Streams are
answered from one buffered completion: a tool call is only known once it is whole.

With ``tool_choice`` ``auto`` the model may do either, and the small models call a
tool for plain questions; so the proxy's factory turns on a tool-or-text decision
read from the model's log-probs before the reply (``upstream.tool_decision``), and
the reply is constrained to a call or to text accordingly.

A tool whose parameter schema uses a keyword the grammar cannot enforce gets a 400
naming the tool and the keyword; output that does not parse or validate is returned
as text, never as a tool call. One call per turn (``parallel_tool_calls`` is moot).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from dmt_proxy.errors import InvalidRequest
from dmt_proxy.openai_types import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatMessage,
    ChunkChoice,
    CompletionMessage,
    Delta,
    FunctionCall,
    ToolCall,
)
from dmt_proxy.upstream.base import ChatModel, OwnedChatModel, UpstreamCall
from dmt_proxy.upstream.tool_decision import decide

NO_TOOL = "none"
"""The ``name`` of the answer that calls no tool."""

# Keywords llama.cpp's json-schema-to-grammar enforces (the rest would be silently ignored).
_ENFORCED = frozenset({
    "type", "properties", "required", "additionalProperties", "items", "enum", "const",
    "anyOf", "oneOf", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "format", "prefixItems",
})  # fmt: skip
# Annotations: no effect on valid output, so nothing to enforce.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$schema", "$comment"})
_FORMATS = frozenset({"date", "time", "date-time", "uuid"})
_TOOL_PARAMS = ("tools", "tool_choice", "parallel_tool_calls")


@dataclass(frozen=True)
class ToolSpec:
    """One function tool of a request."""

    name: str
    description: str
    parameters: dict[str, Any]


def _unsupported(schema: object, where: str) -> str | None:
    """The first keyword at or under ``schema`` that the grammar cannot enforce."""
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, dict):
        return f"{where} (not a schema object)"
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key not in _ENFORCED:
            return f"'{key}' at {where}"
        if key == "format" and value not in _FORMATS:
            return f"format '{value}' at {where}"
        if key == "properties":
            for prop, sub in value.items():
                found = _unsupported(sub, f"{where}.{prop}")
                if found:
                    return found
        elif key in ("items", "additionalProperties") and not isinstance(value, bool):
            found = _unsupported(value, f"{where}.{key}")
            if found:
                return found
        elif key in ("anyOf", "oneOf", "prefixItems"):
            for i, sub in enumerate(value):
                found = _unsupported(sub, f"{where}.{key}[{i}]")
                if found:
                    return found
    return None


def tool_specs(tools: list[dict[str, Any]]) -> list[ToolSpec]:
    """The request's function tools; InvalidRequest (400) naming a tool that cannot be served."""
    specs: list[ToolSpec] = []
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise InvalidRequest(f"tools[{i}]: only function tools are supported", param="tools")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest(f"tools[{i}]: function.name is required", param="tools")
        if name == NO_TOOL:
            raise InvalidRequest(
                f"tool '{name}': the name is reserved on local models (it means 'no tool')",
                param="tools",
            )
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        problem = _unsupported(params, "parameters")
        if problem is None:
            try:
                Draft202012Validator.check_schema(params)
            except SchemaError as exc:
                problem = f"an invalid schema ({exc.message})"
        if problem is not None:
            raise InvalidRequest(
                f"tool '{name}': its parameters use {problem}, which local models cannot be "
                "constrained to; simplify the schema or use a hosted model",
                param="tools",
            )
        specs.append(ToolSpec(name, str(fn.get("description") or ""), params))
    if len({s.name for s in specs}) != len(specs):
        raise InvalidRequest("tools: two tools share a name", param="tools")
    return specs


def allowed(specs: list[ToolSpec], tool_choice: object) -> tuple[list[ToolSpec], bool]:
    """The tools the model may call and whether it may answer without one."""
    if tool_choice in (None, "auto"):
        return specs, True
    if tool_choice == "required":
        return specs, False
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        chosen = [s for s in specs if s.name == name]
        if not chosen:
            raise InvalidRequest(f"tool_choice names '{name}', which is not in tools",
                                 param="tool_choice")  # fmt: skip
        return chosen, False
    raise InvalidRequest(f"tool_choice {tool_choice!r} is not supported", param="tool_choice")


def output_schema(specs: list[ToolSpec], may_answer: bool) -> dict[str, Any]:
    """The JSON schema of one reply: a call of one of ``specs``, or (``may_answer``) text."""
    options: list[dict[str, Any]] = [
        {"type": "object", "properties": {"name": {"const": s.name}, "arguments": s.parameters},
         "required": ["name", "arguments"], "additionalProperties": False}
        for s in specs
    ]  # fmt: skip
    if may_answer:
        options.append(
            {"type": "object", "properties": {"name": {"const": NO_TOOL},
             "content": {"type": "string", "minLength": 1}}, "required": ["name", "content"],
             "additionalProperties": False}
        )  # fmt: skip
    return options[0] if len(options) == 1 else {"anyOf": options}


def tools_prompt(specs: list[ToolSpec], may_answer: bool) -> str:
    """The system message that describes the tools and the reply format."""
    lines = ["You can call these tools:"]
    for s in specs:
        lines.append(f"- {s.name}: {s.description}".rstrip(": "))
        lines.append(f"  arguments (JSON schema): {json.dumps(s.parameters)}")
    lines.append(
        "Reply with exactly one JSON object. To call a tool: "
        '{"name": "<tool name>", "arguments": {...}}.'
    )
    if may_answer:
        lines.append(
            "When no tool is needed, or the tool results already answer the request, reply "
            'to the user with {"name": "none", "content": "<your answer>"}.'
        )
    return "\n".join(lines)


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def plain_history(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Tool calls and results rewritten as ordinary turns in the reply format."""
    names: dict[str, str] = {}
    out: list[ChatMessage] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            calls = []
            for call in m.tool_calls:
                fn = call.get("function") or {}
                names[str(call.get("id"))] = str(fn.get("name"))
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = fn.get("arguments")
                calls.append(json.dumps({"name": fn.get("name"), "arguments": args}))
            out.append(ChatMessage(role="assistant", content="\n".join(calls)))
        elif m.role in ("tool", "function"):
            name = names.get(str(m.tool_call_id), m.name or "the tool")
            out.append(ChatMessage(role="user", content=f"Result of {name}: {_text(m.content)}"))
        else:
            out.append(m)
    return out


@dataclass(frozen=True)
class Prepared:
    """A rewritten call and what its reply is checked against."""

    call: UpstreamCall
    specs: list[ToolSpec]
    may_answer: bool = True

    def narrowed(self, use_tool: bool) -> Prepared:
        """The same call with its reply constrained to a tool call, or to text."""
        specs = self.specs if use_tool else []
        schema = output_schema(specs, may_answer=not use_tool)
        params = {**self.call.params, "response_format": {
            "type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}}  # fmt: skip
        # The prompt is left as it is: the same prefix keeps llama-server's prompt cache.
        call = UpstreamCall(self.call.endpoint, self.call.messages, params, self.call.label)
        return Prepared(call, self.specs, may_answer=not use_tool)


def prepare(call: UpstreamCall) -> Prepared | None:
    """The constrained call for a local endpoint asked for tools; None when it does not apply."""
    params = call.params
    if call.endpoint.kind != "local" or not params.get("tools"):
        return None
    rest = {k: v for k, v in params.items() if k not in _TOOL_PARAMS}
    if params.get("tool_choice") == "none":
        # No call may be made: plain chat, with the history's calls in the same plain form.
        return Prepared(UpstreamCall(call.endpoint, plain_history(call.messages), rest,
                                     call.label), [])  # fmt: skip
    for clash in ("response_format", "grammar", "json_schema"):
        if clash in rest or clash in (rest.get("extra_body") or {}):
            raise InvalidRequest(f"{clash} cannot be combined with tools on local models",
                                 param=clash)  # fmt: skip
    specs = tool_specs(list(params["tools"]))
    callable_specs, may_answer = allowed(specs, params.get("tool_choice"))
    schema = output_schema(callable_specs, may_answer)
    rest["response_format"] = {"type": "json_schema",
                               "json_schema": {"name": "reply", "schema": schema}}  # fmt: skip
    messages = [ChatMessage(role="system", content=tools_prompt(callable_specs, may_answer)),
                *plain_history(call.messages)]  # fmt: skip
    return Prepared(UpstreamCall(call.endpoint, messages, rest, call.label), callable_specs,
                    may_answer)  # fmt: skip


@dataclass(frozen=True)
class Parsed:
    """The model's reply: a validated call, or text."""

    name: str | None
    arguments: dict[str, Any] | None
    content: str


def parse_reply(text: str, specs: list[ToolSpec]) -> Parsed:
    """A tool call only when ``text`` is a call of a known tool whose arguments validate."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return Parsed(None, None, text)
    if not isinstance(obj, dict):
        return Parsed(None, None, text)
    name = obj.get("name")
    if name == NO_TOOL and isinstance(obj.get("content"), str):
        return Parsed(None, None, obj["content"])
    spec = next((s for s in specs if s.name == name), None)
    args = obj.get("arguments")
    if spec is None or not isinstance(args, dict):
        return Parsed(None, None, text)
    if not Draft202012Validator(spec.parameters).is_valid(args):
        return Parsed(None, None, text)
    return Parsed(spec.name, args, "")


def _tool_call(parsed: Parsed, *, index: int | None = None) -> ToolCall:
    fn = FunctionCall(name=parsed.name, arguments=json.dumps(parsed.arguments))
    call = ToolCall(id=f"call_{uuid.uuid4().hex[:24]}", type="function", function=fn)
    if index is not None:
        call.index = index
    return call


def to_tool_reply(completion: ChatCompletion, specs: list[ToolSpec]) -> ChatCompletion:
    """``completion`` with its JSON reply turned into a tool call or plain text."""
    if not completion.choices or not specs:
        return completion
    choice = completion.choices[0]
    parsed = parse_reply(_text(choice.message.content), specs)
    if parsed.name is not None:
        choice.message = CompletionMessage(role="assistant", content=None,
                                           tool_calls=[_tool_call(parsed)])  # fmt: skip
        choice.finish_reason = "tool_calls"
    else:
        choice.message = CompletionMessage(role="assistant", content=parsed.content)
    return completion


def as_chunks(completion: ChatCompletion, *, usage: bool) -> list[ChatCompletionChunk]:
    """A finished completion as stream chunks (tool-call deltas, or one text delta)."""
    base: dict[str, Any] = {"id": completion.id, "created": completion.created,
                            "model": completion.model}  # fmt: skip
    if not completion.choices:
        return []
    choice = completion.choices[0]
    msg = choice.message
    if msg.tool_calls:
        calls = [c.model_copy(update={"index": i}) for i, c in enumerate(msg.tool_calls)]
        delta = Delta(role="assistant", tool_calls=calls)
    else:
        delta = Delta(role="assistant", content=_text(msg.content))
    chunks = [
        ChatCompletionChunk(**base, choices=[ChunkChoice(index=0, delta=delta)]),
        ChatCompletionChunk(**base, choices=[
            ChunkChoice(index=0, delta=Delta(), finish_reason=choice.finish_reason or "stop")]),
    ]  # fmt: skip
    if usage and completion.usage is not None:
        chunks.append(ChatCompletionChunk(**base, choices=[], usage=completion.usage))
    return chunks


def _wants_usage(params: Mapping[str, Any]) -> bool:
    opts = params.get("stream_options")
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


class LocalToolsChatModel:
    """Wraps a chat model: calls with tools to local endpoints get structured tool calls.

    ``decide``: before a reply that may be a call or text (``tool_choice`` ``auto``),
    ask the model which (``upstream.tool_decision``; one short extra request).
    """

    def __init__(self, inner: ChatModel, *, decide: bool = False) -> None:
        self.inner = inner
        self.decide = decide

    async def _prepare(self, call: UpstreamCall) -> Prepared | None:
        prepared = prepare(call)
        if prepared is None or not self.decide or not prepared.may_answer or not prepared.specs:
            return prepared
        decision = await decide(self.inner, call, prepared.specs)
        if decision.use_tool is None:
            return prepared  # no log-probs to read: the reply may be either, as without it
        return prepared.narrowed(decision.use_tool)

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """The inner completion; with tools on a local endpoint, constrained and parsed."""
        prepared = await self._prepare(call)
        if prepared is None:
            return await self.inner.complete(call)
        return to_tool_reply(await self.inner.complete(prepared.call), prepared.specs)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """The inner stream; with tools on a local endpoint, one buffered, parsed reply."""
        prepared = await self._prepare(call)
        if prepared is None:
            async for chunk in self.inner.stream(call):
                yield chunk
            return
        params = {k: v for k, v in prepared.call.params.items() if k != "stream_options"}
        buffered = UpstreamCall(prepared.call.endpoint, prepared.call.messages, params,
                                prepared.call.label)  # fmt: skip
        reply = to_tool_reply(await self.inner.complete(buffered), prepared.specs)
        for chunk in as_chunks(reply, usage=_wants_usage(call.params)):
            yield chunk

    async def aclose(self) -> None:
        """Close the inner model when it owns connections."""
        close = getattr(self.inner, "aclose", None)
        if close is not None:
            await close()


def with_local_tools(inner: OwnedChatModel) -> LocalToolsChatModel:
    """``inner`` behind the local tool-call layer, deciding tool or text (the proxy's factory)."""
    return LocalToolsChatModel(inner, decide=True)
