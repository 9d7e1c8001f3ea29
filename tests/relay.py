"""A recording HTTP relay for end-to-end tests: forwards to a real upstream, keeps each body.

Used to see exactly what the proxy sent to the real model (the upstream prompt
with memories and tags) without replacing the model.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from dmt_proxy.net import free_port
from tests.timing import budget


class RecordingRelay:
    """Runs in a background thread on a free port; ``bodies`` holds the JSON bodies seen."""

    def __init__(self, upstream_base: str) -> None:
        self.upstream_base = upstream_base.rstrip("/")
        self.bodies: list[dict[str, Any]] = []
        self.port = free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _app(self) -> Starlette:
        async def relay(request: Request) -> Response:
            raw = await request.body()
            self.bodies.append(json.loads(raw))
            client = httpx.AsyncClient(timeout=600)
            upstream = client.build_request(
                "POST", self.upstream_base + "/chat/completions", content=raw,
                headers={"content-type": "application/json"},
            )  # fmt: skip
            resp = await client.send(upstream, stream=True)

            async def body() -> Any:
                try:
                    async for chunk in resp.aiter_raw():
                        yield chunk
                finally:
                    await resp.aclose()
                    await client.aclose()

            return StreamingResponse(body(), status_code=resp.status_code,
                                     media_type=resp.headers.get("content-type"))  # fmt: skip

        return Starlette(routes=[Route("/v1/chat/completions", relay, methods=["POST"])])

    def start(self) -> RecordingRelay:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + budget(30)  # a start-up wait: a hang guard
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("relay did not start")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def messages_of(self, index: int = -1) -> list[dict[str, Any]]:
        return list(self.bodies[index]["messages"])


__all__ = ["RecordingRelay", "asyncio"]
