"""The audit API's wire format, typed once: what ``POST /v1/audits`` reads and answers.

The route (``dmt_proxy.api.routes_audits``) validates its body as ``AuditRequest`` and
answers an ``AuditResult`` (``"object": "audit"``); the SDK client
(``dmt_proxy.client``) sends the one and reads back the other. A completed audit's
``outcome`` is what the memory write path would make of the text: the status and the
bias tag a memory of it would be stored with (``tag`` is the stored tag's own JSON),
with the verdict's score, findings, the judge that decided and the versions that
decided it. Plain types only: the client imports this without the web framework.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from dmt_proxy.domains import BiasType
from dmt_proxy.memory.base import MAX_SCOPE_PART, MAX_TEXT_CHARS
from dmt_proxy.policy import TagAction
from dmt_proxy.tags import AuditStatus, BiasTag, Finding

DEFAULT_WAIT_S = 10.0
"""How long ``POST /v1/audits`` waits for the verdict before answering ``pending``."""
MAX_WAIT_S = 60.0
"""The longest wait a request may ask for; a longer audit is polled."""
MAX_CHANNEL_CHARS = 64

Speaker = Literal["user", "assistant", "tool"]
AuditState = Literal["pending", "completed", "failed"]


class AuditRequest(BaseModel):
    """Body of ``POST /v1/audits``: one text to judge as a memory write would be judged."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS,
                      description="The text to judge, as a memory's words.")  # fmt: skip
    speaker: Speaker = Field(
        default="user",
        description="Whose words these are; recorded and echoed. The judges read the text "
        "as a memory's words whoever spoke them, as a text written to memory through "
        "POST /v1/memories or MCP's add_memory is read.",
    )
    channel: str | None = Field(default=None, min_length=1, max_length=MAX_CHANNEL_CHARS,
                                description="Where the text comes from (e.g. 'crm'); "
                                "recorded and echoed.")  # fmt: skip
    user: str | None = Field(default=None, min_length=1, max_length=MAX_SCOPE_PART,
                             description="The user the text belongs to; recorded and echoed, "
                             "nothing is stored for them.")  # fmt: skip
    domain_hint: BiasType | None = Field(
        default=None,
        description="The caller's guess of the bias domain; recorded and echoed, never shown "
        "to the judges (a hint from outside would let the caller steer the verdict).",
    )
    wait: float = Field(default=DEFAULT_WAIT_S, ge=0.0, le=MAX_WAIT_S,
                        description="Seconds to wait for the verdict before answering 202 "
                        "with status 'pending' (0: answer the id at once).")  # fmt: skip

    @field_validator("text")
    @classmethod
    def _not_blank(cls, text: str) -> str:
        if not text.strip():
            raise ValueError("must not be blank")
        return text


class AuditVersions(BaseModel):
    """What decided an outcome: the proxy, its policy and the judges' versions."""

    model_config = ConfigDict(frozen=True, extra="forbid",
                              json_schema_serialization_defaults_required=True)  # fmt: skip

    proxy: str
    """dmt-proxy's version."""
    policy: str
    """The policy's name."""
    policy_version: int
    """The policy file's format version."""
    auditor: str
    """The policy's auditor (``audit.auditor``: ``llm`` by default)."""
    auditor_model: str
    auditor_prompt: str
    calibration: str
    first_stage: str
    """The judge beside the auditor (``audit.first_stage``: ``judge_v2``, ``embedding``,
    ``off``)."""
    normalizer: str | None = None
    """The normaliser's version, where the audit pipeline states one."""
    tag_format: int
    """The layout version of ``tag`` (``dmt_proxy.tags.TAG_FORMAT_VERSION``)."""


class AuditOutcome(BaseModel):
    """What the memory write path would make of the text: decided, grounded, not stored."""

    model_config = ConfigDict(frozen=True, extra="forbid",
                              json_schema_serialization_defaults_required=True)  # fmt: skip

    audit_status: AuditStatus
    """``clean``, ``tagged``, ``quarantined``, ``disputed`` or ``failed`` (no valid
    verdict): the status a memory of this text would be stored with."""
    stored: bool
    """Whether the write path would keep such a memory (false: the policy drops it)."""
    action: TagAction | None
    """The policy's action for a tagged text (``tag``, ``quarantine``, ``drop``)."""
    bias_detected: bool
    """The verdict's own answer (a bias below tau is detected and still ``clean``)."""
    score: float
    """The verdict's probability of bias (the judges' combined one where they are fused)."""
    tag: BiasTag | None
    """The bias tag a memory of this text would carry, as it is stored (or none)."""
    findings: tuple[Finding, ...]
    """What normalisation found: manipulation (a planted verdict, an instruction to the
    auditor, ...) and the excerpt of an oversized text."""
    manipulation: bool
    """A manipulation finding is among ``findings`` (the text tried to steer its audit)."""
    reason: str
    """Why the decision is what it is (the score against tau, the findings, the failure)."""
    judge: str
    """The verdict's auditor label: the LLM's model and prompt, or the first stage's label."""
    decided_by: Literal["first_stage", "auditor"]
    """``first_stage``: the judge beside the auditor decided alone, without an LLM call."""
    first_stage_score: float | None
    """The first stage's probability of bias, when it judged the text too."""
    versions: AuditVersions


class AuditFailure(BaseModel):
    """Why an audit failed (OpenAI's error fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid",
                              json_schema_serialization_defaults_required=True)  # fmt: skip

    message: str
    type: str
    code: str | None = None
    status: int
    """The HTTP status ``POST /v1/audits`` answers for this failure when it waits for it."""


class AuditResult(BaseModel):
    """The audit object: ``POST /v1/audits`` and ``GET /v1/audits/{id}`` answer it."""

    model_config = ConfigDict(frozen=True, extra="forbid",
                              json_schema_serialization_defaults_required=True)  # fmt: skip

    id: str
    object: Literal["audit"] = "audit"
    status: AuditState
    """``pending`` (poll ``GET /v1/audits/{id}``), ``completed`` (``outcome`` is set) or
    ``failed`` (``error`` is set)."""
    created_at: datetime
    completed_at: datetime | None = None
    speaker: Speaker
    channel: str | None = None
    user: str | None = None
    domain_hint: BiasType | None = None
    outcome: AuditOutcome | None = None
    error: AuditFailure | None = None

    @field_serializer("created_at", "completed_at")
    def _iso(self, at: datetime | None) -> str | None:
        # Python's isoformat ("+00:00"), as the memory API writes its times.
        return None if at is None else at.isoformat()
