"""``POST /v1/responses``: the Responses API as a thin route over the chat pipeline.

The body is translated into a chat request (``dmt_proxy.responses.translate``) and
run by the same ``ChatPipeline`` as ``/v1/chat/completions``; only the wire format
of the answer differs. The call is the one every translated API makes
(``dmt_proxy.api.translated``); ``ResponsesTranslation`` is what is the Responses
API's own. See ``dmt_proxy.responses.protocol`` for what is supported.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from dmt_proxy.api.bodies import validate_body
from dmt_proxy.api.routes import RESPONSES
from dmt_proxy.api.routing import serve
from dmt_proxy.api.translated import answer_translated
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.provenance import Channel
from dmt_proxy.responses.protocol import ResponseObject, ResponsesRequest, check_fields
from dmt_proxy.responses.stream import ResponseEvents
from dmt_proxy.responses.translate import new_id, response_of, response_shell, to_chat_request

router = APIRouter()


class ResponsesTranslation:
    """The Responses API's side of a translated call (a ``Translation``)."""

    channel = Channel.RESPONSES

    def parse(self, data: dict[str, Any]) -> ResponsesRequest:
        """Validate a Responses body: a 400 naming the field or the input item."""
        check_fields(data)
        return validate_body(ResponsesRequest, data)

    def to_chat(self, req: ResponsesRequest) -> ChatCompletionRequest:
        """The chat request the pipeline runs for ``req``."""
        return to_chat_request(req)

    def new_id(self) -> str:
        """A Response id, ``resp_...``."""
        return new_id("resp")

    def reply(
        self, req: ResponsesRequest, completion: ChatCompletion, reply_id: str
    ) -> ResponseObject:
        """The Response of a finished chat completion."""
        return response_of(req, completion, response_id=reply_id)

    def events(
        self, req: ResponsesRequest, reply_id: str, first: ChatCompletionChunk | None
    ) -> ResponseEvents:
        """``response.created``, ``response.in_progress``, ..., ``response.completed``."""
        model = (first.model if first is not None else None) or req.model or ""
        shell = response_shell(req, response_id=reply_id, model=model,
                               created_at=int(time.time()))  # fmt: skip
        return ResponseEvents(shell)


RESPONSES_API = ResponsesTranslation()


@serve(router, RESPONSES)
async def create_response(request: Request) -> Response:
    return await answer_translated(request, RESPONSES_API)
