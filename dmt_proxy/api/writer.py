"""The response writer: everything a pipeline route does after the pipeline, in one place.

``response_headers`` is the one place that writes the ``x-dmt-*`` response headers:
the request's id, mode and overhead, and its ``MemoryOutcome`` (what retrieval and
the write did). ``json_reply`` answers with a finished body; ``stream_reply``
answers with a server-sent event stream whose wire format the route supplies as a
``StreamFormat`` (chat chunks, Responses events).

A stream's headers leave with its first chunk, before its write is known, so its
headers report its retrieval only. Its write is reported in-band, as an SSE
comment just before the route's closing events (``data: [DONE]`` for chat)::

    : x-dmt-memory-write: queued

The same words as the non-streamed header. A comment rather than a header sent
early (which would have to promise ``queued`` before the answer is known: a tool
step, an empty answer or a stream that fails midway writes nothing) or an HTTP
trailer (which most clients never read); rather than an event, because SSE
parsers, the OpenAI SDKs among them, skip comments, so no client sees an event
type it does not know. A stream that ends without a write has no such line; one
that fails midway ends with its error event instead.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Protocol

from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.exchange import MemoryOutcome, RequestContext, WriteStatus
from dmt_proxy.openai_types import ChatCompletionChunk
from dmt_proxy.turns import MemoryAccess, RetrievalOutcome, RetrievalStatus

NO_USER_NOTE = "none; no user (set the 'user' field or X-DMT-User)"
"""``x-dmt-memory`` of a request that names no user."""
REUSED_NOTE = "reused (same user turn)"
"""``x-dmt-memory-retrieval`` of a later step of a turn."""
WRITE_NOTES = {
    WriteStatus.QUEUED: "queued",
    WriteStatus.TOOL_STEP: "skipped; tool-call step (the turn's final answer is written)",
}
"""``x-dmt-memory-write`` of each write outcome."""


def _memory_note(retrieval: RetrievalOutcome, access: MemoryAccess) -> str:
    """``x-dmt-memory``: the access the store was consulted under, or why it was not."""
    match retrieval.status:
        case RetrievalStatus.OFF:
            return "off"
        case RetrievalStatus.NO_USER:
            return NO_USER_NOTE
        case RetrievalStatus.DISABLED:
            return "disabled"
        case RetrievalStatus.UNAVAILABLE:
            return f"unavailable ({retrieval.failure}); answered without memory"
        case RetrievalStatus.SKIPPED | RetrievalStatus.SEARCHED:
            return (retrieval.access or access).value


def memory_headers(outcome: MemoryOutcome, access: MemoryAccess) -> dict[str, str]:
    """The ``x-dmt-memory*`` headers of a memory outcome (``access``: the request's)."""
    headers: dict[str, str] = {}
    retrieval = outcome.retrieval
    if retrieval is not None:
        headers["x-dmt-memory"] = _memory_note(retrieval, access)
        if retrieval.memories is not None:
            headers["x-dmt-memories"] = str(retrieval.memories)
        if retrieval.reused:
            headers["x-dmt-memory-retrieval"] = REUSED_NOTE
    if outcome.write is not None:
        headers["x-dmt-memory-write"] = WRITE_NOTES[outcome.write]
    return headers


def response_headers(ctx: RequestContext) -> dict[str, str]:
    """The ``x-dmt-*`` headers every pipeline route answers with."""
    return {
        **memory_headers(ctx.outcome, ctx.memory),
        "x-request-id": ctx.request_id,
        "x-dmt-mode": ctx.mode.value,
        "x-dmt-overhead-ms": f"{ctx.overhead_ms():.3f}",
    }


def _observe_overhead(request: Request, ctx: RequestContext, *, stream: bool) -> None:
    request.app.state.metrics.overhead.labels(str(stream).lower()).observe(
        ctx.overhead_ms() / 1000.0
    )


def json_reply(request: Request, ctx: RequestContext, body: bytes | str) -> Response:
    """A finished answer: the JSON ``body`` with the request's headers."""
    _observe_overhead(request, ctx, stream=False)
    return Response(body, media_type="application/json", headers=response_headers(ctx))


def sse(data: bytes) -> bytes:
    """One server-sent event carrying ``data``."""
    return b"data: " + data + b"\n\n"


def write_comment(outcome: MemoryOutcome) -> bytes:
    """The SSE comment reporting a finished stream's write (empty when it wrote nothing)."""
    if outcome.write is None:
        return b""
    return f": x-dmt-memory-write: {WRITE_NOTES[outcome.write]}\n\n".encode()


class StreamFormat(Protocol):
    """How one route writes a chat stream on the wire; each call returns one write."""

    def opening(self) -> bytes:
        """What leaves first: the stream's preamble and its first chunk (may be empty)."""
        ...

    def chunk(self, chunk: ChatCompletionChunk) -> bytes:
        """One later chunk (empty: nothing to send for it)."""
        ...

    def failure(self, exc: UpstreamError | RequestError) -> bytes:
        """The in-band error that ends a stream whose headers are already sent."""
        ...

    def closing(self, outcome: MemoryOutcome) -> bytes:
        """What ends a complete stream; ``outcome`` is final here (its write included)."""
        ...


async def first_chunk(
    chunks: AsyncGenerator[ChatCompletionChunk, None],
) -> ChatCompletionChunk | None:
    """The stream's first chunk, pulled before answering so that an upstream failure is
    still a proper 502/504 (``None``: the upstream sent nothing)."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None
    except BaseException:
        await chunks.aclose()
        raise


async def stream_reply(
    request: Request,
    ctx: RequestContext,
    chunks: AsyncGenerator[ChatCompletionChunk, None],
    wire: Callable[[ChatCompletionChunk | None], StreamFormat],
) -> Response:
    """A streamed answer: ``chunks`` as server-sent events in the format ``wire`` builds
    from the first chunk; an upstream failure after the first chunk travels in-band."""
    first = await first_chunk(chunks)
    headers = response_headers(ctx)
    _observe_overhead(request, ctx, stream=True)
    fmt = wire(first)

    async def body() -> AsyncIterator[bytes]:
        try:
            opening = fmt.opening()
            if opening:
                yield opening
            async for chunk in chunks:
                data = fmt.chunk(chunk)
                if data:
                    yield data
        except (UpstreamError, RequestError) as exc:
            # Headers are gone: report the failure in-band, as OpenAI does.
            yield fmt.failure(exc)
            return
        finally:
            await chunks.aclose()
        # The pipeline's write has run by now (after the last chunk): its outcome is final.
        yield write_comment(ctx.outcome) + fmt.closing(ctx.outcome)

    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)
