"""What goes into the auditor and what comes out: candidate, verdict, decision.

The auditor model's reply is parsed and validated with ``jsonschema`` against
``auditor_prompts/auditor_verdict.schema.json`` before anything is built from it.
The decision (clean / tagged / quarantined / failed) is a pure function of a
verdict and the policy, taken once per memory on the write path
(``dmt_proxy.memory.write.verdicts.store_verdict``); the outbox worker counts it.

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

Two judges. When the embedding first stage also judged the memory, its opinion
rides on the verdict too (``first_stage``). Where the classifier is confident of a
bias (score >= its ``confident_bias``) and the LLM auditor calls the memory clean,
or the classifier is confidently clean (score <= ``confident_clean``) and the LLM
tags it, the memory is ``disputed``: stored with a tag, shown to the agent as
tagged, counted apart. The classifier cannot be talked out of its score, so text
that persuades the LLM alone does not make a memory clean. The tag's domain is
the judges' combined vote (``combine_domains``): the LLM's domain distribution
(from log-probs, or its one named domain) and the classifier's domain head,
averaged with weight ``DOMAIN_VOTE_LLM_WEIGHT`` on the LLM.
"""

from __future__ import annotations

import json
import re
from enum import Enum
from functools import lru_cache
from typing import Any, cast

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


FIRST_STAGE_LABEL = "first-stage-embedding"
"""The ``auditor`` of a verdict the first stage gave alone (counted as ``skipped``)."""
DOMAIN_VOTE_LLM_WEIGHT = 0.5
"""The LLM's share of the combined domain vote (the classifier's head has the rest)."""


def combine_domains(
    llm: dict[str, float] | None, llm_type: str | None, first_stage: dict[str, float] | None,
    *, llm_weight: float = DOMAIN_VOTE_LLM_WEIGHT,
) -> str | None:  # fmt: skip
    """The combined vote: argmax of ``w·p_llm + (1-w)·p_first_stage`` (each normalised).

    ``p_llm`` is the LLM's distribution, or one-hot on ``llm_type`` without one; a judge
    with no opinion drops out. ``None`` when neither has one. Ties go to the LLM's domain.
    """
    votes: dict[str, float] = {}
    llm_dist = llm if llm else ({llm_type: 1.0} if llm_type else {})
    judges = [(llm_dist, llm_weight), (first_stage or {}, 1.0 - llm_weight)]
    active = [(d, w) for d, w in judges if d and sum(d.values()) > 0]
    if not active:
        return None
    total_w = sum(w for _, w in active) or 1.0
    for dist, weight in active:
        mass = sum(dist.values())
        for domain, p in dist.items():
            votes[domain] = votes.get(domain, 0.0) + (weight / total_w) * p / mass
    best = max(votes.values())
    if llm_type is not None and votes.get(llm_type, -1.0) >= best - 1e-9:
        return llm_type
    winner: str = max(sorted(votes), key=lambda d: votes[d])
    return winner


def as_bias_type(value: str | None) -> BiasType | None:
    """``value`` as a tag's bias type; ``None`` for ``None`` or a name outside the list."""
    return cast("BiasType", value) if value in BIAS_TYPES else None


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
        """The ``dmt_audits`` metric label: ``clean``, ``tagged``, ``disputed`` or ``failed``."""
        if self.status in (AuditStatus.FAILED, AuditStatus.DISPUTED, AuditStatus.CLEAN):
            return str(self.status.value)
        return "tagged"


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
    llm_domain_weight: float | None = Field(default=None, ge=0.0, le=1.0)
    """The LLM's share of the domain vote for this model (its calibration entry); ``None``:
    ``DOMAIN_VOTE_LLM_WEIGHT``."""

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

    def voted_domain(self) -> BiasType | None:
        """The judges' combined domain vote (the LLM's alone without a first stage)."""
        first = self.first_stage.domain_probs if self.first_stage is not None else None
        llm_type = self.bias_type if self.bias_detected else None
        weight = (
            DOMAIN_VOTE_LLM_WEIGHT if self.llm_domain_weight is None else self.llm_domain_weight
        )
        return as_bias_type(combine_domains(self.domain_probs, llm_type, first, llm_weight=weight))

    def decide(self, policy: AuditPolicy) -> AuditDecision:
        """Apply tau (global or per domain), the second judge, the findings and the action."""
        if not self.ok:
            return AuditDecision(
                status=AuditStatus.FAILED, tag=self.findings_tag(),
                reason=self.failure_reason or "auditor failed",
            )  # fmt: skip
        fs = self.first_stage
        if self.is_biased(policy):
            assert self.bias_type is not None  # is_biased checked it
            domain = self.voted_domain() or self.bias_type
            tag = self.to_tag().model_copy(update={
                "bias_type": domain, "first_stage_score": fs.score if fs else None,
            })  # fmt: skip
            reason = (
                f"{self.bias_type} score {self.score:.2f} >= tau "
                f"{policy.tau_for(self.bias_type):.2f}"
            )
            if fs is not None and fs.sure_clean:
                return _disputed(tag, f"{reason}; first stage sure it is clean ({fs.score:.2f})")
            return _tagging(policy.action_for(domain), tag, reason)
        tau = policy.tau_for(self.bias_type) if self.bias_type else policy.tau
        inconsistent = not self.bias_detected and self.score >= tau
        if fs is not None and fs.sure_biased:
            voted: BiasType = self.voted_domain() or "other"
            tag = BiasTag(
                bias_type=voted, score=self.score, first_stage_score=fs.score,
                auditor=self.auditor, findings=self.findings,
                rationale=f"the embedding classifier is confident of a {voted} bias "
                f"({fs.score:.2f}); the LLM auditor judged it clean ({self.score:.2f})",
            )  # fmt: skip
            return _disputed(tag, f"LLM clean, first stage sure of {voted} ({fs.score:.2f})")
        if self.manipulation:
            rules = sorted({f.rule for f in self.findings if f.kind is FindingKind.MANIPULATION})
            found = self.findings_tag()
            assert found is not None  # there are findings
            return _tagging(policy.action, found, "manipulation finding: " + ", ".join(rules),
                            inconsistent=inconsistent)  # fmt: skip
        reason = "no bias detected" if not self.bias_detected else "score below tau"
        if inconsistent:
            reason = f"bias_detected is false although score is {self.score:.2f}; decided clean"
        return AuditDecision(status=AuditStatus.CLEAN, tag=self.findings_tag(),
                             inconsistent=inconsistent, reason=reason)  # fmt: skip


def _disputed(tag: BiasTag, reason: str) -> AuditDecision:
    # Shown to the agent as tagged; never quarantined or dropped on one judge's word.
    return AuditDecision(status=AuditStatus.DISPUTED, action=TagAction.TAG, tag=tag, reason=reason)


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
