"""Messages <-> chat: an Anthropic request becomes the chat request the pipeline runs,
and the pipeline's chat answer becomes an Anthropic Message.

``system`` is the first system message. A message's blocks map onto chat
messages in order: an assistant's text and ``tool_use`` blocks become one
assistant message with ``tool_calls`` (``input`` as JSON ``arguments``); a
user's ``tool_result`` blocks become ``tool`` messages and its text blocks a
user message. So an Anthropic agent's tool loop (user, assistant tool_use, user
tool_result) reaches the pipeline as the chat loop (user, assistant tool_calls,
tool): one user turn for memory, written once, from the final answer.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from dmt_proxy.errors import InvalidRequest, UpstreamError
from dmt_proxy.messages.protocol import (
    ContentBlock,
    MessageObject,
    MessagesRequest,
    MessageUsage,
    StopReason,
    TextBlock,
    ToolUseBlock,
)
from dmt_proxy.openai_types import (
    ChatCompletion,
    ChatCompletionRequest,
    Usage,
    translated_chat_request,
)

UNSUPPORTED_BLOCKS: dict[str, str] = {
    "image": "dmt-proxy passes text only",
    "document": "dmt-proxy passes text only",
    "search_result": "dmt-proxy passes text only",
    "container_upload": "containers are not supported by dmt-proxy",
    "thinking": "extended thinking is not supported by dmt-proxy's chat upstreams",
    "redacted_thinking": "extended thinking is not supported by dmt-proxy's chat upstreams",
}
"""Content block types refused wherever they appear, and why (others: server tools)."""

_BLOCK_KEYS: dict[str, set[str]] = {
    "text": {"type", "text", "cache_control", "citations"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
}
_TOOL_KEYS = {"type", "name", "description", "input_schema", "cache_control", "strict"}
_ROLE_BLOCKS = {"user": ("text", "tool_result"), "assistant": ("text", "tool_use")}
TOOL_ERROR_PREFIX = "Error: "
"""Put before a ``tool_result`` marked ``is_error`` (chat's tool messages have no flag)."""


def new_id(prefix: str) -> str:
    """An Anthropic-style object id (``msg_...``, ``toolu_...``)."""
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _block_type(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _bad(f"Invalid '{where}': expected a content block object with a 'type'.", where)
    kind: str = block["type"]
    why = UNSUPPORTED_BLOCKS.get(kind)
    if why is None and kind not in _BLOCK_KEYS:
        why = "server tools and their results are not supported by dmt-proxy"
    if why is not None:
        raise InvalidRequest(f"Unsupported content block '{kind}' at {where}: {why}.",
                             param=f"{where}.type", code="unsupported_content")  # fmt: skip
    extra = sorted(set(block) - _BLOCK_KEYS[kind])
    if extra:
        raise InvalidRequest(f"Unsupported parameter '{where}.{extra[0]}'.",
                             param=f"{where}.{extra[0]}", code="unsupported_parameter")  # fmt: skip
    if block.get("citations"):
        raise InvalidRequest(f"Unsupported parameter '{where}.citations': citations are not "
                             "supported by dmt-proxy.", param=f"{where}.citations",
                             code="unsupported_parameter")  # fmt: skip
    return kind


def _string(block: dict[str, Any], key: str, where: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise _bad(f"Invalid '{where}.{key}': expected a string.", f"{where}.{key}")
    return value


def text_of(content: Any, where: str) -> str:
    """The text of ``system`` or a ``tool_result``'s content: a string or text blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"Invalid '{where}': expected a string or a list of text blocks.", where)
    texts = []
    for j, block in enumerate(content):
        if _block_type(block, f"{where}[{j}]") != "text":
            raise _bad(f"Invalid '{where}[{j}]': only text blocks are allowed here.",
                       f"{where}[{j}].type")  # fmt: skip
        texts.append(_string(block, "text", f"{where}[{j}]"))
    return "\n".join(texts)


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    arguments = block.get("input")
    if not isinstance(arguments, dict):
        raise _bad(f"Invalid '{where}.input': expected an object.", f"{where}.input")
    return {"id": _string(block, "id", where), "type": "function",
            "function": {"name": _string(block, "name", where),
                         "arguments": json.dumps(arguments, ensure_ascii=False)}}  # fmt: skip


def _tool_message(block: dict[str, Any], where: str) -> dict[str, Any]:
    content = block.get("content", "")
    text = text_of(content, f"{where}.content")
    if block.get("is_error"):
        text = TOOL_ERROR_PREFIX + text
    return {"role": "tool", "tool_call_id": _string(block, "tool_use_id", where),
            "content": text}  # fmt: skip


def _messages_of(message: Any, where: str) -> list[dict[str, Any]]:
    """The chat messages of one Anthropic message."""
    if not isinstance(message, dict):
        raise _bad(f"Invalid '{where}': expected an object with 'role' and 'content'.", where)
    extra = sorted(set(message) - {"role", "content"})
    if extra:
        raise InvalidRequest(f"Unsupported parameter '{where}.{extra[0]}'.",
                             param=f"{where}.{extra[0]}", code="unsupported_parameter")  # fmt: skip
    role = message.get("role")
    if role not in _ROLE_BLOCKS:
        raise _bad(f"Invalid '{where}.role': expected 'user' or 'assistant'.", f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad(f"Invalid '{where}.content': expected a string or a list of content blocks.",
                   f"{where}.content")  # fmt: skip
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content):
        at = f"{where}.content[{j}]"
        kind = _block_type(block, at)
        if kind not in _ROLE_BLOCKS[role]:
            raise _bad(f"Invalid '{at}': a {role} message cannot carry '{kind}' blocks.",
                       f"{at}.type")  # fmt: skip
        if kind == "text":
            texts.append(_string(block, "text", at))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        else:  # tool_result: the tool messages answer the previous assistant's calls first
            if texts:
                out.append({"role": "user", "content": "\n".join(texts)})
                texts = []
            out.append(_tool_message(block, at))
    if role == "assistant":
        reply: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
        if calls:
            reply["tool_calls"] = calls
        return [reply]
    if texts or not out:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def chat_messages(req: MessagesRequest) -> list[dict[str, Any]]:
    """The chat messages of ``system`` and ``messages``; a 400 naming a bad one."""
    messages: list[dict[str, Any]] = []
    if req.system:
        messages.append({"role": "system", "content": text_of(req.system, "system")})
    for i, message in enumerate(req.messages):
        messages.extend(_messages_of(message, f"messages[{i}]"))
    return messages


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Custom tools in chat's shape; server tools (web search, bash...) are refused."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise InvalidRequest(f"Unsupported tool type '{kind}' at tools[{i}]: server tools "
                                 "are not supported by dmt-proxy; declare a custom tool (your "
                                 "agent runs it).", param=f"tools[{i}].type",
                                 code="unsupported_tool")  # fmt: skip
        extra = sorted(set(tool) - _TOOL_KEYS)
        if extra:
            raise InvalidRequest(f"Unsupported parameter 'tools[{i}].{extra[0]}'.",
                                 param=f"tools[{i}].{extra[0]}", code="unsupported_parameter")  # fmt: skip
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _bad(f"Invalid 'tools[{i}].name': expected a non-empty string.",
                       f"tools[{i}].name")  # fmt: skip
        if not isinstance(tool.get("input_schema"), dict):
            raise _bad(f"Invalid 'tools[{i}].input_schema': expected a JSON schema object.",
                       f"tools[{i}].input_schema")  # fmt: skip
        function: dict[str, Any] = {"name": tool["name"], "parameters": tool["input_schema"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        if tool.get("strict") is not None:
            function["strict"] = tool["strict"]
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool]:
    """``tool_choice`` in chat's shape, and whether parallel tool use is disabled."""
    if choice is None:
        return None, False
    kind = choice.get("type")
    allowed = {"auto": {"type", "disable_parallel_tool_use"}, "any": {"type", "disable_parallel_tool_use"},
               "tool": {"type", "name", "disable_parallel_tool_use"}, "none": {"type"}}  # fmt: skip
    if kind not in allowed or set(choice) - allowed[kind]:
        raise _bad("Unsupported 'tool_choice': use {\"type\": \"auto\"}, \"any\", \"none\" or "
                   '{"type": "tool", "name": ...}.', "tool_choice")  # fmt: skip
    serial = bool(choice.get("disable_parallel_tool_use"))
    if kind == "tool":
        if not isinstance(choice.get("name"), str) or not choice["name"]:
            raise _bad("Invalid 'tool_choice.name': expected a tool name.", "tool_choice.name")
        return {"type": "function", "function": {"name": choice["name"]}}, serial
    return {"auto": "auto", "any": "required", "none": "none"}[kind], serial


def to_chat_request(req: MessagesRequest) -> ChatCompletionRequest:
    """The chat request the pipeline runs for ``req``."""
    tools = chat_tools(req.tools)
    choice, serial = chat_tool_choice(req.tool_choice)
    body: dict[str, Any] = {
        "model": req.model, "messages": chat_messages(req), "stream": req.stream,
        "user": req.scope_user(), "max_tokens": req.max_tokens,
        "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k,
        "stop": req.stop_sequences or None, "tools": tools,
        "tool_choice": choice if tools else None,
        "parallel_tool_calls": False if tools and serial else None,
        # Usage arrives in the last chunk only when asked for; message_delta carries it.
        "stream_options": {"include_usage": True} if req.stream else None,
    }  # fmt: skip
    return translated_chat_request(body, "messages")


def stop_reason(finish: str | None, matched: str | None) -> StopReason:
    """Chat's ``finish_reason`` as Anthropic's ``stop_reason``."""
    if finish == "length":
        return "max_tokens"
    if finish in ("tool_calls", "function_call"):
        return "tool_use"
    if finish == "content_filter":
        return "refusal"
    return "stop_sequence" if matched is not None else "end_turn"


def matched_stop(extra: dict[str, Any] | None, stops: list[str] | None) -> str | None:
    """The stop sequence that ended the answer, when the upstream says (vLLM's
    ``stop_reason``); chat completions otherwise does not tell it from the end of turn."""
    value = (extra or {}).get("stop_reason")
    return value if isinstance(value, str) and value in (stops or []) else None


def usage_of(usage: Usage | None) -> MessageUsage:
    """Chat usage in Anthropic's terms (0 where the upstream did not count)."""
    if usage is None:
        return MessageUsage()
    return MessageUsage(input_tokens=usage.prompt_tokens or 0,
                        output_tokens=usage.completion_tokens or 0)  # fmt: skip


def tool_input(arguments: str | None, name: str) -> dict[str, Any]:
    """A tool call's JSON ``arguments`` as ``tool_use.input`` (an object)."""
    if not arguments or not arguments.strip():
        return {}
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamError(f"The upstream called tool '{name}' with arguments that are not a "
                            f"JSON object: {arguments[:200]!r}", upstream="chat")  # fmt: skip
    return value


def message_of(req: MessagesRequest, completion: ChatCompletion, *, message_id: str,
               model: str) -> MessageObject:  # fmt: skip
    """The Message of a finished chat completion."""
    choice = completion.choices[0] if completion.choices else None
    calls = (choice.message.tool_calls or []) if choice is not None else []
    text = completion.text()
    content: list[ContentBlock] = []
    if text or not calls:
        content.append(TextBlock(text=text))
    for call in calls:
        function = call.function
        name = (function.name if function else None) or ""
        content.append(ToolUseBlock(id=call.id or new_id("toolu"), name=name,
                                    input=tool_input(function.arguments if function else None,
                                                     name)))  # fmt: skip
    finish = choice.finish_reason if choice is not None else None
    if calls and finish not in ("length",):
        finish = "tool_calls"  # some upstreams end a tool-call reply with "stop"
    matched = matched_stop(choice.model_extra if choice is not None else None,
                           req.stop_sequences)  # fmt: skip
    reason = stop_reason(finish, matched)
    return MessageObject(id=message_id, model=model, content=content, stop_reason=reason,
                         stop_sequence=matched if reason == "stop_sequence" else None,
                         usage=usage_of(completion.usage))  # fmt: skip


def message_shell(*, message_id: str, model: str) -> MessageObject:
    """The Message ``message_start`` carries: no content, no stop reason yet."""
    return MessageObject(id=message_id, model=model)
