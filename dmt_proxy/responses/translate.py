"""Responses <-> chat: a Responses request becomes the chat request the pipeline runs,
and the pipeline's chat answer becomes a Response object.

``input`` items map onto chat messages one to one: ``instructions`` is the first
system message; a message item keeps its role (``developer`` becomes ``system``,
which every local chat template knows); ``function_call`` items become the
``tool_calls`` of an assistant message (joined to the assistant text just before
them, as chat clients send it); ``function_call_output`` becomes a ``tool``
message. So an agent's tool loop looks the same to the pipeline on either route,
and is one user turn for memory.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from dmt_proxy.errors import InvalidRequest
from dmt_proxy.openai_types import (
    ChatCompletion,
    ChatCompletionRequest,
    Usage,
    translated_chat_request,
)
from dmt_proxy.responses.protocol import (
    FunctionCallItem,
    IncompleteDetails,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponseObject,
    ResponsesRequest,
    ResponseUsage,
)

_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TEXT_PARTS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}
_TOOL_KEYS = {"type", "name", "description", "parameters", "strict"}


def new_id(prefix: str) -> str:
    """An OpenAI-style object id (``resp_...``, ``msg_...``, ``fc_...``)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _content_text(content: Any, where: str) -> str:
    """The text of a message item's content: a string, or text parts (other parts refused)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"Invalid '{where}': expected a string or a list of content parts.", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        key = _TEXT_PARTS.get(str(kind))
        if key is None:
            raise _bad(f"Unsupported content part '{kind}' at {where}[{j}]: dmt-proxy passes text "
                       "only (input_text, output_text).", f"{where}[{j}].type")  # fmt: skip
        text = part.get(key)
        if not isinstance(text, str):
            raise _bad(f"Invalid '{where}[{j}].{key}': expected a string.", f"{where}[{j}].{key}")
        texts.append(text)
    return "\n".join(texts)


def _required_str(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise _bad(f"Invalid input item at {where}: '{key}' must be a string.", f"{where}.{key}")
    return value


def chat_messages(req: ResponsesRequest) -> list[dict[str, Any]]:
    """The chat messages of ``instructions`` and ``input``; a 400 naming a bad item's index."""
    messages: list[dict[str, Any]] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
    if isinstance(req.input, str):
        messages.append({"role": "user", "content": req.input})
        return messages
    if not req.input:
        raise _bad("'input' must contain at least one item.", "input")
    for i, item in enumerate(req.input):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = _ROLES.get(str(item.get("role")))
            if role is None:
                raise _bad(f"Invalid '{where}.role': expected one of user, assistant, system, "
                           "developer.", f"{where}.role")  # fmt: skip
            messages.append({"role": role, "content": _content_text(item.get("content"),
                                                                    f"{where}.content")})  # fmt: skip
        elif kind == "function_call":
            call = {"id": _required_str(item, "call_id", where), "type": "function",
                    "function": {"name": _required_str(item, "name", where),
                                 "arguments": _required_str(item, "arguments", where)}}  # fmt: skip
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)  # text then calls: one message
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content_text(output, f"{where}.output")
            messages.append({"role": "tool", "tool_call_id": _required_str(item, "call_id", where),
                             "content": text})  # fmt: skip
        else:
            raise _bad(f"Unsupported input item type '{kind}' at {where}: dmt-proxy accepts "
                       "message, function_call and function_call_output items.", f"{where}.type")  # fmt: skip
    return messages


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Function tools in chat's shape; hosted tools (web search, files...) are refused."""
    if not tools:
        return None
    out = []
    for i, tool in enumerate(tools):
        if tool.get("type") != "function":
            raise _bad(f"Unsupported tool type '{tool.get('type')}' at tools[{i}]: dmt-proxy "
                       "passes function tools only (your agent runs them).", f"tools[{i}].type")  # fmt: skip
        extra = sorted(set(tool) - _TOOL_KEYS)
        if extra:
            raise _bad(f"Unsupported parameter 'tools[{i}].{extra[0]}'.", f"tools[{i}].{extra[0]}")
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _bad(f"Invalid 'tools[{i}].name': expected a non-empty string.",
                       f"tools[{i}].name")  # fmt: skip
        function = {k: tool[k] for k in ("name", "description", "parameters", "strict")
                    if tool.get(k) is not None}  # fmt: skip
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """``tool_choice`` in chat's shape."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and choice.get("name"):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise _bad("Unsupported 'tool_choice': use auto, none, required or "
               '{"type": "function", "name": ...}.', "tool_choice")  # fmt: skip


def chat_response_format(text: dict[str, Any] | None) -> dict[str, Any] | None:
    """``text.format`` as chat's ``response_format`` (None for plain text)."""
    if not text:
        return None
    extra = sorted(set(text) - {"format", "verbosity"})
    if extra:
        raise _bad(f"Unsupported parameter 'text.{extra[0]}'.", f"text.{extra[0]}")
    if text.get("verbosity") is not None:
        raise _bad("Unsupported parameter 'text.verbosity': chat upstreams have no such "
                   "setting.", "text.verbosity")  # fmt: skip
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("name"), str) or not isinstance(fmt.get("schema"), dict):
            raise _bad("'text.format' of type json_schema needs a 'name' and a 'schema' object.",
                       "text.format")  # fmt: skip
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description")
                  if fmt.get(k) is not None}  # fmt: skip
        return {"type": "json_schema", "json_schema": schema}
    raise _bad("Unsupported 'text.format': use text, json_object or json_schema.", "text.format")


