"""``/v1/chat/completions`` and ``/v1/models`` (chat and embedding names): thin routes."""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from dmt_proxy.api.admission import admit, authenticate
from dmt_proxy.api.bodies import parse_json_object, validate_body
from dmt_proxy.api.errors import error_body
from dmt_proxy.api.routes import CHAT, MODELS
from dmt_proxy.api.routing import serve
from dmt_proxy.api.writer import json_reply, sse, stream_reply
from dmt_proxy.errors import InvalidRequest, RequestError, UpstreamError
from dmt_proxy.exchange import MemoryOutcome
from dmt_proxy.openai_types import UNSUPPORTED_PARAMS, ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.pipeline import ChatPipeline
from dmt_proxy.provenance import Channel

router = APIRouter()


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    """Parse and validate a chat request body, raising ``InvalidRequest`` with the param."""
    data = parse_json_object(body)
    for field, why in UNSUPPORTED_PARAMS.items():
        if field in data and data[field] is not None:
            raise InvalidRequest(f"Unsupported parameter '{field}': {why}.", param=field,
                                 code="unsupported_parameter")  # fmt: skip
    if "messages" in data and data["messages"] == []:
        raise InvalidRequest("'messages' must contain at least one message.", param="messages")
    return validate_body(ChatCompletionRequest, data)


class ChatStream:
    """Chat completion chunks as OpenAI streams them: ``data: {chunk}`` ... ``data: [DONE]``."""

    def __init__(self, first: ChatCompletionChunk | None) -> None:
        self._first = first

    def opening(self) -> bytes:
        """The first chunk's event (nothing when the upstream sent none)."""
        return sse(self._first.wire_json()) if self._first is not None else b""

    def chunk(self, chunk: ChatCompletionChunk) -> bytes:
        """One chunk's event."""
        return sse(chunk.wire_json())

    def failure(self, exc: UpstreamError | RequestError) -> bytes:
        """An event carrying the error in OpenAI's shape."""
        error = error_body(exc.message, exc.error_type, code="upstream_error")
        return sse(json.dumps(error, separators=(",", ":")).encode())

    def closing(self, outcome: MemoryOutcome) -> bytes:
        """``data: [DONE]``."""
        return b"data: [DONE]\n\n"


def _user(req: ChatCompletionRequest) -> str | None:
    return req.user


def _model(req: ChatCompletionRequest) -> str | None:
    return req.model


@serve(router, CHAT)
async def chat_completions(request: Request) -> Response:
    admitted = await admit(request, parse_chat_request, channel=Channel.CHAT, user=_user,
                           model=_model)  # fmt: skip
    req, ctx = admitted.body, admitted.ctx
    pipeline: ChatPipeline = request.app.state.pipeline
    if not req.stream:
        completion = await pipeline.complete(req, ctx)
        return json_reply(request, ctx, completion.wire_json())
    return await stream_reply(request, ctx, pipeline.stream(req, ctx), ChatStream)


@serve(router, MODELS)
async def list_models(request: Request) -> JSONResponse:
    authenticate(request)
    names = [*request.app.state.registry.aliases, *request.app.state.embeddings.names]
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "dmt-proxy"}
        for name in names
    ]
    return JSONResponse({"object": "list", "data": data})
