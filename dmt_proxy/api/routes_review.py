"""The review API: the queue, a memory's evidence, and human verdicts (JSON).

The console (``dmt_proxy.api.routes_console``) is a client of these routes: its
pages read the same service, and its keys post to ``POST /v1/memories/{id}/review``.
Who may call them: ``dmt_proxy.api.review_auth``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from dmt_proxy.api.bodies import json_body
from dmt_proxy.api.openapi import ReviewQueue
from dmt_proxy.api.review_auth import review_service, reviewer
from dmt_proxy.api.routes import (
    MEMORY_EVIDENCE,
    REVIEW_MEMORY,
    REVIEW_OVERVIEW,
    REVIEW_QUEUE,
    REVIEW_USER,
)
from dmt_proxy.api.routing import serve
from dmt_proxy.errors import RequestError
from dmt_proxy.memory.review import (
    QueueFilter,
    Reviewer,
    ReviewRequest,
    utc,
)

router = APIRouter()

Caller = Annotated[Reviewer, Depends(reviewer)]
"""Every review route's caller: authenticated before its query and body are read."""


def _json(model: BaseModel) -> JSONResponse:
    return JSONResponse(model.model_dump(mode="json"))


def queue_filter(
    domain: str | None, status: str | None, user: str | None, since: datetime | None,
    until: datetime | None, limit: int = 100,
) -> QueueFilter:  # fmt: skip
    """The queue filter of query parameters (blank ones ignored)."""
    try:
        return QueueFilter(domain=domain or None, status=status or None, user=user or None,
                           since=utc(since) if since else None,
                           until=utc(until) if until else None, limit=limit)  # fmt: skip
    except ValidationError as exc:
        error = exc.errors()[0]
        raise RequestError(f"Invalid value for '{error['loc'][0]}': {error['msg']}.",
                           param=str(error["loc"][0])) from None  # fmt: skip


@serve(router, REVIEW_QUEUE)
async def review_queue(
    request: Request,
    caller: Caller,
    domain: str | None = None,
    status: str | None = None,
    user: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = Query(100, ge=1, le=1000),
) -> JSONResponse:
    """Tagged, disputed, failed and manipulation-flagged memories, most uncertain first."""
    flt = queue_filter(domain, status, user, since, until, limit)
    return _json(ReviewQueue(data=await review_service(request).queue(caller, flt)))


@serve(router, REVIEW_OVERVIEW)
async def review_overview(request: Request, caller: Caller) -> JSONResponse:
    """Audits by day, status and domain; the outbox; dispute, manipulation, override rates."""
    return _json(await review_service(request).overview(caller))


@serve(router, REVIEW_USER)
async def review_user(
    request: Request, caller: Caller, user: str = Query(..., min_length=1)
) -> JSONResponse:
    """Everything remembered about ``user``, and the block the agent sees in DMT mode."""
    return _json(await review_service(request).user_view(user, caller))


@serve(router, MEMORY_EVIDENCE)
async def memory_evidence(request: Request, memory_id: str, caller: Caller) -> JSONResponse:
    """A memory, both judges' evidence, its history and how each mode shows it."""
    return _json(await review_service(request).detail(memory_id, caller))


@serve(router, REVIEW_MEMORY)
async def review_memory(request: Request, memory_id: str, caller: Caller) -> JSONResponse:
    """Store a human verdict: applied at once, kept in the trail, held against the auditor.
    The body (``ReviewRequest``, documented in the OpenAPI document) is read after the
    caller is authenticated."""
    body = await json_body(request, ReviewRequest)
    return _json(await review_service(request).review(memory_id, body, caller))
