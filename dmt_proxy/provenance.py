"""Where a memory came from: stamped by the proxy on every write, never read from its text.

The API layer knows, when it admits a write, which door it came through (``Channel``),
which tenant and which key sent it, and which model the request named: an ``Origin``. The
origin travels with the ``Exchange`` (``dmt_proxy.exchange``) into the outbox; the record
the worker stores carries a ``Provenance`` built from it, the request id and the time the
write was acknowledged (``OutboxItem.record``), and the worker adds an ``AuditStamp`` when
it stores a verdict (``dmt_proxy.memory.write.verdicts.store_verdict``).

Who wrote which part follows from the channel alone (``authors``): the proxy stores the
user's words (``query``) and the reply (``answer``) apart, so provenance names the author
of each part and never a second copy of either. A bias tag's ``speaker`` (whose words
carry the bias, ``dmt_proxy.tags``) reads against it: ``user`` is the query's author.

Nothing here is parsed from a memory's text: a text that claims a source is only text.

Format versions (``Provenance.version``): 1, this layout. A record stored before
provenance existed, or by a path that knows none (a consolidated or summarised memory,
derived from several writes), has none (``MemoryRecord.provenance`` is ``None``).

A leaf: it imports only the standard library and pydantic.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

PROVENANCE_VERSION = 1
"""The layout of ``Provenance`` written by this release."""

KEY_ID_HEX = 16
"""Hex digits of a key's SHA-256 kept as its id (``Origin.key_id``): names which key wrote,
and the tenants file's ``key_sha256`` starts with them, but it is never the key."""

MAX_MODEL_CHARS = 256
"""Longest model name kept (a request may name any string; the stored name is cut)."""


class Channel(str, Enum):
    """The door a write came through."""

    CHAT = "chat"
    """``POST /v1/chat/completions``: a user turn and the assistant's answer."""
    RESPONSES = "responses"
    """``POST /v1/responses``: a user turn and the assistant's answer."""
    MESSAGES = "messages"
    """``POST /v1/messages``: a user turn and the assistant's answer."""
    MCP = "mcp"
    """An MCP ``add_memory`` or ``update_memory`` tool call: the agent wrote the text."""
    ADMIN = "admin"
    """``POST /v1/memories`` (the admin API): an operator wrote the text."""


class Speaker(str, Enum):
    """Who wrote a part of a memory."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    """A tool's output. No write path stores one today (the pipeline drops tool results:
    they are third-party text); named so that a path that keeps one can say so."""
    OPERATOR = "operator"
    """Whoever holds the admin key, writing through the admin API."""


class Authors(NamedTuple):
    """Who wrote a memory's two parts."""

    query_by: Speaker
    answer_by: Speaker | None
    """``None``: the memory has no answer (a memory tool's text, an admin note)."""


_QUERY_AUTHOR: dict[Channel, Speaker] = {
    Channel.CHAT: Speaker.USER,
    Channel.RESPONSES: Speaker.USER,
    Channel.MESSAGES: Speaker.USER,
    # A memory tool's text is the agent's words, written on the user's behalf.
    Channel.MCP: Speaker.ASSISTANT,
    Channel.ADMIN: Speaker.OPERATOR,
}


def authors(channel: Channel, *, answered: bool) -> Authors:
    """Who wrote the query and the answer of a write that came through ``channel`` (the
    one mapping). An answer on a chat channel is the assistant's; the admin API's
    ``answer`` was typed by the operator like its query; a tool call has none."""
    query_by = _QUERY_AUTHOR[channel]
    if not answered:
        return Authors(query_by, None)
    return Authors(query_by, Speaker.OPERATOR if channel is Channel.ADMIN else Speaker.ASSISTANT)


_FROZEN = ConfigDict(frozen=True, extra="forbid", json_schema_serialization_defaults_required=True)


class Origin(BaseModel):
    """What the API layer knows of a write when it admits it."""

    model_config = _FROZEN

    channel: Channel
    tenant: str | None = None
    """The tenant of the API key (``None``: a single-tenant proxy, or no tenant key)."""
    key_id: str | None = Field(default=None, pattern=rf"^[0-9a-f]{{{KEY_ID_HEX}}}$")
    """The first ``KEY_ID_HEX`` hex digits of the SHA-256 of the tenant key that
    authenticated the request (``None``: none did)."""
    model: str | None = None
    """The model the request named, as it named it (``None``: the write names none)."""

    @field_validator("model")
    @classmethod
    def _bounded(cls, model: str | None) -> str | None:
        # Cut, never refused: an acknowledged write must never be unstorable.
        return None if model is None else model[:MAX_MODEL_CHARS]


CHAT_ORIGIN = Origin(channel=Channel.CHAT)
"""A chat write whose tenant, key and model are not known (``Exchange``'s default)."""


class AuditStamp(BaseModel):
    """What decided a memory's audit status, and when."""

    model_config = _FROZEN

    policy: str | None
    """The policy's name and content fingerprint (``Policy.label``, ``default@3f9c…``);
    ``None`` when the code that stored the verdict was not given its policy (a worker or
    backfill built by hand, as tests do)."""
    auditor: str
    """The verdict's ``auditor`` label (the judges and LLM with their versions), or
    ``reviewer:<name>`` for a human verdict."""
    at: datetime


class Provenance(BaseModel):
    """Who wrote a memory, through which door, for whom, and what audited it."""

    model_config = _FROZEN

    version: int = Field(default=PROVENANCE_VERSION, ge=1)
    channel: Channel
    query_by: Speaker
    """Who wrote the memory's ``query`` (for a memory stored as one text, that text)."""
    answer_by: Speaker | None
    """Who wrote its ``answer`` (``None``: it has none)."""
    tenant: str | None
    key_id: str | None
    request_id: str
    """The id of the request that wrote it (the ``x-request-id`` its answer carried)."""
    model: str | None
    received_at: datetime
    """When the write was acknowledged (committed to the outbox)."""
    audited: AuditStamp | None = None
    """The last audit decision stored on it (``None``: not audited yet, or never)."""

    @classmethod
    def of(
        cls, origin: Origin, *, request_id: str, received_at: datetime, answered: bool
    ) -> Provenance:
        """The provenance of a write admitted with ``origin``, not yet audited."""
        query_by, answer_by = authors(origin.channel, answered=answered)
        return cls(channel=origin.channel, query_by=query_by, answer_by=answer_by,
                   tenant=origin.tenant, key_id=origin.key_id, request_id=request_id,
                   model=origin.model, received_at=received_at)  # fmt: skip

    def stamped(self, audited: AuditStamp) -> Provenance:
        """This provenance with its last audit decision replaced by ``audited``."""
        return self.model_copy(update={"audited": audited})
