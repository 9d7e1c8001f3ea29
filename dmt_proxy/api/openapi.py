"""The OpenAPI document: the words route declarations document their answers in, and
what FastAPI cannot see.

Each route's documented answers are part of its declaration (``dmt_proxy.api.routes``),
written with the helpers and models here. Every route documents its error statuses
with OpenAI's error shape (Anthropic's on ``/v1/messages``), so a schema-driven fuzzer
(schemathesis, in tests/reliability) can check each answer against the document.
Routes that read their raw body (to enforce the size limit before parsing, or to check
a key first) hide the request model from FastAPI; ``install_openapi`` adds each
declared ``body``, and the ``X-DMT-*`` headers of the pipeline routes. The chat
replies are documented by the models the chat route returns
(``openai_types.ChatCompletion``), a memory and the outbox status by the memory side's
own types (``memory.entry.MemoryEntry``, ``memory.service.OutboxStats``), the audit API
by its wire types (``audit_types``, which its SDK client reads too); the other
response models here describe JSON their routes build themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.api.routing import Route
from dmt_proxy.memory.base import MAX_SCOPE_PART, MAX_TEXT_CHARS
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.erasure import Erasure
from dmt_proxy.memory.review import QueueItem
from dmt_proxy.messages.protocol import ErrorResponse as AnthropicErrorResponse
from dmt_proxy.openai_types import UNSUPPORTED_PARAMS, ChatCompletionChunk, ChatCompletionRequest
from dmt_proxy.policy import Mode

_DESCRIPTIONS = {
    400: "The request is invalid (OpenAI error shape).",
    401: "Missing or wrong API key or admin key.",
    403: "The admin API is disabled (no DMT_ADMIN_KEY).",
    404: "Unknown model, memory or route.",
    413: "The request body is larger than DMT_MAX_BODY_BYTES.",
    429: "The upstream is rate limiting.",
    502: "The upstream model failed.",
    504: "The upstream model timed out.",
}


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """``{"error": {"message", "type", "param", "code"}}``: every non-2xx answer."""

    error: ErrorDetail


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries documenting ``statuses`` with the error shape."""
    return {s: {"model": ErrorResponse, "description": _DESCRIPTIONS[s]} for s in statuses}


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    mode: str


class MemoryCreate(BaseModel):
    """Body of ``POST /v1/memories``: one exchange to remember, queued like a chat write."""

    model_config = ConfigDict(extra="forbid")
    user: str = Field(min_length=1, max_length=MAX_SCOPE_PART)
    query: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, description="The user's words.")
    answer: str = Field(default="", max_length=MAX_TEXT_CHARS, description="The agent's reply.")
    mode: Mode | None = Field(
        default=None,
        description="Decides whether the write is audited, as for a chat request "
        "(default: the policy's mode).",
    )


class MemoryList(BaseModel):
    """``GET /v1/memories``: the memories the service lists, as it returns them."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)
    object: Literal["list"] = "list"
    data: list[MemoryEntry]


class MemoryDeleted(BaseModel):
    id: str
    object: Literal["memory"]
    deleted: bool


class UserMemoriesDeleted(BaseModel):
    """``DELETE /v1/memories?user=U``: the user erased (``memory.erasure``)."""

    user: str
    deleted: int
    """Memories deleted, stored or queued (each counted once)."""
    object: Literal["list"]
    erasure: Erasure
    """What was erased where, and what could not be."""


class ReviewQueue(BaseModel):
    """The answer of ``GET /v1/reviews/queue``."""

    object: str = "list"
    data: list[QueueItem]


CHAT_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": "A JSON ChatCompletionChunk (#/components/schemas/ChatCompletionChunk), "
            'an in-band {"error": ...}, or the final "[DONE]".',
        },
        "event": {"type": "string"},
    },
}

RESPONSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string", "description": "The event type (response.created, ...)."},
        "data": {"type": "string", "description": "The JSON event, with the same 'type'."},
    },
}

MESSAGE_EVENT = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "description": "The event type (message_start, ...)."},
        "data": {"type": "string", "description": "The JSON event, with the same 'type'."},
    },
}


def anthropic_error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries documenting ``statuses`` with Anthropic's error shape."""
    return {s: {"model": AnthropicErrorResponse,
                "description": _DESCRIPTIONS[s].replace("OpenAI", "Anthropic")}
            for s in statuses}  # fmt: skip


def _component(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    """``model``'s schema, its nested models added to ``components``."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(schema.pop("$defs", {}))
    return schema


def _chat_request_schema(components: dict[str, Any]) -> dict[str, Any]:
    schema = _component(ChatCompletionRequest, components)
    props = schema.setdefault("properties", {})
    # Rules enforced outside the field types, stated so generated requests are realistic.
    props["n"] = {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 1}, {"type": "null"}],
                  "title": "N", "description": "Only 1 is supported."}  # fmt: skip
    for field, why in UNSUPPORTED_PARAMS.items():
        props[field] = {"type": "null", "description": f"Unsupported: {why}."}
    return schema


_CHAT_HEADERS = [
    {"name": "x-dmt-user", "in": "header", "required": False,
     "description": "Memory scope of the request (overrides the body's 'user').",
     "schema": {"type": "string"}},
    {"name": "x-dmt-mode", "in": "header", "required": False,
     "description": "Mitigation mode for this request (default: the policy's).",
     "schema": {"type": "string", "enum": [m.value for m in Mode]}},
    {"name": "x-dmt-memory", "in": "header", "required": False,
     "description": "What this request may do with memory.",
     "schema": {"type": "string", "enum": ["read-write", "read-only", "off"]}},
]  # fmt: skip


def _json_body(component: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{component}"}}}}  # fmt: skip


def _body_schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    if model is ChatCompletionRequest:
        return _chat_request_schema(components)
    return _component(model, components)


def install_openapi(app: FastAPI, routes: Iterable[Route]) -> None:
    """Generate the document once, with the bodies and headers ``routes`` read themselves."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for operation in (op for item in doc["paths"].values() for op in item.values()):
                # FastAPI documents a 422 for parameter errors; ours answer 400 (errors.py).
                operation["responses"].pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                doc.get("components", {}).get("schemas", {}).pop(name, None)
            components = doc.setdefault("components", {}).setdefault("schemas", {})
            # Named in the chat route's stream event; no route returns it as a model.
            components["ChatCompletionChunk"] = _component(ChatCompletionChunk, components)
            for route in routes:
                operation = doc["paths"].get(route.path, {}).get(route.method.lower())
                if operation is None:
                    continue  # not in the document
                if route.memory_headers:
                    operation["parameters"] = _CHAT_HEADERS
                if route.body is not None:
                    components[route.body.__name__] = _body_schema(route.body, components)
                    operation["requestBody"] = _json_body(route.body.__name__)
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
