"""The one place that builds the upstream side: the chat model, the name registry, endpoints.

The app, ``dmt-proxy audit-backfill``, the simulation's generator and
``dmt-bench auditor-eval`` all reach models through here, so a model name means
the same endpoint to each of them.

The chat model is litellm behind the direct OpenAI-compatible path
(``openai_compat``), unless ``DMT_UPSTREAM_CLIENT=litellm``. litellm is imported
only when a route needs it: the provider list it owns is loaded lazily, at start-up
only when a configured route goes through litellm.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import dataclass

from dmt_proxy.errors import ConfigError
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk
from dmt_proxy.policy import ModelAlias, Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, OwnedChatModel, UpstreamCall
from dmt_proxy.upstream.local_models import LOCAL_MODELS
from dmt_proxy.upstream.openai_compat import OpenAICompatChatModel
from dmt_proxy.upstream.registry import ModelRegistry, alias_endpoint, local_endpoint

FALLBACK_PROVIDERS = frozenset(
    {"openai", "azure", "anthropic", "ollama", "hosted_vllm", "gemini", "vertex_ai", "groq",
     "mistral", "deepseek", "openrouter", "together_ai", "bedrock", "cohere"}
)  # fmt: skip
"""Provider prefixes accepted when the chat model is not litellm (a scripted one in tests)."""


class DispatchingChatModel:
    """Sends OpenAI-compatible endpoints through the fast path, everything else to litellm."""

    def __init__(self, fast: OpenAICompatChatModel, general: ChatModel) -> None:
        self.fast = fast
        self.general = general

    def _pick(self, call: UpstreamCall) -> ChatModel:
        return self.fast if call.endpoint.openai_compatible else self.general

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """Complete on the path that fits the call's endpoint."""
        return await self._pick(call).complete(call)

    def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """Stream on the path that fits the call's endpoint."""
        return self._pick(call).stream(call)

    async def aclose(self) -> None:
        """Close the direct path's connection pool."""
        await self.fast.aclose()


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


def build_chat_model(settings: Settings) -> OwnedChatModel:
    """The production chat model: litellm, behind the direct path unless told otherwise."""
    from dmt_proxy.upstream.litellm_model import LiteLLMChatModel

    general = LiteLLMChatModel()  # imports litellm on its first call, not here
    if settings.upstream_client == "litellm":
        return general
    return DispatchingChatModel(OpenAICompatChatModel(), general)


def build_registry(settings: Settings, policy: Policy, *, litellm: bool) -> ModelRegistry:
    """The name registry: with ``litellm``, its provider list is loaded when first needed."""
    if not litellm:
        return ModelRegistry(settings, policy, FALLBACK_PROVIDERS)
    from dmt_proxy.upstream.litellm_model import litellm_providers

    return ModelRegistry(settings, policy, None, load_providers=litellm_providers)


def needs_litellm(settings: Settings, policy: Policy, registry: ModelRegistry) -> bool:
    """Whether a configured endpoint (or the client setting) sends calls through litellm."""
    if settings.upstream_client == "litellm":
        return True
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
    registry = build_registry(settings, policy, litellm=True)
    if needs_litellm(settings, policy, registry):
        await registry.preload_providers()
    return Upstream(chat=built, registry=registry, owned=built)


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
