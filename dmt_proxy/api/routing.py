"""What a route is (``Route``), and the readers of its one declaration.

Every route the app serves is declared once, in ``dmt_proxy.api.routes``: its method
and path, who may call it, its metrics label, what the OpenAPI document says it
answers and reads. Nothing else writes those down again:

- ``serve`` registers a handler exactly as its route is declared;
- ``RouteLabels`` gives the middleware a request's metrics label;
- ``install_openapi`` (``dmt_proxy.api.openapi``) adds the bodies and headers the
  routes read themselves;
- ``/v1/completions`` lists the declared model APIs in its refusal.

``check_routes`` runs when the app is built: a route served but not declared, or
declared but not served, or registered other than declared, stops the app from
starting, so a new route cannot be silently counted as ``other`` or left out of the
document.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, FastAPI
from fastapi.datastructures import Default
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import BaseModel

OTHER = "other"
"""The metrics label of every request whose path is not labelled by a declaration."""

ANY_METHOD: Literal["*"] = "*"
"""The method of a route that answers every method itself (the MCP transport)."""

Method = Literal["GET", "POST", "DELETE", "*"]
Responses = dict[int | str, dict[str, Any]]
"""FastAPI's ``responses=``: each documented status and its model or content."""


class Access(StrEnum):
    """Who may call a route: the key it checks before reading anything else."""

    PUBLIC = "public"
    """No key (health, metrics, the console's sign-in and assets)."""
    TENANT = "tenant"
    """A tenant's API key, when ``DMT_TENANTS_FILE`` is set (the model APIs, MCP)."""
    ADMIN = "admin"
    """``DMT_ADMIN_KEY``: the memory admin API."""
    REVIEW = "review"
    """A review key (or the admin key): the review API."""
    CONSOLE = "console"
    """A console session; without one the page redirects to the sign-in form."""


@dataclass(frozen=True)
class Route:
    """One route of the app, declared once."""

    method: Method
    path: str
    access: Access
    metrics_label: str = OTHER
    """The ``route`` label of the request metrics. A templated path's label also covers
    every path under its static prefix (a 404 under ``/v1/memories/`` is counted with
    the memory API); the label set stays bounded whatever clients send."""
    responses: Responses = field(default_factory=dict)
    """What the OpenAPI document says the route answers."""
    documented: bool = True
    """In the OpenAPI document (``include_in_schema``)."""
    body: type[BaseModel] | None = None
    """The JSON body the handler reads itself (after the key, under the size limit), so
    FastAPI cannot see it; the OpenAPI document adds it."""
    memory_headers: bool = False
    """Reads ``X-DMT-User``, ``X-DMT-Mode`` and ``X-DMT-Memory`` (a pipeline route)."""
    model_api: bool = False
    """One of the model APIs an agent calls: named when ``/v1/completions`` is refused."""
    response_class: type[Response] | None = None
    """The handler's response class where it is not JSON (FastAPI documents it)."""

    @property
    def name(self) -> str:
        """``METHOD path``, as the API's messages name a route."""
        return f"{self.method} {self.path}"


Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def serve(router: APIRouter, route: Route) -> Callable[[Endpoint], Endpoint]:
    """Register the decorated handler on ``router`` as ``route`` declares it."""

    def register(endpoint: Endpoint) -> Endpoint:
        router.add_api_route(route.path, endpoint, methods=[route.method],
                             responses=route.responses, include_in_schema=route.documented,
                             response_class=route.response_class or Default(JSONResponse))  # fmt: skip
        return endpoint

    return register


class RouteLabels:
    """A request path's metrics label, from the declarations (``OTHER`` when none)."""

    def __init__(self, routes: Iterable[Route]) -> None:
        labelled = [r for r in routes if r.metrics_label != OTHER]
        self._exact = {r.path: r.metrics_label for r in labelled if "{" not in r.path}
        prefixes = {(r.path.split("{", 1)[0], r.metrics_label) for r in labelled if "{" in r.path}
        self._prefixes = sorted(prefixes, key=lambda p: len(p[0]), reverse=True)

    def __call__(self, path: str) -> str:
        """The label of ``path`` (the raw request path, before routing)."""
        label = self._exact.get(path)
        if label is not None:
            return label
        return next((lbl for prefix, lbl in self._prefixes if path.startswith(prefix)), OTHER)


def _framework_paths(app: FastAPI) -> set[str | None]:
    """The routes FastAPI adds itself (the document and its viewers)."""
    return {app.openapi_url, app.docs_url, app.redoc_url, app.swagger_ui_oauth2_redirect_url}


def route_problems(app: FastAPI, routes: Iterable[Route]) -> list[str]:
    """Every way ``app``'s routes differ from ``routes`` (empty: they agree)."""
    declared: dict[tuple[str, str], Route] = {(r.method, r.path): r for r in routes}
    served: set[tuple[str, str]] = set()
    problems: list[str] = []
    framework = _framework_paths(app)
    # Included routers flattened, each route as the app serves it (prefix, responses).
    for served_route in iter_route_contexts(app.routes):
        path = served_route.path
        if path is None or path in framework:
            continue
        methods = sorted(served_route.methods or {ANY_METHOD})
        for method in methods:
            if method == "HEAD" and "GET" in methods:
                continue  # Starlette adds HEAD to a plain GET route
            served.add((method, path))
            route = declared.get((method, path))
            if route is None:
                problems.append(f"{method} {path} is served but not declared")
            elif isinstance(served_route.original_route, APIRoute) and (
                served_route.responses != route.responses
                or served_route.include_in_schema != route.documented
            ):
                problems.append(f"{route.name} is not registered as declared (use serve())")
    problems += [f"{r.name} is declared but not served" for k, r in declared.items()
                 if k not in served]  # fmt: skip
    return problems


def check_routes(app: FastAPI, routes: Iterable[Route]) -> None:
    """Refuse to build an app whose routes are not exactly the declared ones."""
    problems = route_problems(app, routes)
    if problems:
        raise RuntimeError("routes differ from dmt_proxy.api.routes: " + "; ".join(problems))
