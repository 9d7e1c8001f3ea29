"""``dmt-proxy mcp``: the MCP memory server alone, over stdio, for desktop agents.

It opens the policy's memory service (backend, outbox, worker, auditor) as the proxy
does and serves mem0's memory tools on stdin/stdout; logs go to stderr. With no
tenant and no header, the user is the ``user_id`` argument or ``--user-id``.

The SQLite outbox belongs to one process: run it on its own state directory, or
point it and the proxy at the shared PostgreSQL outbox (``DMT_OUTBOX=postgres``).
"""

from __future__ import annotations

import asyncio
import logging
import sys

from dmt_proxy.errors import ConfigError
from dmt_proxy.mcp_server.server import build_mcp_server
from dmt_proxy.mcp_server.tools import Caller, MemoryTools
from dmt_proxy.memory.assembly import build_memory_service
from dmt_proxy.metrics import Metrics
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.factory import open_upstream


async def run_stdio(settings: Settings, *, user_id: str | None = None) -> int:
    """Serve the memory tools on stdin/stdout until the client closes them."""
    policy = settings.load_policy()
    if policy.memory.backend == "none":
        raise ConfigError("the policy turns memory off (memory.backend: none): no memory to serve")
    upstream = await open_upstream(settings, policy)
    try:
        memory = await build_memory_service(settings, policy, upstream.registry, upstream.chat,
                                            Metrics())  # fmt: skip
        try:
            memory.start()
            tools = MemoryTools(memory, policy.mode, top_k=policy.memory.top_k or 10)
            caller = Caller(default_user=user_id)
            await build_mcp_server(tools, lambda _ctx: caller).run_stdio_async()
        finally:
            await memory.aclose()  # the worker stops; what it has not stored stays queued
    finally:
        await upstream.aclose()
    return 0


def main(settings: Settings, *, user_id: str | None = None) -> int:
    """Run the stdio server in a new event loop (the CLI entry point)."""
    # stdout carries the protocol: every log line goes to stderr.
    logging.basicConfig(level=settings.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    return asyncio.run(run_stdio(settings, user_id=user_id))
