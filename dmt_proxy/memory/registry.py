"""Backend registry: ``@register_backend("name")`` on a class, ``await create_backend(...)``.

Built-in backends are imported lazily (mem0 pulls in torch), so naming one costs
nothing until it is created. Outside packages register the same way, through the
``dmt_proxy.memory_backends`` entry-point group (``name = "pkg.module"``): the
module is imported and its decorator registers the class.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.base import MemoryBackend, TextEmbedder
from dmt_proxy.upstream.base import ChatModel

ENTRY_POINT_GROUP = "dmt_proxy.memory_backends"

_BUILTIN: dict[str, str] = {
    "memory": "dmt_proxy.memory.in_memory",
    "mem0": "dmt_proxy.memory.mem0_backend",
    "langmem": "dmt_proxy.memory.langmem_backend",
    "letta": "dmt_proxy.memory.letta_backend",
    "postgres": "dmt_proxy.memory.pg_backend",
}


class LLMConfig(BaseModel):
    """The chat model a backend may call (consolidation, summaries, mem0 inference)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    """litellm name for ``ChatModel`` calls, e.g. ``openai/qwen2.5-0.5b``."""
    api_base: str | None = None
    api_key: str | None = None
    supports_tools: bool = False
    """True only for models that really make tool calls (langmem's own manager)."""
    timeout_s: float = 120.0


@dataclass(frozen=True)
class BackendConfig:
    """What every backend is built from: the state dir, shared pieces and its options."""

    state_dir: Path
    """Backends keep their files under ``<state_dir>/memory/<backend>/``."""
    embedder: TextEmbedder | None = None
    """Shared embedder (one model in RAM for all backends); created when missing."""
    chat: ChatModel | None = None
    llm: LLMConfig | None = None
    options: dict[str, Any] = field(default_factory=dict)
    """Backend-specific options, validated by the backend's ``Options`` model."""

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


class BackendFactory(Protocol):
    """What ``@register_backend`` accepts: a class with options and an async ``open``."""

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]]

    @classmethod
    async def open(cls, config: BackendConfig, options: Any) -> MemoryBackend: ...


_REGISTRY: dict[str, type[Any]] = {}
T = TypeVar("T", bound=type[Any])


def register_backend(name: str) -> Callable[[T], T]:
    """Class decorator registering a memory backend under ``name``."""

    def decorate(cls: T) -> T:
        existing = _REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"memory backend '{name}' is already registered by {existing!r}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _plugin_modules() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_backends() -> list[str]:
    """Names that ``create_backend`` accepts (built-ins, plugins, registered classes)."""
    return sorted({*_BUILTIN, *_plugin_modules(), *_REGISTRY})


def backend_class(name: str) -> type[Any]:
    """The registered class for ``name``, importing its module if needed."""
    if name not in _REGISTRY:
        module = _BUILTIN.get(name) or _plugin_modules().get(name)
        if module is None:
            raise ConfigError(
                f"unknown memory backend '{name}'; known backends: {', '.join(known_backends())}"
            )
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(
                f"memory backend '{name}' needs packages that are not installed ({exc}); "
                "install the memory extra: pip install 'dmt-proxy[memory]' torch==2.13.0"
            ) from exc
        if name not in _REGISTRY:
            raise ConfigError(f"module {module} did not register memory backend '{name}'")
    return _REGISTRY[name]


async def create_backend(name: str, config: BackendConfig) -> MemoryBackend:
    """Open backend ``name``; ConfigError for unknown names, bad options or store paths."""
    cls = backend_class(name)
    try:
        options = cls.Options.model_validate(config.options)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '<options>'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"memory backend '{name}' options are invalid: {problems}") from exc
    backend: MemoryBackend = await cls.open(config, options)
    return backend
