"""What each MCP memory tool does, over the memory service; no transport, no web framework.

The tool names and argument shapes are mem0's: its official MCP server
``mem0-mcp-server`` (github.com/mem0ai/mem0-mcp, ``src/mem0_mcp_server/server.py`` at
commit 08cb2a2, release 0.2.x): ``add_memory(text, messages?, user_id?, agent_id?,
app_id?, run_id?, metadata?, enable_graph?)``, ``search_memories(query, filters?, limit?,
enable_graph?)``, ``get_memories(filters?, page?, page_size?, enable_graph?)``,
``get_memory(memory_id)``, ``update_memory(memory_id, text)``, ``delete_memory(memory_id)``
and ``delete_all_memories(user_id?, agent_id?, app_id?, run_id?)``. Each also takes an
optional ``user_id`` (mem0 reads it from its server's default user). A result has mem0's
fields (``id``, ``memory``, ``user_id``, ``created_at``, ``score`` where mem0 has one)
plus ``audit_status`` and ``tag`` (``dmt_proxy.tags``) when the mode shows tags.

What differs from mem0 on purpose: ``filters`` understands only a ``user_id`` (alone,
or in an ``AND`` list: the shapes mem0's server builds); anything else is refused by
name rather than silently ignored. ``agent_id``/``app_id``/``run_id``/``enable_graph``
are accepted and not used: a scope here is a user.

Who: the user comes from the caller (``Caller``: the tenant of the API key and the
``X-DMT-User`` header, or ``dmt-proxy mcp --user-id``) and the ``user_id`` argument;
a memory of another scope is "not found", never shown, changed or deleted.

A memory a tool writes has provenance channel ``mcp``, written by the assistant (the agent
calls the tool on the user's behalf), with the caller's tenant, key and request id; a
result shows each memory's ``provenance`` beside mem0's fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from dmt_proxy.errors import InvalidRequest
from dmt_proxy.memory.base import MAX_TEXT_CHARS, Scope
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.service import DurableMemoryService
from dmt_proxy.policy import Mode
from dmt_proxy.provenance import Channel, Origin
from dmt_proxy.tags import AuditStatus

MAX_LIMIT = 100
"""Most memories one search or page returns."""


class ToolInputError(InvalidRequest):
    """A tool argument the caller got wrong; the message names the argument."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"Invalid argument '{param}': {message}", param=param)


@dataclass(frozen=True)
class Caller:
    """Who calls the tools: fixed by the transport, not by the tool arguments."""

    tenant: str | None = None
    """The tenant of the API key (``None``: single-tenant proxy, or stdio)."""
    pinned_user: str | None = None
    """A user set by the transport (``X-DMT-User``): an argument may not name another."""
    default_user: str | None = None
    """The user when no argument names one (``dmt-proxy mcp --user-id``)."""
    key_id: str | None = None
    """Which tenant key the transport authenticated (``None``: single-tenant, or stdio)."""
    request_id: str | None = None
    """The id of the HTTP request carrying the call (``None``: stdio)."""

    @property
    def origin(self) -> Origin:
        """Where a memory this caller writes comes from."""
        return Origin(channel=Channel.MCP, tenant=self.tenant, key_id=self.key_id)


@dataclass(frozen=True)
class Found:
    """A tool's answer: the DMT-framed block the agent reads, and mem0's JSON result."""

    block: str
    """The nonce-framed memory block with the DMT instruction ('' when nothing was found)."""
    result: dict[str, Any]


