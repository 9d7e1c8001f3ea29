"""The OpenAPI document: what each route answers, and the chat body it parses by hand.

The chat route reads its raw body (to enforce the size limit before parsing), so
FastAPI cannot see the request model; ``install_openapi`` adds it from
``ChatCompletionRequest``. Every route also documents its error statuses with
OpenAI's error shape, so a schema-driven fuzzer (schemathesis, in
tests/reliability) can check each answer against the document. The chat
replies are documented by the models the chat route returns
(``openai_types.ChatCompletion``), a memory and the outbox status by the service's own
types (``memory.service.MemoryEntry``, ``OutboxStats``); the other response models here
describe JSON their routes build themselves.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.memory.base import MAX_SCOPE_PART, MAX_TEXT_CHARS
from dmt_proxy.memory.review import ReviewRequest
from dmt_proxy.memory.service import MemoryEntry
from dmt_proxy.messages.protocol import ErrorResponse as AnthropicErrorResponse
from dmt_proxy.messages.protocol import MessageObject, MessagesRequest
from dmt_proxy.openai_types import (
    UNSUPPORTED_PARAMS,
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionRequest,
)
from dmt_proxy.policy import Mode
from dmt_proxy.responses.protocol import ResponseObject, ResponsesRequest
from dmt_proxy.upstream.embeddings import EmbeddingRequest, EmbeddingResponse

CHAT_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"

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
    user: str
    deleted: int
    object: Literal["list"]


_SSE_EVENT = {
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

CHAT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ChatCompletion,
        "description": "The completion, or with ``stream: true`` server-sent chunks.",
        # One object per server-sent event (OpenAPI 3.1: the schema describes each event);
        # "data" is a JSON chunk, an in-band {"error": ...}, or the final "[DONE]".
        "content": {"text/event-stream": {"schema": _SSE_EVENT}},
    },
    **error_responses(400, 401, 404, 413, 429, 502, 504),
}


EMBEDDING_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": EmbeddingResponse, "description": "One embedding per input text."},
    **error_responses(400, 401, 404, 413, 429, 502, 504),
}


_RESPONSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string", "description": "The event type (response.created, ...)."},
        "data": {"type": "string", "description": "The JSON event, with the same 'type'."},
    },
}

RESPONSES_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ResponseObject,
        "description": "The Response, or with ``stream: true`` its server-sent events.",
        "content": {"text/event-stream": {"schema": _RESPONSE_EVENT}},
    },
    **error_responses(400, 401, 404, 413, 429, 502, 504),
}


_MESSAGE_EVENT = {
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


MESSAGES_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": MessageObject,
        "description": "The Message, or with ``stream: true`` its server-sent events.",
        "content": {"text/event-stream": {"schema": _MESSAGE_EVENT}},
    },
    **anthropic_error_responses(400, 401, 404, 413, 429, 502, 504),
}

COUNT_TOKENS_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {
        "model": AnthropicErrorResponse,
        "description": "Always: token counting is not served by dmt-proxy.",
    },
    **anthropic_error_responses(401),
}


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


def install_openapi(app: FastAPI) -> None:
    """Generate the document once, with the chat request body added."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            for operation in (op for item in doc["paths"].values() for op in item.values()):
                # FastAPI documents a 422 for parameter errors; ours answer 400 (errors.py).
                operation["responses"].pop("422", None)
            for name in ("HTTPValidationError", "ValidationError"):
                doc.get("components", {}).get("schemas", {}).pop(name, None)
            components = doc.setdefault("components", {}).setdefault("schemas", {})
            components["ChatCompletionRequest"] = _chat_request_schema(components)
            components["ChatCompletionChunk"] = _component(ChatCompletionChunk, components)
            doc["paths"][CHAT_PATH]["post"]["parameters"] = _CHAT_HEADERS
            doc["paths"][CHAT_PATH]["post"]["requestBody"] = _json_body("ChatCompletionRequest")
            components["EmbeddingRequest"] = _component(EmbeddingRequest, components)
            doc["paths"][EMBEDDINGS_PATH]["post"]["requestBody"] = _json_body("EmbeddingRequest")
            components["ResponsesRequest"] = _component(ResponsesRequest, components)
            doc["paths"][RESPONSES_PATH]["post"]["parameters"] = _CHAT_HEADERS
            doc["paths"][RESPONSES_PATH]["post"]["requestBody"] = _json_body("ResponsesRequest")
            components["MessagesRequest"] = _component(MessagesRequest, components)
            doc["paths"][MESSAGES_PATH]["post"]["parameters"] = _CHAT_HEADERS
            doc["paths"][MESSAGES_PATH]["post"]["requestBody"] = _json_body("MessagesRequest")
            # Routes behind a key read their body after authenticating (api/bodies.json_body).
            components["MemoryCreate"] = _component(MemoryCreate, components)
            doc["paths"]["/v1/memories"]["post"]["requestBody"] = _json_body("MemoryCreate")
            components["ReviewRequest"] = _component(ReviewRequest, components)
            review = doc["paths"]["/v1/memories/{memory_id}/review"]["post"]
            review["requestBody"] = _json_body("ReviewRequest")
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
