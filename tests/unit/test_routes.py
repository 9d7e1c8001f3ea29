"""The route declarations (``dmt_proxy.api.routes``) against the app that reads them.

Every route the app serves is declared, and served as declared; the metrics label,
the OpenAPI entries and the list of model APIs come from the declarations. The app
is built, not started: nothing here sends a request through the pipeline.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from dmt_proxy.api.app import create_app
from dmt_proxy.api.routes import CHAT, ROUTES
from dmt_proxy.api.routes_embeddings import SUPPORTED_ROUTES
from dmt_proxy.api.routing import OTHER, Access, Route, RouteLabels, check_routes, route_problems
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.chat import ScriptedChatModel


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    settings = Settings.from_env({}, state_dir=tmp_path / "state", admin_key="admin-key")
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"}})
    return create_app(settings, policy=policy, upstream=ScriptedChatModel(["unused"]))


def test_the_app_serves_exactly_the_declared_routes(app: FastAPI) -> None:
    assert route_problems(app, ROUTES) == []
    assert len({(r.method, r.path) for r in ROUTES}) == len(ROUTES)  # each declared once


async def _handler() -> JSONResponse:
    return JSONResponse({})


def test_a_route_served_but_not_declared_stops_the_app(app: FastAPI) -> None:
    app.get("/v1/undeclared")(_handler)
    with pytest.raises(RuntimeError, match="GET /v1/undeclared is served but not declared"):
        check_routes(app, ROUTES)


def test_a_declared_route_registered_by_hand_is_refused(app: FastAPI) -> None:
    """A handler registered without ``serve`` would document other answers."""
    app.post(CHAT.path)(_handler)  # the declared path and method, no documented answers
    with pytest.raises(RuntimeError, match="POST /v1/chat/completions is not registered"):
        check_routes(app, ROUTES)


def test_a_declared_route_not_served_is_refused(app: FastAPI) -> None:
    gone = Route("GET", "/v1/gone", Access.PUBLIC)
    assert route_problems(app, (*ROUTES, gone)) == ["GET /v1/gone is declared but not served"]


# The labels the request metrics have always carried (dashboards and alerts read them).
LABELS = {
    "/v1/chat/completions": "/v1/chat/completions",
    "/v1/responses": "/v1/responses",
    "/v1/messages": "/v1/messages",
    "/v1/messages/count_tokens": "/v1/messages/count_tokens",
    "/v1/embeddings": "/v1/embeddings",
    "/v1/models": "/v1/models",
    "/healthz": "/healthz",
    "/metrics": "/metrics",
    "/v1/memories": "/v1/memories",
    "/v1/memories/": "/v1/memories",
    "/v1/memories/mem_1": "/v1/memories",
    "/v1/memories/mem_1/review": "/v1/memories",
    "/v1/memories/mem_1/evidence": "/v1/memories",
    "/v1/memories/a/b/c": "/v1/memories",  # no such route (a 404): still the memory API
    "/v1/audits": "/v1/audits",
    "/v1/audits/audit_1": "/v1/audits",
    "/v1/memoriesx": OTHER,
    "/v1/admin/outbox": OTHER,
    "/v1/reviews/queue": OTHER,
    "/console": OTHER,
    "/console/static/console.css": OTHER,
    "/mcp": OTHER,
    "/v1/completions": OTHER,
    "/openapi.json": OTHER,
    "/v1/chat/completions/": OTHER,
    "/nowhere": OTHER,
    "": OTHER,
}


@pytest.mark.parametrize(("path", "label"), LABELS.items())
def test_the_metrics_label_of_a_path(path: str, label: str) -> None:
    assert RouteLabels(ROUTES)(path) == label


def test_a_new_route_is_labelled_by_its_declaration() -> None:
    labels = RouteLabels([Route("GET", "/v1/things", Access.TENANT, metrics_label="/v1/things"),
                          Route("GET", "/v1/things/{id}", Access.TENANT,
                                metrics_label="/v1/things"),
                          Route("GET", "/v1/quiet", Access.TENANT)])  # fmt: skip
    assert labels("/v1/things") == labels("/v1/things/7/parts") == "/v1/things"
    assert labels("/v1/quiet") == OTHER


def test_every_documented_route_is_in_the_document_as_declared(app: FastAPI) -> None:
    doc = app.openapi()
    documented = [r for r in ROUTES if r.documented]
    paths = {(path, method.upper()) for path, item in doc["paths"].items() for method in item}
    assert paths == {(r.path, r.method) for r in documented}
    for route in documented:
        operation = doc["paths"][route.path][route.method.lower()]
        assert {str(status) for status in route.responses} <= set(operation["responses"])
        if route.body is not None:
            schema = operation["requestBody"]["content"]["application/json"]["schema"]
            assert schema["$ref"] == f"#/components/schemas/{route.body.__name__}"
            assert route.body.__name__ in doc["components"]["schemas"]
        else:
            assert "requestBody" not in operation, route.name
        headers = [p["name"] for p in operation.get("parameters", []) if p["in"] == "header"]
        assert ("x-dmt-user" in headers) == route.memory_headers, route.name


def test_the_legacy_completions_refusal_lists_the_model_apis() -> None:
    assert SUPPORTED_ROUTES == ("POST /v1/chat/completions", "POST /v1/responses",
                                "POST /v1/messages", "POST /v1/embeddings", "GET /v1/models")  # fmt: skip
