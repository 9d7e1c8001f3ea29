"""A minimal OpenAI-compatible upstream that answers instantly. It is not a model.

For isolating measurements (proxy overhead without model time) and for fault
tests. Behaviour per request can be steered with the ``x-fake-*`` request
headers or process-wide with ``FakeUpstreamConfig``:

* ``delay_s``: sleep before answering;
* ``fail_status``: answer with this HTTP status and an OpenAI error body;
* ``truncate``: streams stop after the first chunk without ``[DONE]``;
* ``answer``: the canned reply (e.g. a verdict JSON, to stand in for an auditor);
* ``chunk_interval_s`` (process-wide only): pause between stream chunks, like a model.

``/health`` also counts the distinct client connections that sent chat requests.

Run it: ``python -m dmt_proxy.testing.upstream_server --port 9100`` (every setting is
also a flag, so a proxy process can be pointed at a failing upstream). ``/health``
reports how many chat requests it received, so tests can count retries.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, Usage

ANSWER = "This is a canned answer from the fake upstream."


@dataclass
class FakeUpstreamConfig:
    delay_s: float = 0.0
    fail_status: int | None = None
    truncate: bool = False
    stream_chunks: int = 8
    chunk_interval_s: float = 0.0
    answer: str = ANSWER


def _completion(model: str, answer: str = ANSWER) -> ChatCompletion:
    usage = Usage(prompt_tokens=10, completion_tokens=9, total_tokens=19)
    return ChatCompletion.of_text(answer, id="chatcmpl-fake", model=model,
                                  created=int(time.time()), usage=usage)  # fmt: skip


def _chunk(model: str, text: str | None, finish: str | None = None) -> bytes:
    chunk = ChatCompletionChunk.of_text(text, id="chatcmpl-fake", model=model,
                                        created=int(time.time()), finish=finish)  # fmt: skip
    return b"data: " + chunk.wire_json() + b"\n\n"


def create_fake_upstream(config: FakeUpstreamConfig | None = None) -> Starlette:
    """The fake upstream as an ASGI app."""
    cfg = config or FakeUpstreamConfig()
    stats = {"requests": 0}
    peers: set[tuple[str, int]] = set()

    async def chat(request: Request) -> Response:
        stats["requests"] += 1
        if request.client:  # distinct client sockets: shows whether callers reuse connections
            peers.add((request.client.host, request.client.port))
        body = await request.json()
        model = str(body.get("model", "fake"))
        delay = float(request.headers.get("x-fake-delay-s", cfg.delay_s))
        fail = request.headers.get("x-fake-fail-status") or cfg.fail_status
        truncate = request.headers.get("x-fake-truncate", str(cfg.truncate)).lower() == "true"
        if delay:
            await asyncio.sleep(delay)
        if fail:
            status = int(fail)
            return JSONResponse(
                {"error": {"message": f"fake upstream failure {status}", "type": "server_error",
                           "param": None, "code": None}},
                status_code=status,
            )  # fmt: skip
        if not body.get("stream"):
            return Response(_completion(model, cfg.answer).wire_json(),
                            media_type="application/json")  # fmt: skip
        words = cfg.answer.split(" ")
        per_chunk = max(1, len(words) // max(cfg.stream_chunks, 1))

        async def events() -> AsyncIterator[bytes]:
            for i in range(0, len(words), per_chunk):
                piece = " ".join(words[i : i + per_chunk])
                yield _chunk(model, piece if i == 0 else " " + piece)
                if truncate:
                    return
                if cfg.chunk_interval_s:  # a model's pace: open streams that are mostly idle
                    await asyncio.sleep(cfg.chunk_interval_s)
            yield _chunk(model, None, "stop")
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(_: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok", **stats, "connections": len(peers)})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/chat/completions", chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
        ]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--delay-s", type=float, default=0.0, help="sleep before answering")
    parser.add_argument("--fail-status", type=int, default=None,
                        help="answer every request with this HTTP status")  # fmt: skip
    parser.add_argument("--truncate", action="store_true",
                        help="end streams after the first chunk, without [DONE]")  # fmt: skip
    parser.add_argument("--answer", default=ANSWER, help="the canned reply")
    parser.add_argument("--chunk-interval-s", type=float, default=0.0,
                        help="pause between stream chunks (a model's pace)")  # fmt: skip
    args = parser.parse_args()
    config = FakeUpstreamConfig(delay_s=args.delay_s, fail_status=args.fail_status,
                                truncate=args.truncate, answer=args.answer,
                                chunk_interval_s=args.chunk_interval_s)  # fmt: skip
    app = create_fake_upstream(config)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
