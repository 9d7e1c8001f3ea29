"""The memory admin API, behind ``Authorization: Bearer $DMT_ADMIN_KEY``."""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from dmt_proxy.api.openapi import (
    Memory,
    MemoryDeleted,
    MemoryList,
    OutboxStatus,
    UserMemoriesDeleted,
    error_responses,
)
from dmt_proxy.audit.outbox import OutboxItem
from dmt_proxy.audit.service import MemoryPipeline
from dmt_proxy.audit.worker import interaction_text
from dmt_proxy.errors import NotFound, RequestError, Unauthorized
from dmt_proxy.memory.base import MemoryRecord, Scope

# Every admin route can answer these; each route adds its own 200 (and 400 where it has input).
router = APIRouter(responses=error_responses(401, 403, 404))


class Forbidden(RequestError):
    status_code = 403
    error_type = "permission_error"


def require_admin(request: Request) -> MemoryPipeline:
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
    memory: MemoryPipeline | None = request.app.state.memory
    if memory is None:
        raise NotFound("Memory is disabled in this proxy's policy.")
    return memory


def record_json(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "user": record.scope.user,
        "text": record.text,
        "created_at": record.created_at.isoformat(),
        "audit_status": record.audit_status.value,
        "tag": record.tag.model_dump() if record.tag else None,
    }


def queued_json(item: OutboxItem) -> dict[str, Any]:
    from datetime import UTC, datetime

    return {
        "id": item.id,
        "user": item.user,
        "text": interaction_text(item.query, item.answer),
        "created_at": datetime.fromtimestamp(item.created_at, UTC).isoformat(),
        "audit_status": "pending",
        "tag": None,
    }


def _user(user: str) -> Scope:
    if not user.strip():
        raise RequestError("Query parameter 'user' must not be empty.", param="user")
    try:
        return Scope(user=user)
    except ValidationError as exc:  # too long, control characters: the client's mistake
        reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise RequestError(f"Invalid value for 'user': {reason}.", param="user") from None


@router.get("/v1/memories", responses={200: {"model": MemoryList}, **error_responses(400)})
async def list_memories(request: Request, user: str = Query(...)) -> JSONResponse:
    memory = require_admin(request)
    scope = _user(user)
    records = await memory.backend.list(scope)
    data = [record_json(r) for r in records]
    known = {r["id"] for r in data}
    # Writes acknowledged but not yet in the backend are listed too, as pending.
    data += [
        queued_json(i)
        for i in await memory.outbox.pending(user)
        if not i.stored and i.id not in known
    ]
    data.sort(key=lambda r: r["created_at"])
    return JSONResponse({"object": "list", "data": data})


@router.get("/v1/memories/{memory_id}", responses={200: {"model": Memory}})
async def get_memory(request: Request, memory_id: str) -> JSONResponse:
    memory = require_admin(request)
    record = await memory.backend.get(None, memory_id)
    if record is not None:
        return JSONResponse(record_json(record))
    for item in await memory.outbox.pending():
        if item.id == memory_id:
            return JSONResponse(queued_json(item))
    raise NotFound(f"No memory with id '{memory_id}'.", param="id")


@router.delete("/v1/memories/{memory_id}", responses={200: {"model": MemoryDeleted}})
async def delete_memory(request: Request, memory_id: str) -> JSONResponse:
    memory = require_admin(request)
    cancelled = await memory.outbox.cancel(memory_id)
    deleted = await memory.backend.delete(memory_id)
    if not (deleted or cancelled):
        raise NotFound(f"No memory with id '{memory_id}'.", param="id")
    return JSONResponse({"id": memory_id, "object": "memory", "deleted": True})


@router.delete(
    "/v1/memories", responses={200: {"model": UserMemoriesDeleted}, **error_responses(400)}
)
async def delete_user_memories(request: Request, user: str = Query(...)) -> JSONResponse:
    memory = require_admin(request)
    scope = _user(user)
    cancelled = await memory.outbox.cancel_user(user)
    deleted = await memory.backend.delete_all(scope)
    return JSONResponse({"user": user, "deleted": int(deleted) + cancelled, "object": "list"})


@router.get("/v1/admin/outbox", responses={200: {"model": OutboxStatus}})
async def outbox_status(request: Request) -> JSONResponse:
    """Pending memory writes: lets a harness wait until every write is stored and audited."""
    memory = require_admin(request)
    depth, oldest = await memory.outbox.stats()
    return JSONResponse(
        {"object": "outbox", "depth": depth, "oldest_pending_age_s": round(oldest, 3)}
    )
