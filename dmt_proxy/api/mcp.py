"""``/mcp``: the MCP memory server (``dmt_proxy.mcp_server``) over streamable HTTP.

Each request is authenticated like a chat request, by the tenant's API key
(``Authorization: Bearer <key>``), before the MCP transport sees it; the tools then
act for that tenant's users only, the user coming from the ``user_id`` argument or
the ``X-DMT-User`` header (which pins it). The admin key is never needed.

The transport runs stateless with JSON answers: every POST carries its own key and
its own call, so no MCP session can outlive, or be shared across, a key. Its session
manager runs while the app does (``mcp_lifespan``): a mounted Starlette app's own
lifespan would never be started.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from mcp.server.mcpserver import Context
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from dmt_proxy.api.admission import credential
from dmt_proxy.api.auth import Credential
from dmt_proxy.api.errors import request_error_response
from dmt_proxy.api.routes import MCP
from dmt_proxy.errors import NotFound, RequestError
from dmt_proxy.mcp_server.server import build_mcp_server
from dmt_proxy.mcp_server.tools import Caller, MemoryTools

_CREDENTIAL = "dmt_mcp_credential"
"""Where the authenticated tenant and key travel with the request (``scope["state"]``)."""


def identify_http(ctx: Context) -> Caller:
    """The caller of a tool over HTTP: the tenant and key authenticated here, ``X-DMT-User``,
    and the request's id (stamped by the middleware)."""
    request = ctx.request_context.request
    if not isinstance(request, Request):  # only this module serves the server over HTTP
        raise RuntimeError("the MCP endpoint serves HTTP requests only")
    header = request.headers.get("x-dmt-user", "").strip()
    state = request.scope["state"]
    found: Credential | None = state.get(_CREDENTIAL)
    return Caller(tenant=found.tenant if found else None, pinned_user=header or None,
                  key_id=found.key_id if found else None,
                  request_id=state.get("request_id"))  # fmt: skip


class _Endpoint:
    """An ASGI app (not a function: Starlette would treat a function as a request handler)
    that authenticates, then hands the request to the MCP transport."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _serve(scope, receive, send)


async def _serve(scope: Scope, receive: Receive, send: Send) -> None:
    request = Request(scope, receive)
    try:
        found = credential(request)
        transport: StreamableHTTPASGIApp | None = request.app.state.mcp
        if transport is None:
            raise NotFound("Memory is disabled in this proxy's policy.")
    except RequestError as exc:
        await request_error_response(exc, request)(scope, receive, send)
        return
    scope.setdefault("state", {})[_CREDENTIAL] = found
    await transport(scope, receive, send)


def install_mcp(app: FastAPI) -> None:
    """Route ``/mcp`` (every method the transport answers) to the MCP endpoint."""
    app.router.routes.append(
        Route(MCP.path, endpoint=_Endpoint(), include_in_schema=MCP.documented)
    )


@asynccontextmanager
async def mcp_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Run the MCP transport over the app's memory service while the app runs."""
    memory = app.state.memory
    if memory is None:
        app.state.mcp = None
        yield
        return
    policy = app.state.policy
    tools = MemoryTools(memory, policy.mode, top_k=policy.memory.top_k or 10)
    server = build_mcp_server(tools, identify_http)
    # Host checks are for servers without authentication; here every request carries a key.
    server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    # The session manager holds an anyio task group, which must be exited by the task that
    # entered it; a lifespan may be entered and exited by different tasks (a test fixture's
    # setup and teardown), so the manager runs in a task of its own until the app stops.
    ready, stop = asyncio.Event(), asyncio.Event()

    async def run_transport() -> None:
        async with server.session_manager.run():
            ready.set()
            await stop.wait()

    task = asyncio.create_task(run_transport(), name="mcp-transport")
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():  # it failed to start: say why
        waiting.cancel()
        task.result()
    app.state.mcp = StreamableHTTPASGIApp(server.session_manager)
    try:
        yield
    finally:
        app.state.mcp = None
        stop.set()
        await task
