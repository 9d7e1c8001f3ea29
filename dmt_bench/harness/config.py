"""Config sections every benchmark run shares: models, the proxy's auditor, execution.

``ModelSpec`` names a model (a local one, ``local/<name>``, or any litellm name);
``AuditConfig`` is the proxy's auditor in DMT conditions; ``ExecutionConfig`` says how
to run (never part of a config digest, so changing it keeps a run resumable).
``read_yaml`` reads a config file with errors that name it. Field defaults are part
of every run's digest: changing one changes which committed runs resume.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import load_policy


class ModelSpec(BaseModel):
    """A model: a local name (``qwen2.5-0.5b``), ``local/<name>`` or any litellm name."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: str = Field(min_length=1)
    api_base: str | None = None
    """For OpenAI-compatible hosts that litellm cannot find by name (vLLM, llama-server...)."""
    api_key_env: str | None = None
    """Environment variable holding the key (never the key itself)."""

    @property
    def is_local(self) -> bool:
        return self.model.startswith("local/")

    @field_validator("model")
    @classmethod
    def _localize(cls, value: str) -> str:
        from dmt_proxy.upstream.local_models import LOCAL_MODELS

        return f"local/{value}" if value in LOCAL_MODELS else value


def default_auditor_prompt() -> str:
    """The auditor prompt of the proxy's default policy (``policies/default.yaml``)."""
    return load_policy().audit.auditor_prompt


FirstStage = Literal["off", "embedding", "judge_v2"]


def default_first_stage() -> FirstStage:
    """The first judge of the proxy's default policy (``policies/default.yaml``)."""
    first = load_policy().audit.first_stage
    return first if first in ("embedding", "judge_v2") else "off"  # type: ignore[return-value]


class AuditConfig(BaseModel):
    """The proxy's auditor in DMT conditions (paper §6.2)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tau: float = Field(default=0.5, ge=0.0, le=1.0)
    """Tagging threshold τ."""
    prompt: str = Field(default_factory=default_auditor_prompt, pattern=r"^[a-z0-9_]+_v[0-9]+$")
    """Default: the proxy's own default (``policies/default.yaml``), resolved when the
    config is read so the run records (and its digest covers) the prompt it used."""
    timeout_s: float = Field(default=600.0, gt=0)
    first_stage: FirstStage = Field(default_factory=default_first_stage)
    """The judge before the LLM (``judge_v2``: the trained judge; ``embedding``: the MiniLM
    first stage; ``off``: the LLM alone). Default:
    the proxy's own default, resolved when the config is read, like ``prompt``."""


class ExecutionConfig(BaseModel):
    """How to run (not part of the digest: changing these keeps a run resumable)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    proxy_url: str | None = None
    """A running proxy's /v1 URL; default: start one proxy per memory architecture."""
    admin_key_env: str = "DMT_ADMIN_KEY"
    dib_concurrency: int = Field(default=2, ge=1, le=64)
    request_timeout_s: float = Field(default=600.0, gt=0)
    max_retries: int = Field(default=3, ge=0, le=20)
    drain_timeout_s: float = Field(default=1800.0, gt=0)
    proxy_start_timeout_s: float = Field(default=300.0, gt=0)


def read_yaml(path: Path) -> Any:
    """A config file's parsed YAML; ConfigError when it cannot be read or parsed."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {path} is not valid YAML: {exc}") from exc
