"""``create_app(settings)``: the FastAPI application factory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dmt_proxy import __version__
from dmt_proxy.api.audits import AuditJobs
from dmt_proxy.api.auth import Tenants
from dmt_proxy.api.errors import install_error_handlers
from dmt_proxy.api.mcp import install_mcp, mcp_lifespan
from dmt_proxy.api.middleware import RequestMiddleware
from dmt_proxy.api.openapi import install_openapi
from dmt_proxy.api.routes import HEALTHZ, METRICS, ROUTES
from dmt_proxy.api.routes_audits import router as audits_router
from dmt_proxy.api.routes_chat import router as chat_router
from dmt_proxy.api.routes_console import router as console_router
from dmt_proxy.api.routes_embeddings import router as embeddings_router
from dmt_proxy.api.routes_memory import router as memory_router
from dmt_proxy.api.routes_messages import router as messages_router
from dmt_proxy.api.routes_responses import router as responses_router
from dmt_proxy.api.routes_review import router as review_router
from dmt_proxy.api.routing import RouteLabels, check_routes, serve
from dmt_proxy.audit.protocol import Auditor
from dmt_proxy.loop_lag import watch_loop_lag
from dmt_proxy.memory.assembly import build_memory_service
from dmt_proxy.memory.base import MemoryBackend
from dmt_proxy.memory.service import DurableMemoryService
from dmt_proxy.metrics import Metrics
from dmt_proxy.pipeline import ChatPipeline
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel
from dmt_proxy.upstream.embeddings import EmbeddingRouter
from dmt_proxy.upstream.factory import open_upstream

log = logging.getLogger(__name__)


def create_app(
    settings: Settings,
    *,
    policy: Policy | None = None,
    upstream: ChatModel | None = None,
    memory_backend: MemoryBackend | None = None,
    auditor: Auditor | None = None,
) -> FastAPI:
    """Build the proxy app.

    ``upstream`` defaults to litellm (with the direct OpenAI-compatible path);
    ``memory_backend`` to the policy's backend; ``auditor`` to the policy's LLM
    auditor. Tests pass shipped fakes for the parts they are not about.
    """
    policy = policy or settings.load_policy()
    tenants = Tenants.load(settings.tenants_file) if settings.tenants_file else None
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        models = await open_upstream(settings, policy, chat=upstream)
        chat_model, registry = models.chat, models.registry
        app.state.settings = settings
        app.state.tenants = tenants
        app.state.policy = policy
        app.state.metrics = metrics
        app.state.upstream = models
        app.state.registry = registry
        app.state.embeddings = EmbeddingRouter(
            registry, via_litellm=settings.upstream_client == "litellm"
        )
        memory: DurableMemoryService | None = None
        if policy.memory.backend != "none":
            memory = await build_memory_service(settings, policy, registry, chat_model, metrics,
                                                backend=memory_backend, auditor=auditor)  # fmt: skip
            memory.start()
        app.state.memory = memory
        # The audit API judges with the very pipeline the worker judges memory writes with
        # (the assembly hands the review service that same object), not a second one.
        review = memory.review if memory is not None else None
        app.state.audits = AuditJobs(review.auditor if review is not None else None, policy,
                                     metrics)  # fmt: skip
        app.state.pipeline = ChatPipeline(
            upstream=chat_model,
            registry=registry,
            policy=policy,
            metrics=metrics,
            memory=memory,
        )
        log.info(
            "dmt-proxy %s ready (policy %s, mode %s)", __version__, policy.source, policy.mode.value
        )
        lag = asyncio.create_task(watch_loop_lag(metrics.event_loop_lag), name="dmt-loop-lag")
        try:
            async with mcp_lifespan(app):
                yield
        finally:
            lag.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag
            await app.state.audits.aclose()  # before the pipeline's models are closed
            if memory is not None:
                await memory.aclose()
            await app.state.embeddings.aclose()
            await models.aclose()

    app = FastAPI(title="dmt-proxy", version=__version__, lifespan=lifespan)
    app.add_middleware(RequestMiddleware, metrics=metrics, labels=RouteLabels(ROUTES))
    install_error_handlers(app)
    app.include_router(chat_router)
    app.include_router(responses_router)
    app.include_router(messages_router)
    app.include_router(embeddings_router)
    app.include_router(audits_router)
    app.include_router(memory_router)
    app.include_router(review_router)
    app.include_router(console_router)
    install_mcp(app)
    app.state.console_secret = secrets.token_bytes(32)  # signs console sessions (review_auth)
    install_openapi(app, ROUTES)

    @serve(app.router, HEALTHZ)
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "version": __version__, "mode": request.app.state.policy.mode.value}
        )

    @serve(app.router, METRICS)
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    check_routes(app, ROUTES)  # a route served but not declared stops the app here
    return app
