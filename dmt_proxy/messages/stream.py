"""Chat completion chunks in, Anthropic Messages stream events out.

The sequence, as Anthropic documents it ("Streaming Messages")::

    message_start (the Message with empty content), ping
    per content block:  content_block_start, content_block_delta ..., content_block_stop
                        (text: text_delta; tool_use: input_json_delta)
    message_delta       (stop_reason, stop_sequence, usage)
    message_stop

A stream that fails after it started ends with an ``error`` event (the headers
are gone, so the failure travels in-band) and nothing after it. Blocks are
opened in the order their first fragment arrives and closed when the next one
opens, as chat streams send text, then each tool call, one after the other.
An answer with no content at all is one empty text block, as in the
non-streamed Message. Every event is ``event: <type>`` plus ``data: <json>``.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.messages.protocol import MessageObject, error_type
from dmt_proxy.messages.translate import matched_stop, new_id, stop_reason
from dmt_proxy.openai_types import ChatCompletionChunk, ToolCall


def event(kind: str, **fields: Any) -> bytes:
    """One server-sent event: ``event: kind`` and its JSON ``data`` (``type`` first)."""
    # pydantic-core's encoder: several times faster than json.dumps for these small dicts.
    return b"event: " + kind.encode() + b"\ndata: " + to_json({"type": kind, **fields}) + b"\n\n"


class MessageEvents:
    """Turns one chat stream into the events of one Message (``start``, ``feed``, ``finish``)."""

    def __init__(self, shell: MessageObject, stop_sequences: list[str] | None = None) -> None:
        """``shell``: the Message with its id and model, no content, no stop reason."""
        self._shell = shell
        self._stops = stop_sequences
        self._blocks = 0
        """Blocks opened so far (the next block's index)."""
        self._open: str | None = None
        """The kind of the open block (``text`` or ``tool_use``), ``None`` when none is."""
        self._open_call: int | None = None
        """The chat tool-call index of the open ``tool_use`` block."""
        self._calls: set[int] = set()
        self._finish: str | None = None
        self._matched: str | None = None
        self._input_tokens: int | None = None
        self._output_tokens = 0

    def start(self) -> list[bytes]:
        """``message_start`` and a ``ping``."""
        return [event("message_start", message=self._shell.model_dump(mode="json")),
                event("ping")]  # fmt: skip

    def _text_delta(self, text: str) -> bytes:
        # The most frequent event, one per upstream chunk: written directly.
        return (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
                + str(self._blocks - 1).encode() + b',"delta":{"type":"text_delta","text":'
                + to_json(text) + b"}}\n\n")  # fmt: skip

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        self._open, self._open_call = None, None
        return [event("content_block_stop", index=self._blocks - 1)]

    def _add(self, block: dict[str, Any]) -> list[bytes]:
        events = self._close()
        events.append(event("content_block_start", index=self._blocks, content_block=block))
        self._blocks += 1
        self._open = str(block["type"])
        return events

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        """The events one chat chunk adds."""
        if chunk.usage is not None:
            self._input_tokens = chunk.usage.prompt_tokens
            self._output_tokens = chunk.usage.completion_tokens or self._output_tokens
        if not chunk.choices:
            return []
        choice = chunk.choices[0]
        if choice.finish_reason:
            self._finish = choice.finish_reason
            self._matched = matched_stop(choice.model_extra, self._stops)
        events: list[bytes] = []
        text = chunk.text()
        if text:
            if self._open != "text":
                events += self._add({"type": "text", "text": ""})
            events.append(self._text_delta(text))
        for fragment in choice.delta.tool_calls or []:
            events += self._tool_fragment(fragment)
        return events

    def _tool_fragment(self, fragment: ToolCall) -> list[bytes]:
        index = fragment.index or 0
        function = fragment.function
        events: list[bytes] = []
        if index not in self._calls:
            self._calls.add(index)
            events += self._add({"type": "tool_use", "id": fragment.id or new_id("toolu"),
                                 "name": (function.name if function else None) or "",
                                 "input": {}})  # fmt: skip
            self._open_call = index
        arguments = function.arguments if function is not None else None
        # A fragment for a call already closed cannot be sent (its block is stopped);
        # chat streams send each call's fragments together, so this does not happen.
        if arguments and self._open_call == index:
            events.append(event("content_block_delta", index=self._blocks - 1,
                                delta={"type": "input_json_delta", "partial_json": arguments}))  # fmt: skip
        return events

    def finish(self) -> list[bytes]:
        """Close the open block; ``message_delta`` and ``message_stop``."""
        events = self._close()
        if self._blocks == 0:  # an empty answer is still one (empty) text block
            events += self._add({"type": "text", "text": ""})
            events += self._close()
        finish = self._finish
        if self._calls and finish != "length":
            finish = "tool_calls"  # some upstreams end a tool-call reply with "stop"
        reason = stop_reason(finish, self._matched)
        usage: dict[str, int] = {"output_tokens": self._output_tokens}
        if self._input_tokens is not None:
            usage["input_tokens"] = self._input_tokens
        delta = {"stop_reason": reason,
                 "stop_sequence": self._matched if reason == "stop_sequence" else None}  # fmt: skip
        return [*events, event("message_delta", delta=delta, usage=usage), event("message_stop")]

    @staticmethod
    def fail(exc: UpstreamError | RequestError) -> list[bytes]:
        """The ``error`` event that ends a failed stream (its status names its type)."""
        return [event("error", error={"type": error_type(exc.status_code),
                                      "message": exc.message})]  # fmt: skip
