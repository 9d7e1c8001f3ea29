"""The direct OpenAI-compatible upstream path against the shipped fake upstream served
by uvicorn on a real loopback port: connection reuse, which an in-process transport
cannot show. The rest of the path is ``tests/unit/test_openai_compat.py``."""

from __future__ import annotations

import httpx

from dmt_proxy.net import free_port
from dmt_proxy.testing.upstream_server import ANSWER, create_fake_upstream
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel
from tests.unit.test_openai_compat import CALL, FAST


def test_streams_reuse_the_upstream_connection() -> None:
    """A stream read to [DONE] hands its connection back to the pool (real TCP server).

    Stopping at [DONE] used to close the connection, so every streamed request paid a
    new TCP connect to the upstream; the fake server counts distinct client sockets.
    """
    import asyncio
    import dataclasses
    import threading
    import time

    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_fake_upstream(), host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}/v1"
        call = dataclasses.replace(CALL, endpoint=FAST.model_copy(update={"api_base": base}))

        async def run() -> None:
            model = OpenAICompatChatModel()
            for _ in range(5):
                assert "".join([c.text() async for c in model.stream(call)]) == ANSWER
            await model.aclose()

        asyncio.run(run())
        health = httpx.get(f"http://127.0.0.1:{port}/health").json()
        assert health["requests"] == 5 and health["connections"] == 1
    finally:
        server.should_exit = True
        thread.join(timeout=10)
