"""``/v1/chat/completions`` and ``/v1/models``: thin routes over the pipeline."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from dmt_proxy.api.auth import Tenants, scoped_user
from dmt_proxy.api.errors import error_body
from dmt_proxy.api.openapi import CHAT_RESPONSES, ModelList, error_responses
from dmt_proxy.errors import InvalidRequest, PayloadTooLarge, RequestError, UpstreamError
from dmt_proxy.memory.base import Scope
from dmt_proxy.openai_types import UNSUPPORTED_PARAMS, ChatCompletionRequest
from dmt_proxy.pipeline import ChatPipeline, MemoryAccess, RequestContext
from dmt_proxy.policy import Mode

router = APIRouter()


async def read_body(request: Request, limit: int) -> bytes:
    """Read the body, refusing more than ``limit`` bytes without buffering the rest."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"Request body of {declared} bytes exceeds the limit of {limit} bytes."
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body exceeds the limit of {limit} bytes.")
        chunks.append(chunk)
    return b"".join(chunks)


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")

MAX_JSON_DEPTH = 128
"""Deepest nesting of arrays/objects accepted. Deeper data parses (up to ~990 levels) but
would hit Python's recursion limit later, when it is encoded again for the upstream."""


def json_problem(data: Any, *, check_strings: bool) -> str | None:
    """Why parsed JSON cannot be served (too deep, lone surrogates), or ``None``."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:  # iterative, so that checking deep data cannot itself recurse too deep
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                return (
                    f"The JSON body of your request is nested deeper than {MAX_JSON_DEPTH} levels."
                )
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            # Only containers (and, when asked, strings) need a visit: scalars cannot fail.
            stack.extend((child, depth + 1) for child in children
                         if isinstance(child, dict | list) or (check_strings and isinstance(child, str)))  # fmt: skip
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                # '\ud800' parses, but such a string cannot be encoded again: it would fail
                # later (upstream call, outbox) as a 500, after the work was done.
                return ("The JSON body contains an unpaired UTF-16 surrogate escape "
                        "('\\ud800'-'\\udfff'); send valid Unicode text.")  # fmt: skip
    return None


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    """Parse and validate a chat request body, raising ``InvalidRequest`` with the param."""
    try:
        text = body.decode("utf-8-sig")  # strict: JSON on the wire is UTF-8 (RFC 8259)
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidRequest("We could not parse the JSON body of your request.") from None
    except RecursionError:
        # json's parser recurses once per nesting level: 100k '[' would otherwise be a 500.
        raise InvalidRequest("The JSON body of your request is nested too deeply.") from None
    problem = json_problem(data, check_strings=_SURROGATE_ESCAPE.search(text) is not None)
    if problem:
        raise InvalidRequest(problem)
    if not isinstance(data, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    for field, why in UNSUPPORTED_PARAMS.items():
        if field in data and data[field] is not None:
            raise InvalidRequest(f"Unsupported parameter '{field}': {why}.", param=field,
                                 code="unsupported_parameter")  # fmt: skip
    if "messages" in data and data["messages"] == []:
        raise InvalidRequest("'messages' must contain at least one message.", param="messages")
    try:
        return ChatCompletionRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = ".".join(str(p) for p in first["loc"]) or None
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        message = first["msg"].removeprefix("Value error, ")
        raise InvalidRequest(f"Invalid value for '{param}': {message}{more}", param=param) from None


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


def build_context(
    request: Request, req: ChatCompletionRequest, tenant: str | None
) -> RequestContext:
    policy = request.app.state.policy
    scope = memory_scope(tenant, request.headers.get("x-dmt-user") or req.user)
    return RequestContext(
        request_id=request.state.request_id,
        mode=_enum_header(request, "x-dmt-mode", Mode, policy.mode),
        memory=_enum_header(request, "x-dmt-memory", MemoryAccess, MemoryAccess.READ_WRITE),
        scope=scope,
        started=request.state.started,
    )


def _headers(ctx: RequestContext) -> dict[str, str]:
    return {
        **ctx.headers,
        "x-request-id": ctx.request_id,
        "x-dmt-mode": ctx.mode.value,
        "x-dmt-overhead-ms": f"{ctx.overhead_ms():.3f}",
    }


def _sse(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


@router.post("/v1/chat/completions", responses=CHAT_RESPONSES)
async def chat_completions(request: Request) -> Response:
    state = request.app.state
    pipeline: ChatPipeline = state.pipeline
    tenant = authenticate(request)
    body = await read_body(request, state.settings.max_body_bytes)
    req = parse_chat_request(body)
    ctx = build_context(request, req, tenant)
    request.state.mode = ctx.mode.value
    if not req.stream:
        completion = await pipeline.complete(req, ctx)
        state.metrics.overhead.labels("false").observe(ctx.overhead_ms() / 1000.0)
        return Response(completion.wire_json(), media_type="application/json",
                        headers=_headers(ctx))  # fmt: skip

    chunks = pipeline.stream(req, ctx)
    # Pull the first chunk before answering so an upstream failure is a proper 502/504.
    try:
        first = await anext(chunks)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await chunks.aclose()
        raise
    headers = _headers(ctx)
    state.metrics.overhead.labels("true").observe(ctx.overhead_ms() / 1000.0)

    async def body_iter() -> AsyncIterator[bytes]:
        try:
            if first is not None:
                yield _sse(first.wire_json())
            async for chunk in chunks:
                yield _sse(chunk.wire_json())
        except (UpstreamError, RequestError) as exc:
            # Headers are gone: report the failure in-band, as OpenAI does.
            error = error_body(exc.message, exc.error_type, code="upstream_error")
            yield _sse(json.dumps(error, separators=(",", ":")).encode())
            return
        finally:
            await chunks.aclose()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body_iter(), media_type="text/event-stream", headers=headers)


@router.get("/v1/models", responses={200: {"model": ModelList}, **error_responses(401)})
async def list_models(request: Request) -> JSONResponse:
    authenticate(request)
    registry = request.app.state.registry
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "dmt-proxy"}
        for name in registry.aliases
    ]
    return JSONResponse({"object": "list", "data": data})
