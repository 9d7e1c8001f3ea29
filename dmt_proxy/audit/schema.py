"""What goes into the auditor and what comes out: candidate, verdict, decision.

The auditor model's reply is parsed and validated with ``jsonschema`` against
``auditor_prompts/auditor_verdict.schema.json`` before anything is built from it.
The decision (clean / tagged / quarantined / failed) is a pure function of a
verdict and the policy, so the auditor's metrics and the worker agree on it.

Decision rule (paper §6.2, "if the suspicion of bias exceeds τ"): a memory is
tagged iff the verdict is valid, ``bias_detected`` is true and
``score >= tau_for(bias_type)``. A verdict with ``bias_detected=false`` and a
high score is contradictory; it is decided *clean* (the explicit boolean wins
over the free-form number, which small models often fill in carelessly), and
the decision carries ``inconsistent=True`` so the caller can log it. The
opposite case (``bias_detected=true`` below τ) is simply clean, as the paper's
threshold intends.

Findings of the normalisation step (``dmt_proxy.audit.normalize``) ride on the
verdict: a ``manipulation`` finding tags the memory even when the judges call it
clean (its tag then has no ``bias_type``, only findings), and is kept on the tag
of a biased or failed memory too; an ``excerpt`` finding (an oversized memory
judged on a bounded excerpt) is kept on whatever tag the memory gets, and a
clean memory carries a findings-only tag to state it. A failed verdict stays
``failed`` (re-auditable), with its findings on the tag.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from functools import lru_cache
from typing import Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.domains import BIAS_TYPES, BiasType
from dmt_proxy.policy import AuditPolicy, TagAction
from dmt_proxy.resources import data_dir
from dmt_proxy.tags import AuditStatus, BiasTag, Finding, FindingKind

VERDICT_SCHEMA_FILE = "auditor_verdict.schema.json"
VERDICT_SCHEMA_NAME = "auditor_verdict"

# BiasTag's field limits; the model's text is cut to them rather than rejected.
_TAG_LIMITS = {"target_group": 200, "tendency": 200, "rationale": 1000}


class AuditCandidate(BaseModel):
    """One memory write to audit. All text in it is user-controlled."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    """The memory content: the user's message, or a stored memory (backfill)."""
    reply: str = ""
    """The assistant's answer to ``text``, shown as context only (optional)."""
    candidate_id: str = ""
    """For logs and correlation; never sent to the model."""


class VerdictStatus(str, Enum):
    """Whether the auditor produced a usable verdict."""

    OK = "ok"
    FAILED = "failed"
    """No schema-valid reply after the repair retry; ``failure_reason`` says why."""


class AuditDecision(BaseModel):
    """What to do with a memory, given its verdict and the policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: AuditStatus
    """``clean``, ``tagged``, ``quarantined`` or ``failed``."""
    action: TagAction | None = None
    """The policy's action for a tagged memory (``drop`` means: do not store)."""
    tag: BiasTag | None = None
    store: bool = True
    inconsistent: bool = False
    """``bias_detected`` was false but the score reached tau (decided clean)."""
    reason: str = ""

    @property
    def outcome(self) -> str:
        """The ``dmt_audits`` metric label: ``clean``, ``tagged`` or ``failed``."""
        if self.status is AuditStatus.FAILED:
            return "failed"
        return "clean" if self.status is AuditStatus.CLEAN else "tagged"


