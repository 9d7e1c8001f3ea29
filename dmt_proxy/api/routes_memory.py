"""The memory admin API, behind ``Authorization: Bearer $DMT_ADMIN_KEY``.

``DELETE /v1/memories?user=U`` erases the user (``DurableMemoryService.erase``: the
store, its histories and files, the outbox and spool, the review trail's words);
``GET /v1/admin/export?user=U`` answers everything held about the user as one document.
"""

from __future__ import annotations

import hmac
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from dmt_proxy.api.bodies import json_body
from dmt_proxy.api.openapi import MemoryCreate, MemoryList
from dmt_proxy.api.routes import (
    CREATE_MEMORY,
    DELETE_MEMORY,
    DELETE_USER_MEMORIES,
    EXPORT_USER,
    GET_MEMORY,
    LIST_MEMORIES,
    OUTBOX,
)
from dmt_proxy.api.routing import serve
from dmt_proxy.errors import NotFound, RequestError, Unauthorized
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.service import DurableMemoryService
from dmt_proxy.provenance import Channel, Origin

router = APIRouter()

ADMIN_ORIGIN = Origin(channel=Channel.ADMIN)
"""Every admin write's origin: the admin key is no tenant's, and the body names no model."""


class Forbidden(RequestError):
    status_code = 403
    error_type = "permission_error"


def require_admin(request: Request) -> DurableMemoryService:
    """Check the admin key (constant-time) and return the memory service."""
    expected = request.app.state.settings.admin_key
    if not expected:
        raise Forbidden("The memory admin API is disabled: start the proxy with DMT_ADMIN_KEY set.")
    header = request.headers.get("authorization", "")
    scheme, _, supplied = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        supplied.strip().encode(), expected.encode()
    ):
        raise Unauthorized("Missing or wrong admin key (Authorization: Bearer <DMT_ADMIN_KEY>).")
    memory: DurableMemoryService | None = request.app.state.memory
    if memory is None:
        raise NotFound("Memory is disabled in this proxy's policy.")
    return memory


Admin = Annotated[DurableMemoryService, Depends(require_admin)]
"""Every admin route's memory service, reached only with the admin key: the dependency
runs before the route's query parameters and body are read, so a bad key is a 401 first."""


def _json(model: BaseModel) -> JSONResponse:
    """``model`` as the route's answer: its JSON form is the wire shape."""
    return JSONResponse(model.model_dump(mode="json"))


def _user(user: str) -> Scope:
    if not user.strip():
        raise RequestError("Query parameter 'user' must not be empty.", param="user")
    try:
        return Scope(user=user)
    except ValidationError as exc:  # too long, control characters: the client's mistake
        reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise RequestError(f"Invalid value for 'user': {reason}.", param="user") from None


@serve(router, LIST_MEMORIES)
async def list_memories(memory: Admin, user: str = Query(...)) -> JSONResponse:
    entries = await memory.list(_user(user))
    return _json(MemoryList(data=entries))


@serve(router, CREATE_MEMORY)
async def create_memory(request: Request, memory: Admin) -> JSONResponse:
    """Queue one exchange for ``user`` as a chat write would: audited when its mode audits.

    For seeding a user's memory (benchmarks, migrations) without asking the agent.
    The memory comes back ``pending``; ``GET /v1/admin/outbox`` says when it is stored.
    The body (``MemoryCreate``) is read after the key is checked.
    """
    body = await json_body(request, MemoryCreate)
    mode = body.mode or request.app.state.policy.mode
    # The operator wrote it (provenance channel admin), whatever words it holds.
    memory_id = await memory.write(_user(body.user), body.query, body.answer, mode,
                                   origin=ADMIN_ORIGIN,
                                   request_id=request.state.request_id)  # fmt: skip
    entry = await memory.get(memory_id)
    if entry is None:  # stored and deleted again in between: say so, never invent a record
        raise NotFound(f"Memory '{memory_id}' was deleted before it could be shown.", param="id")
    return _json(entry)


@serve(router, GET_MEMORY)
async def get_memory(memory: Admin, memory_id: str) -> JSONResponse:
    entry = await memory.get(memory_id)
    if entry is None:
        raise NotFound(f"No memory with id '{memory_id}'.", param="id")
    return _json(entry)


@serve(router, DELETE_MEMORY)
async def delete_memory(memory: Admin, memory_id: str) -> JSONResponse:
    if not await memory.delete(memory_id):
        raise NotFound(f"No memory with id '{memory_id}'.", param="id")
    return JSONResponse({"id": memory_id, "object": "memory", "deleted": True})


@serve(router, DELETE_USER_MEMORIES)
async def delete_user_memories(
    memory: Admin, user: str = Query(...), vacuum: Literal["plain", "full"] = Query("plain")
) -> JSONResponse:
    """Erase ``user``: every memory, queued or stored, and their text wherever the proxy
    wrote it; the review trail keeps a tombstone of each decision. ``vacuum=full``: rewrite
    PostgreSQL tables whole (``VACUUM FULL``: each is locked while it is rewritten)."""
    scope = _user(user)
    known = {e.id for e in await memory.list(scope)}
    erasure = await memory.erase(scope.user, full=vacuum == "full")
    deleted = max(len(known), erasure.memories)  # a memory both queued and stored counts once
    return JSONResponse({"user": user, "deleted": deleted, "object": "list",
                         "erasure": erasure.model_dump(mode="json")})  # fmt: skip


@serve(router, EXPORT_USER)
async def export_user(memory: Admin, user: str = Query(...)) -> JSONResponse:
    """Everything held about ``user``: memories with tags and provenance, queued writes,
    the review trail."""
    return _json(await memory.export(_user(user).user))


@serve(router, OUTBOX)
async def outbox_status(memory: Admin) -> JSONResponse:
    """Pending memory writes: lets a harness wait until every write is stored and audited."""
    return _json(await memory.outbox_stats())
