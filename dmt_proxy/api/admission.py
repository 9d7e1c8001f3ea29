"""Admission: everything a route does with a request before the pipeline, in one step.

``admit`` authenticates the tenant, reads the body under ``DMT_MAX_BODY_BYTES``,
parses it with the route's parser (JSON, unsupported fields, the pydantic model),
builds the memory scope (``X-DMT-User`` first, then the body's user), reads
``X-DMT-Mode`` and ``X-DMT-Memory``, and returns the typed request with its
``RequestContext``, whose ``Origin`` (the route's channel, the tenant and key, the model
the body names) becomes the provenance of the memory the request writes. The order is
the refusal order clients see: a bad key is a 401 before the body is read, a too large
body a 413 before it is parsed, a bad body a 400 before the headers are looked at.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fastapi import Request
from pydantic import ValidationError

from dmt_proxy.api.auth import Credential, Tenants, scoped_user
from dmt_proxy.api.bodies import parse_off_loop, read_body
from dmt_proxy.errors import InvalidRequest
from dmt_proxy.exchange import RequestContext
from dmt_proxy.memory.base import Scope
from dmt_proxy.policy import Mode
from dmt_proxy.provenance import Channel, Origin
from dmt_proxy.turns import MemoryAccess

Body = TypeVar("Body")


@dataclass(frozen=True)
class Parsed(Generic[Body]):
    """An authenticated request's parsed body."""

    tenant: str | None
    """The tenant of the API key (``None`` when the proxy is single-tenant)."""
    body: Body
    key_id: str | None = None
    """Which tenant key it sent (``Credential.key_id``; ``None`` when single-tenant)."""


@dataclass(frozen=True)
class Admitted(Generic[Body]):
    """A request admitted to the pipeline: its parsed body and its context."""

    body: Body
    ctx: RequestContext


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
    found = credential(request)
    return found.tenant if found is not None else None


def credential(request: Request) -> Credential | None:
    """The tenant of the request and which of its keys it sent (``None`` when the proxy is
    single-tenant), or ``Unauthorized``."""
    tenants: Tenants | None = request.app.state.tenants
    return tenants.credential(request) if tenants is not None else None


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


def build_context(
    request: Request, user: str | None, tenant: str | None, *, origin: Origin
) -> RequestContext:
    """The request's context: its id, mode, memory access and scope (``X-DMT-User`` first),
    and ``origin``, where it came from."""
    policy = request.app.state.policy
    scope = memory_scope(tenant, request.headers.get("x-dmt-user") or user)
    return RequestContext(
        request_id=request.state.request_id,
        mode=_enum_header(request, "x-dmt-mode", Mode, policy.mode),
        memory=_enum_header(request, "x-dmt-memory", MemoryAccess, MemoryAccess.READ_WRITE),
        scope=scope,
        origin=origin,
        started=request.state.started,
    )


async def read_request(request: Request, parse: Callable[[bytes], Body]) -> Parsed[Body]:
    """Authenticate, read the body under the size limit and ``parse`` it."""
    found = credential(request)
    raw = await read_body(request, request.app.state.settings.max_body_bytes)
    body = await parse_off_loop(raw, parse)
    if found is None:
        return Parsed(tenant=None, body=body)
    return Parsed(tenant=found.tenant, body=body, key_id=found.key_id)


async def admit(
    request: Request,
    parse: Callable[[bytes], Body],
    *,
    channel: Channel,
    user: Callable[[Body], str | None],
    model: Callable[[Body], str | None],
) -> Admitted[Body]:
    """The one admission step of a pipeline route: the parsed body and its context.

    ``channel`` is the route's (``dmt_proxy.provenance.Channel``); ``user`` names the
    body's user (the memory scope unless ``X-DMT-User`` is set), ``model`` the model it asks.
    """
    parsed = await read_request(request, parse)
    origin = Origin(channel=channel, tenant=parsed.tenant, key_id=parsed.key_id,
                    model=model(parsed.body))  # fmt: skip
    ctx = build_context(request, user(parsed.body), parsed.tenant, origin=origin)
    request.state.mode = ctx.mode.value  # the request metrics are labelled by mode
    return Admitted(body=parsed.body, ctx=ctx)
