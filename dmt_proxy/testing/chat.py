"""A scripted chat model shipped for tests and demos. It is not a language model.

``ScriptedChatModel`` answers from a list of replies (or a function of the call),
records every call it receives (so tests can assert what the proxy sent
upstream), and can raise a given error to exercise failure paths. ``script()``
replaces the replies mid-test (e.g. an outage, then recovery).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence

from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, Usage
from dmt_proxy.upstream.base import UpstreamCall

Reply = str | BaseException | ChatCompletion
"""Text, an error to raise, or a whole completion (to script log-probs and other extras)."""


class ScriptedChatModel:
    """Replies with scripted text; the last reply repeats once the script runs out."""

    def __init__(
        self,
        replies: Sequence[Reply] | Callable[[UpstreamCall], Reply] = ("ok",),
        *,
        delay_s: float = 0.0,
    ) -> None:
        self._delay_s = delay_s
        self.calls: list[UpstreamCall] = []
        self.script(replies)

    def script(self, replies: Sequence[Reply] | Callable[[UpstreamCall], Reply]) -> None:
        """Answer the following calls from ``replies``, starting at its first entry."""
        if not callable(replies) and not replies:
            raise ValueError("a script needs at least one reply")
        self._replies = replies
        self._answered = 0  # counted apart from ``calls``, which tests may clear

    def _next_reply(self, call: UpstreamCall) -> str | ChatCompletion:
        self.calls.append(call)
        if callable(self._replies):
            reply = self._replies(call)
        else:
            reply = self._replies[min(self._answered, len(self._replies) - 1)]
        self._answered += 1
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def _next(self, call: UpstreamCall) -> str:
        reply = self._next_reply(call)
        return reply if isinstance(reply, str) else reply.text()

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """The next scripted reply as a completion (a scripted completion as it is)."""
        reply = self._next_reply(call)
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        if isinstance(reply, ChatCompletion):
            return reply
        text = reply
        usage = Usage(prompt_tokens=0, completion_tokens=len(text.split()), total_tokens=0)
        return ChatCompletion.of_text(text, id=f"chatcmpl-{uuid.uuid4().hex[:12]}",
                                      model=call.endpoint.model, created=int(time.time()),
                                      usage=usage)  # fmt: skip

    async def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """The next scripted reply, a word a chunk, then a ``stop`` chunk."""
        text = self._next(call)
        ident, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
        model = call.endpoint.model
        words = text.split(" ")
        for i, word in enumerate(words):
            if self._delay_s:
                await asyncio.sleep(self._delay_s / max(len(words), 1))
            piece = word if i == 0 else " " + word
            yield ChatCompletionChunk.of_text(piece, id=ident, model=model, created=created)
        yield ChatCompletionChunk.of_text(None, id=ident, model=model, created=created,
                                          finish="stop")  # fmt: skip
