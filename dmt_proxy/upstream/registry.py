"""Resolve the model name a client sends into a litellm route.

Three kinds of names are accepted:

* local aliases ``local/<name>`` for the embedded models, served by llama.cpp on
  ``models_host:models_port_base + index``;
* aliases declared in the policy (``models:``), e.g. a hosted model under a short name;
* any litellm model name with a provider prefix (``openai/gpt-4o-mini``,
  ``ollama/llama3``, ``hosted_vllm/...``), keys read from the environment by litellm.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass

from dmt_proxy.errors import ModelNotFound
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.local_models import LOCAL_MODELS


@dataclass(frozen=True)
class Route:
    """Where a model name goes."""

    name: str
    litellm_model: str
    api_base: str | None
    api_key: str | None
    kind: str
    """``local``, ``alias`` or ``provider``: a bounded label for metrics."""

    @property
    def label(self) -> str:
        return f"{self.name} at {self.api_base}" if self.api_base else self.name


def local_model_port(settings: Settings, name: str) -> int:
    """The port the local model ``name`` is served on."""
    return settings.models_port_base + list(LOCAL_MODELS).index(name)


def local_api_base(settings: Settings, name: str) -> str:
    return f"http://{settings.models_host}:{local_model_port(settings, name)}/v1"


def _alias_key(env_name: str | None, api_base: str | None) -> str | None:
    if env_name:
        return os.environ.get(env_name)
    # A self-hosted OpenAI-compatible server usually needs no key, but the client
    # library insists on one being present.
    return "unused" if api_base else None


class ModelRegistry:
    """Maps client-facing model names to litellm routes."""

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
        self._routes: dict[str, Route] = {}
        for name in LOCAL_MODELS:
            self._routes[f"local/{name}"] = Route(
                name=f"local/{name}",
                litellm_model=f"openai/{name}",
                api_base=local_api_base(settings, name),
                api_key="local",
                kind="local",
            )
        for alias, spec in policy.models.items():
            self._routes[alias] = Route(
                name=alias,
                litellm_model=spec.model,
                api_base=spec.api_base,
                api_key=_alias_key(spec.api_key_env, spec.api_base),
                kind="alias",
            )
        self.default_model = policy.default_model

    @property
    def aliases(self) -> list[str]:
        return list(self._routes)

    def wants_providers(self, model: str | None) -> bool:
        """True when resolving ``model`` needs the provider list, which is not loaded yet."""
        name = model or self.default_model
        return (
            self._providers is None
            and self._load_providers is not None
            and self._settings.allow_provider_models
            and name not in self._routes
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

    def resolve(self, model: str | None) -> Route:
        """Route for ``model`` (the policy's default model when ``None``)."""
        name = model or self.default_model
        route = self._routes.get(name)
        if route is not None:
            return route
        provider, sep, rest = name.partition("/")
        # A lazily loaded list is loaded by ensure_providers/preload_providers first.
        known = self._providers or frozenset()
        if self._settings.allow_provider_models and sep and rest and provider in known:
            return Route(
                name=name, litellm_model=name, api_base=None, api_key=None, kind="provider"
            )
        raise ModelNotFound(name, self.aliases)
