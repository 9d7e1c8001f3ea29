"""The types a request carries between the API layer, the pipeline and the memory service.

They sit below all three (they import only plain types), so the memory service can
implement ``MemoryService`` without importing the pipeline that calls it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from dmt_proxy.memory.base import Scope
from dmt_proxy.policy import Mode
from dmt_proxy.turns import Retrieval


class MemoryAccess(str, Enum):
    """What a request may do with memory (header ``X-DMT-Memory``)."""

    READ_WRITE = "read-write"
    READ_ONLY = "read-only"
    OFF = "off"


@dataclass
class RequestContext:
    """Per-request facts gathered by the API layer, plus what the pipeline reports back."""

    request_id: str
    mode: Mode
    memory: MemoryAccess
    scope: Scope | None
    """The memory scope, built once by the API layer (``None``: the request names no user)."""
    started: float = field(default_factory=time.perf_counter)
    upstream_seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    """Response headers the pipeline wants the client to see (``x-dmt-*``)."""

    def overhead_ms(self) -> float:
        return max(0.0, (time.perf_counter() - self.started - self.upstream_seconds) * 1000.0)


@dataclass(frozen=True)
class Exchange:
    """A finished interaction ``(q_t, r_t)``, the unit written to memory."""

    scope: Scope
    query: str
    answer: str
    request_id: str
    mode: Mode


class MemoryService(Protocol):
    """The memory side of the pipeline: retrieval before, write-behind after."""

    async def retrieve(self, ctx: RequestContext, query: str) -> Retrieval:
        """System messages carrying the user's memories relevant to ``query``, and headers."""
        ...

    async def record(self, exchange: Exchange) -> None:
        """Durably enqueue ``exchange`` for auditing and storage; must return fast."""
        ...
