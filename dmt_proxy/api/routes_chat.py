"""``/v1/chat/completions`` and ``/v1/models`` (chat and embedding names): thin routes."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from dmt_proxy.api.bodies import parse_json_object, read_body, validate_body
from dmt_proxy.api.context import (
    authenticate,
    build_context,
    first_chunk,
    response_headers,
    sse,
)
from dmt_proxy.api.errors import error_body
from dmt_proxy.api.openapi import CHAT_RESPONSES, ModelList, error_responses
from dmt_proxy.errors import InvalidRequest, RequestError, UpstreamError
from dmt_proxy.openai_types import UNSUPPORTED_PARAMS, ChatCompletionRequest
from dmt_proxy.pipeline import ChatPipeline

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


@router.post("/v1/chat/completions", responses=CHAT_RESPONSES)
async def chat_completions(request: Request) -> Response:
    state = request.app.state
    pipeline: ChatPipeline = state.pipeline
    tenant = authenticate(request)
    body = await read_body(request, state.settings.max_body_bytes)
    req = parse_chat_request(body)
    ctx = build_context(request, req.user, tenant)
    request.state.mode = ctx.mode.value
    if not req.stream:
        completion = await pipeline.complete(req, ctx)
        state.metrics.overhead.labels("false").observe(ctx.overhead_ms() / 1000.0)
        return Response(completion.wire_json(), media_type="application/json",
                        headers=response_headers(ctx))  # fmt: skip

    chunks = pipeline.stream(req, ctx)
    first = await first_chunk(chunks)
    headers = response_headers(ctx)
    state.metrics.overhead.labels("true").observe(ctx.overhead_ms() / 1000.0)

    async def body_iter() -> AsyncIterator[bytes]:
        try:
            if first is not None:
                yield sse(first.wire_json())
            async for chunk in chunks:
                yield sse(chunk.wire_json())
        except (UpstreamError, RequestError) as exc:
            # Headers are gone: report the failure in-band, as OpenAI does.
            error = error_body(exc.message, exc.error_type, code="upstream_error")
            yield sse(json.dumps(error, separators=(",", ":")).encode())
            return
        finally:
            await chunks.aclose()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body_iter(), media_type="text/event-stream", headers=headers)


@router.get("/v1/models", responses={200: {"model": ModelList}, **error_responses(401)})
async def list_models(request: Request) -> JSONResponse:
    authenticate(request)
    names = [*request.app.state.registry.aliases, *request.app.state.embeddings.names]
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "dmt-proxy"}
        for name in names
    ]
    return JSONResponse({"object": "list", "data": data})
