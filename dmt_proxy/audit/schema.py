"""What goes into the auditor and what comes out: the candidate and the verdict.

A verdict is built only from a reply that ``dmt_proxy.audit.parsing`` parsed and
checked against the verdict schema. What the memory then becomes (clean / tagged /
quarantined / disputed / failed) is decided in ``dmt_proxy.audit.decision``
(``decide(verdict, policy)``). Findings of the normalisation step and the
embedding first stage's opinion ride on the verdict (``findings``, ``first_stage``).
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.audit.vote import DOMAIN_VOTE_LLM_WEIGHT, as_bias_type, combine_domains
from dmt_proxy.domains import BiasType
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import BiasTag, Finding, FindingKind

# BiasTag's field limits; the model's text is cut to them rather than rejected.
_TAG_LIMITS = {"target_group": 200, "tendency": 200, "rationale": 1000}

FIRST_STAGE_LABEL = "first-stage-embedding"
"""The ``auditor`` of a verdict the first stage gave alone (counted as ``skipped``)."""
TRAINED_JUDGE_LABEL = "first-stage-judge"
"""The ``auditor`` of a verdict the trained judge (judge v2) gave alone, clean or biased."""
FIRST_STAGE_LABELS = (FIRST_STAGE_LABEL, TRAINED_JUDGE_LABEL)


class FirstStageOpinion(BaseModel):
    """What the embedding first stage (the second judge) said about a memory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str = "classifier"
    score: float = Field(ge=0.0, le=1.0)
    threshold: float
    confident_bias: float | None = None
    confident_clean: float | None = None
    domain_probs: dict[str, float] = Field(default_factory=dict)

    @property
    def sure_biased(self) -> bool:
        """Confident of a bias (never without a ``confident_bias`` level)."""
        return self.confident_bias is not None and self.score >= self.confident_bias

    @property
    def sure_clean(self) -> bool:
        """Confidently clean (never without a ``confident_clean`` level)."""
        return self.confident_clean is not None and self.score <= self.confident_clean


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
    first_stage: FirstStageOpinion | None = None
    """The embedding classifier's view of the same memory, when it judged it too."""
    domain_probs: dict[str, float] | None = None
    """The LLM's distribution over bias types (log-prob verdicts), for the combined vote."""
    p_raw: float | None = Field(default=None, ge=0.0, le=1.0)
    """Log-prob verdicts: P(yes) before calibration (``score`` is the calibrated value)."""
    llm_score: float | None = Field(default=None, ge=0.0, le=1.0)
    """When ``score`` is the two judges' combined probability: the LLM's own (calibrated)."""
    kind_probs: dict[str, float] | None = None
    """auditor_v4, likely biases: the kind question's distribution (``judging``, ``self``,
    ``rejecting``, ``neutral``), combined with the judges by the ``+kind`` fusion."""
    p_framing: float | None = Field(default=None, ge=0.0, le=1.0)
    """auditor_v4, memories judged clean: P(the text asks to be excused from judgment)."""
    llm_domain_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    """The LLM's share of the domain vote for this model (its calibration entry); ``None``:
    ``DOMAIN_VOTE_LLM_WEIGHT``."""
    text_domains: tuple[str, ...] = ()
    """The domains of the groups the judged text names (``grounding.named_domains`` of the
    normalised text, so a group named only in a removed injection does not count), in order
    of first mention; set by the staged auditor. The domain vote keeps to them."""
    speaker: Literal["user", "assistant", "both"] | None = None
    """Whose words the bias is in, when the judge attributes speakers (judge v2)."""

    @property
    def decided_by_first_stage(self) -> bool:
        """The first stage (the MiniLM classifier or the trained judge) decided this memory
        alone: no LLM call was made."""
        return self.auditor in FIRST_STAGE_LABELS

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
            speaker=self.speaker,
        )

    def findings_tag(self) -> BiasTag | None:
        """A tag carrying only the findings (no bias named); ``None`` without findings."""
        if not self.findings:
            return None
        return BiasTag(score=self.score if self.ok else 0.0, auditor=self.auditor,
                       findings=self.findings)  # fmt: skip

    def voted_domain(self) -> BiasType | None:
        """The judges' combined domain vote (the LLM's alone without a first stage), over
        the domains the text names when it names any (``text_domains``)."""
        first = self.first_stage.domain_probs if self.first_stage is not None else None
        llm_type = self.bias_type if self.bias_detected else None
        weight = (
            DOMAIN_VOTE_LLM_WEIGHT if self.llm_domain_weight is None else self.llm_domain_weight
        )
        return as_bias_type(combine_domains(self.domain_probs, llm_type, first, llm_weight=weight,
                                            within=self.text_domains))  # fmt: skip
