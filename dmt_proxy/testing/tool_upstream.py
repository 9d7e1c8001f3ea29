"""A scripted chat model that drives tool loops, shipped for tests and demos. It is not a model.

Given a request that declares function tools, it calls the first one (or the one
``tool_choice`` names) ``tool_steps`` times in a user turn, then answers in text
with what the tools returned: ``Tool result: <output>; <output>``. Without tools
(or with ``tool_choice: "none"``) it answers ``answer``. Tool-call arguments are
filled from the function's JSON schema: string properties get the last word of
the user's message, numbers the step number, booleans ``true``.

``ToolLoopChatModel`` is the in-process ``ChatModel``; the same replies are
served over HTTP by ``python -m dmt_proxy.testing.tool_upstream --tool-steps N``
(with a ``/v1/embeddings`` of deterministic vectors), so a real agent framework
can run a tool round trip against a real proxy process.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from dmt_proxy.openai_types import (
    ChatCompletion,
    ChatCompletionChunk,
    Choice,
    ChunkChoice,
    CompletionMessage,
    Delta,
    FunctionCall,
    ToolCall,
    Usage,
)
from dmt_proxy.upstream.base import UpstreamCall

TOOL_ANSWER_PREFIX = "Tool result: "
PLAIN_ANSWER = "This is a canned answer from the scripted tool model."


def _since_last_user(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return list(messages[index + 1 :])
    return list(messages)


def _last_user_text(messages: Sequence[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def _pick_tool(tools: list[dict[str, Any]], choice: object) -> dict[str, Any] | None:
    functions = [t.get("function") or {} for t in tools if t.get("type") == "function"]
    if not functions or choice == "none":
        return None
    if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        wanted = choice["function"].get("name")
        return next((f for f in functions if f.get("name") == wanted), functions[0])
    return functions[0]


def _arguments(function: dict[str, Any], user_text: str, step: int) -> str:
    words = re.findall(r"[\w-]+", user_text)
    word = words[-1] if words else "x"
    properties = (function.get("parameters") or {}).get("properties") or {}
    args: dict[str, Any] = {}
    for name, schema in properties.items():
        kind = schema.get("type") if isinstance(schema, dict) else None
        if kind in ("integer", "number"):
            args[name] = step
        elif kind == "boolean":
            args[name] = True
        else:
            args[name] = word
    return json.dumps(args)


class ToolPlan:
    """What the scripted model answers to one request: a tool call or text."""

    def __init__(self, messages: Sequence[dict[str, Any]], params: dict[str, Any],
                 *, tool_steps: int, answer: str) -> None:  # fmt: skip
        after = _since_last_user(messages)
        results = [m for m in after if m.get("role") == "tool"]
        tool = _pick_tool(list(params.get("tools") or []), params.get("tool_choice"))
        self.id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        self.created = int(time.time())
        self.tool_name: str | None = None
        self.arguments = ""
        self.call_id = ""
        if tool is not None and len(results) < tool_steps:
            self.tool_name = str(tool.get("name", "tool"))
            self.arguments = _arguments(tool, _last_user_text(messages), len(results) + 1)
            self.call_id = f"call_{uuid.uuid4().hex[:16]}"
            self.text = ""
        elif results:
            outputs = [_text(m.get("content")) for m in results]
            self.text = TOOL_ANSWER_PREFIX + "; ".join(outputs)
        else:
            self.text = answer

    def completion(self, model: str) -> ChatCompletion:
        """The plan as a non-streamed completion."""
        usage = Usage(prompt_tokens=10, completion_tokens=max(1, len(self.text.split())),
                      total_tokens=10 + max(1, len(self.text.split())))  # fmt: skip
        if self.tool_name is None:
            return ChatCompletion.of_text(self.text, id=self.id, model=model,
                                          created=self.created, usage=usage)  # fmt: skip
        call = ToolCall(id=self.call_id, type="function",
                        function=FunctionCall(name=self.tool_name, arguments=self.arguments))  # fmt: skip
        message = CompletionMessage(role="assistant", content=None, tool_calls=[call])
        choice = Choice(index=0, message=message, finish_reason="tool_calls")
        return ChatCompletion(id=self.id, object="chat.completion", created=self.created,
                              model=model, choices=[choice], usage=usage)  # fmt: skip

    def chunks(self, model: str) -> list[ChatCompletionChunk]:
        """The plan as stream chunks, split the way OpenAI splits them."""

        def chunk(delta: Delta, finish: str | None = None) -> ChatCompletionChunk:
            return ChatCompletionChunk(id=self.id, object="chat.completion.chunk",
                                       created=self.created, model=model,
                                       choices=[ChunkChoice(index=0, delta=delta,
                                                            finish_reason=finish)])  # fmt: skip

        out = [chunk(Delta(role="assistant", content=""))]
        if self.tool_name is None:
            words = self.text.split(" ")
            out += [chunk(Delta(content=w if i == 0 else " " + w)) for i, w in enumerate(words)]
            out.append(chunk(Delta(), "stop"))
            return out
        head = ToolCall(index=0, id=self.call_id, type="function",
                        function=FunctionCall(name=self.tool_name, arguments=""))  # fmt: skip
        out.append(chunk(Delta(tool_calls=[head])))
        half = len(self.arguments) // 2
        for piece in (self.arguments[:half], self.arguments[half:]):
            fragment = ToolCall(index=0, function=FunctionCall(arguments=piece))
            out.append(chunk(Delta(tool_calls=[fragment])))
        out.append(chunk(Delta(), "tool_calls"))
        return out


def _text(content: object) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class ToolLoopChatModel:
    """The in-process scripted tool-loop model; records every call it receives."""

    def __init__(self, *, tool_steps: int = 1, answer: str = PLAIN_ANSWER) -> None:
        self.tool_steps = tool_steps
        self.answer = answer
        self.calls: list[UpstreamCall] = []

    def _plan(self, call: UpstreamCall) -> ToolPlan:
        self.calls.append(call)
        return ToolPlan(call.wire_messages(), call.params, tool_steps=self.tool_steps,
                        answer=self.answer)  # fmt: skip

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """A tool call while the turn has fewer than ``tool_steps`` results, then the answer."""
        return self._plan(call).completion(call.endpoint.model)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """The same reply as ``complete``, as stream chunks."""
        for chunk in self._plan(call).chunks(call.endpoint.model):
            yield chunk


def fake_vector(text: str, dims: int = 8) -> list[float]:
    """A deterministic unit vector of ``text`` (for the fake ``/v1/embeddings``)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    raw = [b - 127.5 for b in digest[:dims]]
    norm = sum(v * v for v in raw) ** 0.5 or 1.0
    return [v / norm for v in raw]


