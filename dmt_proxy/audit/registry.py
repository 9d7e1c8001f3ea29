"""Auditor registry: ``@register_auditor("name")`` on a class, ``create_auditor(name, config)``.

Built-ins: ``llm`` (``LLMAuditor``: its model, prompt version and thresholds come
from ``policy.audit``) and ``scripted`` (``ScriptedAuditor``, the shipped fake,
answering clean unless scripted). The policy picks one (``audit.auditor``,
default ``llm``; ``build_auditor``). Built-ins and outside packages alike are
declared under the ``dmt_proxy.auditors`` entry-point group; see
``dmt_proxy.plugins``. A registered class provides
``from_config(config: AuditorConfig) -> Auditor`` and ``contract_config(env:
ContractEnv) -> AuditorConfig``, the config ``tests/unit/test_auditor_contract.py``
builds it from (``env`` holds the contract's scripted upstream).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from dmt_proxy.plugins import Registry
from dmt_proxy.policy import AuditPolicy

if TYPE_CHECKING:
    from dmt_proxy.audit.protocol import Auditor
    from dmt_proxy.metrics import Metrics
    from dmt_proxy.policy import Policy
    from dmt_proxy.upstream.base import ChatModel, ModelEndpoint
    from dmt_proxy.upstream.models import ModelRegistry

ENTRY_POINT_GROUP = "dmt_proxy.auditors"


@dataclass(frozen=True)
class AuditorConfig:
    """What every auditor is built from; each takes the pieces it needs."""

    policy: AuditPolicy = field(default_factory=AuditPolicy)
    """Thresholds, actions and the auditor prompt version (``policy.audit``)."""
    chat: ChatModel | None = None
    """The chat model an LLM-backed auditor calls."""
    endpoint: ModelEndpoint | None = None
    """Where the auditor model is (resolved from ``policy.audit.auditor_model``)."""
    metrics: Metrics | None = None
    """Where the auditor counts its outcomes, if it should (the worker counts them too)."""


@dataclass(frozen=True)
class ContractEnv:
    """What the auditor contract offers an auditor to be built on."""

    chat: ChatModel
    """A scripted upstream (not a language model): biased, clean, or a reply that is no verdict."""
    endpoint: ModelEndpoint
    """The endpoint to call it at."""


def _check_auditor(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and callable(getattr(cls, "from_config", None))):
        raise TypeError(f"auditor '{name}' must be a class with a from_config(config) classmethod")


AUDITORS: Registry[type[Any]] = Registry(
    "auditor",
    group=ENTRY_POINT_GROUP,
    check=_check_auditor,
)
_T = TypeVar("_T", bound=type[Any])


def register_auditor(name: str) -> Callable[[_T], _T]:
    """Class decorator registering an auditor under ``name``."""
    return AUDITORS.register(name)


def known_auditors() -> list[str]:
    """Names that ``create_auditor`` accepts."""
    return AUDITORS.names()


def create_auditor(name: str, config: AuditorConfig) -> Auditor:
    """Build auditor ``name`` from ``config``; ConfigError for unknown names or missing pieces."""
    auditor: Auditor = AUDITORS.create(name, config)
    return auditor


def build_auditor(policy: Policy, registry: ModelRegistry, chat: ChatModel) -> Auditor:
    """The auditor ``policy.audit.auditor`` names, configured by ``policy.audit``.

    Its model (``auditor_model``) is resolved like any request's; ConfigError when
    the name is not a registered auditor (naming the known ones).
    """
    endpoint = registry.resolve(policy.audit.auditor_model)
    endpoint = endpoint.with_limits(timeout_s=policy.audit.timeout_s)
    # Audit metrics are counted by the worker (once per memory, whatever the auditor).
    config = AuditorConfig(policy=policy.audit, chat=chat, endpoint=endpoint)
    return create_auditor(policy.audit.auditor, config)
