"""Upstream client registry: ``@register_client("name")`` on a class, ``create_client(name, ...)``.

An upstream client is a chat model that reaches real model servers (the
``ChatModel`` seam, plus ``aclose`` for its connections). Built-ins:

* ``openai-compat`` (``OpenAICompatChatModel``): direct pooled HTTP to servers that
  already speak the OpenAI wire format (llama-server, vLLM); no translation;
* ``litellm`` (``LiteLLMChatModel``): every provider litellm knows; litellm itself is
  imported on the first call, not when the class is registered or named;
* ``auto`` (``DispatchingChatModel``, the default ``DMT_UPSTREAM_CLIENT``): the two
  above composed, each call sent to ``openai-compat`` when its endpoint is
  OpenAI-compatible and to ``litellm`` otherwise.

``DMT_UPSTREAM_CLIENT`` names the one the proxy uses (``upstream.factory``). Outside
packages register through the ``dmt_proxy.upstream_clients`` entry-point group; see
``dmt_proxy.plugins``. A registered class provides
``from_config(settings: Settings) -> OwnedChatModel`` and says in ``provider_models``
whether it reaches litellm provider names (``anthropic/claude-3-haiku``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar

from dmt_proxy.plugins import Registry
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import OwnedChatModel

ENTRY_POINT_GROUP = "dmt_proxy.upstream_clients"

AUTO = "auto"
"""The default client: the direct path for OpenAI-compatible endpoints, litellm for the rest."""


class UpstreamClient(Protocol):
    """What ``@register_client`` accepts: a class built from the settings."""

    name: ClassVar[str]
    provider_models: ClassVar[bool]
    """True when the client reaches litellm provider model names without an address
    (``anthropic/claude-3-haiku``): the model registry then accepts litellm's provider
    list. False: only local models and policy aliases with an address resolve."""

    @classmethod
    def from_config(cls, settings: Settings) -> OwnedChatModel:
        """A client ready for calls; its builder closes it with ``aclose``."""
        ...


def _check_client(name: str, cls: Any) -> None:
    if not (
        isinstance(cls, type)
        and callable(getattr(cls, "from_config", None))
        and isinstance(getattr(cls, "provider_models", None), bool)
    ):
        raise TypeError(
            f"upstream client '{name}' must be a class with a from_config(settings) "
            "classmethod and a boolean provider_models"
        )


UPSTREAM_CLIENTS: Registry[type[Any]] = Registry(
    "upstream client",
    group=ENTRY_POINT_GROUP,
    builtins={
        AUTO: "dmt_proxy.upstream.dispatch",
        "litellm": "dmt_proxy.upstream.litellm_model",
        "openai-compat": "dmt_proxy.upstream.openai_compat",
    },
    check=_check_client,
)
_T = TypeVar("_T", bound=type[Any])


def register_client(name: str) -> Callable[[_T], _T]:
    """Class decorator registering an upstream client under ``name``."""
    return UPSTREAM_CLIENTS.register(name)


def known_clients() -> list[str]:
    """Names that ``create_client`` (and ``DMT_UPSTREAM_CLIENT``) accept; imports nothing."""
    return UPSTREAM_CLIENTS.names()


def client_class(name: str) -> type[Any]:
    """The class registered as ``name``; ConfigError naming the known ones when there is none."""
    return UPSTREAM_CLIENTS.get(name)


def create_client(name: str, settings: Settings) -> OwnedChatModel:
    """Build upstream client ``name`` from ``settings``."""
    client: OwnedChatModel = client_class(name).from_config(settings)
    return client
