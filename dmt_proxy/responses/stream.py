"""Chat completion chunks in, Responses stream events out.

The sequence, as OpenAI documents it::

    response.created, response.in_progress
    for a text answer:  response.output_item.added (message), response.content_part.added,
                        response.output_text.delta ..., response.output_text.done,
                        response.content_part.done, response.output_item.done
    per tool call:      response.output_item.added (function_call),
                        response.function_call_arguments.delta ...,
                        response.function_call_arguments.done, response.output_item.done
    response.completed  (response.incomplete when the token limit cut the answer)

A stream that fails after it started ends with an ``error`` event and then
``response.failed`` (the headers are gone, so the failure travels in-band).
Every event carries ``sequence_number``, counting from 0. Output items are
opened in the order their first fragment arrives and closed when the next one
opens, as chat streams send them one after the other.
"""

from __future__ import annotations

from typing import Any

from pydantic_core import to_json

from dmt_proxy.errors import RequestError, UpstreamError
from dmt_proxy.openai_types import ChatCompletionChunk, ToolCall
from dmt_proxy.responses.protocol import (
    FunctionCallItem,
    IncompleteDetails,
    OutputItem,
    OutputMessage,
    OutputText,
    ResponseError,
    ResponseObject,
)
from dmt_proxy.responses.translate import new_id, response_usage


class ResponseEvents:
    """Turns one chat stream into the events of one Response (``start``, ``feed``, ``finish``)."""

    def __init__(self, shell: ResponseObject) -> None:
        """``shell``: the Response echoing the request, status in_progress, no output."""
        self.response = shell
        self._seq = 0
        self._open: OutputItem | None = None
        self._text: list[str] = []
        self._args: list[str] = []
        self._calls: dict[int, FunctionCallItem] = {}
        self._finish: str | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        # pydantic-core's encoder: ~4x faster than json.dumps for these small dicts.
        return b"event: " + kind.encode() + b"\ndata: " + to_json(payload) + b"\n\n"

    def _text_delta(self, item_id: str, index: int, text: str) -> bytes:
        # The most frequent event, one per upstream chunk: written directly.
        self._seq += 1
        return (b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
                b'"item_id":"' + item_id.encode() + b'","output_index":' + str(index).encode()
                + b',"content_index":0,"delta":' + to_json(text) + b',"logprobs":[],'
                b'"sequence_number":' + str(self._seq - 1).encode() + b"}\n\n")  # fmt: skip

    def _dump(self) -> dict[str, Any]:
        return self.response.model_dump(mode="json")

    def start(self) -> list[bytes]:
        """``response.created`` and ``response.in_progress``."""
        shell = self._dump()
        return [self._event("response.created", response=shell),
                self._event("response.in_progress", response=shell)]  # fmt: skip

    def _add(self, item: OutputItem) -> list[bytes]:
        events = self._close()
        self.response.output.append(item)
        self._open = item
        index = len(self.response.output) - 1
        events.append(self._event("response.output_item.added", output_index=index,
                                  item=item.model_dump(mode="json")))  # fmt: skip
        if isinstance(item, OutputMessage):
            part = OutputText(text="").model_dump(mode="json")
            events.append(self._event("response.content_part.added", item_id=item.id,
                                      output_index=index, content_index=0, part=part))  # fmt: skip
        return events

    def _close(self) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = self.response.output.index(item)
        events = []
        item.status = "completed"
        if isinstance(item, OutputMessage):
            text = "".join(self._text)
            item.content = [OutputText(text=text)]
            events.append(self._event("response.output_text.done", item_id=item.id,
                                      output_index=index, content_index=0, text=text,
                                      logprobs=[]))  # fmt: skip
            events.append(self._event("response.content_part.done", item_id=item.id,
                                      output_index=index, content_index=0,
                                      part=item.content[0].model_dump(mode="json")))  # fmt: skip
            self._text = []
        else:
            item.arguments = "".join(self._args)
            events.append(self._event("response.function_call_arguments.done", item_id=item.id,
                                      output_index=index, name=item.name,
                                      arguments=item.arguments))  # fmt: skip
            self._args = []
        events.append(self._event("response.output_item.done", output_index=index,
                                  item=item.model_dump(mode="json")))  # fmt: skip
        return events

    def feed(self, chunk: ChatCompletionChunk) -> list[bytes]:
        """The events one chat chunk adds."""
        if chunk.usage is not None:
            self.response.usage = response_usage(chunk.usage)
        if not chunk.choices:
            return []
        choice = chunk.choices[0]
        self._finish = choice.finish_reason or self._finish
        events: list[bytes] = []
        text = chunk.text()
        if text:
            if not isinstance(self._open, OutputMessage):
                events += self._add(OutputMessage(id=new_id("msg"), status="in_progress"))
            item = self._open
            assert item is not None
            self._text.append(text)
            events.append(self._text_delta(item.id, len(self.response.output) - 1, text))
        for fragment in choice.delta.tool_calls or []:
            events += self._tool_fragment(fragment)
        return events

    def _tool_fragment(self, fragment: ToolCall) -> list[bytes]:
        index = fragment.index or 0
        function = fragment.function
        events: list[bytes] = []
        item = self._calls.get(index)
        if item is None:
            item = FunctionCallItem(id=new_id("fc"), status="in_progress", arguments="",
                                    call_id=fragment.id or new_id("call"),
                                    name=(function.name if function else None) or "")  # fmt: skip
            self._calls[index] = item
            events += self._add(item)
        elif function is not None and function.name and not item.name:
            item.name = function.name
        arguments = function.arguments if function is not None else None
        if arguments and item is self._open:
            self._args.append(arguments)
            events.append(self._event("response.function_call_arguments.delta", item_id=item.id,
                                      output_index=self.response.output.index(item),
                                      delta=arguments))  # fmt: skip
        elif arguments:  # a fragment for a call already closed (chat streams do not do this)
            item.arguments += arguments
        return events

    def finish(self) -> list[bytes]:
        """Close the open item; ``response.completed`` (or ``response.incomplete``)."""
        events = self._close()
        if not self.response.output:  # an empty answer is still one (empty) message
            events += self._add(OutputMessage(id=new_id("msg"), status="in_progress"))
            events += self._close()
        if self._finish == "length":
            self.response.status = "incomplete"
            self.response.incomplete_details = IncompleteDetails(reason="max_output_tokens")
            return [*events, self._event("response.incomplete", response=self._dump())]
        self.response.status = "completed"
        return [*events, self._event("response.completed", response=self._dump())]

    def fail(self, exc: UpstreamError | RequestError) -> list[bytes]:
        """An ``error`` event (code ``upstream_error``), then ``response.failed`` carrying it."""
        self.response.status = "failed"
        self.response.error = ResponseError(code="server_error", message=exc.message)
        return [self._event("error", code="upstream_error", message=exc.message, param=None),
                self._event("response.failed", response=self._dump())]  # fmt: skip