def create_tool_upstream(*, tool_steps: int = 1, answer: str = PLAIN_ANSWER) -> Starlette:
    """The scripted tool model as an OpenAI-compatible ASGI app.

    ``GET /requests`` lists what each chat request carried (its message roles, its
    tool names, the ``tool`` messages' contents), so a test can check the round trip.
    """
    seen: list[dict[str, Any]] = []

    async def chat(request: Request) -> Response:
        body = await request.json()
        messages = list(body.get("messages") or [])
        params = {k: v for k, v in body.items() if k not in ("messages", "model", "stream")}
        seen.append({"roles": [m.get("role") for m in messages],
                     "tools": [(t.get("function") or {}).get("name") for t in params.get("tools") or []],
                     "tool_results": [_text(m.get("content")) for m in messages
                                      if m.get("role") == "tool"]})  # fmt: skip
        plan = ToolPlan(messages, params, tool_steps=tool_steps, answer=answer)
        model = str(body.get("model", "fake"))
        if not body.get("stream"):
            return Response(plan.completion(model).wire_json(), media_type="application/json")

        async def events() -> AsyncIterator[bytes]:
            for chunk in plan.chunks(model):
                yield b"data: " + chunk.wire_json() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def embeddings(request: Request) -> Response:
        body = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(t)}
                for i, t in enumerate(texts)]  # fmt: skip
        tokens = sum(len(str(t).split()) for t in texts)
        return JSONResponse({"object": "list", "data": data, "model": body.get("model"),
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})  # fmt: skip

    async def requests(_: Request) -> Response:
        return JSONResponse({"requests": seen})

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok", "requests": len(seen)})

    return Starlette(routes=[
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/embeddings", embeddings, methods=["POST"]),
        Route("/requests", requests),
        Route("/health", health),
    ])  # fmt: skip


def main() -> None:
    """``python -m dmt_proxy.testing.tool_upstream --port 9101 --tool-steps 1``."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9101)
    parser.add_argument("--tool-steps", type=int, default=1,
                        help="tool calls per user turn before the text answer")  # fmt: skip
    parser.add_argument("--answer", default=PLAIN_ANSWER, help="the reply without tools")
    args = parser.parse_args()
    app = create_tool_upstream(tool_steps=args.tool_steps, answer=args.answer)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
