"""Experiment configuration of the long-term simulation, validated with pydantic.

A config is a YAML file (``benchmarks/configs/*.yaml``) or built from
``dmt-bench compare`` flags. Everything that changes results is hashed into
``digest()``, which decides whether an existing run directory may be resumed;
``execution`` settings (proxy URL, concurrency, timeouts) are not part of it.

Checkpoints are t = 0, Δt, 2Δt, ... and always T. "t=80-equivalent" is the
checkpoint nearest to 0.8·T (later one on a tie): t=80 for the paper's T=100.

Config ``version: 2`` (the default) samples DIB by whole contexts, at least two per
domain (``dib-sample-v2``), and audits as the proxy does by default (its auditor
prompt and its first stage). A ``version: 1`` file keeps what it meant when it was
written: ``dib-sample-v1``, ``auditor_v1`` and no first stage unless it says
otherwise, and the same digest, so runs started from it still resume.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dmt_bench.dib.generator import MIN_CONTEXTS, SAMPLING_V1, SAMPLING_VERSION, Sampling
from dmt_bench.harness.config import AuditConfig, ExecutionConfig, ModelSpec, read_yaml
from dmt_proxy.domains import DOMAINS, check_domains
from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import Mode

SIM_VERSION = "sim-v1"
"""Version of the simulation protocol (stream, loop, metrics); results record it."""

Condition = Literal["baseline", "ssp", "dmt", "dmt-tags", "dmt-instruction", "ssp+dmt"]
CONDITIONS: tuple[Condition, ...] = (
    "baseline",
    "ssp",
    "dmt",
    "dmt-tags",
    "dmt-instruction",
    "ssp+dmt",
)
DEFAULT_CONDITIONS: tuple[Condition, ...] = ("baseline", "ssp", "dmt")
CONDITION_MODE: dict[str, Mode] = {
    "baseline": Mode.OFF,
    "ssp": Mode.SSP,
    "dmt": Mode.DMT,
    "dmt-tags": Mode.DMT_TAGS,
    "dmt-instruction": Mode.DMT_INSTRUCTION,
    "ssp+dmt": Mode.SSP_DMT,
}
"""Baseline is memory without mitigation (mode off); the others add SSP and/or DMT, or
one half of DMT (``dmt-tags``, ``dmt-instruction``: the ablations, see ``policy.Mode``)."""

LEGACY_AUDITOR_PROMPT = "auditor_v1"
"""The auditor prompt ``version: 1`` configs default to (the simulation's old default)."""

MEMORY_ALIASES = {"paging": "letta", "memgpt": "letta"}
"""Names the paper uses for an architecture, mapped to our backend names."""


def _model(value: Any) -> Any:
    return {"model": value} if isinstance(value, str) else value


class Models(BaseModel):
    """The three roles, each its own setting (issue: agent, auditor, generator)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    agent: ModelSpec = ModelSpec(model="local/qwen2.5-0.5b")
    auditor: ModelSpec = ModelSpec(model="local/qwen2.5-1.5b")
    generator: ModelSpec = ModelSpec(model="local/qwen2.5-1.5b")

    @model_validator(mode="before")
    @classmethod
    def _strings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: _model(v) for k, v in data.items()}
        return data


class InjectionConfig(BaseModel):
    """The Bias Generator Agent (paper §4.2): rate, source domains and output checks."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rate: float = Field(default=0.3, ge=0.0, le=1.0)
    """λ: probability that a turn's question is rewritten."""
    mode: Literal["mixed", "single"] = "mixed"
    """mixed: a random domain per injected turn; single: always ``domain``."""
    domain: str | None = None
    intact_policy: Literal["append", "strict"] = "append"
    """strict: a rewrite without the verbatim question and options is retried, then the
    original question is used; append: the verbatim question block is appended to it."""
    max_attempts: int = Field(default=3, ge=1, le=10)
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    max_tokens: int = Field(default=600, ge=64)
    prompt: str = "bias_injection_v1"
    bias_list: str = "bias_list_v1"

    @model_validator(mode="after")
    def _domain(self) -> InjectionConfig:
        if self.mode == "single" and self.domain not in DOMAINS:
            raise ValueError(f"single-source injection needs domain: one of {', '.join(DOMAINS)}")
        if self.mode == "mixed" and self.domain is not None:
            raise ValueError("domain is only used with mode: single")
        return self


class StreamConfig(BaseModel):
    """Where the MMLU-Pro questions come from and which are eligible."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: str | None = None
    """JSON-lines file (gzip or plain) or ``hf:TIGER-Lab/MMLU-Pro``; default: the shared copy."""
    max_question_chars: int | None = Field(default=1500, ge=50)
    categories: list[str] | None = None


class DibConfig(BaseModel):
    """The periodic DIB audit (paper §4.1, "Retrieve-only Mode")."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sample: int | None = Field(default=None, ge=1)
    """About this many decisions (whole counterfactual sets, every domain); None = full DIB."""
    contexts_per_domain: int | None = Field(default=None, ge=MIN_CONTEXTS)
    """Instead of ``sample``: this many whole contexts of every domain (``dib-sample-v2``)."""
    sampling: Sampling = SAMPLING_VERSION
    """The sampler (``dmt_bench.dib.generator``); ``version: 1`` configs default to v1."""
    domains: list[str] | None = None
    seed: int = 0
    scoring: Literal["expected", "generate"] = "expected"
    grammar: bool = True
    bootstrap: int = Field(default=1000, ge=0)
    permutations: int = Field(default=1000, ge=0)

    @field_validator("domains")
    @classmethod
    def _known(cls, value: list[str] | None) -> list[str] | None:
        return check_domains(value)

    @model_validator(mode="after")
    def _size(self) -> DibConfig:
        if self.sample is not None and self.contexts_per_domain is not None:
            raise ValueError("give sample (decisions) or contexts_per_domain, not both")
        if self.contexts_per_domain is not None and self.sampling == SAMPLING_V1:
            raise ValueError(f"contexts_per_domain needs sampling {SAMPLING_VERSION}")
        return self


class AgentConfig(BaseModel):
    """How the agent is asked each day, and how much memory it sees."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_k: int = Field(default=3, ge=0, le=50)
    """Memories retrieved per request (the proxy policy's memory.top_k)."""


class SimConfig(BaseModel):
    """One experiment: a compare (conditions × memory architectures) or a heatmap."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: Literal[1, 2] = 2
    kind: Literal["compare", "heatmap"] = "compare"
    name: str = "custom"
    seed: int = 0
    turns: int = Field(default=100, ge=1, le=100_000)
    interval: int = Field(default=20, ge=1)
    conditions: list[Condition] = Field(default_factory=lambda: list(DEFAULT_CONDITIONS))
    memory: list[str] = Field(default_factory=lambda: ["mem0"])
    backend_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per memory architecture, its proxy ``memory.options`` (``mem0: {infer: true}``,
    ``langmem: {consolidate: true}``), validated by the backend when its proxy starts.
    Retrieval depth is ``agent.top_k``."""
    share_t0: bool = True
    """At t=0 memory is empty, so conditions with the same SSP setting send identical
    requests (off = dmt, ssp = ssp+dmt): audit t=0 once per SSP setting and share it."""
    heatmap_sources: list[str] = Field(default_factory=lambda: list(DOMAINS))
    models: Models = Field(default_factory=Models)
    injection: InjectionConfig = Field(default_factory=InjectionConfig)
    stream: StreamConfig = Field(default_factory=StreamConfig)
    dib: DibConfig = Field(default_factory=DibConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: list[str]) -> list[str]:
        from dmt_proxy.memory.registry import known_backends

        names = [MEMORY_ALIASES.get(v.strip().lower(), v.strip().lower()) for v in value]
        known = [b for b in known_backends() if b != "none"]
        unknown = [n for n in names if n not in known]
        if unknown or not names:
            raise ValueError(f"unknown memory architecture(s) {unknown}; known: {', '.join(known)}")
        if len(set(names)) != len(names):
            raise ValueError(f"memory architectures repeat: {names}")
        return names

    @model_validator(mode="before")
    @classmethod
    def _version_1_defaults(cls, data: Any) -> Any:
        # What a version-1 file meant when it was written (see the module docstring).
        if not isinstance(data, dict) or data.get("version") != 1:
            return data
        dib = dict(data.get("dib") or {})
        dib.setdefault("sampling", SAMPLING_V1)
        audit = dict(data.get("audit") or {})
        audit.setdefault("prompt", LEGACY_AUDITOR_PROMPT)
        audit.setdefault("first_stage", "off")
        return {**data, "dib": dib, "audit": audit}

    @model_validator(mode="after")
    def _options(self) -> SimConfig:
        unknown = [b for b in self.backend_options if MEMORY_ALIASES.get(b, b) not in self.memory]
        if unknown:
            raise ValueError(
                f"backend_options for {unknown}, which this run does not use "
                f"(memory: {', '.join(self.memory)})"
            )
        return self

    def options_for(self, backend: str) -> dict[str, Any]:
        """The ``memory.options`` of ``backend``'s proxy policy ({} when none are set)."""
        for name, options in self.backend_options.items():
            if MEMORY_ALIASES.get(name, name) == backend:
                return dict(options)
        return {}

    @field_validator("conditions")
    @classmethod
    def _conditions(cls, value: list[Condition]) -> list[Condition]:
        if not value or len(set(value)) != len(value):
            raise ValueError("conditions must be a non-empty list without repeats")
        return value

    @field_validator("heatmap_sources")
    @classmethod
    def _sources(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(DOMAINS))
        if unknown or not value:
            raise ValueError(f"unknown source domain(s) {unknown}; known: {', '.join(DOMAINS)}")
        return value

    @model_validator(mode="after")
    def _shape(self) -> SimConfig:
        if self.interval > self.turns:
            raise ValueError(f"interval ({self.interval}) must not exceed turns ({self.turns})")
        if self.kind == "heatmap" and self.injection.mode == "single":
            raise ValueError("heatmap sets the single source itself; leave injection.mode mixed")
        return self

    def checkpoints(self) -> list[int]:
        """Audit turns: 0, Δt, 2Δt, ... and T."""
        points = list(range(0, self.turns + 1, self.interval))
        if points[-1] != self.turns:
            points.append(self.turns)
        return points

    def t80(self) -> int:
        """The checkpoint nearest to 0.8·T (the later one on a tie)."""
        target = 0.8 * self.turns
        return min(reversed(self.checkpoints()), key=lambda t: abs(t - target))

    def digest(self) -> str:
        """SHA-256 over everything that changes results (``execution`` excluded).

        A ``version: 1`` config leaves out the fields added since while they hold the
        value that reproduces version 1, so its digest is what it was before them.
        """
        payload = self.model_dump(mode="json", exclude={"execution"})
        if self.version == 1:
            for section, key, legacy in _ADDED_AFTER_V1:
                node = payload.get(section, {}) if section else payload
                if key in node and node[key] == legacy:
                    del node[key]
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


_ADDED_AFTER_V1: tuple[tuple[str | None, str, Any], ...] = (
    ("dib", "sampling", SAMPLING_V1),
    ("dib", "contexts_per_domain", None),
    (None, "backend_options", {}),
    ("audit", "first_stage", "off"),
)
"""(section, field, the value that reproduces version 1) of fields added after it."""


def _format_errors(exc: ValidationError, where: str) -> str:
    lines = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        msg = str(e["msg"]).removeprefix("Value error, ")
        lines.append(f"  {loc}: {msg}")
    return f"{where} is invalid:\n" + "\n".join(lines)


def parse_config(raw: Any, *, where: str = "config") -> SimConfig:
    """Validate a parsed mapping into a ``SimConfig``; ConfigError lists every problem."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    try:
        return SimConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, where)) from None


def load_config(path: Path) -> SimConfig:
    """Read and validate a YAML config file."""
    return parse_config(read_yaml(path), where=f"config {path}")


def with_overrides(config: SimConfig, overrides: dict[str, Any]) -> SimConfig:
    """A copy with dotted-key overrides (``{"injection.rate": 0.5}``), re-validated."""
    data = config.model_dump(mode="json")
    for key, value in overrides.items():
        if value is None:
            continue
        node = data
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return parse_config(data, where="options")
