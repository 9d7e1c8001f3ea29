"""``create_app(settings)``: the FastAPI application factory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from dmt_proxy import __version__
from dmt_proxy.api.auth import Tenants
from dmt_proxy.api.errors import install_error_handlers
from dmt_proxy.api.middleware import RequestMiddleware
from dmt_proxy.api.openapi import Health, install_openapi
from dmt_proxy.api.routes_chat import router as chat_router
from dmt_proxy.api.routes_memory import router as memory_router
from dmt_proxy.audit.auditor import Auditor
from dmt_proxy.memory.base import MemoryBackend
from dmt_proxy.memory.service import DurableMemoryService, build_memory_service
from dmt_proxy.metrics import Metrics
from dmt_proxy.pipeline import ChatPipeline
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel
from dmt_proxy.upstream.openai_compat import (
    DispatchingChatModel,
    OpenAICompatChatModel,
    compatible_model,
)
from dmt_proxy.upstream.registry import ModelRegistry

log = logging.getLogger(__name__)

# Used when the upstream is not litellm (tests with a scripted model): the names
# litellm accepts as provider prefixes that matter most here.
_FALLBACK_PROVIDERS = frozenset(
    {"openai", "azure", "anthropic", "ollama", "hosted_vllm", "gemini", "vertex_ai", "groq",
     "mistral", "deepseek", "openrouter", "together_ai", "bedrock", "cohere"}
)  # fmt: skip


def _needs_litellm(settings: Settings, policy: Policy, registry: ModelRegistry) -> bool:
    """Whether a configured route (or the client setting) sends calls through litellm."""
    if settings.upstream_client == "litellm":
        return True
    names = {policy.default_model, policy.audit.auditor_model, *registry.aliases} - {None, ""}
    for name in names:
        if registry.wants_providers(name):
            return True  # a provider-prefixed name: only litellm knows the provider
        route = registry.resolve(name)
        if not compatible_model(route.litellm_model, route.api_base):
            return True
    return False


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
        chat_model = upstream
        providers: frozenset[str] | None = _FALLBACK_PROVIDERS
        fast: OpenAICompatChatModel | None = None
        load_providers: Callable[[], frozenset[str]] | None = None
        if chat_model is None:
            from dmt_proxy.upstream.litellm_model import LiteLLMChatModel, litellm_providers

            chat_model = LiteLLMChatModel()
            providers, load_providers = None, litellm_providers
            if settings.upstream_client == "auto":
                fast = OpenAICompatChatModel()
                chat_model = DispatchingChatModel(fast, chat_model)
        registry = ModelRegistry(settings, policy, providers, load_providers)
        if load_providers is not None and _needs_litellm(settings, policy, registry):
            # A configured route goes through litellm: import it now, not on a request.
            await registry.preload_providers()
        app.state.settings = settings
        app.state.tenants = tenants
        app.state.policy = policy
        app.state.metrics = metrics
        app.state.registry = registry
        memory: DurableMemoryService | None = None
        if policy.memory.backend != "none":
            memory = await build_memory_service(settings, policy, registry, chat_model, metrics,
                                                backend=memory_backend, auditor=auditor)  # fmt: skip
            memory.start()
        app.state.memory = memory
        app.state.pipeline = ChatPipeline(
            upstream=chat_model,
            registry=registry,
            policy=policy,
            metrics=metrics,
            memory=memory,
            timeout_s=settings.upstream_timeout_s,
            max_retries=settings.upstream_max_retries,
        )
        log.info(
            "dmt-proxy %s ready (policy %s, mode %s)", __version__, policy.source, policy.mode.value
        )
        try:
            yield
        finally:
            if memory is not None:
                await memory.aclose()
            if fast is not None:
                await fast.aclose()

    app = FastAPI(title="dmt-proxy", version=__version__, lifespan=lifespan)
    app.add_middleware(RequestMiddleware, metrics=metrics)
    install_error_handlers(app)
    app.include_router(chat_router)
    app.include_router(memory_router)
    install_openapi(app)

    @app.get("/healthz", responses={200: {"model": Health}})
    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse(
            {"status": "ok", "version": __version__, "mode": request.app.state.policy.mode.value}
        )

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                         "description": "Prometheus text exposition."}},
    )  # fmt: skip
    async def prometheus_metrics() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app
