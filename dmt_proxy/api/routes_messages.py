"""``POST /v1/messages``: the Anthropic Messages API as a thin route over the chat pipeline.

The body is translated into a chat request (``dmt_proxy.messages.translate``) and
run by the same ``ChatPipeline`` as ``/v1/chat/completions``; only the wire format
of the answer differs. The call is the one every translated API makes
(``dmt_proxy.api.translated``); ``MessagesTranslation`` is what is the Messages
API's own. See ``dmt_proxy.messages.protocol`` for what is supported.

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
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from dmt_proxy.api.admission import authenticate
from dmt_proxy.api.bodies import validate_body
from dmt_proxy.api.routes import COUNT_TOKENS, MESSAGES
from dmt_proxy.api.routing import serve
from dmt_proxy.api.translated import answer_translated
from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.messages.protocol import MessageObject, MessagesRequest, check_fields, error_body
from dmt_proxy.messages.stream import MessageEvents
from dmt_proxy.messages.translate import message_of, message_shell, new_id, to_chat_request
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.provenance import Channel

log = logging.getLogger(__name__)
router = APIRouter()

COUNT_TOKENS_REFUSAL = (
    f"{COUNT_TOKENS.name} is not served by dmt-proxy: its upstreams are chat completions, "
    f"which count no tokens without generating. Use the usage of a {MESSAGES.path} answer "
    "instead."
)


class MessagesTranslation:
    """The Messages API's side of a translated call (a ``Translation``)."""

    channel = Channel.MESSAGES

    def parse(self, data: dict[str, Any]) -> MessagesRequest:
        """Validate a Messages body: a 400 naming the field or the block."""
        check_fields(data)
        return validate_body(MessagesRequest, data)

    def to_chat(self, req: MessagesRequest) -> ChatCompletionRequest:
        """The chat request the pipeline runs for ``req``."""
        return to_chat_request(req)

    def new_id(self) -> str:
        """A Message id, ``msg_...``."""
        return new_id("msg")

    def reply(
        self, req: MessagesRequest, completion: ChatCompletion, reply_id: str
    ) -> MessageObject:
        """The Message of a finished chat completion."""
        return message_of(req, completion, message_id=reply_id,
                          model=completion.model or req.model)  # fmt: skip

    def events(
        self, req: MessagesRequest, reply_id: str, first: ChatCompletionChunk | None
    ) -> MessageEvents:
        """``message_start``, ``ping``, the content blocks, ``message_delta``, ``message_stop``."""
        model = (first.model if first is not None else None) or req.model
        return MessageEvents(message_shell(message_id=reply_id, model=model), req.stop_sequences)


MESSAGES_API = MessagesTranslation()


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


async def _create_message(request: Request) -> Response:
    response = await answer_translated(request, MESSAGES_API)
    response.headers["request-id"] = request.state.request_id  # the Anthropic SDK reads it
    return response


@serve(router, MESSAGES)
async def create_message(request: Request) -> Response:
    return await anthropic_errors(request, lambda: _create_message(request))


async def _count_tokens(request: Request) -> Response:
    authenticate(request)  # an unknown key is told so first, as on every route
    return error_response(request, 404, COUNT_TOKENS_REFUSAL)


@serve(router, COUNT_TOKENS)
async def count_tokens(request: Request) -> Response:
    return await anthropic_errors(request, lambda: _count_tokens(request))
