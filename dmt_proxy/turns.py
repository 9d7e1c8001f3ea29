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
from typing import Any

from dmt_proxy.openai_types import ChatMessage

DEFAULT_TTL_S = 600.0
"""How long a turn's retrieval is reused: longer than any tool loop of a local model."""
DEFAULT_MAX_TURNS = 4096
"""Turns remembered at once (each entry holds one rendered memory block)."""


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


@dataclass(frozen=True)
class Retrieval:
    """What retrieval added to a request: system messages and the headers that describe it."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    reusable: bool = True
    """False when the store failed: a later step of the turn should try again."""


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
