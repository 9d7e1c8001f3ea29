"""A user turn, not an HTTP request, is the unit of memory.

An agent's tool loop sends several requests for one thing the user said::

    [..., user]                              step 1: the model answers with tool_calls
    [..., user, assistant(tool_calls), tool] step 2..n: more tool calls, or the final answer

Every step carries the same last user message. ``turn_of`` names the turn a
request belongs to: the text of its last user message (the query that is
retrieved for and written) and a digest of the conversation up to and including
that message, so the same words said again later are another turn. A request is
a *continuation* when anything follows the last user message (assistant tool
calls, tool results): a later step of a turn that has already started.

``TurnCache`` keeps the retrieval of a turn for its later steps, so a five-step
loop embeds and searches once. It is bounded (least recently used entries go
first) and entries expire after a TTL, so a conversation resumed much later is
retrieved afresh.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from dmt_proxy.openai_types import ChatMessage

DEFAULT_TTL_S = 600.0
"""How long a turn's retrieval is reused: longer than any tool loop of a local model."""
DEFAULT_MAX_TURNS = 4096
"""Turns remembered at once (each entry holds one rendered memory block)."""


class MemoryAccess(str, Enum):
    """What a request may do with memory (header ``X-DMT-Memory``)."""

    READ_WRITE = "read-write"
    READ_ONLY = "read-only"
    OFF = "off"


@dataclass(frozen=True)
class Turn:
    """The user turn a chat request belongs to."""

    query: str
    """Text of the last user message ('' when the request has none)."""
    continuation: bool
    """True when messages follow the last user message: a later step of a started turn."""
    prefix: tuple[ChatMessage, ...] = ()
    """The messages up to and including the last user message (empty without one)."""

    @property
    def key(self) -> str:
        """Digest of ``prefix``: the same words said again later are another turn."""
        dumped = [m.model_dump(exclude_none=True) for m in self.prefix]
        text = json.dumps(dumped, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def turn_of(messages: Sequence[ChatMessage]) -> Turn:
    """The turn of a request with the client's ``messages``."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "user":
            return Turn(query=messages[index].text(), continuation=index < len(messages) - 1,
                        prefix=tuple(messages[: index + 1]))  # fmt: skip
    return Turn(query="", continuation=False)


class RetrievalStatus(str, Enum):
    """What became of a request's memory retrieval."""

    OFF = "off"
    """The request turned memory off."""
    NO_USER = "no-user"
    """The request names no user, so there is no scope to search."""
    DISABLED = "disabled"
    """The proxy runs without a memory backend."""
    SKIPPED = "skipped"
    """Memory was on but there was nothing to search for (no query, or ``top_k`` 0)."""
    SEARCHED = "searched"
    """The store was searched; ``memories`` says how many were shown."""
    UNAVAILABLE = "unavailable"
    """The store failed; the request was answered without memory."""


@dataclass(frozen=True)
class RetrievalOutcome:
    """What retrieval did for one request: a value the API layer reports to the client."""

    status: RetrievalStatus
    access: MemoryAccess | None = None
    """The memory access the store was consulted under (``None`` when it was not)."""
    memories: int | None = None
    """How many memories were shown (``SEARCHED`` only)."""
    failure: str | None = None
    """Why the store could not be searched: the error's type (``UNAVAILABLE`` only)."""
    reused: bool = False
    """True when a later step of a turn reused the retrieval of the turn's first step."""


def _skipped() -> RetrievalOutcome:
    return RetrievalOutcome(RetrievalStatus.SKIPPED)


@dataclass(frozen=True)
class Retrieval:
    """What retrieval added to a request: system messages, and the outcome that describes it."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    outcome: RetrievalOutcome = field(default_factory=_skipped)
    reusable: bool = True
    """False when the store failed: a later step of the turn should try again."""

    @classmethod
    def skipped(cls, access: MemoryAccess) -> Retrieval:
        """Nothing to search for: no memories, and a later step may reuse that."""
        return cls(outcome=RetrievalOutcome(RetrievalStatus.SKIPPED, access=access))

    @classmethod
    def searched(
        cls, access: MemoryAccess, messages: list[dict[str, Any]], shown: int
    ) -> Retrieval:
        """The store was searched: ``messages`` carry the ``shown`` memories."""
        outcome = RetrievalOutcome(RetrievalStatus.SEARCHED, access=access, memories=shown)
        return cls(messages=messages, outcome=outcome)

    @classmethod
    def unavailable(cls, access: MemoryAccess, failure: str) -> Retrieval:
        """The store failed with ``failure``: no memories, and the next step tries again."""
        outcome = RetrievalOutcome(RetrievalStatus.UNAVAILABLE, access=access, failure=failure)
        return cls(outcome=outcome, reusable=False)


@dataclass(frozen=True)
class TurnKey:
    """Whose turn, in which mode (DMT renders tags, baseline does not), which conversation."""

    user: str
    mode: str
    turn: str


class TurnCache:
    """Bounded, expiring map from a turn to its retrieval (one per proxy process)."""

    def __init__(
        self,
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_turns
        self._ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[TurnKey, tuple[float, Retrieval]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: TurnKey) -> Retrieval | None:
        """The turn's retrieval if it is still fresh."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        stored, retrieval = entry
        if self._clock() - stored > self._ttl_s:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return retrieval

    def put(self, key: TurnKey, retrieval: Retrieval) -> None:
        """Remember ``retrieval`` for the turn's later steps (dropping the oldest if full)."""
        if self._max <= 0 or not retrieval.reusable:
            return
        self._entries[key] = (self._clock(), retrieval)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
