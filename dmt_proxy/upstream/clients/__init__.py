"""Upstream client plugins: the registry here, one module per client beside it.

``@register_client("name")`` on a class, ``create_client(name, settings)``. An
upstream client is a chat model that reaches real model servers (the
``ChatModel`` seam, plus ``aclose`` for its connections). Built-ins, declared
under the ``dmt_proxy.upstream_clients`` entry-point group like outside ones:

* ``openai-compat`` (``OpenAICompatChatModel`` in ``openai_compat``): direct pooled
  HTTP to servers that already speak the OpenAI wire format (llama-server, vLLM); no
  translation;
* ``litellm`` (``LiteLLMChatModel`` in ``litellm_model``): every provider litellm
  knows; litellm itself is imported on the first call, not when the class is
  registered or named;
* ``auto`` (``DispatchingChatModel`` in ``auto``; the default ``DMT_UPSTREAM_CLIENT``):
  the two above composed, each call sent to ``openai-compat`` when its endpoint is
  OpenAI-compatible and to ``litellm`` otherwise.

``DMT_UPSTREAM_CLIENT`` names the one the proxy uses (``upstream.factory``); see
``dmt_proxy.plugins``. A registered class provides
``from_config(settings: Settings) -> OwnedChatModel`` (the settings are the kind's
config), says in ``provider_models`` whether it reaches litellm provider names
(``anthropic/claude-3-haiku``), and declares in ``contract_config(state_dir)`` the
settings ``tests/integration/test_upstream_contract.py`` builds it from (``ClientPlugin``
gives plain settings).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
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


class ClientPlugin:
    """Base of an upstream client plugin: the contract test's settings, by default plain."""

    name: ClassVar[str]

    @classmethod
    def contract_config(cls, state_dir: Path) -> Settings:
        """The settings the contract tests build this client from (defaults, ``state_dir``)."""
        return Settings(state_dir=state_dir)


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
    client: OwnedChatModel = UPSTREAM_CLIENTS.create(name, settings)
    return client
