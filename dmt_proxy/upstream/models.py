"""Resolve the model name a client sends into an endpoint.

Three kinds of names are accepted:

* local aliases ``local/<name>`` for the embedded models, served by llama.cpp on
  ``models_host:models_port_base + index``, and the bare ``<name>`` for each: clients
  with their own ``provider/model`` convention (the OpenAI Agents SDK rejects an
  unknown ``local/`` prefix; litellm reads ``openai/<name>`` as "an OpenAI-compatible
  server, model ``<name>``") can only send a name without a slash;
* aliases declared in the policy (``models:``), e.g. a hosted model under a short name;
* any litellm model name with a provider prefix (``openai/gpt-4o-mini``,
  ``ollama/llama3``, ``hosted_vllm/...``), keys read from the environment by litellm.

Every endpoint carries the settings' upstream timeout and retry budget. Build the
registry with ``upstream.factory``, which also picks the provider list.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from dmt_proxy.errors import ModelNotFound
from dmt_proxy.policy import ModelAlias, Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import EndpointKind, ModelEndpoint
from dmt_proxy.upstream.local_models import LOCAL_MODELS

NO_KEY = "unused"
"""Key sent to a self-hosted OpenAI-compatible server that needs none (clients insist on one)."""


def local_model_port(settings: Settings, name: str) -> int:
    """The port the local model ``name`` is served on."""
    return settings.models_port_base + list(LOCAL_MODELS).index(name)


def local_api_base(settings: Settings, name: str) -> str:
    """The OpenAI-compatible base URL of the local model ``name``."""
    return f"http://{settings.models_host}:{local_model_port(settings, name)}/v1"


def local_endpoint(settings: Settings, name: str, *, bare: bool = False) -> ModelEndpoint:
    """The embedded model ``name`` (``qwen2.5-0.5b``), served by llama-server.

    ``bare``: the endpoint clients name ``qwen2.5-0.5b`` rather than ``local/qwen2.5-0.5b``.
    """
    return ModelEndpoint(
        name=name if bare else f"local/{name}", model=f"openai/{name}", api_base=local_api_base(settings, name),
        api_key="local", kind="local", timeout_s=settings.upstream_timeout_s,
        max_retries=settings.upstream_max_retries,
    )  # fmt: skip


def alias_endpoint(
    settings: Settings, name: str, spec: ModelAlias, *, kind: EndpointKind = "alias"
) -> ModelEndpoint:
    """A model declared by name, litellm model, address and key variable."""
    if spec.api_key_env:
        key = os.environ.get(spec.api_key_env)
    else:
        key = NO_KEY if spec.api_base else None
    return ModelEndpoint(
        name=name, model=spec.model, api_base=spec.api_base, api_key=key, kind=kind,
        timeout_s=settings.upstream_timeout_s, max_retries=settings.upstream_max_retries,
    )  # fmt: skip


def provider_endpoint(settings: Settings, name: str) -> ModelEndpoint:
    """A litellm provider name (``anthropic/claude-3-haiku``); litellm finds the key."""
    return ModelEndpoint(
        name=name, model=name, kind="provider", timeout_s=settings.upstream_timeout_s,
        max_retries=settings.upstream_max_retries,
    )  # fmt: skip


class ModelRegistry:
    """Maps client-facing model names to endpoints."""

    def __init__(
        self,
        settings: Settings,
        policy: Policy,
        provider_names: frozenset[str] | None,
        load_providers: Callable[[], frozenset[str]] | None = None,
    ):
        """``provider_names`` None: loaded by ``load_providers`` when first needed.

        Loading them means importing litellm (~3.6 s, ~135 MB RSS), which a proxy that
        only talks to OpenAI-compatible servers never needs.
        """
        self._settings = settings
        self._providers = provider_names
        self._load_providers = load_providers
        self._endpoints: dict[str, ModelEndpoint] = {}
        for name in LOCAL_MODELS:
            self._endpoints[f"local/{name}"] = local_endpoint(settings, name)
        for name in LOCAL_MODELS:
            self._endpoints[name] = local_endpoint(settings, name, bare=True)
        # A policy alias of the same name wins: the operator said what it means.
        for alias, spec in policy.models.items():
            self._endpoints[alias] = alias_endpoint(settings, alias, spec)
        self.default_model = policy.default_model

    @property
    def aliases(self) -> list[str]:
        """Every name the registry knows without the provider list."""
        return list(self._endpoints)

    def wants_providers(self, model: str | None) -> bool:
        """True when resolving ``model`` needs the provider list, which is not loaded yet."""
        name = model or self.default_model
        return (
            self._providers is None
            and self._load_providers is not None
            and self._settings.allow_provider_models
            and name not in self._endpoints
            and "/" in name
        )

    async def ensure_providers(self, model: str | None) -> None:
        """Load the provider list off the event loop if resolving ``model`` needs it."""
        if self.wants_providers(model):
            await self.preload_providers()

    async def preload_providers(self) -> None:
        """Load the provider list now (off the event loop), if it is loaded lazily."""
        if self._providers is None and self._load_providers is not None:
            self._providers = await asyncio.to_thread(self._load_providers)

    def resolve(self, model: str | None) -> ModelEndpoint:
        """Endpoint for ``model`` (the policy's default model when ``None``)."""
        name = model or self.default_model
        endpoint = self._endpoints.get(name)
        if endpoint is not None:
            return endpoint
        provider, sep, rest = name.partition("/")
        # A lazily loaded list is loaded by ensure_providers/preload_providers first.
        known = self._providers or frozenset()
        if self._settings.allow_provider_models and sep and rest and provider in known:
            return provider_endpoint(self._settings, name)
        raise ModelNotFound(name, self.aliases)
