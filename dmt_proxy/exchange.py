"""The types a request carries between the API layer, the pipeline and the memory service.

They sit below all three (they import only plain types, and no policy parser: the mode
is ``dmt_proxy.modes.Mode``), so the memory service can implement ``MemoryService``
without importing the pipeline that calls it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from dmt_proxy.memory.base import Scope
from dmt_proxy.modes import Mode
from dmt_proxy.provenance import CHAT_ORIGIN, Origin
from dmt_proxy.turns import MemoryAccess, Retrieval, RetrievalOutcome


class WriteStatus(str, Enum):
    """What a request did to memory once its answer was known."""

    QUEUED = "queued"
    """The turn was enqueued in the outbox (audited and stored behind the client's back)."""
    TOOL_STEP = "tool-step"
    """Nothing written: the step ended in tool calls; the turn's final answer is written."""


@dataclass(frozen=True)
class MemoryOutcome:
    """What happened to memory for one request: its retrieval and its write.

    The pipeline and the memory service fill it in; the API layer alone reports it
    (as response headers). ``None`` parts: nothing to report (yet: a stream's
    write is known only after its last chunk).
    """

    retrieval: RetrievalOutcome | None = None
    write: WriteStatus | None = None


@dataclass
class RequestContext:
    """Per-request facts gathered by the API layer, plus what the pipeline reports back."""

    request_id: str
    mode: Mode
    memory: MemoryAccess
    scope: Scope | None
    """The memory scope, built once by the API layer (``None``: the request names no user)."""
    origin: Origin = CHAT_ORIGIN
    """Where the request came from (its route's channel, tenant, key, model), built once by
    the API layer; the exchange it writes carries it to the memory's provenance."""
    started: float = field(default_factory=time.perf_counter)
    upstream_seconds: float = 0.0
    outcome: MemoryOutcome = field(default_factory=MemoryOutcome)
    """What the pipeline did with memory so far; only the API layer turns it into headers."""

    def overhead_ms(self) -> float:
        return max(0.0, (time.perf_counter() - self.started - self.upstream_seconds) * 1000.0)


@dataclass(frozen=True)
class Exchange:
    """A finished interaction ``(q_t, r_t)``, the unit written to memory.

    It travels as it is: the memory service enqueues it, the outbox keeps it
    (``dmt_proxy.memory.write.outbox``) and hands it to the worker inside the row's
    ``OutboxItem``, still typed (``mode`` a ``Mode``, not its text).
    """

    scope: Scope
    query: str
    answer: str
    request_id: str
    mode: Mode
    origin: Origin | None = CHAT_ORIGIN
    """Where it came from (``dmt_proxy.provenance``). The default, a chat write with no
    tenant, key or model known, is what a caller that names none gets. ``None`` only for a
    write the outbox acknowledged before origins were recorded: its origin is unknown, and
    the memory it becomes has no provenance."""


class MemoryService(Protocol):
    """The memory side of the pipeline: retrieval before, write-behind after."""

    async def retrieve(self, ctx: RequestContext, query: str) -> Retrieval:
        """System messages carrying the user's memories relevant to ``query``, and the outcome."""
        ...

    async def record(self, exchange: Exchange) -> None:
        """Durably enqueue ``exchange`` for auditing and storage; must return fast."""
        ...
