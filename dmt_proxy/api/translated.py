"""One call shape for the APIs translated to chat: ``/v1/responses`` and ``/v1/messages``.

Such a route parses its API's body, translates it into the ``ChatCompletionRequest``
a chat client would send, runs it on the one ``ChatPipeline`` and answers in its
API's wire format. Everything but the API's own pieces is here, once: admission, the
pipeline call, the JSON answer, and the stream (``EventStream``: the reply's opening
events with the first chunk's, each chunk's events, the failure, the closing events,
each one write). The API supplies a ``Translation``: its request's parser, its
translation to chat, its reply object and its event writer (``dmt_proxy.messages``,
``dmt_proxy.responses``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel

from dmt_proxy.api.admission import admit
from dmt_proxy.api.bodies import parse_json_object
from dmt_proxy.api.writer import json_reply, stream_reply
from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.exchange import MemoryOutcome
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.pipeline import ChatPipeline
from dmt_proxy.provenance import Channel


class TranslatedRequest(Protocol):
    """What the shared call reads of a translated API's request."""

    @property
    def stream(self) -> bool:
        """Answer as server-sent events."""
        ...

    def scope_user(self) -> str | None:
        """The user the body names (the memory scope unless ``X-DMT-User`` is set)."""
        ...


Req = TypeVar("Req", bound=TranslatedRequest)


class ChatEvents(Protocol):
    """One reply's events over a chat stream; each call returns the events of one step."""

    def start(self) -> list[bytes]:
        """The reply's opening events."""
        ...

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        """The events of one chunk (none for a chunk that adds nothing)."""
        ...

    def fail(self, exc: UpstreamError | RequestError) -> list[bytes]:
        """The events that end a stream failed after its headers left."""
        ...

    def finish(self) -> list[bytes]:
        """The events that end a complete reply."""
        ...


class Translation(Protocol[Req]):
    """What one translated API supplies; the rest of its call is shared."""

    @property
    def channel(self) -> Channel:
        """The door its writes come through (their memories' provenance names it)."""
        ...

    def parse(self, data: dict[str, Any]) -> Req:
        """The API's request in a JSON object: a 400 naming the field or item."""
        ...

    def to_chat(self, req: Req) -> ChatCompletionRequest:
        """The chat request the pipeline runs for ``req`` (a 400 if there is none)."""
        ...

    def new_id(self) -> str:
        """A new id for the reply."""
        ...

    def reply(self, req: Req, completion: ChatCompletion, reply_id: str) -> BaseModel:
        """The API's reply to ``req`` from a finished chat completion."""
        ...

    def events(self, req: Req, reply_id: str, first: ChatCompletionChunk | None) -> ChatEvents:
        """The event writer of a streamed reply (``first``: the stream's first chunk)."""
        ...


@dataclass(frozen=True)
class TranslatedCall(Generic[Req]):
    """A translated API's request and the chat request the pipeline runs for it."""

    request: Req
    chat: ChatCompletionRequest


def parse_call(api: Translation[Req], body: bytes) -> TranslatedCall[Req]:
    """Parse and validate ``body`` as ``api``'s request and translate it to chat: a 400
    naming the field, item or block that cannot be."""
    req = api.parse(parse_json_object(body))
    return TranslatedCall(request=req, chat=api.to_chat(req))


class EventStream:
    """A chat stream as one reply's events (a ``StreamFormat``); a chunk's events are one write."""

    def __init__(self, events: ChatEvents, first: ChatCompletionChunk | None) -> None:
        self._events = events
        self._first = first

    def opening(self) -> bytes:
        """The reply's opening events and the first chunk's."""
        opening = self._events.start()
        if self._first is not None:
            opening += self._events.feed(self._first)
        return b"".join(opening)

    def chunk(self, chunk: ChatCompletionChunk) -> bytes:
        """The events of one chunk (none for a chunk that adds nothing)."""
        return b"".join(self._events.feed(chunk))

    def failure(self, exc: UpstreamError | RequestError) -> bytes:
        """The in-band failure, as the API sends one mid-stream."""
        return b"".join(self._events.fail(exc))

    def closing(self, outcome: MemoryOutcome) -> bytes:
        """The events that end the reply."""
        return b"".join(self._events.finish())


async def answer_translated(request: Request, api: Translation[Req]) -> Response:
    """Admit ``request`` as ``api``'s, run its chat request, answer in ``api``'s format."""
    admitted = await admit(request, lambda body: parse_call(api, body), channel=api.channel,
                           user=lambda call: call.request.scope_user(),
                           model=lambda call: call.chat.model)  # fmt: skip
    req, ctx = admitted.body.request, admitted.ctx
    pipeline: ChatPipeline = request.app.state.pipeline
    reply_id = api.new_id()
    if not req.stream:
        completion = await pipeline.complete(admitted.body.chat, ctx)
        return json_reply(request, ctx, api.reply(req, completion, reply_id).model_dump_json())

    def wire(first: ChatCompletionChunk | None) -> EventStream:
        return EventStream(api.events(req, reply_id, first), first)

    return await stream_reply(request, ctx, pipeline.stream(admitted.body.chat, ctx), wire)