def _text(value: object, param: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ToolInputError(param, "must be a non-empty string")
    if len(value) > MAX_TEXT_CHARS:
        raise ToolInputError(param, f"is {len(value)} characters; the limit is {MAX_TEXT_CHARS}")
    return value


def _count(value: int | None, param: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise ToolInputError(param, f"must be an integer from 1 to {MAX_LIMIT}")
    return value


def filter_user(filters: Mapping[str, Any] | None) -> str | None:
    """The ``user_id`` a mem0 ``filters`` object names (``None``: none), or ``ToolInputError``."""
    if not filters:
        return None
    if not isinstance(filters, Mapping):
        raise ToolInputError("filters", "must be an object")
    clauses: Sequence[Any] = [filters]
    if set(filters) == {"AND"}:
        clauses = filters["AND"] if isinstance(filters["AND"], list) else [None]
    users: set[str] = set()
    for clause in clauses:
        if not isinstance(clause, Mapping) or set(clause) != {"user_id"}:
            raise ToolInputError("filters", "only a user_id filter is supported")
        if not isinstance(clause["user_id"], str):
            raise ToolInputError("filters", "user_id must be a string")
        users.add(clause["user_id"])
    if len(users) > 1:
        raise ToolInputError("filters", "names more than one user_id")
    return users.pop() if users else None


class MemoryTools:
    """The memory tools, each a method taking the ``Caller`` first."""

    def __init__(self, memory: DurableMemoryService, mode: Mode, *, top_k: int = 10) -> None:
        self._memory = memory
        self._mode = mode
        self._top_k = top_k

    def scope(self, caller: Caller, user_id: str | None, param: str = "user_id") -> Scope:
        """The scope a call acts on: the caller's tenant, and its user."""
        if user_id is not None and not isinstance(user_id, str):
            raise ToolInputError(param, "must be a string")
        user = user_id.strip() if user_id else None
        if caller.pinned_user is not None:
            if user is not None and user != caller.pinned_user:
                raise ToolInputError(param, "differs from the X-DMT-User header")
            user = caller.pinned_user
        user = user or caller.default_user
        if not user:
            raise ToolInputError(param, "is required (or send the X-DMT-User header)")
        try:
            return Scope(user=f"{caller.tenant}/{user}" if caller.tenant else user)
        except ValidationError as exc:
            reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
            raise ToolInputError(param, reason) from None

    def _listing_scope(
        self, caller: Caller, filters: Mapping[str, Any] | None, user_id: str | None
    ) -> Scope:
        """The scope of a search or a listing: its ``filters``' user, or ``user_id``."""
        named = filter_user(filters)
        if named is None:
            return self.scope(caller, user_id)
        if user_id is not None and user_id != named:
            raise ToolInputError("user_id", "differs from the user_id in filters")
        return self.scope(caller, named, "filters")

    def _shown(self, entry: MemoryEntry, caller: Caller) -> dict[str, Any]:
        user = entry.user
        if caller.tenant and user.startswith(f"{caller.tenant}/"):
            user = user[len(caller.tenant) + 1 :]  # the agent's own name for its user
        shown: dict[str, Any] = {"id": entry.id, "memory": entry.text, "user_id": user,
                                 "created_at": entry.created_at.isoformat()}  # fmt: skip
        if self._mode.shows_tags:
            shown["audit_status"] = entry.audit_status.value
            shown["tag"] = None if entry.tag is None else entry.tag.model_dump(mode="json")
        # In every mode, as the admin API shows it: where it came from is not a mitigation.
        provenance = entry.provenance
        shown["provenance"] = None if provenance is None else provenance.model_dump(mode="json")
        return shown

    def _found(self, entries: list[MemoryEntry], caller: Caller, **extra: Any) -> Found:
        return Found(
            block=self._memory.render(entries, self._mode),
            result={"results": [self._shown(e, caller) for e in entries], **extra},
        )

    async def _own(self, caller: Caller, memory_id: object, user_id: str | None) -> MemoryEntry:
        """Memory ``memory_id`` if it is the caller's, else ``ToolInputError`` (not found)."""
        if not isinstance(memory_id, str) or not memory_id.strip():
            raise ToolInputError("memory_id", "must be a non-empty string")
        scope = self.scope(caller, user_id)
        entry = await self._memory.get(memory_id)
        # Another scope's memory reads as absent: its existence is not the caller's to know.
        if (
            entry is None
            or entry.user != scope.user
            or entry.audit_status is AuditStatus.QUARANTINED
        ):
            raise ToolInputError("memory_id", f"no memory '{memory_id}' for this user")
        return entry

    async def add_memory(
        self, caller: Caller, text: str, user_id: str | None = None
    ) -> dict[str, Any]:
        """Queue ``text`` as a memory through the outbox; its id, ``pending``."""
        scope = self.scope(caller, user_id)
        memory_id = await self._memory.write(scope, _text(text, "text"), "", self._mode,
                                             origin=caller.origin,
                                             request_id=caller.request_id)  # fmt: skip
        return {"results": [{"id": memory_id, "memory": text, "event": "ADD",
                             "status": "pending"}]}  # fmt: skip

    async def search_memories(self, caller: Caller, query: str, filters: Mapping[str, Any] | None = None,
                              limit: int | None = None, user_id: str | None = None) -> Found:  # fmt: skip
        """The caller's stored memories most relevant to ``query``."""
        scope = self._listing_scope(caller, filters, user_id)
        entries = await self._memory.search(
            scope, _text(query, "query"), _count(limit, "limit", self._top_k)
        )
        entries.sort(key=lambda e: (e.created_at, e.id))  # the same block for the same memories
        return self._found(entries, caller)

    async def get_memories(self, caller: Caller, filters: Mapping[str, Any] | None = None,
                           page: int | None = None, page_size: int | None = None,
                           user_id: str | None = None) -> Found:  # fmt: skip
        """A page of the caller's memories, oldest first (queued ones too, ``pending``)."""
        scope = self._listing_scope(caller, filters, user_id)
        if page is not None and (isinstance(page, bool) or not isinstance(page, int) or page < 1):
            raise ToolInputError("page", "must be an integer from 1")
        number, size = page or 1, _count(page_size, "page_size", 10)
        entries = [
            e
            for e in await self._memory.list(scope)
            if e.audit_status is not AuditStatus.QUARANTINED
        ]
        shown = entries[(number - 1) * size : number * size]
        return self._found(shown, caller, count=len(entries), page=number, page_size=size)

    async def get_memory(self, caller: Caller, memory_id: str, user_id: str | None = None) -> Found:
        """One of the caller's memories."""
        return self._found([await self._own(caller, memory_id, user_id)], caller)

    async def update_memory(self, caller: Caller, memory_id: str, text: str,
                            user_id: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Replace a memory's text through the outbox (audited again); its id, ``pending``."""
        entry = await self._own(caller, memory_id, user_id)
        scope = self.scope(caller, user_id)
        rewritten = await self._memory.rewrite(scope, entry.id, _text(text, "text"), self._mode,
                                               origin=caller.origin,
                                               request_id=caller.request_id)  # fmt: skip
        if not rewritten:
            raise ToolInputError("memory_id", f"no memory '{memory_id}' for this user")
        return {"results": [{"id": entry.id, "memory": text, "event": "UPDATE",
                             "status": "pending"}]}  # fmt: skip

    async def delete_memory(
        self, caller: Caller, memory_id: str, user_id: str | None = None
    ) -> dict[str, Any]:
        """Forget one of the caller's memories."""
        entry = await self._own(caller, memory_id, user_id)
        await self._memory.delete(entry.id)
        return {"message": "Memory deleted successfully!", "id": entry.id}

    async def delete_all_memories(
        self, caller: Caller, user_id: str | None = None
    ) -> dict[str, Any]:
        """Forget every memory of the caller's user."""
        deleted = await self._memory.delete_all(self.scope(caller, user_id))
        return {"message": "Memories deleted successfully!", "deleted": deleted}


def dumps(result: Mapping[str, Any]) -> str:
    """A tool's JSON text, as mem0's server writes it (``ensure_ascii=False``)."""
    return json.dumps(result, ensure_ascii=False)