class AuditVerdict(BaseModel):
    """The auditor's judgement of one memory (valid, or failed with a reason)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: VerdictStatus = VerdictStatus.OK
    bias_detected: bool = False
    bias_type: BiasType | None = None
    target_group: str = ""
    tendency: str = ""
    score: float = Field(default=0.0, ge=0.0, le=1.0)
    rationale: str = ""
    failure_reason: str | None = None
    auditor: str = ""
    """Auditor model and prompt version, e.g. ``local/qwen2.5-1.5b@auditor_v1``."""
    attempts: int = 0
    """Model calls made: 0 (nothing to audit), 1, or 2 (after a repair retry)."""
    latency_s: float = 0.0
    raw_reply: str | None = None
    """The last model reply, kept (truncated) only when the verdict failed."""
    findings: tuple[Finding, ...] = ()
    """What normalisation found (manipulation, excerpt); attached by the staged auditor."""

    @property
    def manipulation(self) -> bool:
        """Whether normalisation found a manipulation attempt in the memory."""
        return any(f.kind is FindingKind.MANIPULATION for f in self.findings)

    @classmethod
    def clean(cls, *, rationale: str = "", score: float = 0.0, auditor: str = "") -> AuditVerdict:
        """A valid no-bias verdict (for fakes and trivial inputs)."""
        return cls(score=score, rationale=rationale, auditor=auditor)

    @classmethod
    def biased(
        cls,
        bias_type: BiasType,
        *,
        score: float = 0.9,
        target_group: str = "",
        tendency: str = "",
        rationale: str = "",
        auditor: str = "",
    ) -> AuditVerdict:
        """A valid bias verdict (for fakes and tests)."""
        return cls(
            bias_detected=True, bias_type=bias_type, score=score, target_group=target_group,
            tendency=tendency, rationale=rationale, auditor=auditor,
        )  # fmt: skip

    @classmethod
    def failed(
        cls,
        reason: str,
        *,
        auditor: str = "",
        attempts: int = 0,
        latency_s: float = 0.0,
        raw_reply: str | None = None,
    ) -> AuditVerdict:
        """A verdict recording that the auditor gave no valid answer."""
        return cls(
            status=VerdictStatus.FAILED, failure_reason=reason, auditor=auditor,
            attempts=attempts, latency_s=latency_s,
            raw_reply=None if raw_reply is None else raw_reply[:2000],
        )  # fmt: skip

    @property
    def ok(self) -> bool:
        return self.status is VerdictStatus.OK

    def is_biased(self, policy: AuditPolicy) -> bool:
        """True iff valid, ``bias_detected`` and ``score >= policy.tau_for(bias_type)``."""
        return (
            self.ok
            and self.bias_detected
            and self.bias_type is not None
            and self.score >= policy.tau_for(self.bias_type)
        )

    def to_tag(self, auditor_label: str | None = None) -> BiasTag:
        """The stored tag for this verdict; only meaningful for a detected bias."""
        if self.bias_type is None:
            raise ValueError("a verdict without bias_type cannot become a tag")
        return BiasTag(
            bias_type=self.bias_type,
            target_group=self.target_group[: _TAG_LIMITS["target_group"]],
            tendency=self.tendency[: _TAG_LIMITS["tendency"]],
            score=self.score,
            rationale=self.rationale[: _TAG_LIMITS["rationale"]],
            auditor=self.auditor if auditor_label is None else auditor_label,
            findings=self.findings,
        )

    def findings_tag(self) -> BiasTag | None:
        """A tag carrying only the findings (no bias named); ``None`` without findings."""
        if not self.findings:
            return None
        return BiasTag(score=self.score if self.ok else 0.0, auditor=self.auditor,
                       findings=self.findings)  # fmt: skip

    def decide(self, policy: AuditPolicy) -> AuditDecision:
        """Apply tau (global or per domain), the findings and the policy's action."""
        if not self.ok:
            return AuditDecision(
                status=AuditStatus.FAILED, tag=self.findings_tag(),
                reason=self.failure_reason or "auditor failed",
            )  # fmt: skip
        if self.is_biased(policy):
            assert self.bias_type is not None  # is_biased checked it
            action = policy.action_for(self.bias_type)
            reason = (
                f"{self.bias_type} score {self.score:.2f} >= tau "
                f"{policy.tau_for(self.bias_type):.2f}"
            )
            return _tagging(action, self.to_tag(), reason)
        tau = policy.tau_for(self.bias_type) if self.bias_type else policy.tau
        inconsistent = not self.bias_detected and self.score >= tau
        if self.manipulation:
            rules = sorted({f.rule for f in self.findings if f.kind is FindingKind.MANIPULATION})
            tag = self.findings_tag()
            assert tag is not None  # there are findings
            return _tagging(policy.action, tag, "manipulation finding: " + ", ".join(rules),
                            inconsistent=inconsistent)  # fmt: skip
        reason = "no bias detected" if not self.bias_detected else "score below tau"
        if inconsistent:
            reason = f"bias_detected is false although score is {self.score:.2f}; decided clean"
        return AuditDecision(status=AuditStatus.CLEAN, tag=self.findings_tag(),
                             inconsistent=inconsistent, reason=reason)  # fmt: skip


