"""``POST /v1/messages``: the Anthropic Messages API as a thin route over the chat pipeline.

The body is translated into a chat request (``dmt_proxy.messages.translate``) and
run by the same ``ChatPipeline`` as ``/v1/chat/completions``; only the wire format
of the answer differs. See ``dmt_proxy.messages.protocol`` for what is supported.

Every error on these routes leaves in Anthropic's shape (the Anthropic SDK reads
``error.type`` and ``error.message``), not OpenAI's: the route maps the same
exceptions the app's handlers map, to Anthropic's error types. Answers carry
``request-id`` (the header the Anthropic SDK reads) besides ``x-request-id``.

``POST /v1/messages/count_tokens`` is refused with a 404 ``not_found_error``: the
upstreams are chat completions, which count no tokens without generating, and the
proxy has no tokenizer for a provider's model. A 4xx, so that SDKs do not retry it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from dmt_proxy.api.admission import admit, authenticate
from dmt_proxy.api.bodies import parse_json_object, validate_body
from dmt_proxy.api.openapi import COUNT_TOKENS_RESPONSES, MESSAGES_RESPONSES
from dmt_proxy.api.writer import json_reply, stream_reply
from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.exchange import MemoryOutcome
from dmt_proxy.messages.protocol import MessagesRequest, check_fields, error_body
from dmt_proxy.messages.stream import MessageEvents
from dmt_proxy.messages.translate import message_of, message_shell, new_id, to_chat_request
from dmt_proxy.openai_types import ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.pipeline import ChatPipeline

log = logging.getLogger(__name__)
router = APIRouter()

COUNT_TOKENS_REFUSAL = (
    "POST /v1/messages/count_tokens is not served by dmt-proxy: its upstreams are chat "
    "completions, which count no tokens without generating. Use the usage of a "
    "/v1/messages answer instead."
)


@dataclass(frozen=True)
class MessagesCall:
    """A Messages request and the chat request the pipeline runs for it."""

    request: MessagesRequest
    chat: ChatCompletionRequest


def parse_messages_request(body: bytes) -> MessagesRequest:
    """Parse and validate a Messages body: a 400 naming the field or the block."""
    data = parse_json_object(body)
    check_fields(data)
    return validate_body(MessagesRequest, data)


def parse_messages_call(body: bytes) -> MessagesCall:
    """Parse a Messages body and translate it to chat (a 400 if it cannot be)."""
    req = parse_messages_request(body)
    return MessagesCall(request=req, chat=to_chat_request(req))


class MessagesStream:
    """A chat stream as the events of one Message; the events of one chunk are one write."""

    def __init__(self, events: MessageEvents, first: ChatCompletionChunk | None) -> None:
        self._events = events
        self._first = first

    def opening(self) -> bytes:
        """``message_start``, ``ping`` and the first chunk's events."""
        opening = self._events.start()
        if self._first is not None:
            opening += self._events.feed(self._first)
        return b"".join(opening)

    def chunk(self, chunk: ChatCompletionChunk) -> bytes:
        """The events of one chunk (none for a chunk that adds nothing)."""
        return b"".join(self._events.feed(chunk))

    def failure(self, exc: UpstreamError | RequestError) -> bytes:
        """The ``error`` event, as Anthropic sends a failure mid-stream."""
        return b"".join(self._events.fail(exc.status_code, exc.message))

    def closing(self, outcome: MemoryOutcome) -> bytes:
        """The open block's ``content_block_stop``, ``message_delta``, ``message_stop``."""
        return b"".join(self._events.finish())


def error_response(request: Request, status: int, message: str) -> JSONResponse:
    """An Anthropic-shaped error answer."""
    request_id = getattr(request.state, "request_id", None)
    headers = {"x-request-id": request_id, "request-id": request_id} if request_id else {}
    return JSONResponse(error_body(status, message, request_id), status_code=status,
                        headers=headers)  # fmt: skip


async def anthropic_errors(request: Request, handle: Callable[[], Awaitable[Response]]) -> Response:
    """``handle()``'s answer, or its error in Anthropic's shape (a bug: a logged 500)."""
    try:
        return await handle()
    except RequestError as exc:
        return error_response(request, exc.status_code, exc.message)
    except UpstreamError as exc:
        log.warning("upstream error: %s", exc.message)
        return error_response(request, exc.status_code, exc.message)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(request, 500, "Internal error in dmt-proxy; see the proxy log.")


def _user(call: MessagesCall) -> str | None:
    return call.request.scope_user()


async def _create_message(request: Request) -> Response:
    admitted = await admit(request, parse_messages_call, user=_user)
    req, ctx = admitted.body.request, admitted.ctx
    pipeline: ChatPipeline = request.app.state.pipeline
    message_id = new_id("msg")
    response: Response
    if not req.stream:
        completion = await pipeline.complete(admitted.body.chat, ctx)
        reply = message_of(req, completion, message_id=message_id,
                           model=completion.model or req.model)  # fmt: skip
        response = json_reply(request, ctx, reply.model_dump_json())
    else:

        def wire(first: ChatCompletionChunk | None) -> MessagesStream:
            model = (first.model if first is not None else None) or req.model
            shell = message_shell(message_id=message_id, model=model)
            return MessagesStream(MessageEvents(shell, req.stop_sequences), first)

        response = await stream_reply(request, ctx, pipeline.stream(admitted.body.chat, ctx),
                                      wire)  # fmt: skip
    response.headers["request-id"] = ctx.request_id
    return response


@router.post("/v1/messages", responses=MESSAGES_RESPONSES)
async def create_message(request: Request) -> Response:
    return await anthropic_errors(request, lambda: _create_message(request))


async def _count_tokens(request: Request) -> Response:
    authenticate(request)  # an unknown key is told so first, as on every route
    return error_response(request, 404, COUNT_TOKENS_REFUSAL)


@router.post("/v1/messages/count_tokens", responses=COUNT_TOKENS_RESPONSES)
async def count_tokens(request: Request) -> Response:
    return await anthropic_errors(request, lambda: _count_tokens(request))
