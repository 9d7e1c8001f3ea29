"""``POST /v1/responses``: the Responses API as a thin route over the chat pipeline.

The body is translated into a chat request (``dmt_proxy.responses.translate``) and
run by the same ``ChatPipeline`` as ``/v1/chat/completions``; only the wire format
of the answer differs. See ``dmt_proxy.responses.protocol`` for what is supported.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from dmt_proxy.api.bodies import parse_json_object, read_body, validate_body
from dmt_proxy.api.context import (
    authenticate,
    build_context,
    first_chunk,
    response_headers,
)
from dmt_proxy.api.openapi import RESPONSES_RESPONSES
from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.pipeline import ChatPipeline
from dmt_proxy.responses.protocol import ResponsesRequest, check_fields
from dmt_proxy.responses.stream import ResponseEvents
from dmt_proxy.responses.translate import new_id, response_of, response_shell, to_chat_request

router = APIRouter()


def parse_responses_request(body: bytes) -> ResponsesRequest:
    """Parse and validate a Responses body: a 400 naming the field or the input item."""
    data = parse_json_object(body)
    check_fields(data)
    return validate_body(ResponsesRequest, data)


@router.post("/v1/responses", responses=RESPONSES_RESPONSES)
async def create_response(request: Request) -> Response:
    state = request.app.state
    pipeline: ChatPipeline = state.pipeline
    tenant = authenticate(request)
    body = await read_body(request, state.settings.max_body_bytes)
    req = parse_responses_request(body)
    chat = to_chat_request(req)
    ctx = build_context(request, req.scope_user(), tenant)
    request.state.mode = ctx.mode.value
    response_id = new_id("resp")
    if not req.stream:
        completion = await pipeline.complete(chat, ctx)
        state.metrics.overhead.labels("false").observe(ctx.overhead_ms() / 1000.0)
        reply = response_of(req, completion, response_id=response_id)
        return Response(reply.model_dump_json(), media_type="application/json",
                        headers=response_headers(ctx))  # fmt: skip

    chunks = pipeline.stream(chat, ctx)
    first = await first_chunk(chunks)
    headers = response_headers(ctx)
    state.metrics.overhead.labels("true").observe(ctx.overhead_ms() / 1000.0)
    model = (first.model if first is not None else None) or req.model or ""
    events = ResponseEvents(response_shell(req, response_id=response_id, model=model,
                                           created_at=int(time.time())))  # fmt: skip

    async def body_iter() -> AsyncIterator[bytes]:
        # The events of one chunk leave in one write: fewer sends than events.
        try:
            opening = events.start()
            if first is not None:
                opening += events.feed(first)
            yield b"".join(opening)
            async for chunk in chunks:
                produced = events.feed(chunk)
                if produced:
                    yield b"".join(produced)
        except (UpstreamError, RequestError) as exc:
            # Headers are gone: the failure travels in-band, as OpenAI sends it.
            yield b"".join(events.fail(exc.message, code="upstream_error"))
            return
        finally:
            await chunks.aclose()
        yield b"".join(events.finish())

    return StreamingResponse(body_iter(), media_type="text/event-stream", headers=headers)
