"""``app_client``: the real proxy app in process, started, behind an ``httpx`` client.

This is how API tests drive the app (STYLE: ``httpx.AsyncClient`` over
``ASGITransport``): ``create_app`` with the parts the test is not about replaced by
shipped fakes, its lifespan entered (so the memory service and its worker run),
and a client that speaks to it without a socket. Everything is shut down on exit,
as the app shuts down: the memory service closes its backend, even one passed in,
while an upstream passed in stays the caller's to close.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import FastAPI

from dmt_proxy.api import create_app
from dmt_proxy.audit.protocol import Auditor
from dmt_proxy.memory.base import MemoryBackend
from dmt_proxy.memory.service import DurableMemoryService
from dmt_proxy.policy import Policy, parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel


@dataclass(frozen=True)
class InProcessApp:
    """A started app and a client bound to it."""

    app: FastAPI
    client: httpx.AsyncClient

    @property
    def memory(self) -> DurableMemoryService:
        """The app's memory service (the policy must enable memory)."""
        memory: DurableMemoryService | None = self.app.state.memory
        if memory is None:
            raise RuntimeError("memory is off in this app's policy")
        return memory


@asynccontextmanager
async def app_client(
    settings: Settings,
    *,
    upstream: ChatModel,
    policy: Policy | Mapping[str, Any] | None = None,
    memory_backend: MemoryBackend | None = None,
    auditor: Auditor | None = None,
    base_url: str = "http://proxy",
) -> AsyncIterator[InProcessApp]:
    """The app ``create_app`` builds from these arguments, started, with a client.

    ``policy`` may be a parsed ``Policy`` or the mapping ``parse_policy`` takes; without
    it the app loads the settings' policy, as ``create_app`` does. ``upstream`` is
    required so that no test reaches a real model by accident.
    """
    if isinstance(policy, Mapping):
        policy = parse_policy(dict(policy))
    app = create_app(settings, policy=policy, upstream=upstream,
                     memory_backend=memory_backend, auditor=auditor)  # fmt: skip
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url=base_url) as client,
    ):
        yield InProcessApp(app=app, client=client)