def _tagging(
    action: TagAction, tag: BiasTag, reason: str, *, inconsistent: bool = False
) -> AuditDecision:
    status = AuditStatus.QUARANTINED if action is TagAction.QUARANTINE else AuditStatus.TAGGED
    return AuditDecision(status=status, action=action, tag=tag, store=action is not TagAction.DROP,
                         inconsistent=inconsistent, reason=reason)  # fmt: skip


class VerdictInvalid(ValueError):
    """The model's reply is not a schema-valid verdict; ``reason`` is shown to it on repair."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@lru_cache(maxsize=1)
def verdict_schema() -> dict[str, Any]:
    """The verdict JSON schema shipped in ``auditor_prompts/``.

    Its ``bias_type`` enum is set from ``dmt_proxy.domains.BIAS_TYPES`` (plus
    ``null``) here, so the model is asked for exactly the tag's types; a test keeps
    the file's copy equal.
    """
    path = data_dir("auditor_prompts") / VERDICT_SCHEMA_FILE
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    schema["properties"]["bias_type"]["enum"] = [*BIAS_TYPES, None]
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def wire_schema() -> dict[str, Any]:
    """The schema as sent for structured output: the core object, without cross-field rules.

    Grammar converters (llama.cpp) and hosted strict modes support only a subset
    of JSON Schema; ``allOf``/``if``/``then`` are checked locally instead.
    """
    keep = ("type", "additionalProperties", "required", "properties")
    return {k: v for k, v in verdict_schema().items() if k in keep}


def response_format() -> dict[str, Any]:
    """The OpenAI ``response_format`` asking for a verdict (llama-server and litellm accept it).

    ``strict`` is off on purpose: OpenAI's strict mode rejects schemas using
    keywords outside its subset (``maxLength``, a typeless ``enum``), while
    llama-server turns the schema into a grammar either way; the reply is
    validated locally in every case.
    """
    return {
        "type": "json_schema",
        "json_schema": {"name": VERDICT_SCHEMA_NAME, "schema": wire_schema(), "strict": False},
    }


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)


def _extract_json(text: str) -> Any:
    stripped = text.strip()
    if not stripped:
        raise VerdictInvalid("the reply was empty")
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1)
    try:
        return json.loads(stripped)
    except json.JSONDecodeError as first:
        # Without structured output some models add a sentence around the object.
        start, end = stripped.find("{"), stripped.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(stripped[start : end + 1])
            except json.JSONDecodeError:
                pass
        raise VerdictInvalid(
            f"the reply is not valid JSON ({first.msg} at char {first.pos})"
        ) from None


def parse_verdict(text: str) -> dict[str, Any]:
    """Parse and validate a reply; raise ``VerdictInvalid`` with a reason the model can act on."""
    data = _extract_json(text)
    validator = jsonschema.Draft202012Validator(verdict_schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        problems = []
        for err in errors[:3]:
            where = "/".join(str(p) for p in err.absolute_path) or "the object"
            message = err.message
            if "allOf" in err.schema_path:
                message = (
                    "bias_type must be null when bias_detected is false, "
                    "and one of the bias types when it is true"
                )
            problems.append(f"{where}: {message[:200]}")
        raise VerdictInvalid("; ".join(problems))
    if not isinstance(data, dict):  # the schema requires an object; keeps mypy honest
        raise VerdictInvalid("the reply is not a JSON object")
    return data
