"""Pure-ASGI middleware: request id, start time, request metrics.

The metrics' ``route`` label comes from the route declarations (``RouteLabels``), read
from the raw path before routing, so a request to no route is counted as ``other``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from dmt_proxy.api.routing import RouteLabels
from dmt_proxy.metrics import Metrics


class RequestMiddleware:
    """Gives every request an id (client's ``x-request-id`` if sane) and counts it."""

    def __init__(self, app: ASGIApp, metrics: Metrics, labels: RouteLabels) -> None:
        self.app = app
        self.metrics = metrics
        self.labels = labels

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        incoming = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        request_id = (
            incoming
            if 0 < len(incoming) <= 128 and incoming.isprintable()
            else (f"req_{uuid.uuid4().hex}")
        )
        state: dict[str, Any] = scope.setdefault("state", {})
        state["request_id"] = request_id
        state["started"] = started
        route = self.labels(scope.get("path", ""))
        status = 500
        is_stream = False

        async def send_wrapper(message: Message) -> None:
            nonlocal status, is_stream
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"x-request-id" for k, _ in headers):
                    headers.append((b"x-request-id", request_id.encode("latin-1")))
                is_stream = any(
                    k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                    for k, v in headers
                )
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            mode = str(state.get("mode", "none"))
            self.metrics.requests.labels(route, mode, str(status)).inc()
            self.metrics.request_duration.labels(route, str(is_stream).lower()).observe(
                time.perf_counter() - started
            )
