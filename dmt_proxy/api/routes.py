"""Every route of the app, declared once (what a ``Route`` holds: ``dmt_proxy.api.routing``).

The handlers register from these (``serve``); the middleware labels the request
metrics by them; the OpenAPI document reads their answers, bodies and headers;
``/v1/completions`` names the model APIs among them. Building the app fails when a
route it serves is not in ``ROUTES`` (``check_routes``), so a new route is an entry
here and a handler that ``serve``s it.
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import Response
from pydantic import BaseModel

from dmt_proxy.api.openapi import (
    CHAT_EVENT,
    MESSAGE_EVENT,
    RESPONSE_EVENT,
    ErrorResponse,
    Health,
    MemoryCreate,
    MemoryDeleted,
    MemoryList,
    ModelList,
    ReviewQueue,
    UserMemoriesDeleted,
    anthropic_error_responses,
    error_responses,
)
from dmt_proxy.api.routing import ANY_METHOD, Access, Responses, Route
from dmt_proxy.audit_types import AuditRequest, AuditResult
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.erasure import UserExport
from dmt_proxy.memory.review import MemoryDetail, Overview, ReviewOutcome, ReviewRequest, UserView
from dmt_proxy.memory.service import OutboxStats
from dmt_proxy.messages.protocol import ErrorResponse as AnthropicErrorResponse
from dmt_proxy.messages.protocol import MessageObject, MessagesRequest
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionRequest
from dmt_proxy.responses.protocol import ResponseObject, ResponsesRequest
from dmt_proxy.upstream.embeddings import EmbeddingRequest, EmbeddingResponse

_MODEL_ERRORS = error_responses(400, 401, 404, 413, 429, 502, 504)
_KEY_ERRORS = error_responses(401, 403, 404)
"""What every admin and review route can answer, before its own answers."""


def _keyed(model: type[BaseModel], *errors: int) -> Responses:
    """An admin or review route's answers: ``model``, the key's refusals, ``errors``."""
    return {**_KEY_ERRORS, 200: {"model": model}, **error_responses(*errors)}


def _streamed(model: type[BaseModel], description: str, event: dict[str, Any]) -> Responses:
    # One object per server-sent event (OpenAPI 3.1: the schema describes each event).
    return {200: {"model": model, "description": description,
                  "content": {"text/event-stream": {"schema": event}}}}  # fmt: skip


# The model APIs, behind a tenant's key.
CHAT = Route(
    "POST", "/v1/chat/completions", Access.TENANT, metrics_label="/v1/chat/completions",
    responses={**_streamed(ChatCompletion, "The completion, or with ``stream: true`` "
                           "server-sent chunks.", CHAT_EVENT), **_MODEL_ERRORS},
    body=ChatCompletionRequest, memory_headers=True, model_api=True,
)  # fmt: skip
RESPONSES = Route(
    "POST", "/v1/responses", Access.TENANT, metrics_label="/v1/responses",
    responses={**_streamed(ResponseObject, "The Response, or with ``stream: true`` its "
                           "server-sent events.", RESPONSE_EVENT), **_MODEL_ERRORS},
    body=ResponsesRequest, memory_headers=True, model_api=True,
)  # fmt: skip
MESSAGES = Route(
    "POST", "/v1/messages", Access.TENANT, metrics_label="/v1/messages",
    responses={**_streamed(MessageObject, "The Message, or with ``stream: true`` its "
                           "server-sent events.", MESSAGE_EVENT),
               **anthropic_error_responses(400, 401, 404, 413, 429, 502, 504)},
    body=MessagesRequest, memory_headers=True, model_api=True,
)  # fmt: skip
COUNT_TOKENS = Route(
    "POST", "/v1/messages/count_tokens", Access.TENANT, metrics_label="/v1/messages/count_tokens",
    responses={404: {"model": AnthropicErrorResponse,
                     "description": "Always: token counting is not served by dmt-proxy."},
               **anthropic_error_responses(401)},
)  # fmt: skip
EMBEDDINGS = Route(
    "POST", "/v1/embeddings", Access.TENANT, metrics_label="/v1/embeddings",
    responses={200: {"model": EmbeddingResponse, "description": "One embedding per input text."},
               **_MODEL_ERRORS},
    body=EmbeddingRequest, model_api=True,
)  # fmt: skip
MODELS = Route(
    "GET", "/v1/models", Access.TENANT, metrics_label="/v1/models",
    responses={200: {"model": ModelList}, **error_responses(401)}, model_api=True,
)  # fmt: skip
LEGACY_COMPLETIONS = Route("POST", "/v1/completions", Access.TENANT, documented=False)
"""Refused with the list of model APIs (``dmt_proxy.api.routes_embeddings``)."""
MCP = Route(ANY_METHOD, "/mcp", Access.TENANT, documented=False)

# The audit API (``dmt_proxy.api.routes_audits``), behind a tenant's key: it judges a text
# as a memory write would be judged and stores nothing.
_AUDIT_ERRORS: Responses = {
    **error_responses(400, 401, 413),
    404: {"model": ErrorResponse, "description": "The audit API is off: the policy turns "
          "memory off, so the proxy builds no audit pipeline (code audit_api_disabled)."},
    429: {"model": ErrorResponse, "description": "Too many audits are in progress in this "
          "proxy (code too_many_audits): retry later."},
    502: {"model": ErrorResponse, "description": "The auditor model refused the request "
          "(type auditor_unavailable)."},
    503: {"model": ErrorResponse, "description": "The auditor model could not be reached or "
          "did not answer in time (type auditor_unavailable): retry later."},
}  # fmt: skip
CREATE_AUDIT = Route(
    "POST", "/v1/audits", Access.TENANT, metrics_label="/v1/audits",
    responses={200: {"model": AuditResult, "description": "The audit, completed: its outcome "
                     "is what the memory write path would make of the text."},
               202: {"model": AuditResult, "description": "The audit, still pending after "
                     "'wait' seconds: poll GET /v1/audits/{audit_id} (the Location header)."},
               **_AUDIT_ERRORS},
    body=AuditRequest,
)  # fmt: skip
GET_AUDIT = Route(
    "GET", "/v1/audits/{audit_id}", Access.TENANT, metrics_label="/v1/audits",
    responses={200: {"model": AuditResult, "description": "The audit: pending, completed or "
                     "failed (with its error)."},
               **error_responses(401),
               404: {"model": ErrorResponse, "description": "No such audit for this key: "
                     "unknown, another tenant's, expired, or accepted by another process."}},
)  # fmt: skip

# The memory admin API (``dmt_proxy.api.routes_memory``).
LIST_MEMORIES = Route("GET", "/v1/memories", Access.ADMIN, metrics_label="/v1/memories",
                      responses=_keyed(MemoryList, 400))  # fmt: skip
CREATE_MEMORY = Route("POST", "/v1/memories", Access.ADMIN, metrics_label="/v1/memories",
                      responses=_keyed(MemoryEntry, 400, 413), body=MemoryCreate)  # fmt: skip
GET_MEMORY = Route("GET", "/v1/memories/{memory_id}", Access.ADMIN, metrics_label="/v1/memories",
                   responses=_keyed(MemoryEntry))  # fmt: skip
DELETE_MEMORY = Route("DELETE", "/v1/memories/{memory_id}", Access.ADMIN,
                      metrics_label="/v1/memories", responses=_keyed(MemoryDeleted))  # fmt: skip
DELETE_USER_MEMORIES = Route("DELETE", "/v1/memories", Access.ADMIN, metrics_label="/v1/memories",
                             responses=_keyed(UserMemoriesDeleted, 400))  # fmt: skip
OUTBOX = Route("GET", "/v1/admin/outbox", Access.ADMIN, responses=_keyed(OutboxStats))
EXPORT_USER = Route("GET", "/v1/admin/export", Access.ADMIN,
                    responses=_keyed(UserExport, 400))  # fmt: skip

# The review API (``dmt_proxy.api.routes_review``).
REVIEW_QUEUE = Route("GET", "/v1/reviews/queue", Access.REVIEW,
                     responses=_keyed(ReviewQueue, 400))  # fmt: skip
REVIEW_OVERVIEW = Route("GET", "/v1/reviews/overview", Access.REVIEW, responses=_keyed(Overview))
REVIEW_USER = Route("GET", "/v1/reviews/user", Access.REVIEW, responses=_keyed(UserView, 400))
MEMORY_EVIDENCE = Route("GET", "/v1/memories/{memory_id}/evidence", Access.REVIEW,
                        metrics_label="/v1/memories", responses=_keyed(MemoryDetail))  # fmt: skip
REVIEW_MEMORY = Route("POST", "/v1/memories/{memory_id}/review", Access.REVIEW,
                      metrics_label="/v1/memories", responses=_keyed(ReviewOutcome, 400, 413),
                      body=ReviewRequest)  # fmt: skip

# The review console's pages (``dmt_proxy.api.routes_console``): HTML, not documented.
CONSOLE_LOGIN_FORM = Route("GET", "/console/login", Access.PUBLIC, documented=False)
CONSOLE_LOGIN = Route("POST", "/console/login", Access.PUBLIC, documented=False)
CONSOLE_LOGOUT = Route("POST", "/console/logout", Access.PUBLIC, documented=False)
CONSOLE_OVERVIEW = Route("GET", "/console", Access.CONSOLE, documented=False)
CONSOLE_QUEUE = Route("GET", "/console/queue", Access.CONSOLE, documented=False)
CONSOLE_MEMORY = Route("GET", "/console/memories/{memory_id}", Access.CONSOLE, documented=False)
CONSOLE_USERS = Route("GET", "/console/users", Access.CONSOLE, documented=False)
CONSOLE_STATIC = Route("GET", "/console/static/{name}", Access.PUBLIC, documented=False)

# Operations.
HEALTHZ = Route("GET", "/healthz", Access.PUBLIC, metrics_label="/healthz",
                responses={200: {"model": Health}})  # fmt: skip
METRICS = Route(
    "GET", "/metrics", Access.PUBLIC, metrics_label="/metrics",
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                     "description": "Prometheus text exposition."}},
    response_class=Response,
)  # fmt: skip

ROUTES: tuple[Route, ...] = (
    CHAT, RESPONSES, MESSAGES, COUNT_TOKENS, EMBEDDINGS, MODELS, LEGACY_COMPLETIONS, MCP,
    CREATE_AUDIT, GET_AUDIT,
    LIST_MEMORIES, CREATE_MEMORY, GET_MEMORY, DELETE_MEMORY, DELETE_USER_MEMORIES, OUTBOX,
    EXPORT_USER,
    REVIEW_QUEUE, REVIEW_OVERVIEW, REVIEW_USER, MEMORY_EVIDENCE, REVIEW_MEMORY,
    CONSOLE_LOGIN_FORM, CONSOLE_LOGIN, CONSOLE_LOGOUT, CONSOLE_OVERVIEW, CONSOLE_QUEUE,
    CONSOLE_MEMORY, CONSOLE_USERS, CONSOLE_STATIC, HEALTHZ, METRICS,
)  # fmt: skip
"""Every route the app serves (FastAPI's own document and viewers aside)."""
