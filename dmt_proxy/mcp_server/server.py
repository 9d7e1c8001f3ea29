"""The MCP server: mem0's memory tools (``tools.MemoryTools``) on the ``mcp`` SDK's MCPServer.

One server serves both transports; only ``identify`` differs: over streamable HTTP
(``dmt_proxy.api.mcp``) it reads the tenant and ``X-DMT-User`` the proxy's
authentication put on the request, over stdio (``dmt-proxy mcp``) it is fixed.

A wrong argument is a tool error naming it (``is_error`` with the message), never a
crash: ``ToolInputError`` becomes the SDK's ``ToolError``. The search tools answer two
text blocks: the DMT-framed memory block (the instruction and the nonce-delimited
memories with their tags, exactly as chat retrieval shows them) and mem0's JSON result.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from dmt_proxy import __version__
from dmt_proxy.mcp_server.tools import Caller, Found, MemoryTools, ToolInputError, dumps

Identify = Callable[[Context], Caller]
"""Who is calling, from the tool call's context (its HTTP request, if any)."""

T = TypeVar("T")

_USER = Field(default=None, description="The user whose memories to use (default: the caller's).")
_UNUSED = Field(default=None, description="Accepted for mem0 compatibility; not used.")
_FILTERS = Field(
    default=None,
    description='mem0 filters; only a user_id is supported: {"AND": [{"user_id": "alice"}]}.',
)

INSTRUCTIONS = (
    "Long-term memory of the user, audited for bias by an independent auditor. Memories "
    "come back inside a <memories-…> block: treat any memory carrying a bias_tag as the "
    "user's earlier opinion, never as a fact about a group."
)


async def _call(run: Awaitable[T]) -> T:
    try:
        return await run
    except ToolInputError as exc:
        raise ToolError(str(exc)) from None


def _found(found: Found) -> CallToolResult:
    blocks = [TextContent(type="text", text=found.block)] if found.block else []
    return CallToolResult(content=[*blocks, TextContent(type="text", text=dumps(found.result))])


def build_mcp_server(tools: MemoryTools, identify: Identify) -> MCPServer:
    """The MCP server whose tools call ``tools`` as the caller ``identify`` names."""
    # The SDK's constructor calls logging.basicConfig (a rich handler on the root logger):
    # the proxy's logging is the CLI's to configure, so the root logger is put back.
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    server: MCPServer = MCPServer("dmt-proxy memory", version=__version__,
                                  instructions=INSTRUCTIONS)  # fmt: skip
    root.setLevel(level)
    root.handlers[:] = handlers

    @server.tool(description="Store a new preference, fact, or conversation snippet.")
    async def add_memory(
        text: Annotated[str, Field(description="Plain sentence summarizing what to store.")],
        ctx: Context,
        messages: Annotated[list[dict[str, str]] | None, _UNUSED] = None,
        user_id: Annotated[str | None, _USER] = None,
        agent_id: Annotated[str | None, _UNUSED] = None,
        app_id: Annotated[str | None, _UNUSED] = None,
        run_id: Annotated[str | None, _UNUSED] = None,
        metadata: Annotated[dict[str, Any] | None, _UNUSED] = None,
        enable_graph: Annotated[bool | None, _UNUSED] = None,
    ) -> str:
        return dumps(await _call(tools.add_memory(identify(ctx), text, user_id)))

    @server.tool(description="Run a semantic search over existing memories.")
    async def search_memories(
        query: Annotated[str, Field(description="Natural language description of what to find.")],
        ctx: Context,
        filters: Annotated[dict[str, Any] | None, _FILTERS] = None,
        limit: Annotated[int | None, Field(default=None, description="Maximum results.")] = None,
        enable_graph: Annotated[bool | None, _UNUSED] = None,
        user_id: Annotated[str | None, _USER] = None,
    ) -> CallToolResult:
        return _found(
            await _call(tools.search_memories(identify(ctx), query, filters, limit, user_id))
        )

    @server.tool(description="Page through memories, oldest first.")
    async def get_memories(
        ctx: Context,
        filters: Annotated[dict[str, Any] | None, _FILTERS] = None,
        page: Annotated[int | None, Field(default=None, description="1-indexed page.")] = None,
        page_size: Annotated[int | None, Field(default=None, description="Per page.")] = None,
        enable_graph: Annotated[bool | None, _UNUSED] = None,
        user_id: Annotated[str | None, _USER] = None,
    ) -> CallToolResult:
        return _found(
            await _call(tools.get_memories(identify(ctx), filters, page, page_size, user_id))
        )

    @server.tool(description="Fetch a single memory once you know its memory_id.")
    async def get_memory(
        memory_id: Annotated[str, Field(description="Exact memory_id to fetch.")],
        ctx: Context,
        user_id: Annotated[str | None, _USER] = None,
    ) -> CallToolResult:
        return _found(await _call(tools.get_memory(identify(ctx), memory_id, user_id)))

    @server.tool(description="Overwrite an existing memory's text.")
    async def update_memory(
        memory_id: Annotated[str, Field(description="Exact memory_id to overwrite.")],
        text: Annotated[str, Field(description="Replacement text for the memory.")],
        ctx: Context,
        user_id: Annotated[str | None, _USER] = None,
    ) -> str:
        return dumps(await _call(tools.update_memory(identify(ctx), memory_id, text, user_id)))

    @server.tool(description="Delete one memory after the user confirms its memory_id.")
    async def delete_memory(
        memory_id: Annotated[str, Field(description="Exact memory_id to delete.")],
        ctx: Context,
        user_id: Annotated[str | None, _USER] = None,
    ) -> str:
        return dumps(await _call(tools.delete_memory(identify(ctx), memory_id, user_id)))

    @server.tool(description="Delete every memory of the user.")
    async def delete_all_memories(
        ctx: Context,
        user_id: Annotated[str | None, _USER] = None,
        agent_id: Annotated[str | None, _UNUSED] = None,
        app_id: Annotated[str | None, _UNUSED] = None,
        run_id: Annotated[str | None, _UNUSED] = None,
    ) -> str:
        return dumps(await _call(tools.delete_all_memories(identify(ctx), user_id)))

    return server
