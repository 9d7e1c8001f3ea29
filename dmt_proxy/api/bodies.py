"""Reading and parsing request bodies, the same for every route that takes JSON.

Routes read their raw body (to enforce the size limit before parsing) and parse it
here, so that every route refuses the same bad input the same way: too large,
not JSON, nested too deeply, lone surrogates, not an object, and a pydantic
validation error turned into a 400 naming the field.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from dmt_proxy.errors import InvalidRequest, PayloadTooLarge

Model = TypeVar("Model", bound=BaseModel)
Result = TypeVar("Result")


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


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or ``InvalidRequest`` saying what is wrong with it."""
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
    return data


def invalid_request(exc: ValidationError) -> InvalidRequest:
    """The first problem of a failed validation, as a 400 naming the field."""
    first = exc.errors()[0]
    param = ".".join(str(p) for p in first["loc"]) or None
    more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
    if first["type"] == "extra_forbidden":
        return InvalidRequest(f"Unsupported parameter '{param}': dmt-proxy does not support it "
                              f"on this route{more}.", param=param, code="unsupported_parameter")  # fmt: skip
    message = first["msg"].removeprefix("Value error, ")
    return InvalidRequest(f"Invalid value for '{param}': {message}{more}", param=param)


def validate_body(model: type[Model], data: dict[str, Any]) -> Model:
    """``data`` validated as ``model``, or the 400 of ``invalid_request``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise invalid_request(exc) from None


PARSE_INLINE_BYTES = 64 * 1024
"""Bodies up to this size are parsed on the event loop (well under a millisecond); a larger
one (up to ``DMT_MAX_BODY_BYTES``, 4 MiB: tens of milliseconds of parsing, depth and
surrogate checks and validation) is parsed in a worker thread, so it stalls no other request."""


async def parse_off_loop(raw: bytes, parse: Callable[[bytes], Result]) -> Result:
    """``parse(raw)``, in a worker thread when ``raw`` is over ``PARSE_INLINE_BYTES``."""
    return parse(raw) if len(raw) <= PARSE_INLINE_BYTES else await asyncio.to_thread(parse, raw)


async def json_body(request: Request, model: type[Model]) -> Model:
    """The request's body, read under ``DMT_MAX_BODY_BYTES`` and validated as ``model``.

    For routes behind a key: FastAPI parses a declared body before any dependency runs,
    so a malformed body would be refused (400) before a missing key (401). Those routes
    declare no body, authenticate as a dependency, then read the body here.
    """
    raw = await read_body(request, request.app.state.settings.max_body_bytes)
    return await parse_off_loop(raw, lambda body: validate_body(model, parse_json_object(body)))
