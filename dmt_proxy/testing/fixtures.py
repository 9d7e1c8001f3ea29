"""pytest fixtures over the shipped test helpers (import them into a ``conftest.py``).

- ``open_app``: opens ``app_client`` apps for a test and closes them all after it,
  so a test or another fixture can ask for a started app in one line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack
from typing import Any, Protocol

import pytest

from dmt_proxy.audit.protocol import Auditor
from dmt_proxy.memory.base import MemoryBackend
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.app import InProcessApp, app_client
from dmt_proxy.upstream.base import ChatModel


class OpenApp(Protocol):
    """``open_app``'s value: ``app_client``'s arguments in, the started app out."""

    async def __call__(
        self,
        settings: Settings,
        *,
        upstream: ChatModel,
        policy: Policy | Mapping[str, Any] | None = None,
        memory_backend: MemoryBackend | None = None,
        auditor: Auditor | None = None,
        base_url: str = "http://proxy",
    ) -> InProcessApp: ...


@pytest.fixture
async def open_app() -> AsyncIterator[OpenApp]:
    """Start in-process apps (see ``app_client``); each is shut down after the test."""
    async with AsyncExitStack() as stack:

        async def start(
            settings: Settings,
            *,
            upstream: ChatModel,
            policy: Policy | Mapping[str, Any] | None = None,
            memory_backend: MemoryBackend | None = None,
            auditor: Auditor | None = None,
            base_url: str = "http://proxy",
        ) -> InProcessApp:
            opened = app_client(settings, upstream=upstream, policy=policy,
                                memory_backend=memory_backend, auditor=auditor,
                                base_url=base_url)  # fmt: skip
            return await stack.enter_async_context(opened)

        yield start