def to_chat_request(req: ResponsesRequest) -> ChatCompletionRequest:
    """The chat request the pipeline runs for ``req``."""
    body: dict[str, Any] = {
        "model": req.model, "messages": chat_messages(req), "stream": req.stream,
        "user": req.scope_user(), "temperature": req.temperature, "top_p": req.top_p,
        "max_tokens": req.max_output_tokens, "tools": chat_tools(req.tools),
        "tool_choice": chat_tool_choice(req.tool_choice),
        "parallel_tool_calls": req.parallel_tool_calls if req.tools else None,
        "response_format": chat_response_format(req.text),
        # Usage arrives in the last chunk only when asked for; response.completed carries it.
        "stream_options": {"include_usage": True} if req.stream else None,
    }  # fmt: skip
    return translated_chat_request(body, "input")


def response_shell(req: ResponsesRequest, *, response_id: str, created_at: int, model: str,
                   status: str = "in_progress") -> ResponseObject:  # fmt: skip
    """The Response echoing ``req``'s settings, with no output yet."""
    return ResponseObject.model_validate({
        "id": response_id, "created_at": created_at, "status": status, "model": model,
        "instructions": req.instructions, "tools": req.tools or [],
        "tool_choice": req.tool_choice or "auto",
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "temperature": req.temperature, "top_p": req.top_p,
        "max_output_tokens": req.max_output_tokens,
        "text": req.text if req.text and req.text.get("format") else {"format": {"type": "text"}},
        "metadata": req.metadata or {}, "user": req.user,
    })  # fmt: skip


def response_usage(usage: Usage | None) -> ResponseUsage | None:
    """Chat usage in Responses' terms."""
    if usage is None:
        return None
    given_in, given_out = usage.prompt_tokens or 0, usage.completion_tokens or 0
    return ResponseUsage(input_tokens=given_in, output_tokens=given_out,
                         total_tokens=usage.total_tokens or given_in + given_out)  # fmt: skip


def response_of(
    req: ResponsesRequest, completion: ChatCompletion, *, response_id: str
) -> ResponseObject:
    """The Response of a finished chat completion."""
    response = response_shell(req, response_id=response_id, model=completion.model or "",
                              created_at=completion.created or int(time.time()),
                              status="completed")  # fmt: skip
    choice = completion.choices[0] if completion.choices else None
    calls = (choice.message.tool_calls or []) if choice is not None else []
    text = completion.text()
    output: list[OutputItem] = []
    if text or not calls:
        output.append(OutputMessage(id=new_id("msg"), content=[OutputText(text=text)]))
    for call in calls:
        function = call.function
        output.append(FunctionCallItem(id=new_id("fc"), call_id=call.id or new_id("call"),
                                       name=(function.name if function else None) or "",
                                       arguments=(function.arguments if function else None) or ""))  # fmt: skip
    response.output = output
    response.usage = response_usage(completion.usage)
    if choice is not None and choice.finish_reason == "length":
        response.status = "incomplete"
        response.incomplete_details = IncompleteDetails(reason="max_output_tokens")
    return response
