"""The one place that builds the upstream side: the chat model, the name registry, endpoints.

The app, ``dmt-proxy audit-backfill``, the simulation's generator and
``dmt-bench auditor-eval`` all reach models through here, so a model name means
the same endpoint to each of them.

The chat model is the upstream client named by ``DMT_UPSTREAM_CLIENT``, built through
the client registry (``upstream.clients``). The default, ``auto``, is litellm behind
the direct OpenAI-compatible path (``openai_compat``). litellm is imported only when
a route needs it: the provider list it owns is loaded lazily, at start-up only when a
configured route goes through litellm.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import ModelAlias, Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, OwnedChatModel
from dmt_proxy.upstream.clients import AUTO, client_class, create_client, known_clients
from dmt_proxy.upstream.local_models import LOCAL_MODELS
from dmt_proxy.upstream.local_tools import with_local_tools
from dmt_proxy.upstream.models import ModelRegistry, alias_endpoint, local_endpoint

__all__ = [
    "FALLBACK_PROVIDERS", "Upstream", "build_chat_model",
    "build_registry", "check_client", "declared_endpoint", "needs_litellm", "open_upstream",
]  # fmt: skip

FALLBACK_PROVIDERS = frozenset(
    {"openai", "azure", "anthropic", "ollama", "hosted_vllm", "gemini", "vertex_ai", "groq",
     "mistral", "deepseek", "openrouter", "together_ai", "bedrock", "cohere"}
)  # fmt: skip
"""Provider prefixes accepted when the chat model is not litellm (a scripted one in tests)."""


@dataclass
class Upstream:
    """The chat model and the registry that names its endpoints; ``aclose`` when done."""

    chat: ChatModel
    registry: ModelRegistry
    owned: OwnedChatModel | None = None
    """``chat`` when it was built here (and is closed by ``aclose``)."""

    def resolve(self, model: str | None) -> ModelEndpoint:
        """The endpoint for ``model`` (the policy's default model when ``None``)."""
        return self.registry.resolve(model)

    async def aclose(self) -> None:
        """Close what was built here (a chat model passed in belongs to the caller)."""
        if self.owned is not None:
            await self.owned.aclose()


def check_client(settings: Settings) -> type[Any]:
    """The class of ``DMT_UPSTREAM_CLIENT``; ConfigError naming the known clients if unknown.

    Imports the client's module only (never litellm itself), so it is cheap enough to
    run before anything starts.
    """
    name = settings.upstream_client
    known = known_clients()
    if name not in known:
        raise ConfigError(
            f"DMT_UPSTREAM_CLIENT: unknown upstream client '{name}'; "
            f"known upstream clients: {', '.join(known)}"
        )
    return client_class(name)


def build_chat_model(settings: Settings) -> OwnedChatModel:
    """The production chat model: the upstream client ``DMT_UPSTREAM_CLIENT`` names."""
    check_client(settings)
    return create_client(settings.upstream_client, settings)


def build_registry(settings: Settings, policy: Policy, *, litellm: bool) -> ModelRegistry:
    """The name registry: with ``litellm``, its provider list is loaded when first needed."""
    if not litellm:
        return ModelRegistry(settings, policy, FALLBACK_PROVIDERS)
    from dmt_proxy.upstream.clients.litellm_model import litellm_providers

    return ModelRegistry(settings, policy, None, load_providers=litellm_providers)


def needs_litellm(settings: Settings, policy: Policy, registry: ModelRegistry) -> bool:
    """Whether a configured endpoint (or the client setting) sends calls through litellm."""
    if settings.upstream_client != AUTO:
        # One client takes every call: litellm's list is wanted exactly when it routes
        # provider names (the litellm client, whose every call imports litellm anyway).
        return bool(check_client(settings).provider_models)
    names = {policy.default_model, policy.audit.auditor_model, *registry.aliases} - {None, ""}
    for name in names:
        if registry.wants_providers(name):
            return True  # a provider-prefixed name: only litellm knows the provider
        if not registry.resolve(name).openai_compatible:
            return True
    return False


async def open_upstream(
    settings: Settings, policy: Policy, *, chat: ChatModel | None = None
) -> Upstream:
    """Build the chat model and registry for ``settings``/``policy``.

    ``chat`` replaces the production chat model (tests pass a scripted one); then
    litellm is never imported and provider names are checked against
    ``FALLBACK_PROVIDERS``. Otherwise litellm is imported now only when a configured
    endpoint needs it, so no request pays for the import.
    """
    if chat is not None:
        return Upstream(chat=chat, registry=build_registry(settings, policy, litellm=False))
    built = build_chat_model(settings)
    if check_client(settings).provider_models:
        registry = build_registry(settings, policy, litellm=True)
    else:
        # A client that cannot reach provider names: they are unknown models (404).
        registry = ModelRegistry(settings, policy, frozenset())
    if needs_litellm(settings, policy, registry):
        await registry.preload_providers()
    # Local endpoints asked for tools get them constrained and parsed (upstream.local_tools).
    return Upstream(chat=with_local_tools(built), registry=registry, owned=built)


def declared_endpoint(
    settings: Settings, name: str, *, api_base: str | None = None, api_key_env: str | None = None
) -> ModelEndpoint:
    """The endpoint for a model named outside a policy (command-line flags, a benchmark config).

    ``local/<name>`` alone is the embedded model. With ``api_base``, ``name`` is served
    by an OpenAI-compatible server there (a bare name is sent as llama-server's alias,
    ``openai/<name>``). Otherwise ``name`` must be a litellm name with a provider
    prefix. ``$api_key_env``, when named, holds the key and must be set.
    """
    if api_base is None and name.startswith("local/"):
        local = name.removeprefix("local/")
        if local not in LOCAL_MODELS:
            raise ConfigError(
                f"unknown local model {name}; local models: {', '.join(LOCAL_MODELS)}"
            )
        return local_endpoint(settings, local)
    if api_key_env and not os.environ.get(api_key_env):
        raise ConfigError(f"model {name}: the key variable ${api_key_env} is not set")
    model = name
    if api_base:
        bare = name.removeprefix("local/")
        model = bare if "/" in bare else f"openai/{bare}"
    elif "/" not in name:
        raise ConfigError(
            f"model {name}: give a litellm name with a provider prefix (openai/gpt-4o-mini), "
            "a local alias (local/qwen2.5-1.5b), or the base URL of an OpenAI-compatible server"
        )
    spec = ModelAlias(model=model, api_base=api_base, api_key_env=api_key_env)
    return alias_endpoint(settings, name, spec, kind="direct")
