"""OpenAI-shaped error responses, mapped explicitly per exception type."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from dmt_proxy.errors import RequestError, UpstreamError

log = logging.getLogger(__name__)


def error_body(
    message: str, error_type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}`` as OpenAI sends it."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response(status: int, body: dict[str, Any], request: Request) -> JSONResponse:
    headers = {}
    request_id = getattr(request.state, "request_id", None)
    if request_id:
        headers["x-request-id"] = request_id
    return JSONResponse(body, status_code=status, headers=headers)


def request_error_response(exc: RequestError, request: Request) -> JSONResponse:
    return error_response(
        exc.status_code,
        error_body(exc.message, exc.error_type, param=exc.param, code=exc.code),
        request,
    )


def upstream_error_response(exc: UpstreamError, request: Request) -> JSONResponse:
    return error_response(
        exc.status_code, error_body(exc.message, exc.error_type, code="upstream_error"), request
    )


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    loc = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "path", "header")]
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid value"))
    if first.get("type") == "json_invalid":
        return "We could not parse the JSON body of your request.", None
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"Invalid value for '{param}': {msg}{more}" if param else msg + more, param


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that keep every error in OpenAI's shape."""

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return request_error_response(exc, request)

    @app.exception_handler(UpstreamError)
    async def _upstream_error(request: Request, exc: UpstreamError) -> JSONResponse:
        log.warning("upstream error: %s", exc.message)
        return upstream_error_response(exc, request)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(
            400, error_body(message, "invalid_request_error", param=param), request
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return error_response(exc.status_code, error_body(str(exc.detail), kind), request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(
            500,
            error_body("Internal error in dmt-proxy; see the proxy log.", "server_error"),
            request,
        )
