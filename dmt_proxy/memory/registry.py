"""Backend registry: ``@register_backend("name")`` on a class, ``await create_backend(...)``.

``MEMORY_BACKENDS`` is a ``dmt_proxy.plugins.Registry``: backends, built-in or
not, are declared under the ``dmt_proxy.memory_backends`` entry-point group
(``name = "pkg.module"``) and imported lazily (mem0 pulls in torch), so naming one
costs nothing until it is created (see ``dmt_proxy.plugins``).

A backend subclasses ``BackendPlugin``: an ``Options`` model and
``open(config, options)``; the kind's factory, ``from_config(config)`` (a
coroutine), validates ``config.options`` against ``Options`` and opens it. Its
``contract_config(env)`` says how ``tests/integration/test_memory_contract.py`` opens it
(default: no options), from the resources of a ``ContractEnv``.

What the rest of ``memory/`` must know about a store, the backend declares here, so no
module outside the backend's own names it: ``store_database(options, database_url)``
says whether the store keeps its tables in PostgreSQL (then the outbox and the review
trail follow it there by default, under its table prefix, and the store's circuit
breaker checks that database); ``BackendConfig.database_url`` hands every backend
``DMT_DATABASE_URL``, for a store whose options name no database of their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar, cast

from pydantic import BaseModel, ValidationError

from dmt_proxy.embedder import LocalEmbedder, TextEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.base import MemoryBackend
from dmt_proxy.plugins import Registry, declared_builtins
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint
from dmt_proxy.upstream.models import ModelRegistry

ENTRY_POINT_GROUP = "dmt_proxy.memory_backends"

_MEMORY_EXTRA = "pip install 'dmt-proxy[memory]' torch==2.13.0"


BACKEND_LLM_TIMEOUT_S = 120.0
"""How long a backend's own model call (consolidation, summary, mem0 inference) may take."""


@dataclass(frozen=True)
class BackendConfig:
    """What every backend is built from: the state dir, shared pieces and its options."""

    state_dir: Path
    """Backends keep their files under ``<state_dir>/memory/<backend>/``."""
    embedder: TextEmbedder | None = None
    """Shared embedder (one model in RAM for all backends); created when missing."""
    chat: ChatModel | None = None
    llm: ModelEndpoint | None = None
    """The model a backend may call (consolidation, summaries, mem0 inference)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Backend-specific options, validated by the backend's ``Options`` model."""
    database_url: str | None = None
    """``DMT_DATABASE_URL``: the database of a store kept in PostgreSQL whose options name
    none (a database named in the options wins)."""

    def store_dir(self, backend: str) -> Path:
        """``<state_dir>/memory/<backend>``, created; a clear ConfigError when it cannot be."""
        path = self.state_dir / "memory" / backend
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"memory store path {path} cannot be created: {exc.strerror or exc}"
            ) from exc
        if not path.is_dir():
            raise ConfigError(f"memory store path {path} is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"memory store path {path} is not writable")
        return path

    def shared_embedder(self) -> TextEmbedder:
        return self.embedder if self.embedder is not None else LocalEmbedder()


@dataclass(frozen=True)
class StoreDatabase:
    """The PostgreSQL database a backend keeps its store in (``BackendPlugin.store_database``)."""

    url: str | None
    """Its connection string (``None``: none is configured)."""
    prefix: str = "dmt_"
    """The store's table prefix: the outbox and the review trail beside it use it too."""


@dataclass(frozen=True)
class ContractEnv:
    """What the memory contract tests offer a backend to be opened on."""

    state_dir: Path
    """A fresh directory of the test's own."""
    embedder: TextEmbedder
    """The shared local embedder (loaded once per test session)."""
    database_url: Callable[[], str]
    """A fresh PostgreSQL database; asking skips the test where no server can be started."""


class BackendPlugin:
    """Base of a memory backend plugin: ``Options``, ``open`` and the kind's factory.

    A subclass defines ``Options`` (a pydantic model) and
    ``async open(cls, config, options) -> Self``, which gets the validated options.
    """

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]]

    @classmethod
    async def from_config(cls, config: BackendConfig) -> MemoryBackend:
        """Validate ``config.options`` against ``Options`` and open; ConfigError when invalid."""
        try:
            options = cls.Options.model_validate(config.options)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '<options>'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ConfigError(
                f"memory backend '{cls.name}' options are invalid: {problems}"
            ) from exc
        backend: MemoryBackend = await cast(Any, cls).open(config, options)
        return backend

    @classmethod
    def contract_config(cls, env: ContractEnv) -> BackendConfig:
        """How the contract tests open this backend: default options, the shared embedder."""
        return BackendConfig(state_dir=env.state_dir, embedder=env.embedder)

    @classmethod
    def store_database(
        cls, options: Mapping[str, Any], database_url: str | None
    ) -> StoreDatabase | None:
        """The PostgreSQL database the store keeps its tables in, read from the policy's
        ``options`` (not yet validated) and ``DMT_DATABASE_URL``; ``None`` (the default)
        for a store kept elsewhere, whose outbox and trail then default to SQLite."""
        return None


def _check_backend(name: str, cls: Any) -> None:
    if not (isinstance(cls, type) and callable(getattr(cls, "from_config", None))):
        raise TypeError(
            f"memory backend '{name}' must be a class with an async from_config(config) "
            "classmethod (subclass BackendPlugin: an Options model and an async open())"
        )


MEMORY_BACKENDS: Registry[type[Any]] = Registry(
    "memory backend",
    group=ENTRY_POINT_GROUP,
    # What a built-in backend's module imports beyond the base install (numpy, mem0,
    # langgraph, ...) comes with the memory extra; psycopg is checked when a store opens.
    install_hints=dict.fromkeys(declared_builtins(ENTRY_POINT_GROUP), _MEMORY_EXTRA),
    check=_check_backend,
)
T = TypeVar("T", bound=type[Any])


def register_backend(name: str) -> Callable[[T], T]:
    """Class decorator registering a memory backend under ``name``."""
    return MEMORY_BACKENDS.register(name)


def known_backends() -> list[str]:
    """Names that ``create_backend`` accepts (built-ins, plugins, registered classes)."""
    return MEMORY_BACKENDS.names()


def backend_class(name: str) -> type[Any]:
    """The registered class for ``name``, importing its module if needed."""
    return MEMORY_BACKENDS.get(name)


async def create_backend(name: str, config: BackendConfig) -> MemoryBackend:
    """Open backend ``name``; ConfigError for unknown names, bad options or store paths."""
    backend: MemoryBackend = await MEMORY_BACKENDS.create(name, config)
    return backend


async def open_policy_backend(
    settings: Settings, policy: Policy, models: ModelRegistry, chat: ChatModel
) -> MemoryBackend:
    """The policy's backend with the policy's options; its model is the policy's default.

    The app and ``dmt-proxy audit-backfill`` both open the store here, so they open
    the same one (a non-default mem0 collection, for instance).
    """
    llm = models.resolve(policy.default_model).with_limits(timeout_s=BACKEND_LLM_TIMEOUT_S)
    config = BackendConfig(state_dir=settings.state_dir, chat=chat, llm=llm,
                           options=dict(policy.memory.options),
                           database_url=settings.database_url)  # fmt: skip
    return await create_backend(policy.memory.backend, config)
