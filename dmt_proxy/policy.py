"""The policy: mitigation mode, thresholds, actions, models and prompt versions.

Loaded from YAML, validated against ``policies/policy.schema.json`` (so a bad file
fails at start-up with the offending path), then parsed into typed models.
"""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from pathlib import Path
from typing import Any, Literal

import jsonschema
import yaml
from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.domains import BIAS_TYPES
from dmt_proxy.errors import ConfigError
from dmt_proxy.modes import Mode as Mode
from dmt_proxy.resources import data_dir


class TagAction(str, Enum):
    """What happens to a memory whose bias score reaches tau."""

    TAG = "tag"
    QUARANTINE = "quarantine"
    DROP = "drop"


class ModelAlias(BaseModel):
    """An extra model alias routed through litellm."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: str
    api_base: str | None = None
    api_key_env: str | None = None


VerdictMode = Literal["auto", "logprob", "json"]
"""How the auditor model gives its verdict (``dmt_proxy.audit.auditor``)."""


class MemoryPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    backend: str = "mem0"
    top_k: int = 5
    min_score: float | None = None
    retrieval: Literal["search", "recent"] = "search"
    """``search``: the top_k memories most relevant to the request. ``recent``: the top_k
    newest, whatever the request asks (small stores, and experiments that must show every
    memory to every request)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Backend-specific options (validated by the backend, e.g. letta's ``core_size``)."""
    show_source: bool = True
    """Show each retrieved memory's provenance to the agent, as a short ``source`` field of
    its block entry (``dmt_proxy.memory.render``). The research harness turns it off, so the
    blocks its runs show stay those of its committed results."""


class AuditPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    tau: float = 0.5
    tau_per_domain: dict[str, float] = Field(default_factory=dict)
    action: TagAction = TagAction.TAG
    action_per_domain: dict[str, TagAction] = Field(default_factory=dict)
    auditor: str = Field(default="llm", min_length=1)
    """The auditor plugin (``dmt_proxy.audit.registry``): ``llm``, ``scripted`` or an
    installed one; checked against the registry when the auditor is built (start-up)."""
    auditor_model: str = "local/qwen2.5-1.5b"
    auditor_prompt: str = "auditor_v3"
    calibration: str = Field(default="calibration_v5", min_length=1)
    """The auditor's calibration: a shipped version, or a ``.json`` file written by
    ``dmt-proxy calibrate --from-reviews`` (a refit is used only once a policy names it)."""
    ssp_prompt: str = "ssp_v1"
    dmt_prompt: str = "dmt_render_v1"
    first_stage: str = "judge_v2"
    """``judge_v2`` (the trained multilingual judge, ``dmt_proxy.audit.trained_judge``:
    decides confident cases alone in every language, the LLM judges its uncertain band, each
    speaker's words are judged apart), ``embedding`` (the MiniLM classifier judges every
    English memory too and decides confidently plain text alone) or ``off``. The default is the shipped policy's: a policy that
    omits a field audits exactly as ``policies/default.yaml`` (tests/unit/test_policy_defaults.py)."""
    first_stage_threshold: float | None = None
    timeout_s: float = 120.0
    max_attempts: int = 8
    judged_chars: int = Field(default=2800, ge=200, le=3000)
    """Characters of a memory the judges see. A longer memory is judged on its head, the
    sentences that name a group and its tail; the verdict's ``excerpt`` finding states the
    cut, and the stored memory keeps its own bound (``MAX_TEXT_CHARS``). At most the LLM
    prompt's own bound (``auditor_prompt.MEMORY_MAX_CHARS``)."""
    include_reply: bool = False
    """Also show the agent's reply to the auditor (as context) instead of the user's words only."""
    verdict: VerdictMode = "auto"
    """``logprob`` (calibrated P(biased) from token log-probs), ``json`` (the model's JSON
    verdict and self-reported score), or ``auto``: log-probs where the provider returns them."""
    rationale: bool = True
    """Log-prob path: write a short rationale for memories that will be tagged."""
    combine_judges: bool = True
    """With the first stage and a fitted fusion for the auditor model: the verdict's score is
    the two judges' combined probability (``audit.logprob.JudgeFusion``), not the LLM's alone."""

    def tau_for(self, domain: str) -> float:
        """Threshold for ``domain``: the per-domain value if set, else the global tau."""
        return self.tau_per_domain.get(domain, self.tau)

    def action_for(self, domain: str) -> TagAction:
        """Action for a tagged memory of ``domain``."""
        return self.action_per_domain.get(domain, self.action)


class Policy(BaseModel):
    """A validated policy file."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: int = 1
    name: str = "default"
    mode: Mode = Mode.DMT
    default_model: str = "local/qwen2.5-0.5b"
    models: dict[str, ModelAlias] = Field(default_factory=dict)
    memory: MemoryPolicy = Field(default_factory=MemoryPolicy)
    audit: AuditPolicy = Field(default_factory=AuditPolicy)
    source: str | None = None

    @property
    def fingerprint(self) -> str:
        """12 hex digits of the SHA-256 of the parsed policy's canonical JSON (every field,
        defaults included, keys sorted; not ``source``, where it was read from): two files
        that parse to the same policy share it, and any change of a value changes it."""
        canonical = json.dumps(self.model_dump(mode="json", exclude={"source"}),
                               sort_keys=True, separators=(",", ":"))  # fmt: skip
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]

    @property
    def label(self) -> str:
        """``<name>@<fingerprint>``: what a memory's audit stamp names as its policy
        (``dmt_proxy.provenance.AuditStamp``). Computed on each call: read it once."""
        return f"{self.name}@{self.fingerprint}"


def policy_schema() -> dict[str, Any]:
    """The JSON schema every policy file must satisfy.

    The bias-type enum (the keys of ``tau_per_domain``/``action_per_domain``) is
    set from ``dmt_proxy.domains.BIAS_TYPES`` here; the file's copy is for readers
    and editors, and a test keeps it equal.
    """
    schema: dict[str, Any] = json.loads(
        (data_dir("policies") / "policy.schema.json").read_text(encoding="utf-8")
    )
    schema["$defs"]["bias_type"]["enum"] = list(BIAS_TYPES)
    return schema


def default_policy_path() -> Path:
    return data_dir("policies") / "default.yaml"


def _unfold_yaml_off(raw: dict[str, Any]) -> dict[str, Any]:
    """YAML 1.1 reads a bare ``off`` as ``False``; in these fields it means the string."""
    raw = dict(raw)
    if raw.get("mode") is False:
        raw["mode"] = "off"
    audit = raw.get("audit")
    if isinstance(audit, dict) and audit.get("first_stage") is False:
        raw["audit"] = {**audit, "first_stage": "off"}
    return raw


def parse_policy(raw: Any, *, source: str = "<memory>") -> Policy:
    """Validate ``raw`` (parsed YAML) and return the typed policy."""
    if not isinstance(raw, dict):
        raise ConfigError(f"policy {source}: expected a mapping at the top level")
    raw = _unfold_yaml_off(raw)
    validator = jsonschema.Draft202012Validator(policy_schema())
    errors = sorted(validator.iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [
            f"  at '{'/'.join(str(p) for p in e.absolute_path) or '<root>'}': {e.message}"
            for e in errors
        ]
        raise ConfigError(f"policy {source} is invalid:\n" + "\n".join(lines))
    return Policy.model_validate({**raw, "source": source})


def load_policy(path: Path | None = None) -> Policy:
    """Load and validate a policy file (default: ``policies/default.yaml``)."""
    path = path or default_policy_path()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read policy file {path}: {exc.strerror or exc}") from exc
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"policy file {path} is not valid YAML: {exc}") from exc
    return parse_policy(raw, source=str(path))
