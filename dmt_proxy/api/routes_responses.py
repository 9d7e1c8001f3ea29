"""``POST /v1/responses``: the Responses API as a thin route over the chat pipeline.

The body is translated into a chat request (``dmt_proxy.responses.translate``) and
run by the same ``ChatPipeline`` as ``/v1/chat/completions``; only the wire format
of the answer differs. See ``dmt_proxy.responses.protocol`` for what is supported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import Response

from dmt_proxy.api.admission import admit
from dmt_proxy.api.bodies import parse_json_object, validate_body
from dmt_proxy.api.openapi import RESPONSES_RESPONSES
from dmt_proxy.api.writer import json_reply, stream_reply
from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.exchange import MemoryOutcome
from dmt_proxy.openai_types import ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.pipeline import ChatPipeline
from dmt_proxy.responses.protocol import ResponsesRequest, check_fields
from dmt_proxy.responses.stream import ResponseEvents
from dmt_proxy.responses.translate import new_id, response_of, response_shell, to_chat_request

router = APIRouter()


@dataclass(frozen=True)
class ResponsesCall:
    """A Responses request and the chat request the pipeline runs for it."""

    request: ResponsesRequest
    chat: ChatCompletionRequest


def parse_responses_request(body: bytes) -> ResponsesRequest:
    """Parse and validate a Responses body: a 400 naming the field or the input item."""
    data = parse_json_object(body)
    check_fields(data)
    return validate_body(ResponsesRequest, data)


def parse_responses_call(body: bytes) -> ResponsesCall:
    """Parse a Responses body and translate it to chat (a 400 if it cannot be)."""
    req = parse_responses_request(body)
    return ResponsesCall(request=req, chat=to_chat_request(req))


class ResponsesStream:
    """A chat stream as the events of one Response; the events of one chunk are one write."""

    def __init__(self, events: ResponseEvents, first: ChatCompletionChunk | None) -> None:
        self._events = events
        self._first = first

    def opening(self) -> bytes:
        """``response.created``, ``response.in_progress`` and the first chunk's events."""
        opening = self._events.start()
        if self._first is not None:
            opening += self._events.feed(self._first)
        return b"".join(opening)

    def chunk(self, chunk: ChatCompletionChunk) -> bytes:
        """The events of one chunk (none for a chunk that adds nothing)."""
        return b"".join(self._events.feed(chunk))

    def failure(self, exc: UpstreamError | RequestError) -> bytes:
        """``error`` and ``response.failed``, as OpenAI sends a failure mid-stream."""
        return b"".join(self._events.fail(exc.message, code="upstream_error"))

    def closing(self, outcome: MemoryOutcome) -> bytes:
        """The open item's closing events and ``response.completed`` (or ``incomplete``)."""
        return b"".join(self._events.finish())


def _user(call: ResponsesCall) -> str | None:
    return call.request.scope_user()


@router.post("/v1/responses", responses=RESPONSES_RESPONSES)
async def create_response(request: Request) -> Response:
    admitted = await admit(request, parse_responses_call, user=_user)
    req, ctx = admitted.body.request, admitted.ctx
    pipeline: ChatPipeline = request.app.state.pipeline
    response_id = new_id("resp")
    if not req.stream:
        completion = await pipeline.complete(admitted.body.chat, ctx)
        reply = response_of(req, completion, response_id=response_id)
        return json_reply(request, ctx, reply.model_dump_json())

    def wire(first: ChatCompletionChunk | None) -> ResponsesStream:
        model = (first.model if first is not None else None) or req.model or ""
        shell = response_shell(req, response_id=response_id, model=model,
                               created_at=int(time.time()))  # fmt: skip
        return ResponsesStream(ResponseEvents(shell), first)

    return await stream_reply(request, ctx, pipeline.stream(admitted.body.chat, ctx), wire)
