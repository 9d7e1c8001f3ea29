"""What every pipeline route does with a request before and after the pipeline: the
tenant, the memory scope, the mode and memory headers, and the response headers."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from fastapi import Request
from pydantic import ValidationError

from dmt_proxy.api.auth import Tenants, scoped_user
from dmt_proxy.errors import InvalidRequest
from dmt_proxy.exchange import MemoryAccess, RequestContext
from dmt_proxy.memory.base import Scope
from dmt_proxy.openai_types import ChatCompletionChunk
from dmt_proxy.policy import Mode


def _enum_header(request: Request, name: str, enum: type[Any], default: Any) -> Any:
    raw = request.headers.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return enum(raw.strip().lower())
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise InvalidRequest(f"Invalid {name} header '{raw}'; expected one of: {allowed}.",
                             param=name) from None  # fmt: skip


def authenticate(request: Request) -> str | None:
    """The tenant of the request (``None`` when the proxy is single-tenant)."""
    tenants: Tenants | None = request.app.state.tenants
    return tenants.authenticate(request) if tenants is not None else None


def memory_scope(tenant: str | None, raw: str | None) -> Scope | None:
    """The request's memory scope (the user, namespaced by tenant), or ``InvalidRequest``.

    Built once here and carried by the request context to retrieval and to the write.
    """
    if not raw or not raw.strip():
        return None
    try:
        return Scope(user=scoped_user(tenant, raw.strip()) or "")
    except ValidationError as exc:
        # Checked here, not in the worker: an acknowledged write must never be unstorable.
        reason = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise InvalidRequest(f"Invalid user id for memory: {reason}.", param="user") from None


def build_context(request: Request, user: str | None, tenant: str | None) -> RequestContext:
    """The request's context: its id, mode, memory access and scope (``X-DMT-User`` first)."""
    policy = request.app.state.policy
    scope = memory_scope(tenant, request.headers.get("x-dmt-user") or user)
    return RequestContext(
        request_id=request.state.request_id,
        mode=_enum_header(request, "x-dmt-mode", Mode, policy.mode),
        memory=_enum_header(request, "x-dmt-memory", MemoryAccess, MemoryAccess.READ_WRITE),
        scope=scope,
        started=request.state.started,
    )


def response_headers(ctx: RequestContext) -> dict[str, str]:
    """The ``x-dmt-*`` headers every pipeline route answers with."""
    return {
        **ctx.headers,
        "x-request-id": ctx.request_id,
        "x-dmt-mode": ctx.mode.value,
        "x-dmt-overhead-ms": f"{ctx.overhead_ms():.3f}",
    }


def sse(data: bytes) -> bytes:
    """One server-sent event carrying ``data``."""
    return b"data: " + data + b"\n\n"


async def first_chunk(
    chunks: AsyncGenerator[ChatCompletionChunk, None],
) -> ChatCompletionChunk | None:
    """The stream's first chunk, pulled before answering so that an upstream failure is
    still a proper 502/504 (``None``: the upstream sent nothing)."""
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None
    except BaseException:
        await chunks.aclose()
        raise
